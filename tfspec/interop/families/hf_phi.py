"""Hugging Face ``PhiForCausalLM`` (phi-2; and ``PhiModel``) <-> a compiled spec: GPT-J's (``hf_gptj``: attention
and feed-forward in parallel on one norm) with Phi's table -- half-split partial rotary, every projection biased,
optional per-head qk LayerNorm."""

from __future__ import annotations

from ..family import Requires, causal_lm
from . import hf_gptj, hf_llama
from ..document import Document
from ..weights import Projections


def document(s, *, padding: bool, head: bool) -> Document:
    """Phi's spec: GPT-J's layout with Llama's rotary positions, grouped-query attention, every projection biased
    and each head's queries and keys LayerNorm-ed where ``qk_layernorm``."""
    qk_norm = f", qk_norm=layernorm(eps={s.eps})" if s.value("qk_layernorm") else ""
    return hf_gptj.parallel(s, padding=padding, head=head, position=hf_llama.rotary(s), kv=f", kv_heads={s.kv_heads}",
                            extra=", bias=true" + qk_norm, d_ff=s.d_ff)


PHI = hf_gptj.GPTJ.derive(
    "Phi", ("phi",), causal_lm("Phi"),
    "Phi (phi-2): attention and feed-forward in parallel on one LayerNorm, half-split partial rotary "
    "positions, every projection biased, optional per-head qk LayerNorm, an untied head with a bias",
    module=__name__, priority=300, fields=hf_gptj.PHI_FIELDS, document=document, prefix="model.",
    requires=(Requires(lambda f: f.attention("decoder").bias, "its attention projections have no biases; Phi's have"),),
    rules=hf_gptj.GPTJ.rules.derive(
        {"attention": Projections(names=("q_proj", "k_proj", "v_proj", "dense")),
         "attention.q_norm": "self_attn.q_layernorm", "attention.k_norm": "self_attn.k_layernorm",
         "feedforward.up": "mlp.fc1", "feedforward.down": "mlp.fc2", "attention_norm": "input_layernorm"},
        top={"embeddings.tokens.tokens": "embed_tokens", "decoder.final_norm": "final_layernorm"}, layers="layers"))
