"""Hugging Face ``StableLmForCausalLM`` (StableLM 2; and ``StableLmModel``) <-> a compiled spec: Cohere's
(``hf_cohere``: Llama's projections around LayerNorms) with StableLM's table -- half-split partial rotary, q/k/v
biases where ``use_qkv_bias``, pre-norm or parallel on one norm, dropout on the feed-forward's output."""

from __future__ import annotations

from ..family import causal_lm
from . import hf_cohere, hf_llama
from ..document import Document
from ..layouts import covering, example


def document(s, *, padding: bool, head: bool) -> Document:
    """StableLM's spec: Cohere's layout with LayerNorms (with bias), parallel where ``use_parallel_residual``."""
    return hf_cohere.wired(s, padding=padding, head=head, position=hf_llama.rotary(s), parallel=s.value("parallel"),
                           bias=f"bias={s.qkv_bias}, out_bias=false", norm=f"layernorm(eps={s.eps})",
                           dropout=s.p_dropout if s.value("p_dropout") else None)


EXAMPLES = {
    "StableLmForCausalLM": example("stablelm", use_qkv_bias=True, bos_token_id=1, eos_token_id=2),
    "StableLmModel": example("stablelm", num_hidden_layers=1, num_key_value_heads=4, use_parallel_residual=True,
                             bos_token_id=1, eos_token_id=2),
}

COVERAGE = [dict(model_type="stablelm", vocab_size=91, hidden_size=24, num_hidden_layers=3,
                 num_attention_heads=3, num_key_value_heads=1, intermediate_size=40, layer_norm_eps=1e-6,
                 rope_parameters={"rope_type": "linear", "rope_theta": 5e5, "partial_rotary_factor": 0.5,
                                  "factor": 2.0},
                 hidden_dropout=0.2, attention_dropout=0.3, initializer_range=0.05, hidden_act="gelu",
                 use_qkv_bias=True, use_parallel_residual=True, tie_word_embeddings=True,
                 bos_token_id=1, eos_token_id=2),
            *(covering("stablelm", num_hidden_layers=1, num_key_value_heads=3, max_position_embeddings=32,
                       rope_parameters={**rope, "partial_rotary_factor": 0.5}, bos_token_id=1, eos_token_id=2)
              for rope in hf_llama.ROPE_EXAMPLES.values())]


STABLELM = hf_cohere.COHERE.derive(
    "StableLM", ("stablelm",), causal_lm("StableLm"),
    "StableLM 2: Llama's projections around LayerNorms (with bias), partial rotary positions, optional q/k/v "
    "biases, pre-norm or parallel on one norm, dropout on the feed-forward's output",
    priority=320, fields=hf_cohere.STABLELM_FIELDS, document=document, requires=())
