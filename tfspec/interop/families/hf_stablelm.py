"""Hugging Face ``StableLmForCausalLM`` (StableLM 2; and ``StableLmModel``) <-> a compiled spec: Cohere's
(``hf_cohere``: Llama's projections around LayerNorms) with StableLM's table -- half-split partial rotary, q/k/v
biases where ``use_qkv_bias``, pre-norm or parallel on one norm, dropout on the feed-forward's output."""

from __future__ import annotations

from ..family import causal_lm
from . import hf_cohere, hf_llama
from ..document import Document


def document(s, *, padding: bool, head: bool) -> Document:
    """StableLM's spec: Cohere's layout with LayerNorms (with bias), parallel where ``use_parallel_residual``."""
    return hf_cohere.wired(s, padding=padding, head=head, position=hf_llama.rotary(s), parallel=s.value("parallel"),
                           bias=f"bias={s.qkv_bias}, out_bias=false", norm=f"layernorm(eps={s.eps})",
                           dropout=s.p_dropout if s.value("p_dropout") else None)


STABLELM = hf_cohere.COHERE.derive(
    "StableLM", ("stablelm",), causal_lm("StableLm"),
    "StableLM 2: Llama's projections around LayerNorms (with bias), partial rotary positions, optional q/k/v "
    "biases, pre-norm or parallel on one norm, dropout on the feed-forward's output",
    module=__name__, priority=320, fields=hf_cohere.STABLELM_FIELDS, document=document, requires=())
