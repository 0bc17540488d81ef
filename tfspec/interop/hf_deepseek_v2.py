"""Hugging Face ``DeepseekV2ForCausalLM`` (and its base model) <-> a compiled spec: ``tfspec.interop.hf_deepseek``
with DeepSeek-V2's table (softmax routing, ``topk_method``, always-interleaved rotary dimensions)."""

from __future__ import annotations

from .hf_deepseek import V2_FIELDS as FIELDS  # noqa: F401 (the family's table)
from .hf_deepseek import from_hf_deepseek, hf_config, spec_text, to_hf_deepseek  # noqa: F401
