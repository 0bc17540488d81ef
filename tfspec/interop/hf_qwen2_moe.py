"""Hugging Face ``Qwen2MoeForCausalLM`` (and its base model) <-> a compiled spec: ``tfspec.interop.hf_qwen_moe``
with Qwen2-MoE's table (biased q/k/v, a gated shared expert)."""

from __future__ import annotations

from .hf_qwen_moe import QWEN2_MOE_FIELDS as FIELDS  # noqa: F401 (the family's table)
from .hf_qwen_moe import from_hf_qwen_moe, hf_config, spec_text, to_hf_qwen_moe  # noqa: F401
