"""Hugging Face ``GemmaForCausalLM`` (and its base model) <-> a compiled spec.

Gemma (Gemma Team 2024) is Llama's layout -- the same tensor names, ``hf_llama``'s weight rules --
with three differences the spec states: its RMSNorm scales by ``1 + w`` in float32 (``gemma_rmsnorm``), its
embedding is scaled by ``sqrt(hidden_size)``, and its gated feed-forward is GEGLU with the tanh approximation
(``hidden_act`` "gelu" is an old name transformers reads as that). ``head_dim`` is set apart from
``hidden_size / heads`` (256 in the released models).
"""

from __future__ import annotations

from ..family import causal_lm
from . import hf_gemma2, hf_llama
from ..fields import Field, Fields, Fixed
from ..document import Document, Statement
from ..layouts import covering, example

ACTIVATIONS = {"gelu_pytorch_tanh": "geglu_tanh", "gelu": "geglu_tanh", "silu": "swiglu"}  # on the gate -> ours
_LLAMA = {e.name: e for e in hf_llama.FIELDS.fields}

FIELDS = Fields(
    *(_LLAMA[n] for n in ("d_model", "heads", "kv_heads", "layers", "d_ff", "vocab", "rope_theta", "eps",
                          "p_attn_dropout", "init_std", "attention_bias", "tied")),
    Field("head_dim", "head_dim", lambda f: f.geometry("decoder").head_dim),  # Gemma's default is 256
    Field("activation", "hidden_act", lambda f: f.feedforward("decoder").activation.name, names=ACTIVATIONS),
    Fixed("rope_parameters.rope_type", "default", "rope scaling '{value}' is not supported (only unscaled RoPE)",
          read=lambda c: hf_llama.rope(c)["rope_type"], exported=True),
    Fixed("use_bidirectional_attention", None, "bidirectional attention ({value}) makes Gemma an encoder; "
          "tfspec reads the causal model", read=lambda c: getattr(c, "use_bidirectional_attention", None) or None),
    ignored=hf_llama.FIELDS.ignored,
)


def document(s, *, padding: bool, head: bool) -> Document:
    """Gemma's spec: Llama's with (1 + w) RMSNorms, the embeddings scaled by sqrt(d_model) and every dimension
    rotated."""
    return (hf_llama.document(s, padding=padding, head=head, norm="gemma_rmsnorm")
            .add("embedding tokens", Statement("scale", f"sqrt({s.d_model})"))
            .change("decoder", "position", f"rotary(theta={s.rope_theta})"))


EXAMPLES = {
    "GemmaForCausalLM": example("gemma", num_key_value_heads=1, head_dim=16),
    "GemmaModel": example("gemma", num_hidden_layers=1, num_key_value_heads=4, head_dim=8, attention_bias=True),
}

COVERAGE = [covering("gemma", num_hidden_layers=3, num_key_value_heads=1, head_dim=16, rms_norm_eps=1e-5,
                     rope_parameters={"rope_type": "default", "rope_theta": 5e5}, attention_dropout=0.1,
                     initializer_range=0.05, attention_bias=True, tie_word_embeddings=False, hidden_act="silu")]


GEMMA = hf_llama.LLAMA.derive(
    "Gemma", ("gemma",), causal_lm("Gemma"),
    "Gemma: Llama's block with an RMSNorm scaling by 1 + w (in float32), embeddings scaled by "
    "sqrt(hidden_size), GEGLU (tanh) feed-forward and head_dim set apart; the head tied to the token "
    "embedding",
    priority=260, fields=FIELDS, document=document, hf_config=None,
    requires=(hf_gemma2.EMBEDDING_SCALE,))
