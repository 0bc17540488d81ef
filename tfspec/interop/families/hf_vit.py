"""Hugging Face ``ViTForImageClassification`` / ``ViTModel`` <-> a compiled encoder-only spec of pictures.

ViT (Dosovitskiy et al. 2021) cuts each picture into ``patch_size``-sided squares, maps each linearly to
``hidden_size`` (Hugging Face's ``patch_embeddings.projection``, a convolution whose kernel is its stride: our
``patches`` over each patch's pixels in (channel, row, column) order, the same matrix reshaped), puts a learned
class token before them and adds learned positions (``embedding image { input patches(image=N, patch=P,
class_token=true); position learned(...) }``); then a pre-norm LayerNorm encoder and a final norm. The classifier
reads the class token (``head linear(num_labels) pool=first``); the base model has BERT's pooler on it (``pooler
tanh``).
Pictures are square (an ``image_size`` or ``patch_size`` of two different sides is refused).
"""

from __future__ import annotations

from . import hf_bert
from ..fields import Field, Fields, Fixed, standard
from ..mapping import InteropError, Rule, rule
from ..document import Block, Document, Statement
from ..family import Family
from ..weights import Classifier, Projections, Weights

POOLER_ACTIVATIONS = {**hf_bert.ACTIVATIONS, "tanh": "tanh"}


def square_side(value):
    """A square picture's (or patch's) side; None for two different sides (refused by ``Fixed`` below)."""
    if isinstance(value, (list, tuple)):
        return value[0] if len(set(value)) == 1 else None
    return value


def _square(config) -> bool:
    return square_side(config.image_size) is not None and square_side(config.patch_size) is not None


FIELDS = Fields(
    *standard("encoder", d_model="hidden_size", heads="num_attention_heads", layers="num_hidden_layers",
              d_ff="intermediate_size"),
    Field("image", "image_size", lambda f: f.input_option("image"), read=lambda c: square_side(c.image_size)),
    Field("patch", "patch_size", lambda f: f.input_option("patch"), read=lambda c: square_side(c.patch_size)),
    Field("channels", "num_channels", lambda f: f.input_option("channels")),
    Field("eps", "layer_norm_eps", lambda f: f.norm_option("encoder", "eps", 1e-5)),
    *standard("encoder", p_dropout="hidden_dropout_prob", p_attn_dropout="attention_probs_dropout_prob",
              init_std="initializer_range"),
    Field("activation", "hidden_act", lambda f: f.feedforward("encoder").activation.name, names=hf_bert.ACTIVATIONS),
    Field("qkv_bias", "qkv_bias", lambda f: f.attention("encoder").bias, let=False),
    Field("classes", "num_labels", lambda f: f.spec.head.out if f.spec.head is not None else None,
          read=lambda c: c.num_labels),
    Field("pooler_activation", "pooler_act",
          lambda f: f.spec.pooler.activation.name if f.spec.pooler is not None else None,
          names=POOLER_ACTIVATIONS, let=False),
    Fixed("image_size", True, "image_size and patch_size of two different sides: tfspec's pictures and patches "
                              "are square", read=_square, required="one side (square pictures), as patch_size"),
    Fixed("pooler_output_size", None, "pooler_output_size={value}: tfspec's pooler keeps the width (hidden_size)",
          read=lambda c: c.pooler_output_size if c.pooler_output_size != c.hidden_size else None),
    ignored={"encoder_stride": "the masked-image-modeling decoder's, which tfspec does not import",
             "id2label": "the classes' names; their number is num_labels (the classifier's outputs)",
             "label2id": "the classes' names; their number is num_labels (the classifier's outputs)"},
)


def document(s, *, padding: bool, head: bool, pooler: bool = False) -> Document:
    """The spec a ViT configuration's settings ``s`` describe: the classifier (``head``) or the base model with its
    ``pooler``. (Pictures have no padding: ``padding`` changes nothing.)"""
    if not _square(s.config):
        raise InteropError("image_size and patch_size of two different sides: tfspec's pictures and patches are "
                           "square")
    norm, side = f"layernorm(eps={s.eps})", f"({s.image} // {s.patch})"
    tail = ([Statement("head", f"linear({s.classes})", pool="first", comment="the classifier, on the class token")]
            if head else []) + ([Statement("pooler", s.pooler_activation)] if pooler else [])
    return Document.of(
        Block("defaults", Statement("residual", "pre"), Statement("norm", norm), Statement("dropout", s.p_dropout),
              Statement("attn_dropout", s.p_attn_dropout), Statement("init", f"normal(std={s.init_std})")),
        Block("embedding image",
              Statement("input", f"patches(image={s.image}, patch={s.patch}, channels={s.channels}, class_token=true)"),
              Statement("dim", s.d_model), Statement("position", f"learned({side} * {side} + 1)"),
              Statement("dropout", s.p_dropout)),
        Block(f"encoder x {s.layers}",
              Statement("attention", "self", heads=s.heads, bias=s.qkv_bias, out_bias="true"),
              Statement("feedforward", d_ff=s.d_ff, activation=s.activation), Statement("final", norm)),
        tail=tuple(tail))


def patch_embeddings(model, ours: str, prefix: str, state: dict, ours_state: dict) -> list[Rule]:
    """The pictures' embedding: the patches' map (a convolution's kernel there, each patch's pixels here), the
    class token and the learned positions, each stored with leading dimensions of one."""
    embedding, theirs = model.get_submodule(ours), f"{prefix}embeddings"
    width, side = embedding.patches.weight.shape[0], embedding.patch
    return [rule(f"{ours}.patches.weight", f"{theirs}.patch_embeddings.projection.weight",
                 shape=(width, embedding.channels, side, side)),
            rule(f"{ours}.patches.bias", f"{theirs}.patch_embeddings.projection.bias"),
            rule(f"{ours}.class_token", f"{theirs}.cls_token", shape=(1, 1, width)),
            rule(f"{ours}.positions.weight", f"{theirs}.position_embeddings",
                 shape=(1, *embedding.positions.weight.shape))]


# a pre-norm encoder's layers under ``layers``, their attention's projections ``q_proj`` ... ``o_proj``
WEIGHTS = Weights({"self_attn": Projections("attention"), "self_attn_norm": "layernorm_before",
                   "ffn.up": "mlp.fc1", "ffn.down": "mlp.fc2", "ffn_norm": "layernorm_after"},
                  {"embeddings.image": patch_embeddings, "encoder.final_norm": "layernorm"}, parts=None,
                  head=Classifier())


EXAMPLES = {
    "ViTForImageClassification": dict(model_type="vit", hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                      intermediate_size=48, image_size=16, patch_size=4, num_labels=5,
                                      layer_norm_eps=1e-6),
    "ViTModel": dict(model_type="vit", hidden_size=24, num_hidden_layers=1, num_attention_heads=3,
                     intermediate_size=40, image_size=12, patch_size=6, num_channels=1, qkv_bias=False,
                     hidden_act="gelu_new"),
}

COVERAGE = [dict(model_type="vit", hidden_size=24, num_hidden_layers=3, num_attention_heads=3,
                 intermediate_size=40, image_size=20, patch_size=5, num_channels=2, layer_norm_eps=1e-6,
                 hidden_dropout_prob=0.2, attention_probs_dropout_prob=0.3, initializer_range=0.05,
                 hidden_act="relu", qkv_bias=False, num_labels=7, architectures=["ViTForImageClassification"]),
            dict(model_type="vit", hidden_size=24, num_hidden_layers=1, num_attention_heads=3,
                 intermediate_size=40, image_size=8, patch_size=4, pooler_act="relu", architectures=["ViTModel"])]


VIT = Family(
    "ViT", ("vit",),
    {"ViTForImageClassification": {"head": True, "pooler": False},
    "ViTModel": {"head": False, "pooler": True}},
    "ViT: pictures cut into square patches, each mapped linearly (embedding image { input patches(image=N, "
    "patch=P, class_token=true) }), learned positions, a pre-norm LayerNorm encoder; the classifier reads the class "
    "token (head linear(num_labels) pool=first), the base model's pooler too",
    priority=160, fields=FIELDS, document=document, kind="encoder-only", rules=WEIGHTS,
    prefix="vit.")
