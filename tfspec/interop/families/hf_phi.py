"""Hugging Face ``PhiForCausalLM`` (phi-2; and ``PhiModel``) <-> a compiled spec: GPT-J's (``hf_gptj``: attention
and feed-forward in parallel on one norm) with Phi's table -- half-split partial rotary, every projection biased,
optional per-head qk LayerNorm."""

from __future__ import annotations

from ..family import Requires, causal_lm
from . import hf_gptj, hf_llama
from ..document import Document
from ..weights import Projections
from ..layouts import covering, example


def document(s, *, padding: bool, head: bool) -> Document:
    """Phi's spec: GPT-J's layout with Llama's rotary positions, grouped-query attention, every projection biased
    and each head's queries and keys LayerNorm-ed where ``qk_layernorm``."""
    qk_norm = f", qk_norm=layernorm(eps={s.eps})" if s.value("qk_layernorm") else ""
    return hf_gptj.parallel(s, padding=padding, head=head, position=hf_llama.rotary(s), kv=f", kv_heads={s.kv_heads}",
                            extra=", bias=true" + qk_norm, d_ff=s.d_ff)


EXAMPLES = {
    "PhiForCausalLM": example("phi", qk_layernorm=True, bos_token_id=1, eos_token_id=2),
    "PhiModel": dict(model_type="phi", vocab_size=90, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                     intermediate_size=48, bos_token_id=1, eos_token_id=2),
}

COVERAGE = [dict(model_type="phi", vocab_size=91, hidden_size=24, num_hidden_layers=3, num_attention_heads=3,
                 num_key_value_heads=1, intermediate_size=40, layer_norm_eps=1e-6,
                 rope_parameters={"rope_type": "linear", "rope_theta": 5e5, "partial_rotary_factor": 0.75,
                                  "factor": 2.0},
                 resid_pdrop=0.2, embd_pdrop=0.25, attention_dropout=0.3, initializer_range=0.05,
                 hidden_act="relu", qk_layernorm=True, tie_word_embeddings=True, bos_token_id=1, eos_token_id=2),
            *hf_llama.each_scaling(covering("phi", num_hidden_layers=1, max_position_embeddings=32, bos_token_id=1,
                                            eos_token_id=2))]


PHI = hf_gptj.GPTJ.derive(
    "Phi", ("phi",), causal_lm("Phi"),
    "Phi (phi-2): attention and feed-forward in parallel on one LayerNorm, half-split partial rotary "
    "positions, every projection biased, optional per-head qk LayerNorm, an untied head with a bias",
    priority=300, fields=hf_gptj.PHI_FIELDS, document=document, prefix="model.",
    requires=(Requires(lambda f: f.attention("decoder").bias, "its attention projections have no biases; Phi's have"),),
    rules=hf_gptj.GPTJ.rules.derive(
        {"attention": Projections(names=("q_proj", "k_proj", "v_proj", "dense")),
         "attention.q_norm": "self_attn.q_layernorm", "attention.k_norm": "self_attn.k_layernorm",
         "feedforward.up": "mlp.fc1", "feedforward.down": "mlp.fc2", "attention_norm": "input_layernorm"},
        top={"embeddings.tokens.tokens": "embed_tokens", "decoder.final_norm": "final_layernorm"}, layers="layers"))
