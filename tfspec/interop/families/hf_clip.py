"""Hugging Face ``CLIPModel`` <-> a compiled model of two towers and a contrastive head.

CLIP (Radford et al. 2021) is two towers whose pooled vectors meet in a contrastive head:

- ``tower text``: token ids with learned positions through a pre-norm LayerNorm encoder under a causal mask (and
  the padding mask), a final norm, pooled at the end-of-text token (``pool=token(eos_token_id)``; the checkpoints
  from before that id was written, ``eos_token_id`` 2, at the highest token id: ``pool=highest_id``) and
  projected without a bias (``text_projection``);
- ``tower vision``: square pictures cut into patches mapped without a bias (``patches(..., class_token=true,
  bias=false)``), learned positions, a LayerNorm on the embeddings (``pre_layrnorm``), a pre-norm encoder, the
  class token normed (``post_layernorm``: the final norm, which only the pooled vector reads) and projected without
  a bias (``visual_projection``);
- ``contrastive text vision``: the cosine of each pair times exp(``logit_scale``), softmax's loss both ways.

Each tower's configuration is nested (``text_config``, ``vision_config``); the field tables read them there.
"""

from __future__ import annotations

from ...registry import POOLS
from . import hf_bert, hf_vit
from ..facts import TowerFacts
from ..fields import Field, Fields, Fixed, lookup
from ..document import Block, Document, Statement, Tower
from ..mapping import InteropError
from ..weights import One, Patches, Projections, Towers
from .hf_bart import PROJECTIONS
from ..family import Family
from ..layouts import covering_vision

ACTIVATIONS = {"quick_gelu": "quick_gelu", **hf_bert.ACTIVATIONS}
LEGACY_EOS = 2  # CLIPTextModel pools at the highest token id where its configuration's eos_token_id is this


def _eos(facts: TowerFacts) -> int | None:
    """The end-of-text id the text tower pools at (the legacy 2 where it pools at the highest id)."""
    pool = facts.text.spec.head.pool if facts.text.spec.head is not None else None
    if pool is None:
        return None
    variant, options = POOLS.of(pool)
    return variant.token(options) if variant.token(options) is not None else \
        LEGACY_EOS if variant.reads_highest_id else None


def picture_fields(where: str = "vision_config") -> tuple:
    """A vision tower's pictures (``where``'s ``image_size``, ``patch_size``, ``num_channels``), square: one side
    each, as ViT's are read; two different sides are refused."""
    return (Field("image", f"{where}.image_size", lambda f: f.vision.input_option("image"),
                  read=lambda c: hf_vit.square_side(lookup(c, f"{where}.image_size"))),
            Field("patch", f"{where}.patch_size", lambda f: f.vision.input_option("patch"),
                  read=lambda c: hf_vit.square_side(lookup(c, f"{where}.patch_size"))),
            Field("channels", f"{where}.num_channels", lambda f: f.vision.input_option("channels")),
            Fixed(f"{where}.image_size", True, SQUARE, required="one side (square pictures)",
                  read=lambda c: hf_vit.square_side(lookup(c, f"{where}.image_size")) is not None))


def square_pictures(config, where: str = "vision_config") -> None:
    """Refuse a configuration whose pictures have two different sides (``spec_text`` called on its own)."""
    if hf_vit.square_side(lookup(config, f"{where}.image_size")) is None:
        raise InteropError(SQUARE)


SQUARE = "image_size of two different sides: tfspec's pictures are square"


def tower_fields(prefix: str, tower: str, where: str, activations: dict[str, str] = ACTIVATIONS,
                 init: bool = True) -> tuple[Field, ...]:
    """The fields a tower's configuration has (a CLIP-like encoder's), read from ``where`` (``text_config``) and
    the facts of ``tower`` (``text``); ``init``: its ``initializer_range`` too."""
    def of(f):
        return getattr(f, tower)
    return (
        Field(f"{prefix}d_model", f"{where}.hidden_size", lambda f: of(f).embedding.dim),
        Field(f"{prefix}heads", f"{where}.num_attention_heads", lambda f: of(f).attention("encoder").heads),
        Field(f"{prefix}layers", f"{where}.num_hidden_layers", lambda f: of(f).layers("encoder")),
        Field(f"{prefix}d_ff", f"{where}.intermediate_size", lambda f: of(f).feedforward("encoder").d_ff),
        Field(f"{prefix}eps", f"{where}.layer_norm_eps", lambda f: of(f).norm_option("encoder", "eps", 1e-5)),
        Field(f"{prefix}p_attn_dropout", f"{where}.attention_dropout", lambda f: of(f).attention("encoder").dropout),
        Field(f"{prefix}activation", f"{where}.hidden_act",
              lambda f: of(f).feedforward("encoder").activation.name, names=activations, let=False),
    ) + ((Field(f"{prefix}init_std", f"{where}.initializer_range", lambda f: of(f).init_option("std", 0.02)),)
         if init else ())


def towers_ignored(where: tuple[str, ...] = ("text_config", "vision_config")) -> dict[str, str]:
    """The fields of every tower's nested configuration that do not change what it computes."""
    from ..fields import COMMON_IGNORED
    own = {"model_type": "the tower's configuration class", "architectures": "the class, the whole model's"}
    return {f"{w}.{key}": own.get(key, why) for w in where for key, why in COMMON_IGNORED.items()
            if key not in ("pad_token_id", "bos_token_id", "eos_token_id", "sep_token_id", "decoder_start_token_id")}


FIELDS = Fields(
    *tower_fields("text_", "text", "text_config"),
    Field("vocab", "text_config.vocab_size", lambda f: f.text.embedding.vocab),
    Field("text_positions", "text_config.max_position_embeddings", lambda f: f.text.learned_positions()),
    Field("eos", "text_config.eos_token_id", _eos, let=False),
    *tower_fields("vision_", "vision", "vision_config"),
    *picture_fields(),
    Field("projection", "projection_dim", lambda f: f.text.spec.head.out if f.text.spec.head else None),
    Field("logit_scale", "logit_scale_init_value", lambda f: f.contrastive.scale, let=False),
    ignored={
        **towers_ignored(),
        **{f"{where}.{key}": why for where in ("text_config", "vision_config") for key, why in {
            "projection_dim": "the towers' projections are the model's projection_dim",
            "initializer_factor": "scales Hugging Face's initialisation; imported weights are the checkpoint's"}.items()},
        "text_config.pad_token_id": "a token id, which the tokenizer reads",
        "text_config.bos_token_id": "a token id, which the tokenizer reads",
        "initializer_factor": "scales Hugging Face's initialisation; imported weights are the checkpoint's",
    },
)


def document(s, *, padding: bool, head: bool) -> Document:
    """The two towers and the contrastive head a CLIP configuration's settings ``s`` describe."""
    square_pictures(s.config)
    eos = s.value("eos")
    pool = "highest_id" if eos == LEGACY_EOS else f"token({eos})"
    norm = f"layernorm(eps={s.text_eps})"
    text = Document.of(
        Block("defaults", Statement("norm", norm), Statement("attn_dropout", s.text_p_attn_dropout),
              Statement("init", f"normal(std={s.text_init_std})")),
        Block("embedding tokens", Statement("vocab", s.vocab), Statement("dim", s.text_d_model),
              Statement("position", f"learned({s.text_positions})")),
        Block(f"encoder x {s.text_layers}",
              Statement("attention", "self", heads=s.text_heads, mask="causal + padding" if padding else "causal"),
              Statement("feedforward", d_ff=s.text_d_ff, activation=s.text_activation), Statement("final", norm)),
        tail=(Statement("head", f"linear({s.projection})", bias="false", pool=pool,
                        comment="at the end of each text"),))
    vision = vision_tower(s, Statement("head", f"linear({s.projection})", bias="false", pool="first",
                                       comment="the class token"))
    return Document.of(Block("defaults", Statement("residual", "pre")), tail=(
        Tower("text", text), vision,
        Statement("contrastive", "text", "vision", loss="softmax", scale=s.logit_scale)))


def vision_tower(s, head: Statement | None = None) -> Tower:
    """CLIP's vision tower (``tower vision { ... }``) from a configuration's settings ``s``: ``head``, its head
    (none without: LLaVA's, whose connector reads the patches)."""
    grid = f"({s.image} // {s.patch}) * ({s.image} // {s.patch}) + 1"
    norm = f"layernorm(eps={s.vision_eps})"
    final = "which only the class token's vector reads" if head else "post_layernorm, read by nothing"
    return Tower("vision", Document.of(
        Block("defaults", Statement("norm", norm), Statement("attn_dropout", s.vision_p_attn_dropout),
              Statement("init", f"normal(std={s.vision_init_std})")),
        Block("embedding image", Statement("input", f"patches(image={s.image}, patch={s.patch}, "
                                                    f"channels={s.channels}, class_token=true, bias=false)"),
              Statement("dim", s.vision_d_model), Statement("position", f"learned({grid})"), Statement("norm", norm)),
        Block(f"encoder x {s.vision_layers}", Statement("attention", "self", heads=s.vision_heads),
              Statement("feedforward", d_ff=s.vision_d_ff, activation=s.vision_activation),
              Statement("final", norm, comment=final)),
        tail=(head,) if head else ()))


# a CLIP-like encoder's layer (CLIP's towers, SigLIP's): q, k, v and out projections, two LayerNorms, fc1 and fc2
ENCODER_LAYER = {"self_attn": Projections("self_attn", PROJECTIONS), "self_attn_norm": "layer_norm1",
                 "ffn.up": "mlp.fc1", "ffn.down": "mlp.fc2", "ffn_norm": "layer_norm2"}


def vision_top(theirs: str) -> dict:
    """A CLIP-like vision tower's tensors outside its layers (``theirs``: where the checkpoint holds its vision
    transformer): the patches, the class token, the positions, a norm of the embeddings (``pre_layrnorm``) and the
    final norm (``post_layernorm``), each where the tower has it."""
    embedding = "towers.{vision}.embeddings.{image}"
    return {f"{embedding}.patches": Patches(f"{theirs}.embeddings.patch_embedding"),
            f"{embedding}.class_token": One(f"{theirs}.embeddings.class_embedding"),
            f"{embedding}.positions": f"{theirs}.embeddings.position_embedding",
            f"{embedding}.norm": f"{theirs}.pre_layrnorm",
            "towers.{vision}.encoder.final_norm": f"{theirs}.post_layernorm"}


def encoder_layers(tower: str, theirs: str) -> dict:
    """A CLIP-like tower's layers (``theirs``: where the checkpoint holds its transformer)."""
    return {f"towers.{{{tower}}}.encoder.layers": (f"{theirs}.encoder.layers", ENCODER_LAYER)}


# each tower's, the projections and the contrastive head's scale
WEIGHTS = Towers({"towers.{text}.embeddings.{tokens}.tokens": "text_model.embeddings.token_embedding",
                  "towers.{text}.embeddings.{tokens}.positions": "text_model.embeddings.position_embedding",
                  "towers.{text}.encoder.final_norm": "text_model.final_layer_norm",
                  "towers.{text}.head": "text_projection",
                  **vision_top("vision_model"),
                  "towers.{vision}.head": "visual_projection",
                  "contrastive.scale": One("logit_scale")},
                 layers={**encoder_layers("text", "text_model"), **encoder_layers("vision", "vision_model")})


EXAMPLES = {
    # two towers (a causal text encoder pooled at its end-of-text id, a vision encoder of bias-free patches) meeting
    # in a contrastive head
    "CLIPModel": dict(model_type="clip", projection_dim=16, logit_scale_init_value=2.3,
                      text_config=dict(vocab_size=90, hidden_size=24, intermediate_size=40, num_hidden_layers=2,
                                       num_attention_heads=4, max_position_embeddings=30, eos_token_id=89),
                      vision_config=dict(hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                                         num_attention_heads=4, image_size=12, patch_size=4, num_channels=3,
                                         hidden_act="gelu", layer_norm_eps=1e-6)),
}

# every field away from its default; the second a checkpoint from before CLIP's end-of-text id was written
# (eos_token_id 2: pooled at the highest id)
COVERAGE = [dict(model_type="clip", projection_dim=12, logit_scale_init_value=3.1,
                 text_config=dict(vocab_size=91, hidden_size=24, intermediate_size=40, num_hidden_layers=3,
                                  num_attention_heads=3, max_position_embeddings=33, hidden_act="gelu",
                                  layer_norm_eps=1e-6, attention_dropout=0.1, initializer_range=0.05,
                                  eos_token_id=90),
                 vision_config=covering_vision(image_size=20, patch_size=5, hidden_act="relu", initializer_range=0.04)),
            dict(model_type="clip", text_config=dict(vocab_size=50, eos_token_id=2),
                 vision_config=dict(image_size=32, patch_size=16))]


CLIP = Family("CLIP", ("clip",), {"CLIPModel": {}},
              "CLIP: two towers (tower text, tower vision) whose pooled, projected vectors meet in a contrastive head "
              "(contrastive text vision loss=softmax); the text tower causal, pooled at the end-of-text token; the "
              "vision tower's patches without a bias, a LayerNorm on its embeddings, its class token normed and "
              "projected",
              priority=690, fields=FIELDS, document=document, rules=WEIGHTS, towers=True)
