"""Hugging Face ``PaliGemmaForConditionalGeneration`` (PaliGemma, ``model_type: paligemma``) <-> a compiled model of
two towers joined by a connector.

PaliGemma (Beyer et al. 2024) reads a picture with SigLIP's vision tower (its patches normed by
``post_layernorm``, no attention pool), maps each patch's vector by one linear map with a bias to the text model's
width (``multi_modal_projector.linear``, ``projection_dim``), in place of the prompt's image tokens, and reads the
prompt as a prefix-LM does: the pictures and the prompt (the processor's ``token_type_ids`` 0) see one another,
the answer after them (``token_type_ids`` 1) is causal (``mask=prefix``, its run-time ``text_prefix_lengths`` each
row's tokens before its answer; generation reads the whole prompt as the prefix, as Hugging Face's does). Its text
model is Gemma's (PaliGemma) or Gemma 2's (PaliGemma 2), whose sliding layers see the whole prefix beyond their
window (``prefix_window``):

- ``tower vision``: SigLIP's vision tower without its attention pool;
- ``tower text``: the text model as its family writes it, its ``let``s prefixed ``text_``, its masks ``prefix``
  where they are ``causal`` and ``prefix_window`` where they are ``window``;
- ``connect vision -> text image_token=ID { linear text_d_model }``.
"""

from __future__ import annotations

from ..document import Block, Document, Statement
from ..fields import Field, Fields, Fixed
from .hf_clip import encoder_layers, picture_fields, tower_fields, towers_ignored, vision_top
from .hf_llava import TIED, connected_config, connected_document, vision_prefix
from .hf_siglip import ACTIVATIONS, vision_tower
from ..weights import Towers
from ..nested import Nested
from ..family import Family
from ..layouts import covering, covering_vision, example

TEXT = Nested("text_config", "text", "text_", "gemma",
              (("model.language_model.", "model."), ("lm_head.", "lm_head.")),
              words=(("causal", "prefix"), ("window", "prefix_window")), settled=("use_bidirectional_attention",))

FIELDS = TEXT.fields(Fields(
    *tower_fields("vision_", "vision", "vision_config", ACTIVATIONS, init=False),
    *picture_fields(),
    Field("image_token", "image_token_index", lambda f: f.connector.image_token, let=False),
    *TIED,
    Fixed("projection_dim", True, "projection_dim other than text_config.hidden_size: the projector's vectors "
          "would not be the text model's width", read=lambda c: c.projection_dim == c.text_config.hidden_size,
          required="text_config.hidden_size"),
    Fixed("vision_config.vision_use_head", False, "vision_use_head=true: an attention pool PaliGemma never reads",
          exported=True),
    ignored={
        **towers_ignored(("vision_config",)),
        "hidden_size": "the text model's width, which text_config.hidden_size holds",
        "vocab_size": "the text model's vocabulary, which text_config.vocab_size holds",
        "vision_config.projection_dim": "projection_dim, which PaliGemma copies into its vision configuration",
        "vision_config.vocab_size": "a text model's, which a vision tower does not have",
        "text_config.num_image_tokens": "the image tokens of a picture, which PaliGemma derives from the picture's "
                                        "size",
    },
))


def document(s, *, padding: bool, head: bool) -> Document:
    """The vision tower, the text model and the projector a PaliGemma configuration's settings ``s`` describe."""
    connector = Block(f"connect vision -> text image_token={s.image_token}", Statement("linear", "text_d_model"),
                      comment="each picture's normed patches, each one vector of the text model's width")
    return connected_document(s, TEXT, vision_tower(s), connector, padding=padding)


def hf_config(towers) -> dict:
    """The PaliGemma configuration ``towers`` would be."""
    config, facts = connected_config(towers, FIELDS, TEXT, "PaliGemma", "paligemma", "siglip_vision_model")
    return {**config, "projection_dim": facts.text.embedding.dim}


# SigLIP's vision tower (where this transformers holds it) and the projector's linear map
WEIGHTS = Towers({**vision_top("{vision_model}"), "{steps}.0": "model.multi_modal_projector.linear"},
                 layers=encoder_layers("vision", "{vision_model}"),
                 paths=lambda state: {"vision_model": vision_prefix(state or None, "SiglipVision")})

EXAMPLES = {
    # PaliGemma 2's: SigLIP's vision tower, normed, each patch mapped in place of Gemma 2's image tokens; pictures and
    # prompt a prefix, longer than the sliding layers' window
    "PaliGemmaForConditionalGeneration": dict(
        model_type="paligemma", image_token_index=89, projection_dim=32, tie_word_embeddings=True,
        text_config=example("gemma2", num_hidden_layers=3, num_key_value_heads=1, head_dim=8, sliding_window=4,
                            layer_types=["sliding_attention", "full_attention", "sliding_attention"],
                            tie_word_embeddings=True),
        vision_config=dict(hidden_size=24, intermediate_size=40, num_hidden_layers=2, num_attention_heads=4,
                           image_size=8, patch_size=4, num_channels=3, layer_norm_eps=1e-6, vision_use_head=False)),
}

# every field away from its default: PaliGemma's Gemma text model, untied
COVERAGE = [dict(model_type="paligemma", image_token_index=5, projection_dim=24, tie_word_embeddings=False,
                 text_config=covering("gemma", num_hidden_layers=2, num_key_value_heads=3, head_dim=6,
                                      tie_word_embeddings=False),
                 vision_config=covering_vision(image_size=12, patch_size=4, hidden_act="gelu", vision_use_head=False))]

PALIGEMMA = Family(
    "PaliGemma", ("paligemma",), {"PaliGemmaForConditionalGeneration": {}},
    "PaliGemma, PaliGemma 2: SigLIP's vision tower, normed (tower vision), connected to a Gemma or Gemma 2 text "
    "model (tower text) by a linear map with a bias (connect vision -> text { linear }); the pictures and the "
    "prompt see one another whole, the answer after them is causal (mask=prefix + prefix_window, from the "
    "processor's token_type_ids)",
    priority=735, fields=FIELDS, document=document, hf_config=hf_config, rules=WEIGHTS, text=TEXT, towers=True)
