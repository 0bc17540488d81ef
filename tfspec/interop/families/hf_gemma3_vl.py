"""Hugging Face ``Gemma3ForConditionalGeneration`` (Gemma 3 at 4B and above, ``model_type: gemma3``) <-> a compiled
model of two towers joined by a connector.

Gemma 3 (Gemma Team 2025) reads a picture with SigLIP's vision tower (its patches normed by ``post_layernorm``,
no attention pool), averages each block of its patches so that a picture gives ``mm_tokens_per_image`` vectors,
norms them with Gemma's RMSNorm (``mm_soft_emb_norm``, a weight of 1 + w) and maps them without a bias to the text
model's width (``mm_input_projection_weight``, stored input-major), in place of the prompt's image tokens
(``image_token_index``). Its text model is Gemma 3's own (``text_config``, ``gemma3_text``), except that a picture's
image tokens see one another (``mask=pictures``: causal otherwise), as the processor's ``token_type_ids`` make
Hugging Face's do:

- ``tower vision``: SigLIP's vision tower without its attention pool;
- ``tower text``: Gemma 3's text model as its family writes it, its ``let``s prefixed ``text_`` and its masks
  ``pictures`` where they are ``causal``;
- ``connect vision -> text image_token=ID { mean_pool S; norm gemma_rmsnorm; linear text_d_model bias=false }``.
"""

from __future__ import annotations

import math

from ..document import Block, Document, Statement
from ..fields import Field, Fields, Fixed
from .hf_clip import encoder_layers, picture_fields, tower_fields, towers_ignored, vision_top
from .hf_llava import TIED, connected_config, connected_document, vision_prefix
from .hf_siglip import ACTIVATIONS, vision_tower
from ..weights import One, Towers
from ..nested import Nested
from ..family import Family
from ..layouts import covering, covering_vision, example

TEXT = Nested("text_config", "text", "text_", "gemma3_text",
              (("model.language_model.", "model."), ("lm_head.", "lm_head.")), words=(("causal", "pictures"),))
PROJECTOR = "model.multi_modal_projector"
# token ids the processor writes around a picture's image tokens, which no spec setting holds: written back as an
# import carried them
CARRIED = ("boi_token_index", "eoi_token_index")


def _side(config) -> int:
    """The patches of a side of the grid a picture makes."""
    return config.vision_config.image_size // config.vision_config.patch_size


def _block(config) -> int | None:
    """The side of each block of patches averaged into one vector (None where no square block gives
    ``mm_tokens_per_image`` vectors)."""
    tokens = config.mm_tokens_per_image
    per_side = math.isqrt(tokens)
    return _side(config) // per_side if per_side * per_side == tokens and _side(config) % per_side == 0 else None


def _pooled(facts) -> int:
    """The side of the blocks the connector's first step averages (a connector that does not pool is no Gemma 3's)."""
    side = facts.step(0, "side")
    if side is None:
        raise facts.text.refuse("Gemma 3's connector first averages the patches in square blocks (mean_pool)")
    return side


FIELDS = TEXT.fields(Fields(
    *tower_fields("vision_", "vision", "vision_config", ACTIVATIONS, init=False),
    *picture_fields(),
    Field("image_token", "image_token_index", lambda f: f.connector.image_token, let=False),
    Field("block", "mm_tokens_per_image", lambda f: (f.vision.input_option("image") // f.vision.input_option("patch")
                                                     // _pooled(f)) ** 2, read=_block, let=False),
    *TIED,
    Fixed("mm_tokens_per_image", True, "mm_tokens_per_image not the square of a divisor of the patches' side "
          "(vision_config.image_size // patch_size): no square blocks of patches average into that many vectors",
          read=lambda c: _block(c) is not None, required="a square dividing the patches' grid"),
    Fixed("vision_config.vision_use_head", False, "vision_use_head=true: an attention pool Gemma 3 never reads",
          exported=True),
    Fixed("text_config.sliding_window", True, "a picture's image tokens (mm_tokens_per_image) as many as the text "
          "model's sliding window or more: Hugging Face's window bounds how far back a query sees, tfspec's both ways",
          read=lambda c: c.text_config.sliding_window is None or c.mm_tokens_per_image < c.text_config.sliding_window,
          required="more than mm_tokens_per_image"),
    ignored={
        **towers_ignored(("vision_config",)),
        "boi_token_index": "a token id the processor writes before each picture's image tokens",
        "eoi_token_index": "a token id the processor writes after each picture's image tokens",
        "initializer_range": "the projector's initialisation by Hugging Face; imported weights are the checkpoint's",
    },
))


def document(s, *, padding: bool, head: bool) -> Document:
    """The vision tower, Gemma 3's text model and the projector a Gemma 3 configuration's settings ``s`` describe."""
    connector = Block(f"connect vision -> text image_token={s.image_token}", Statement("mean_pool", s.block),
                      Statement("norm", "gemma_rmsnorm", eps="vision_eps"),
                      Statement("linear", "text_d_model", bias="false"),
                      comment=f"each picture's normed patches averaged in blocks of {s.block} × {s.block}: "
                              f"{s.config.mm_tokens_per_image} vectors")
    return connected_document(s, TEXT, vision_tower(s), connector, padding=padding)


def hf_config(towers) -> dict:
    """The Gemma 3 configuration ``towers`` would be."""
    return connected_config(towers, FIELDS, TEXT, "Gemma 3", "gemma3", "siglip_vision_model")[0]


# SigLIP's vision tower (where this transformers holds it), the projector's norm and its projection (stored
# transposed)
WEIGHTS = Towers({**vision_top("{vision_model}"), "{steps}.1": f"{PROJECTOR}.mm_soft_emb_norm",
                  "{steps}.2.weight": One(f"{PROJECTOR}.mm_input_projection_weight", transpose=True)},
                 layers=encoder_layers("vision", "{vision_model}"),
                 paths=lambda state: {"vision_model": vision_prefix(state or None, "SiglipVision")})


EXAMPLES = {
    # SigLIP's vision tower, normed, its patches averaged in 2 × 2 blocks, normed and mapped in place of Gemma 3's
    # image tokens, which see one another (sliding and full layers)
    "Gemma3ForConditionalGeneration": dict(
        model_type="gemma3", image_token_index=89, boi_token_index=87, eoi_token_index=88, mm_tokens_per_image=4,
        text_config=example("gemma3_text", num_hidden_layers=3, head_dim=8, sliding_window=8,
                            layer_types=["sliding_attention", "full_attention", "sliding_attention"]),
        vision_config=dict(hidden_size=24, intermediate_size=40, num_hidden_layers=2, num_attention_heads=4,
                           image_size=16, patch_size=4, num_channels=3, layer_norm_eps=1e-6, vision_use_head=False)),
}

# every field away from its default (Gemma 3's pictures of 896 pixels give 256 vectors of 4 × 4 blocks)
COVERAGE = [dict(model_type="gemma3", image_token_index=5, mm_tokens_per_image=9, tie_word_embeddings=False,
                 text_config=covering("gemma3_text", num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                      head_dim=6, sliding_window=16, tie_word_embeddings=False),
                 vision_config=covering_vision(image_size=24, patch_size=4, hidden_act="gelu", vision_use_head=False))]


GEMMA3_VL = Family(
    "Gemma 3 (vision)", ("gemma3",), {"Gemma3ForConditionalGeneration": {}},
    "Gemma 3's vision-language models: SigLIP's vision tower, normed (tower vision), connected to Gemma 3's "
    "text model (tower text) by a mean over square blocks of patches, Gemma's RMSNorm and a linear map without "
    "a bias (connect vision -> text { mean_pool; norm gemma_rmsnorm; linear }); a picture's image tokens see "
    "one another (mask=pictures), every other query is causal",
    priority=730, fields=FIELDS, document=document, hf_config=hf_config, rules=WEIGHTS, text=TEXT,
    towers=True, carried=CARRIED)
