"""Hugging Face ``SmolLM3ForCausalLM`` (and its base model) <-> a compiled spec: Qwen2's module
(``tfspec.interop.hf_qwen2``) with SmolLM3's table, whose ``no_rope_layers`` leave rotary out of some layers."""

from __future__ import annotations

from .hf_qwen2 import SMOLLM3_FIELDS as FIELDS  # noqa: F401 (the family's table)
from .hf_qwen2 import from_hf_qwen2 as from_hf_smollm3  # noqa: F401
from .hf_qwen2 import hf_config_smollm3 as hf_config  # noqa: F401
from .hf_qwen2 import spec_text  # noqa: F401
from .hf_qwen2 import to_hf_qwen2 as to_hf_smollm3  # noqa: F401
