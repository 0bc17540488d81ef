"""Hugging Face ``Starcoder2ForCausalLM`` (and its base model) <-> a compiled spec.

StarCoder2 (Lozhkov et al. 2024) is a pre-norm decoder with LayerNorms (with bias), rotary positions,
grouped-query attention, an optional sliding window and a plain (not gated) feed-forward ``c_fc`` -> GELU (tanh)
-> ``c_proj``; ``use_bias`` switches every projection's bias at once. ``residual_dropout`` drops each sublayer's
output and ``embedding_dropout`` the embeddings (both carried over). The head is tied by default.
"""

from __future__ import annotations

from ..family import Requires, causal_lm
from . import hf_llama
from ..fields import Field, Fields
from ..document import Document, Statement
from ..layouts import covering, example

ACTIVATIONS = {"gelu_pytorch_tanh": "gelu_tanh", "gelu_new": "gelu_tanh", "gelu": "gelu", "relu": "relu",
               "silu": "silu"}
_LLAMA = {e.name: e for e in hf_llama.FIELDS.fields}

FIELDS = Fields(
    *(_LLAMA[n] for n in ("d_model", "heads", "kv_heads", "layers", "d_ff", "vocab", "rope_theta", "rotary_fraction",
                          "window", "p_attn_dropout", "init_std", "tied")),
    *hf_llama.ROPE_SCALING,
    Field("eps", "norm_epsilon", lambda f: f.norm_option("decoder", "eps", 1e-5)),
    Field("activation", "hidden_act", lambda f: f.feedforward("decoder").activation.name, names=ACTIVATIONS),
    Field("use_bias", "use_bias", lambda f: f.attention("decoder").bias, let=False),
    Field("p_dropout", "residual_dropout", lambda f: f.residual_dropout("decoder")),
    Field("p_embd_dropout", "embedding_dropout", lambda f: f.embedding.dropout),
    ignored=hf_llama.FIELDS.ignored,
)


def document(s, *, padding: bool, head: bool) -> Document:
    """StarCoder2's spec: Llama's with LayerNorms, biases as use_bias says and dropout on the embeddings."""
    return (hf_llama.document(s, padding=padding, head=head, norm="layernorm")
            .add("embedding tokens", Statement("dropout", s.p_embd_dropout))
            .change("decoder", "attention", bias=s.use_bias)
            .change("decoder", "feedforward", bias=s.use_bias))


# use_bias sets both, which the table reads from the attention's
SAME_BIAS = Requires(lambda f: f.feedforward("decoder").bias == f.attention("decoder").bias,
                     "its attention and feed-forward differ in bias; StarCoder2's use_bias sets both")

EXAMPLES = {
    "Starcoder2ForCausalLM": example("starcoder2", sliding_window=6, bos_token_id=1, eos_token_id=2),
    "Starcoder2Model": example("starcoder2", num_hidden_layers=1, num_key_value_heads=4, use_bias=False, bos_token_id=1,
                               eos_token_id=2),
}

COVERAGE = [dict(model_type="starcoder2", vocab_size=91, hidden_size=24, num_hidden_layers=3,
                 num_attention_heads=3, num_key_value_heads=1, intermediate_size=40, norm_epsilon=1e-6,
                 sliding_window=7, rope_parameters={"rope_type": "default", "rope_theta": 5e5,
                                                    "partial_rotary_factor": 0.5},
                 attention_dropout=0.1, residual_dropout=0.2, embedding_dropout=0.15,
                 initializer_range=0.05, hidden_act="relu", use_bias=False, tie_word_embeddings=False,
                 bos_token_id=1, eos_token_id=2),
            *hf_llama.each_scaling(covering("starcoder2", num_hidden_layers=1, num_key_value_heads=3,
                                            max_position_embeddings=32, bos_token_id=1, eos_token_id=2))]


STARCODER2 = hf_llama.LLAMA.derive(
    "StarCoder2", ("starcoder2",), causal_lm("Starcoder2"),
    "StarCoder2: pre-norm LayerNorm (with bias), rotary positions, grouped-query attention, an optional "
    "sliding window, a plain GELU (tanh) feed-forward, every projection biased by use_bias, the head tied",
    priority=240, fields=FIELDS, document=document, hf_config=None, requires=(SAME_BIAS,),
    rules=hf_llama.WEIGHTS.derive({"feedforward": None, "feedforward.up": "mlp.c_fc",
                                   "feedforward.down": "mlp.c_proj"}))
