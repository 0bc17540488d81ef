"""Hugging Face ``ModernBertForMaskedLM`` / ``ModernBertModel`` (Answer.AI and LightOn's ModernBERT) <-> a
compiled encoder-only spec.

ModernBERT (Warner et al. 2024) is a pre-norm encoder of LayerNorms (without bias where ``norm_bias`` says), its
embeddings normed, and no norm before the first layer's attention (the embeddings' serves: ``layers 0 { norm =
none }``, in the wiring form). Its layers attend globally or within ``local_attention / 2`` keys each side as
``layer_types`` says (one in three global by default), each kind with rotary positions of its own base
(``rope_parameters.full_attention`` 160,000, ``sliding_attention`` 10,000): a layer schedule. Its feed-forward is
GEGLU with ``Wi``'s first half through the activation (tfspec's order), its attention a fused ``Wqkv``; dropout
with ``attention_dropout`` falls on the attention's output too. The MLM head is a dense layer (biased where
``classifier_bias`` says: ``transform_bias``), ``classifier_activation``, a LayerNorm, then the tied decoder with a
bias (``decoder_bias``).
"""

from __future__ import annotations

from ..document import Document, Statement
from ..family import Family
from ..weights import MaskedLMHead, Weights
from ...ir import nodes as ir
from ...ir.queries import sublayers
from . import hf_gemma2, hf_gemma3
from ..fields import Field, Fields, standard
from ..mapping import InteropError
from .. import layouts
from ..writer import schedule, selection

SLIDING, FULL = hf_gemma2.SLIDING, hf_gemma2.FULL
ACTIVATIONS = {"gelu": "geglu", "gelu_pytorch_tanh": "geglu_tanh", "gelu_new": "geglu_tanh", "silu": "swiglu",
               "swish": "swiglu", "relu": "reglu"}
HEAD_ACTIVATIONS = {"gelu": "gelu", "gelu_pytorch_tanh": "gelu_tanh", "gelu_new": "gelu_tanh", "silu": "silu",
                    "relu": "relu"}


def _window(config) -> int | None:
    """The sliding layers' mask: ``window(local_attention // 2 + 1)`` (|i - j| <= local_attention / 2)."""
    return config.local_attention // 2 + 1 if SLIDING in (config.layer_types or []) else None


def _local_attention(f) -> int | None:
    windows = {w for w in f.layer_windows("encoder") if w is not None}
    if len(windows) > 1:
        raise f.refuse("its layers slide over different windows")
    return 2 * (windows.pop() - 1) if windows else None


def _norm_bias(f) -> bool:
    return f.norm_option("encoder", "bias", True)


def _theta(kind: str):
    return lambda c: float(hf_gemma3.rope_of_kind(c, kind)["rope_theta"]) if kind in (c.layer_types or []) else None


FIELDS = Fields(
    *standard("encoder", d_model="hidden_size", heads="num_attention_heads", layers="num_hidden_layers",
              d_ff="intermediate_size", vocab="vocab_size"),
    Field("eps", "norm_eps", lambda f: f.norm_option("encoder", "eps", 1e-5)),
    Field("norm_bias", "norm_bias", _norm_bias, let=False),
    Field("attention_bias", "attention_bias", lambda f: f.attention("encoder").bias, let=False),
    Field("mlp_bias", "mlp_bias", lambda f: f.feedforward("encoder").bias, let=False),
    Field("activation", "hidden_activation", lambda f: f.feedforward("encoder").activation.name, names=ACTIVATIONS),
    Field("p_attn_dropout", "attention_dropout", lambda f: f.attention("encoder").dropout),
    Field("p_mlp_dropout", "mlp_dropout", lambda f: f.feedforward("encoder").dropout),
    Field("p_embedding_dropout", "embedding_dropout", lambda f: f.embedding.dropout),
    Field("init_std", "initializer_range", lambda f: f.init_option("std", 0.02)),
    Field("window", "local_attention", _local_attention, read=_window, setting=False),
    Field("layer_types", "layer_types", lambda f: [SLIDING if w is not None else FULL
                                                   for w in f.layer_windows("encoder")],
          read=lambda c: list(c.layer_types), setting=False),
    Field("global_theta", "rope_parameters.full_attention.rope_theta",
          lambda f: f.layer_rotaries("encoder", sliding=False).get("theta"), read=_theta(FULL)),
    Field("local_theta", "rope_parameters.sliding_attention.rope_theta",
          lambda f: f.layer_rotaries("encoder", sliding=True).get("theta"), read=_theta(SLIDING)),
    Field("tied", "tie_word_embeddings", lambda f: f.tied, let=False),
    Field("decoder_bias", "decoder_bias", lambda f: f.spec.head.bias if f.spec.head else None, let=False),
    Field("classifier_bias", "classifier_bias", lambda f: f.spec.head.transform_bias if f.spec.head else None,
          let=False),
    Field("head_activation", "classifier_activation",
          lambda f: f.spec.head.transform.name if f.spec.head and f.spec.head.transform else None,
          names=HEAD_ACTIVATIONS),
    ignored={"max_position_embeddings": "the longest sequence trained on; rotary positions compute the same at "
                                        "any length",
             "rope_parameters.full_attention.rope_type": "the global layers' rotary scaling, unscaled in every "
                                                         "ModernBERT (Hugging Face's rotary reads only the base)",
             "rope_parameters.sliding_attention.rope_type": "the local layers' rotary scaling (as the global ones')",
             "initializer_cutoff_factor": "how far a fresh model's truncated normal init reaches; imported weights "
                                          "are the checkpoint's",
             "cls_token_id": "a token id, which the tokenizer reads (written back as it was)",
             "classifier_pooling": "the sequence classifier's pooling, which tfspec does not import",
             "deterministic_flash_attn": "which flash-attention kernel runs; the result is the same",
             "sparse_prediction": "computes the MLM loss on the masked positions only; the logits are the same",
             "sparse_pred_ignore_index": "the label sparse_prediction skips",
             "global_attn_every_n_layers": "how layer_types is derived when a configuration leaves it out",
             "sliding_window": "local_attention / 2, which local_attention says"},
)


def document(s, *, padding: bool, head: bool, pooler: bool = False) -> Document:
    """ModernBERT's spec: a pre-norm encoder in the wiring form, its first layer without a norm before attention
    and its sliding and global layers a schedule."""
    w, config = s.writer, s.config
    slides = [s.value("window") is not None and t == SLIDING for t in s.value("layer_types")]
    # |i - j| <= local_attention / 2, as tfspec's window(k) writes |i - j| < k
    window = f"{w('local_attention', config.local_attention, 'local_attention')} // 2 + 1" if any(slides) else None
    masks = "padding" if padding else "none"

    def changes(first: bool, slide: bool, base: tuple) -> list[str]:
        out = ["norm = none"] if first != base[0] else []
        if slide != base[1]:
            out += [f"self_attn mask={masks} + window({window})" if slide else f"self_attn mask={masks}",
                    f"position rotary(theta={s.local_theta if slide else s.global_theta})"]
        return out

    if len(slides) < 2:
        raise InteropError("a ModernBERT of one layer: its only layer has no norm before attention, and a stack's "
                           "own layer is one of its later layers")
    per_layer = [(i == 0, slide) for i, slide in enumerate(slides)]
    base = schedule(per_layer[1:])[0]  # the stack's own layer: the commonest after the first
    sections = [(selection([i for i, v in enumerate(per_layer) if v == value], len(per_layer)), value)
                for value in dict.fromkeys(per_layer) if value != base]
    lines = "".join(f"  layers {layers} {{ {'; '.join(changes(*kind, base))} }}\n" for layers, kind in sections)
    if not any(slides):
        w.forget("local_theta")
    if all(slides):
        w.forget("global_theta")
    norm = f"layernorm(eps={s.eps}, bias={s.norm_bias})"
    own_mask = f"{masks} + window({window})" if base[1] else masks
    attention = f"attention(norm(x), heads={s.heads}, mask={own_mask}, bias={s.attention_bias})"
    if s.value("p_attn_dropout"):  # Hugging Face drops the attention's output with the same rate
        attention = f"dropout({attention}, {s.p_attn_dropout})"
    wiring = f"""x = x + {attention}
x = x + feedforward(norm(x), d_ff={s.d_ff}, activation={s.activation}, bias={s.mlp_bias}, \\
                    act_dropout={s.p_mlp_dropout})  # (Hugging Face's mlp_dropout: on the gated product)"""
    document = (layouts.wired(s, norm=norm, position=f"rotary(theta={s.local_theta if base[1] else s.global_theta})",
                              wiring=wiring, head=False, role="encoder")
                .add("embedding tokens", Statement("norm", norm))
                .add("embedding tokens", Statement("dropout", s.p_embedding_dropout))
                .add_lines("encoder", lines))
    if not head:
        w.forget("head_activation")
        return document
    return document.with_tail(Statement(
        "head", "tied(tokens)" if s.value("tied") else f"linear({s.vocab})", transform=s.head_activation,
        norm=norm, bias=s.decoder_bias, transform_bias=s.classifier_bias, comment="the MLM head"))


def _layer_parts(model, i: int) -> dict[str, str]:
    """Module names in layer ``i``: ``attention``, ``feedforward``, and the norm before each where it has one."""
    g = model.spec.graph()
    kind = g.stacks["encoder"].kind_of(i)
    parts: dict[str, str] = {}
    for node in sublayers(g, "encoder", kind=kind):
        part = "attention" if isinstance(node, ir.Attention) else "feedforward"
        if part in parts:
            raise InteropError(f"spec '{model.spec.name}' has more than one {part} per layer; ModernBERT has one")
        parts[part] = node.name
        before = g.node(node.inputs[0])
        if isinstance(before, ir.Norm) and before.module is not None:
            parts[f"{part}_norm"] = before.module.name
    return parts


EXAMPLES = {
    "ModernBertForMaskedLM": dict(model_type="modernbert", vocab_size=90, hidden_size=32, num_hidden_layers=4,
                                  num_attention_heads=4, intermediate_size=48, local_attention=8,
                                  pad_token_id=0, bos_token_id=1, eos_token_id=2, cls_token_id=1, sep_token_id=2),
    "ModernBertModel": dict(model_type="modernbert", vocab_size=90, hidden_size=32, num_hidden_layers=3,
                            num_attention_heads=4, intermediate_size=48, local_attention=6, norm_bias=True,
                            attention_bias=True, mlp_bias=True, norm_eps=1e-6,
                            layer_types=["sliding_attention", "full_attention", "sliding_attention"],
                            rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 50000.0},
                                             "sliding_attention": {"rope_type": "default", "rope_theta": 5000.0}},
                            pad_token_id=0, bos_token_id=1, eos_token_id=2, cls_token_id=1, sep_token_id=2),
}

COVERAGE = [dict(model_type="modernbert", vocab_size=91, hidden_size=24, num_hidden_layers=3,
                 num_attention_heads=3, intermediate_size=40, local_attention=6, norm_eps=1e-7,
                 norm_bias=True, attention_bias=True, mlp_bias=True, hidden_activation="relu",
                 attention_dropout=0.3, mlp_dropout=0.2, embedding_dropout=0.1, initializer_range=0.05,
                 tie_word_embeddings=False, decoder_bias=False, classifier_bias=True,
                 classifier_activation="relu",
                 layer_types=["sliding_attention", "full_attention", "full_attention"],
                 rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 5e4},
                                  "sliding_attention": {"rope_type": "default", "rope_theta": 5e3}},
                 pad_token_id=0, bos_token_id=1, eos_token_id=2, cls_token_id=1, sep_token_id=2,
                 architectures=["ModernBertForMaskedLM"])]


MODERNBERT = Family(
    "ModernBERT", ("modernbert",), {"ModernBertForMaskedLM": {"head": True}, "ModernBertModel": {"head": False}},
    "ModernBERT: a pre-norm encoder of LayerNorms (no norm before the first layer's attention: the "
    "embeddings' serves), GEGLU, global and local (a window of local_attention / 2 each side) layers as "
    "layer_types says, each with rotary positions of its own base (a layer schedule); the MLM head's "
    "transform biased where classifier_bias says",
    priority=470, fields=FIELDS, document=document, kind="encoder-only", carried=("cls_token_id",),
    rules=Weights({"attention.qkv": "attn.Wqkv", "attention.out": "attn.Wo", "feedforward.up": "mlp.Wi",
                   "feedforward.down": "mlp.Wo", "attention_norm": "attn_norm", "feedforward_norm": "mlp_norm"},
                  top={"embeddings.tokens.tokens": "embeddings.tok_embeddings",
                       "embeddings.tokens.norm": "embeddings.norm", "encoder.final_norm": "final_norm"},
                  parts=lambda model: [_layer_parts(model, i) for i in range(len(model.encoder.layers))],
                  head=MaskedLMHead("head.dense", "head.norm", "decoder", "decoder.bias")))
