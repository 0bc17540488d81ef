"""Hugging Face ``Idefics3ForConditionalGeneration`` and ``SmolVLMForConditionalGeneration`` <-> a compiled model
of two towers joined by a pixel-shuffle connector.

Idefics3 (Laurençon et al. 2024) and SmolVLM (Marafioti et al. 2025), one architecture under two model types, read
each picture (a tile of ``vision_config.image_size`` pixels; the processor cuts a large image into tiles) with
SigLIP's vision tower, normed by its ``post_layernorm``, trade each ``scale_factor`` × ``scale_factor`` block of
patches for one vector ``scale_factor²`` times as wide (a pixel shuffle) and map it without a bias to the text
model's width, in place of the prompt's image tokens (``image_token_id``):

- ``tower vision``: SigLIP's vision tower without its attention pool;
- ``tower text``: the language model of ``text_config``, written, loaded and exported by its own family (a Llama's
  by default; ``tfspec.interop.nested``), its ``let``s prefixed ``text_``;
- ``connect vision -> text image_token=ID { pixel_shuffle F; linear text_d_model bias=false }``.

tfspec's pictures are the tiles, one example each, in the order their image tokens stand: Hugging Face's
``pixel_values`` of shape (prompts, tiles, channels, side, side) flattened over its first two dimensions, less the
all-zero tiles that pad it.
"""

from __future__ import annotations

from ..document import Block, Document, Statement
from ..fields import Field, Fields, Fixed
from .hf_clip import encoder_layers, picture_fields, tower_fields, towers_ignored, vision_top
from .hf_llava import TIED, connected_config, connected_document
from .hf_siglip import ACTIVATIONS, vision_tower
from ..weights import Towers
from ..nested import Nested
from ..family import Family
from ..layouts import covering, covering_vision, example

TEXT = Nested("text_config", "text", "text_", "llama",
              (("model.text_model.", "model."), ("lm_head.", "lm_head.")))

FIELDS = TEXT.fields(Fields(
    *tower_fields("vision_", "vision", "vision_config", ACTIVATIONS),
    *picture_fields(),
    Field("image_token", "image_token_id", lambda f: f.connector.image_token, let=False),
    Field("scale_factor", "scale_factor", lambda f: f.step(0, "factor"), let=False),
    *TIED,
    Fixed("scale_factor", True, "scale_factor not dividing the side of the grid of patches (vision_config.image_size "
          "// patch_size): a pixel shuffle's blocks would not tile it", required="a divisor of the patches' side",
          read=lambda c: (c.vision_config.image_size // c.vision_config.patch_size) % c.scale_factor == 0),
    ignored={
        **towers_ignored(("vision_config",)),
        "_pad_token_id": "a token id, which the tokenizer reads",
        "vision_config.model_type": "the vision tower's configuration class (idefics3_vision, smolvlm_vision)",
    },
))


def document(s, *, padding: bool, head: bool) -> Document:
    """The vision tower, the text model and the pixel-shuffle connector an Idefics3 or SmolVLM configuration's
    settings ``s`` describe."""
    connector = Block(f"connect vision -> text image_token={s.image_token}", Statement("pixel_shuffle", s.scale_factor),
                      Statement("linear", "text_d_model", bias="false"),
                      comment=f"each picture's normed patches, each {s.scale_factor} × {s.scale_factor} block of them "
                              "one vector")
    return connected_document(s, TEXT, vision_tower(s, init=True), connector, padding=padding)


def hf_config(towers, model_type: str = "idefics3") -> dict:
    """The Idefics3 (or SmolVLM) configuration ``towers`` would be."""
    return connected_config(towers, FIELDS, TEXT, "Idefics3", model_type, f"{model_type}_vision")[0]


# SigLIP's vision tower and the connector's projection
WEIGHTS = Towers({**vision_top("model.vision_model"), "{steps}.1": "model.connector.modality_projection.proj"},
                 layers=encoder_layers("vision", "model.vision_model"))


def pictures(config, outputs: dict):
    """Idefics3's processor's tiles (``pixel_values`` ``(prompts, tiles, channels, height, width)``, a prompt's
    missing tiles all zeros) as the spec reads them: each real tile a picture ``(tiles, channels, height, width)``,
    in order, as Hugging Face's model keeps them (a tile of zeros alone is padding)."""
    pixels = outputs["pixel_values"]
    if pixels.dim() != 5:
        raise ValueError(f"Idefics3 reads pixel_values (prompts, tiles, channels, height, width); got "
                         f"{tuple(pixels.shape)}")
    tiles = pixels.flatten(0, 1)
    return tiles[(tiles != 0).flatten(1).any(dim=1)]


CONVENTIONS = ("SigLIP's vision tower, normed (tower vision), connected to a text model (tower text, its "
               "text_config's family: Llama's by default) by a pixel shuffle of scale_factor and a linear map without "
               "a bias (connect vision -> text { pixel_shuffle; linear }), its vectors in place of the image tokens")

EXAMPLES = {
    # SigLIP's vision tower, normed, each 2 × 2 block of its patches one vector mapped in place of a Llama's image
    # tokens (SmolVLM: the same architecture under its own model type)
    **{cls: dict(model_type=model_type, image_token_id=89, scale_factor=2,
                 text_config=example("llama"),
                 vision_config=dict(hidden_size=24, intermediate_size=40, num_hidden_layers=2, num_attention_heads=4,
                                    image_size=16, patch_size=4, num_channels=3, layer_norm_eps=1e-6))
       for cls, model_type in (("Idefics3ForConditionalGeneration", "idefics3"),
                               ("SmolVLMForConditionalGeneration", "smolvlm"))},
}

# every field away from its default: a 3 × 3 pixel shuffle of a 6 × 6 grid, a tied text model
COVERAGE = [dict(model_type="idefics3", image_token_id=5, scale_factor=3, tie_word_embeddings=True,
                 text_config=covering("llama", num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                      tie_word_embeddings=True),
                 vision_config=covering_vision(image_size=24, patch_size=4, hidden_act="gelu", initializer_range=0.04))]


IDEFICS3 = Family(
    "Idefics3", ("idefics3",), {"Idefics3ForConditionalGeneration": {}}, f"Idefics3: {CONVENTIONS}",
    priority=720, fields=FIELDS, document=document, hf_config=hf_config, rules=WEIGHTS, text=TEXT,
    towers=True, pictures=pictures)
SMOLVLM = IDEFICS3.derive(
    "SmolVLM", ("smolvlm",), {"SmolVLMForConditionalGeneration": {}},
    f"SmolVLM: Idefics3's architecture: {CONVENTIONS}",
    priority=720, hf_config=lambda towers: hf_config(towers, "smolvlm"))
