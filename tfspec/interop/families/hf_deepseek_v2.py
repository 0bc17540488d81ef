"""Hugging Face ``DeepseekV2ForCausalLM`` (and its base model) <-> a compiled spec: ``hf_deepseek``
with DeepSeek-V2's table (softmax routing, ``topk_method``, always-interleaved rotary dimensions)."""

from __future__ import annotations

from .hf_deepseek import V2_FIELDS as FIELDS
from .hf_deepseek import from_hf_deepseek, hf_config, spec_text, to_hf_deepseek
from ..family import Family


EXPORT_PRIORITY = 150  # where export tries this module's families (lower first)
FAMILIES = (  # the families this module reads and writes (``tfspec.interop.family``)
    Family("DeepSeek-V2", ("deepseek_v2",),
           {"DeepseekV2ForCausalLM": {"head": True},
           "DeepseekV2Model": {"head": False}},
           "DeepSeek-V2: DeepSeek-V3's layout with a softmax router (group-limited by each group's best score: "
           "group_score=max) and always-interleaved rotary dimensions",
           module=__name__, fields=FIELDS, spec_text=spec_text, hf_config=hf_config, load=from_hf_deepseek,
           export=to_hf_deepseek),
)
