"""Hugging Face ``Qwen2MoeForCausalLM`` (and its base model) <-> a compiled spec: Qwen3-MoE's (``hf_qwen_moe``)
with Qwen2-MoE's table, biased q/k/v instead of qk-norms, and a shared expert behind a sigmoid gate."""

from __future__ import annotations

from ..family import causal_lm
from . import hf_llama, hf_qwen_moe
from ..document import Document
from ..layouts import covering, example


def document(s, *, padding: bool, head: bool) -> Document:
    """Qwen2-MoE's spec: Llama's with Qwen2's biased q/k/v, its mixtures with a gated shared expert."""
    return hf_qwen_moe.scheduled_mixtures(
        s, hf_llama.document(s, padding=padding, head=head).change("decoder", "attention", bias="true",
                                                                   out_bias="false"),
        shared=f", shared={s.shared}, shared_gate=true")


EXAMPLES = {
    "Qwen2MoeForCausalLM": example("qwen2_moe", num_hidden_layers=4, intermediate_size=40, moe_intermediate_size=24,
                                   shared_expert_intermediate_size=20, num_experts=4, num_experts_per_tok=2,
                                   decoder_sparse_step=2),  # every 2nd layer a mixture,
    "Qwen2MoeModel": dict(model_type="qwen2_moe", vocab_size=90, hidden_size=32, num_hidden_layers=1,
                          num_attention_heads=4, num_key_value_heads=4, moe_intermediate_size=24,
                          shared_expert_intermediate_size=16, num_experts=3, num_experts_per_tok=3,
                          norm_topk_prob=True),
}

COVERAGE = [covering("qwen2_moe", num_hidden_layers=3, num_key_value_heads=1, moe_intermediate_size=20,
                     shared_expert_intermediate_size=12, num_experts=5, num_experts_per_tok=3, norm_topk_prob=True,
                     mlp_only_layers=[0], output_router_logits=True, router_aux_loss_coef=0.05, rms_norm_eps=1e-7,
                     attention_dropout=0.3, initializer_range=0.05, hidden_act="gelu", tie_word_embeddings=True,
                     rope_parameters={"rope_type": "default", "rope_theta": 5000.0},
                     architectures=["Qwen2MoeForCausalLM"]),
            *hf_llama.each_scaling(dict(
                model_type="qwen2_moe", vocab_size=91, hidden_size=24, num_hidden_layers=1, num_attention_heads=3,
                num_key_value_heads=3, moe_intermediate_size=20, shared_expert_intermediate_size=12, num_experts=2,
                num_experts_per_tok=1, max_position_embeddings=32))]


QWEN2_MOE = hf_qwen_moe.QWEN3_MOE.derive(
    "Qwen2-MoE", ("qwen2_moe",), causal_lm("Qwen2Moe"),
    "Qwen2-MoE (Qwen1.5-MoE): Qwen2's decoder (biased q/k/v) whose feed-forwards are mixtures of SwiGLU "
    "experts plus a shared expert scaled by a sigmoid gate (shared=..., shared_gate=true); dense layers as "
    "Qwen3-MoE's",
    priority=190, fields=hf_qwen_moe.QWEN2_MOE_FIELDS, document=document)
