"""Hugging Face ``GPTNeoXForCausalLM`` / ``GPTNeoXModel`` (Pythia, GPT-NeoX-20B) <-> a compiled spec.

GPT-NeoX's fused ``query_key_value`` interleaves q, k and v per head (rows
ordered head, then q/k/v, then dimension); our ``qkv`` holds all queries, then
all keys, then all values, so the rows are permuted on the way in and out. With
``use_parallel_residual`` attention and feed-forward read the same input through
their own LayerNorms and are added together: the spec writes that in the wiring
form. ``spec_text(config)`` is the spec a configuration describes; loading
compares against it (partial rotary fraction, θ, eps, parallel residual, biases,
tying, dropout) and refuses any difference with an ``InteropError``.
"""

from __future__ import annotations

from ..family import Family, causal_lm
from ...ir.queries import sublayers
from ..document import Document
from ..fields import Field, Fields, Fixed, standard
from .. import layouts
from ..weights import Weights, Reordered, per_head_rows
from ..layouts import covering

ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "relu": "relu",
               "silu": "silu", "tanh": "tanh"}


def rope(config) -> tuple[float, float]:
    """(θ, partial rotary fraction) of a GPT-NeoX configuration."""
    params = dict(getattr(config, "rope_parameters", None) or {})
    theta = params.get("rope_theta", getattr(config, "rotary_emb_base", 10000))
    fraction = params.get("partial_rotary_factor", getattr(config, "rotary_pct", 1.0))
    return float(theta), float(fraction)


def _parallel(f) -> bool:
    """Parallel residual: the feed-forward's norm reads the layer's input, as the attention's does."""
    g = f.g
    norm_input = [g.node(node.inputs[0]).inputs[0] for node in sublayers(g, "decoder")]
    return len(set(norm_input)) == 1


FIELDS = Fields(
    *standard("decoder", d_model="hidden_size", heads="num_attention_heads", layers="num_hidden_layers",
              d_ff="intermediate_size", vocab="vocab_size"),
    Field("rope_theta", "rope_parameters.rope_theta", lambda f: f.rotary("decoder").get("theta", 10000.0),
          read=lambda c: rope(c)[0]),
    # always exported: GPT-NeoX's default fraction is 0.25, not 1
    Field("rotary_fraction", "rope_parameters.partial_rotary_factor",
          lambda f: f.rotary("decoder").get("fraction", 1.0), read=lambda c: rope(c)[1] if rope(c)[1] != 1.0 else None),
    Field("eps", "layer_norm_eps", lambda f: f.norm_option("decoder", "eps", 1e-5)),
    Field("p_attn_dropout", "attention_dropout", lambda f: f.attention("decoder").dropout),
    Field("p_dropout", "hidden_dropout", lambda f: f.residual_dropout("decoder"),
          read=lambda c: float(getattr(c, "hidden_dropout", 0.0) or 0.0) or None),  # written where it acts
    Field("init_std", "initializer_range", lambda f: f.init_option("std", 0.02)),
    Field("activation", "hidden_act", lambda f: f.feedforward("decoder").activation.name, names=ACTIVATIONS),
    Field("bias", "attention_bias", lambda f: f.attention("decoder").bias,
          read=lambda c: bool(getattr(c, "attention_bias", True)), let=False),
    Field("parallel", "use_parallel_residual", _parallel, let=False),
    Field("tied", "tie_word_embeddings", lambda f: f.tied, let=False),
    Fixed("rope_parameters.rope_type", "default", "rope scaling '{value}' is not supported (only unscaled RoPE)",
          read=lambda c: dict(getattr(c, "rope_parameters", None) or {}).get("rope_type", "default"), exported=True),
    ignored={"max_position_embeddings": "the longest sequence trained on; unscaled rotary positions compute the "
                                        "same at any length",
             "is_decoder": "not read by GPT-NeoX's model, which is always causal"},
)


def document(s, *, padding: bool, head: bool) -> Document:
    """GPT-NeoX's spec: each branch behind its own LayerNorm, in parallel where ``use_parallel_residual``."""
    masks = "causal + padding" if padding else "causal"

    def out(t: str) -> str:  # HF's post_attention_dropout / post_mlp_dropout
        return f"dropout({t}, {s.p_dropout})" if s.p_dropout else t

    attention = out(f"attention(layernorm(x, eps={s.eps}), heads={s.heads}, mask={masks}, bias={s.bias})")
    feedforward = out(f"feedforward(layernorm(x, eps={s.eps}), d_ff={s.d_ff}, activation={s.activation})")
    wiring = (f"x = x + {attention} + {feedforward}   # parallel residual" if s.value("parallel")
              else f"x = x + {attention}\nx = x + {feedforward}")
    position = f"rotary(theta={s.rope_theta}" + (f", fraction={s.rotary_fraction})" if s.rotary_fraction else ")")
    return layouts.wired(s, norm=None, final=f"layernorm(eps={s.eps})", position=position, wiring=wiring, head=head)


# GPT-NeoX's checkpoint; its fused query_key_value interleaves q, k and v per head
WEIGHTS = Weights({
    "attention.qkv": Reordered("attention.query_key_value", lambda model, core: per_head_rows(core.heads,
                                                                                             core.head_dim)),
    "attention.out": "attention.dense", "feedforward.up": "mlp.dense_h_to_4h", "feedforward.down": "mlp.dense_4h_to_h",
    "attention_norm": "input_layernorm", "feedforward_norm": "post_attention_layernorm"},
    top={"embeddings.tokens.tokens": "embed_in", "decoder.final_norm": "final_layer_norm"})


EXAMPLES = {
    "GPTNeoXForCausalLM": dict(model_type="gpt_neox", vocab_size=90, hidden_size=32, num_hidden_layers=2,
                               num_attention_heads=4, intermediate_size=64, rotary_pct=0.5),
    "GPTNeoXModel": dict(model_type="gpt_neox", vocab_size=90, hidden_size=32, num_hidden_layers=1,
                         num_attention_heads=4, intermediate_size=64, use_parallel_residual=False),
}

COVERAGE = [covering("gpt_neox", num_hidden_layers=3, layer_norm_eps=1e-6,
                     rope_parameters={"rope_type": "default", "rope_theta": 5e5, "partial_rotary_factor": 0.5},
                     attention_dropout=0.1, hidden_dropout=0.2, initializer_range=0.05, hidden_act="relu",
                     attention_bias=False, use_parallel_residual=False, tie_word_embeddings=True)]


GPT_NEOX = Family(
    "GPT-NeoX", ("gpt_neox",), causal_lm("GPTNeoX"),
    "GPT-NeoX (Pythia): attention and feed-forward read the same input in parallel (when use_parallel_residual), "
    "each behind its own LayerNorm; partial rotary positions; an untied head",
    priority=330, fields=FIELDS, document=document, rules=WEIGHTS, prefix="gpt_neox.")
