"""Hugging Face ``DeepseekV2ForCausalLM`` (and its base model) <-> a compiled spec: DeepSeek-V3's (``hf_deepseek``)
with DeepSeek-V2's table (softmax routing, ``topk_method``, always-interleaved rotary dimensions)."""

from __future__ import annotations

from ..family import causal_lm
from . import hf_deepseek

DEEPSEEK_V2 = hf_deepseek.DEEPSEEK_V3.derive(
    "DeepSeek-V2", ("deepseek_v2",), causal_lm("DeepseekV2"),
    "DeepSeek-V2: DeepSeek-V3's layout with a softmax router (group-limited by each group's best score: "
    "group_score=max) and always-interleaved rotary dimensions",
    module=__name__, priority=150, fields=hf_deepseek.V2_FIELDS)
