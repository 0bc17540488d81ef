"""Hugging Face ``SmolLM3ForCausalLM`` (and its base model) <-> a compiled spec: Qwen2's module
(``hf_qwen2``) with SmolLM3's table, whose ``no_rope_layers`` leave rotary out of some layers."""

from __future__ import annotations

from .hf_qwen2 import SMOLLM3_FIELDS as FIELDS
from .hf_qwen2 import from_hf_qwen2 as from_hf_smollm3
from .hf_qwen2 import hf_config_smollm3 as hf_config
from .hf_qwen2 import spec_text
from .hf_qwen2 import to_hf_qwen2 as to_hf_smollm3
from ..family import Family


EXPORT_PRIORITY = 220  # where export tries this module's families (lower first)
FAMILIES = (  # the families this module reads and writes (``tfspec.interop.family``)
    Family("SmolLM3", ("smollm3",),
           {"SmolLM3ForCausalLM": {"head": True}, "SmolLM3Model": {"head": False}},
           "SmolLM3: Llama's block without rotary positions in every 4th layer (no_rope_layers: a layer "
           "schedule), the head tied to the token embedding",
           module=__name__, fields=FIELDS, spec_text=spec_text, hf_config=hf_config, load=from_hf_smollm3,
           export=to_hf_smollm3),
)
