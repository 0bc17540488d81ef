"""Hugging Face ``Qwen2MoeForCausalLM`` (and its base model) <-> a compiled spec: ``hf_qwen_moe``
with Qwen2-MoE's table (biased q/k/v, a gated shared expert)."""

from __future__ import annotations

from .hf_qwen_moe import QWEN2_MOE_FIELDS as FIELDS
from .hf_qwen_moe import from_hf_qwen_moe, hf_config, spec_text, to_hf_qwen_moe
from ..family import Family


EXPORT_PRIORITY = 190  # where export tries this module's families (lower first)
FAMILIES = (  # the families this module reads and writes (``tfspec.interop.family``)
    Family("Qwen2-MoE", ("qwen2_moe",),
           {"Qwen2MoeForCausalLM": {"head": True}, "Qwen2MoeModel": {"head": False}},
           "Qwen2-MoE (Qwen1.5-MoE): Qwen2's decoder (biased q/k/v) whose feed-forwards are mixtures of SwiGLU "
           "experts plus a shared expert scaled by a sigmoid gate (shared=..., shared_gate=true); dense layers as "
           "Qwen3-MoE's",
           module=__name__, fields=FIELDS, spec_text=spec_text, hf_config=hf_config, load=from_hf_qwen_moe,
           export=to_hf_qwen_moe),
)
