"""Hugging Face ``DeepseekV32ForCausalLM`` (DeepSeek-V3.2; and its base model) <-> a compiled spec.

DeepSeek-V3.2 is DeepSeek-V3 (``hf_deepseek``: latent attention, sigmoid-routed experts among groups
with a correction bias and shared experts) whose attention is sparse (DeepSeek Sparse Attention, ``kind=dsa``): a
lightning indexer of ``index_n_heads`` heads of ``index_head_dim`` features, its queries from the query latent and
one LayerNorm-ed key per position, rotated with halves paired, ranks the keys each query may see, and the query
attends to the ``index_topk`` best. The main attention rotates neighbouring pairs, as V3's checkpoints do. Which
layers keep a gated MLP, ``mlp_layer_types`` says (the first ``first_k_dense_replace`` by default). Its
multi-token prediction layers are left out, as Hugging Face's model leaves them out.
"""

from __future__ import annotations

from ..family import Requires, causal_lm
from .. import mtp
from . import hf_deepseek, hf_llama
from ..document import Document
from ..fields import Field, Fields
from ..layouts import example

DENSE, SPARSE = "dense", "sparse"


def _indexed(f):
    """The options of the stack's sparse attention (refused where its attention has no indexer)."""
    options = f.attention_kind("decoder")
    if not hasattr(options, "index_heads"):
        raise f.refuse("its attention selects no keys by an indexer (kind=dsa(...))")
    return options


def _sparse_layers(config) -> list[bool]:
    return [t == SPARSE for t in config.mlp_layer_types]


def _leading_dense(f) -> int | None:
    """``first_k_dense_replace``, where the layers that keep a gated MLP are the leading ones (elsewhere
    ``mlp_layer_types`` alone says which, and this is left to its default)."""
    routes = f.layer_routes("decoder")
    first = routes.index(True) if True in routes else len(routes)
    return first if not any(not r for r in routes[first:]) else None


_SHARED = {e.config: e for e in hf_deepseek.SHARED if isinstance(e, Field)}
FIELDS = Fields(
    *(e for e in hf_deepseek.SHARED if getattr(e, "config", None) not in ("first_k_dense_replace",
                                                                             "intermediate_size", "q_lora_rank")),
    Field("dense_d_ff", "intermediate_size", _SHARED["intermediate_size"].fact,
          read=lambda c: c.intermediate_size if not all(_sparse_layers(c)) else None),
    Field("q_rank", "q_lora_rank", lambda f: _indexed(f).q_rank),
    *hf_deepseek.group_fields(always=True),
    Field("renormalize", "norm_topk_prob", lambda f: f.router("decoder").renormalize, let=False),
    Field("topk", "index_topk", lambda f: _indexed(f).topk),
    Field("index_heads", "index_n_heads", lambda f: _indexed(f).index_heads),
    Field("index_dim", "index_head_dim", lambda f: _indexed(f).index_dim),
    Field("mlp_layer_types", "mlp_layer_types", lambda f: [SPARSE if r else DENSE for r in f.layer_routes("decoder")],
          read=_sparse_layers, setting=False),
    Field("first_dense", "first_k_dense_replace", _leading_dense, read=_sparse_layers, setting=False),
    mtp.field(default=0),
    ignored={**hf_deepseek.IGNORED,
             "mlp_bias": "not read by Hugging Face's DeepSeek-V3.2, whose networks have no biases",
             "layer_types": "every layer's attention is sparse whatever it says (it chooses the cache's classes)"},
)


def document(s, *, padding: bool, head: bool) -> Document:
    """DeepSeek-V3.2's spec, its dense layers a schedule: DeepSeek-V3's with DeepSeek Sparse Attention in place of
    latent attention."""
    document = (hf_llama.document(s, padding=padding, head=head)
                .change("decoder", "position", hf_llama.rotary(s, interleaved=True))
                .change("decoder", "attention", bias=None)  # (written again after the sparse attention's options)
                .change("decoder", "attention", **hf_deepseek.latent_options(
                    s, "dsa", topk=s.topk, index_heads=s.index_heads, index_dim=s.index_dim, q_rank=s.q_rank)))
    document = hf_deepseek.v3_feedforwards(document, s, _sparse_layers(s.config))
    return mtp.with_modules(hf_deepseek.said_scale(document, s), s, head)


EXAMPLES = {
    # 5 of 24 keys per query, so that most queries attend sparsely; 8 indexer heads, so that a score of exactly 0
    # (every head's relu 0), whose ties torch.topk breaks as it will, is rare
    "DeepseekV32ForCausalLM": example("deepseek_v32", moe_intermediate_size=8, num_hidden_layers=3,
                                      num_key_value_heads=4, n_shared_experts=1, n_routed_experts=4,
                                      num_experts_per_tok=2, n_group=2, topk_group=1, kv_lora_rank=8, q_lora_rank=12,
                                      qk_rope_head_dim=4, v_head_dim=6, qk_nope_head_dim=6, index_topk=5,
                                      index_head_dim=8, index_n_heads=8, first_k_dense_replace=1,
                                      routed_scaling_factor=2.5, pad_token_id=0, bos_token_id=1, eos_token_id=2),
    "DeepseekV32Model": example("deepseek_v32", moe_intermediate_size=8, num_attention_heads=2, n_shared_experts=2,
                                n_routed_experts=4, num_experts_per_tok=1, n_group=1, topk_group=1, kv_lora_rank=6,
                                q_lora_rank=8, qk_rope_head_dim=2, v_head_dim=4, qk_nope_head_dim=6, index_topk=9,
                                index_head_dim=4, index_n_heads=8, mlp_layer_types=["sparse", "dense"],
                                norm_topk_prob=False, attention_bias=True, pad_token_id=0, bos_token_id=1,
                                eos_token_id=2),
}

COVERAGE = [dict(model_type="deepseek_v32", vocab_size=91, hidden_size=24, intermediate_size=40,
                 moe_intermediate_size=10, num_hidden_layers=4, num_attention_heads=3,
                 num_key_value_heads=3, n_shared_experts=2, n_routed_experts=6, num_experts_per_tok=3,
                 n_group=3, topk_group=2, kv_lora_rank=7, q_lora_rank=9, qk_rope_head_dim=4,
                 v_head_dim=5, qk_nope_head_dim=6, index_topk=11, index_head_dim=6, index_n_heads=3,
                 first_k_dense_replace=2, norm_topk_prob=False, routed_scaling_factor=1.5,
                 attention_bias=True, rms_norm_eps=1e-7, attention_dropout=0.3, initializer_range=0.05,
                 hidden_act="gelu", tie_word_embeddings=True, num_nextn_predict_layers=1,
                 rope_parameters={"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0,
                                  "original_max_position_embeddings": 8, "beta_fast": 16.0,
                                  "beta_slow": 2.0, "mscale": 0.9, "mscale_all_dim": 0.5}),
            dict(model_type="deepseek_v32", vocab_size=91, hidden_size=24, num_hidden_layers=3,
                 num_attention_heads=3, num_key_value_heads=3, n_routed_experts=4, n_group=2,
                 topk_group=1, num_experts_per_tok=2, kv_lora_rank=7, q_lora_rank=9, qk_rope_head_dim=4,
                 v_head_dim=5, qk_nope_head_dim=6, mlp_layer_types=["sparse", "dense", "sparse"]),
            *hf_llama.each_scaling(dict(
                model_type="deepseek_v32", vocab_size=91, hidden_size=24, num_hidden_layers=1, num_attention_heads=3,
                num_key_value_heads=3, n_routed_experts=4, n_group=2, topk_group=1, num_experts_per_tok=2,
                kv_lora_rank=7, q_lora_rank=9, qk_rope_head_dim=4, v_head_dim=5, qk_nope_head_dim=6,
                first_k_dense_replace=0, max_position_embeddings=32))]


DEEPSEEK_V32 = hf_deepseek.DEEPSEEK_V3.derive(
    "DeepSeek-V3.2", ("deepseek_v32",), causal_lm("DeepseekV32"),
    "DeepSeek-V3.2: DeepSeek-V3 whose latent attention is sparse (kind=dsa(kv_rank, rope_dim, topk, "
    "index_heads, index_dim, q_rank)): each query attends to the index_topk keys a lightning indexer ranks "
    "highest; mlp_layer_types says which layers keep a gated MLP",
    priority=530, fields=FIELDS, document=document, hf_config=None,
    requires=(Requires(lambda f: hasattr(f.attention_kind("decoder"), "index_heads"),
                       "its attention selects no keys by an indexer (kind=dsa(...))"),),
    # and the indexer's projections and key norm
    rules=hf_deepseek.WEIGHTS.derive({f"attention.indexer.{ours}": f"self_attn.indexer.{theirs}" for ours, theirs in
                                      (("q", "wq_b"), ("k", "wk"), ("k_norm", "k_norm"), ("weights", "weights_proj"))}))
