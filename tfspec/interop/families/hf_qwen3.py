"""Hugging Face ``Qwen3ForCausalLM`` (and its base model) <-> a compiled spec: Qwen2's module
(``hf_qwen2``) with Qwen3's table, each head's queries and keys RMS-normed and every projection
biased by one switch."""

from __future__ import annotations

from .hf_qwen2 import QWEN3_FIELDS as FIELDS
from .hf_qwen2 import from_hf_qwen3, to_hf_qwen3
from .hf_qwen2 import hf_config_qwen3 as hf_config
from .hf_qwen2 import spec_text
from ..family import Family


EXPORT_PRIORITY = 210  # where export tries this module's families (lower first)
FAMILIES = (  # the families this module reads and writes (``tfspec.interop.family``)
    Family("Qwen3", ("qwen3",),
           {"Qwen3ForCausalLM": {"head": True}, "Qwen3Model": {"head": False}},
           "Qwen3: Llama's block with each head's queries and keys RMS-normed before rotary positions "
           "(qk_norm), head_dim set apart from hidden_size / heads; layer_types give some layers a sliding window",
           module=__name__, fields=FIELDS, spec_text=spec_text, hf_config=hf_config, load=from_hf_qwen3,
           export=to_hf_qwen3),
)
