"""Hugging Face ``SiglipModel`` <-> a compiled model of two towers and a sigmoid contrastive head.

SigLIP (Zhai et al. 2023) is CLIP's two towers with a pairwise sigmoid loss and a learned bias:

- ``tower text``: token ids with learned positions through a pre-norm encoder that sees every position (its
  padding hidden), a final norm, the last position's vector (``pool=last``: SigLIP pads every text to one length)
  through a linear map with a bias (``head``, to ``projection_size``);
- ``tower vision``: square pictures cut into patches (with a bias, no class token), learned positions, a pre-norm
  encoder, a final norm (``post_layernorm``) and multi-head attention pooling (``head pool=attention(heads,
  d_ff)``: a learned probe attends over the patches, a LayerNormed MLP adds to it), projected by nothing;
- ``contrastive text vision loss=sigmoid``: the cosine of each pair times exp(``logit_scale``) plus
  ``logit_bias``. Hugging Face starts both at 0; the imported spec starts them where the paper does, ln 10 and
  -10 (a checkpoint's own values are loaded over them).
"""

from __future__ import annotations

import math

from ...registry import POOLS
from . import hf_bert
from ..fields import Field, Fields, Fixed
from .hf_clip import encoder_layers, vision_top, picture_fields, square_pictures, tower_fields, towers_ignored
from ..document import Block, Document, Statement, Tower
from ..mapping import rule
from ..weights import One, Towers
from ..family import Family, Requires
from ..layouts import covering_vision

ACTIVATIONS = {"gelu_pytorch_tanh": "gelu_tanh", **hf_bert.ACTIVATIONS, "quick_gelu": "quick_gelu"}
SCALE, BIAS = math.log(10), -10.0  # the paper's initial log scale and bias


def _pool_option(facts, option: str):
    """An option of the vision tower's attention pool (refused where its head pools otherwise)."""
    head = facts.vision.spec.head
    if head is None or head.pool is None or POOLS[head.pool.name].heads(POOLS.of(head.pool)[1]) is None:
        raise facts.vision.refuse("its vision tower's head is not an attention pool (head pool=attention(...))")
    return head.pool.options[option]


FIELDS = Fields(
    *tower_fields("text_", "text", "text_config", ACTIVATIONS, init=False),
    Field("vocab", "text_config.vocab_size", lambda f: f.text.embedding.vocab),
    Field("text_positions", "text_config.max_position_embeddings", lambda f: f.text.learned_positions()),
    Field("projection", "text_config.projection_size", lambda f: f.text.spec.head.out if f.text.spec.head else None),
    *tower_fields("vision_", "vision", "vision_config", ACTIVATIONS, init=False),
    *picture_fields(),
    Fixed("vision_config.vision_use_head", True, "vision_use_head=false: the model's image embeddings are its "
                                                 "attention pool's, which it then lacks"),
    Fixed("text_config.projection_size", True, "text_config.projection_size other than vision_config.hidden_size: "
                                               "the two towers' vectors, which the head compares, of two widths",
          read=lambda c: c.text_config.projection_size == c.vision_config.hidden_size,
          required="vision_config.hidden_size"),
    ignored={
        **towers_ignored(),
        "text_config.pad_token_id": "a token id, which the tokenizer reads (the text tower pools its last position)",
        "text_config.bos_token_id": "a token id, which the tokenizer reads",
        "text_config.eos_token_id": "a token id, which the tokenizer reads (the text tower pools its last position)",
        "initializer_factor": "scales Hugging Face's initialisation; imported weights are the checkpoint's",
    },
)


def document(s, *, padding: bool, head: bool) -> Document:
    """The two towers and the sigmoid contrastive head a SigLIP configuration's settings ``s`` describe."""
    square_pictures(s.config)
    norm = f"layernorm(eps={s.text_eps})"
    text = Document.of(
        Block("defaults", Statement("norm", norm), Statement("attn_dropout", s.text_p_attn_dropout)),
        Block("embedding tokens", Statement("vocab", s.vocab), Statement("dim", s.text_d_model),
              Statement("position", f"learned({s.text_positions})")),
        Block(f"encoder x {s.text_layers}",
              Statement("attention", "self", heads=s.text_heads, mask="padding" if padding else None),
              Statement("feedforward", d_ff=s.text_d_ff, activation=s.text_activation), Statement("final", norm)),
        tail=(Statement("head", f"linear({s.projection})", pool="last",
                        comment="the last position, whatever it holds: texts padded to one length"),))
    vision = vision_tower(s, Statement("head", pool=f"attention({s.vision_heads}, d_ff={s.vision_d_ff}, "
                                                    f"activation={s.vision_activation}, eps={s.vision_eps})"))
    return Document.of(Block("defaults", Statement("residual", "pre")), tail=(
        Tower("text", text), vision,
        Statement("contrastive", "text", "vision", loss="sigmoid", scale=repr(SCALE), bias=repr(BIAS))))


def vision_tower(s, head: Statement | None = None, init: bool = False) -> Tower:
    """SigLIP's vision tower (``tower vision { ... }``) from a configuration's settings ``s``: its patches with a
    bias and no class token, learned positions, a pre-norm encoder and a final norm (``post_layernorm``); ``head``,
    its head (none without: Idefics3's, whose connector reads the normed patches); ``init``: with its
    ``initializer_range``."""
    norm = f"layernorm(eps={s.vision_eps})"
    return Tower("vision", Document.of(
        Block("defaults", Statement("norm", norm), Statement("attn_dropout", s.vision_p_attn_dropout),
              *([Statement("init", f"normal(std={s.vision_init_std})")] if init else [])),
        Block("embedding image",
              Statement("input", f"patches(image={s.image}, patch={s.patch}, channels={s.channels})"),
              Statement("dim", s.vision_d_model),
              Statement("position", f"learned(({s.image} // {s.patch}) * ({s.image} // {s.patch}))")),
        Block(f"encoder x {s.vision_layers}", Statement("attention", "self", heads=s.vision_heads),
              Statement("feedforward", d_ff=s.vision_d_ff, activation=s.vision_activation), Statement("final", norm)),
        tail=(head,) if head else ()))


# what export asks beyond the fields: the sigmoid contrastive head with a learned bias, and the vision tower pooled
# by attention (``_pool_option`` refuses it otherwise)
REQUIRES = (Requires(lambda f: f.contrastive.loss == "sigmoid" and f.contrastive.bias is not None,
                     "its contrastive head is not the sigmoid one with a learned bias"),
            Requires(lambda f: _pool_option(f, "heads"), "its vision tower's head is not an attention pool"))


def _in_projection(model, ours: str, names: dict, state: dict, ours_state: dict) -> list:
    """The attention pool's queries and keys-and-values, one in_proj in the checkpoint."""
    return [rule((f"{ours}.q.{p}", f"{ours}.kv.{p}"), f"vision_model.head.attention.in_proj_{p}")
            for p in ("weight", "bias")]


def _probe(model, ours: str, names: dict, state: dict, ours_state: dict) -> list:
    return [rule(ours, "vision_model.head.probe", shape=(1, 1, ours_state[ours].shape[-1]))]


# each tower's, the vision tower's attention pool and the contrastive head's
POOL = "towers.{vision}.head.pool"
WEIGHTS = Towers({"towers.{text}.embeddings.{tokens}.tokens": "text_model.embeddings.token_embedding",
                  "towers.{text}.embeddings.{tokens}.positions": "text_model.embeddings.position_embedding",
                  "towers.{text}.encoder.final_norm": "text_model.final_layer_norm",
                  "towers.{text}.head": "text_model.head",
                  **vision_top("vision_model"),  # (CLIP's, without the class token and the embeddings' norm)
                  f"{POOL}.probe": _probe, POOL: _in_projection,
                  f"{POOL}.out": "vision_model.head.attention.out_proj", f"{POOL}.norm": "vision_model.head.layernorm",
                  f"{POOL}.up": "vision_model.head.mlp.fc1", f"{POOL}.down": "vision_model.head.mlp.fc2",
                  "contrastive.scale": One("logit_scale", shape=(1,)),
                  "contrastive.bias": One("logit_bias", shape=(1,))},
                 layers={**encoder_layers("text", "text_model"), **encoder_layers("vision", "vision_model")})


EXAMPLES = {
    # CLIP's towers with a sigmoid head and a learned bias: a text tower reading its last position, a vision tower
    # of patches pooled by attention
    "SiglipModel": dict(model_type="siglip",
                        text_config=dict(vocab_size=90, hidden_size=24, intermediate_size=40, num_hidden_layers=2,
                                         num_attention_heads=4, max_position_embeddings=30, projection_size=32),
                        vision_config=dict(hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                                           num_attention_heads=4, image_size=12, patch_size=4, num_channels=3,
                                           layer_norm_eps=1e-5)),
}

COVERAGE = [dict(model_type="siglip",
                 text_config=dict(vocab_size=91, hidden_size=24, intermediate_size=40, num_hidden_layers=3,
                                  num_attention_heads=3, max_position_embeddings=33, hidden_act="gelu",
                                  layer_norm_eps=1e-5, attention_dropout=0.1, projection_size=20),
                 vision_config=covering_vision(image_size=20, patch_size=5, hidden_act="quick_gelu"))]


SIGLIP = Family(
    "SigLIP", ("siglip",), {"SiglipModel": {}},
    "SigLIP: CLIP's two towers meeting in a sigmoid contrastive head with a learned bias (contrastive text "
    "vision loss=sigmoid bias=-10); the text tower sees every position and reads its last (pool=last) "
    "through a linear map with a bias; the vision tower has no class token and pools its patches by "
    "attention (head pool=attention(heads, d_ff)), projected by nothing",
    priority=700, fields=FIELDS, document=document, requires=REQUIRES, rules=WEIGHTS, towers=True)
