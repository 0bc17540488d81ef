"""Hugging Face ``DeepseekV2ForCausalLM`` (and its base model) <-> a compiled spec: DeepSeek-V3's (``hf_deepseek``)
with DeepSeek-V2's table (softmax routing, ``topk_method``, always-interleaved rotary dimensions)."""

from __future__ import annotations

from . import hf_llama
from ..family import causal_lm
from . import hf_deepseek
from ..layouts import covering

EXAMPLES = {
    "DeepseekV2ForCausalLM": dict(model_type="deepseek_v2", vocab_size=90, hidden_size=32, num_hidden_layers=3,
                                  num_attention_heads=4, intermediate_size=40, moe_intermediate_size=12,
                                  n_routed_experts=8, num_experts_per_tok=3, n_group=4, topk_group=2,
                                  topk_method="group_limited_greedy", first_k_dense_replace=1, kv_lora_rank=12,
                                  q_lora_rank=None, qk_rope_head_dim=4, qk_nope_head_dim=6, v_head_dim=5,
                                  n_shared_experts=2, routed_scaling_factor=1.5),
    "DeepseekV2Model": dict(model_type="deepseek_v2", vocab_size=90, hidden_size=32, num_hidden_layers=2,
                            num_attention_heads=4, moe_intermediate_size=12, n_routed_experts=4,
                            num_experts_per_tok=2, kv_lora_rank=10, q_lora_rank=8, qk_rope_head_dim=2,
                            qk_nope_head_dim=6, v_head_dim=8, n_shared_experts=1, attention_bias=True),
}

COVERAGE = [covering("deepseek_v2", num_hidden_layers=4, moe_intermediate_size=10, n_routed_experts=6,
                     num_experts_per_tok=3, n_group=3, topk_group=2, topk_method="group_limited_greedy",
                     first_k_dense_replace=1, kv_lora_rank=9, q_lora_rank=None, qk_rope_head_dim=4, qk_nope_head_dim=5,
                     v_head_dim=7, n_shared_experts=1, routed_scaling_factor=1.5, rms_norm_eps=1e-7,
                     attention_dropout=0.3, initializer_range=0.05, hidden_act="gelu", tie_word_embeddings=True,
                     attention_bias=True, rope_parameters={"rope_type": "default", "rope_theta": 5000.0},
                     architectures=["DeepseekV2ForCausalLM"]),
            *hf_llama.each_scaling(dict(
                model_type="deepseek_v2", vocab_size=91, hidden_size=24, num_hidden_layers=1, num_attention_heads=3,
                moe_intermediate_size=10, n_routed_experts=4, num_experts_per_tok=2, kv_lora_rank=8, q_lora_rank=6,
                qk_rope_head_dim=4, qk_nope_head_dim=4, v_head_dim=4, max_position_embeddings=32))]


DEEPSEEK_V2 = hf_deepseek.DEEPSEEK_V3.derive(
    "DeepSeek-V2", ("deepseek_v2",), causal_lm("DeepseekV2"),
    "DeepSeek-V2: DeepSeek-V3's layout with a softmax router (group-limited by each group's best score: "
    "groups(n, k, by=max)) and always-interleaved rotary dimensions",
    priority=150, fields=hf_deepseek.V2_FIELDS)
