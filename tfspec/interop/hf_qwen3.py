"""Hugging Face ``Qwen3ForCausalLM`` (and its base model) <-> a compiled spec: Qwen2's module
(``tfspec.interop.hf_qwen2``) with Qwen3's table, each head's queries and keys RMS-normed and every projection
biased by one switch."""

from __future__ import annotations

from .hf_qwen2 import QWEN3_FIELDS as FIELDS  # noqa: F401 (the family's table)
from .hf_qwen2 import from_hf_qwen3, to_hf_qwen3  # noqa: F401
from .hf_qwen2 import hf_config_qwen3 as hf_config  # noqa: F401
from .hf_qwen2 import spec_text  # noqa: F401
