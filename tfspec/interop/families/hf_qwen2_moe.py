"""Hugging Face ``Qwen2MoeForCausalLM`` (and its base model) <-> a compiled spec: Qwen3-MoE's (``hf_qwen_moe``)
with Qwen2-MoE's table, biased q/k/v instead of qk-norms, and a shared expert behind a sigmoid gate."""

from __future__ import annotations

from ..family import causal_lm
from . import hf_llama, hf_qwen_moe
from ..document import Document


def document(s, *, padding: bool, head: bool) -> Document:
    """Qwen2-MoE's spec: Llama's with Qwen2's biased q/k/v, its mixtures with a gated shared expert."""
    return hf_qwen_moe.scheduled_mixtures(
        s, hf_llama.document(s, padding=padding, head=head).change("decoder", "attention", bias="true",
                                                                   out_bias="false"),
        shared=f", shared={s.shared}, shared_gate=true")


QWEN2_MOE = hf_qwen_moe.QWEN3_MOE.derive(
    "Qwen2-MoE", ("qwen2_moe",), causal_lm("Qwen2Moe"),
    "Qwen2-MoE (Qwen1.5-MoE): Qwen2's decoder (biased q/k/v) whose feed-forwards are mixtures of SwiGLU "
    "experts plus a shared expert scaled by a sigmoid gate (shared=..., shared_gate=true); dense layers as "
    "Qwen3-MoE's",
    module=__name__, priority=190, fields=hf_qwen_moe.QWEN2_MOE_FIELDS, document=document)
