"""Hugging Face ``PhiForCausalLM`` (phi-2; and ``PhiModel``) <-> a compiled spec: GPT-J's module
(``tfspec.interop.hf_gptj``: attention and feed-forward in parallel on one norm) with Phi's table -- half-split
partial rotary, every projection biased, optional per-head qk LayerNorm."""

from __future__ import annotations

from .hf_gptj import PHI_FIELDS as FIELDS  # noqa: F401 (the family's table)
from .hf_gptj import from_hf_phi, to_hf_phi  # noqa: F401
from .hf_gptj import hf_config_phi as hf_config  # noqa: F401
from .hf_gptj import spec_text  # noqa: F401
