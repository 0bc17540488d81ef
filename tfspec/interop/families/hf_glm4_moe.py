"""Hugging Face ``Glm4MoeForCausalLM`` (Zhipu's GLM-4.5 and GLM-4.6, Air included; and its base model) <-> a
compiled spec.

GLM-4.5 is Llama's pre-norm layout with grouped-query attention whose q/k/v are biased where ``attention_bias``
says (the output never), each head's queries and keys RMS-normed where ``use_qk_norm`` says, and half of each
head rotated (``partial_rotary_factor`` 0.5, the halves paired as GPT-NeoX pairs them); its feed-forwards are
DeepSeek-V3's (``hf_deepseek``): after the first ``first_k_dense_replace`` layers' gated MLPs, a
mixture of SwiGLU experts routed by sigmoid scores plus a correction bias among the best groups of experts, the
chosen weights renormalised and scaled by ``routed_scaling_factor``, beside shared experts. Its multi-token
prediction layers (``num_mtp_layers``) are the spec's ``mtp`` (``tfspec.interop.mtp``).
"""

from __future__ import annotations

from ..family import Requires, causal_lm
from ...registry import NORMS
from .. import mtp
from . import hf_deepseek, hf_llama, hf_mixtral
from ..document import Document
from ..fields import Field, Fields
from ..layouts import covering, example

_LLAMA = [e for e in hf_llama.FIELDS.entries if getattr(e, "config", None) not in hf_deepseek.LEFT_OUT
          and getattr(e, "config", None) not in ("pretraining_tp",)]
_DEEPSEEK = {e.name: e for e in hf_deepseek.SHARED if isinstance(e, Field)}

FIELDS = Fields(
    *_LLAMA,
    next(e for e in hf_llama.FIELDS.fields if e.name == "kv_heads"),
    # written where it is its own
    Field("head_dim", "head_dim", hf_mixtral.exported_head_dim, read=hf_llama.written_head_dim),
    *(_DEEPSEEK[n] for n in ("dense_d_ff", "first_dense", "d_ff", "experts", "top", "shared_experts",
                             "routed_scale")),
    *hf_deepseek.group_fields(always=True),
    Field("renormalize", "norm_topk_prob", lambda f: f.router("decoder").renormalize, let=False),
    Field("attention_bias", "attention_bias", lambda f: f.attention("decoder").bias, let=False),
    Field("qk_norm", "use_qk_norm", lambda f: not NORMS[f.attention("decoder").qk_norm.name].absent,
          setting=False),
    # exported even when whole: GLM-4.5's default is half
    Field("rotary_fraction", "rope_parameters.partial_rotary_factor",
          lambda f: f.rotary("decoder").get("fraction", 1.0),
          read=lambda c: hf_llama.written_fraction(hf_llama.rope(c)["partial_rotary_factor"])),
    mtp.field(default=1),
    ignored={**hf_llama.FIELDS.ignored,
             "output_router_logits": "what a forward call returns; GLM-4.5's causal LM adds no auxiliary loss"},
)


def document(s, *, padding: bool, head: bool) -> Document:
    """GLM-4.5's spec, its first dense layers a schedule: Llama's with biased q/k/v, qk-norms where use_qk_norm
    says, and DeepSeek-V3's mixtures."""
    document = hf_llama.document(s, padding=padding, head=head).change(
        "decoder", "attention", out_bias="false", qk_norm=f"rmsnorm(eps={s.eps})" if s.config.use_qk_norm else None)
    document = hf_deepseek.v3_feedforwards(document, s, [not d for d in hf_deepseek.dense_layers(s.config)])
    return mtp.with_modules(document, s, head)


EXAMPLES = {
    "Glm4MoeForCausalLM": example("glm4_moe", num_hidden_layers=3, moe_intermediate_size=8, n_routed_experts=8,
                                  num_experts_per_tok=3, n_shared_experts=1, n_group=2, topk_group=1,
                                  first_k_dense_replace=1, routed_scaling_factor=2.5, use_qk_norm=True,
                                  attention_bias=True, pad_token_id=0, eos_token_id=2),
    "Glm4MoeModel": dict(model_type="glm4_moe", vocab_size=90, hidden_size=32, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=4, moe_intermediate_size=8,
                         n_routed_experts=4, num_experts_per_tok=2, n_shared_experts=2, first_k_dense_replace=0,
                         norm_topk_prob=False, partial_rotary_factor=1.0, pad_token_id=0),
}

COVERAGE = [covering("glm4_moe", num_hidden_layers=3, num_key_value_heads=1, head_dim=10, moe_intermediate_size=10,
                     n_routed_experts=6, num_experts_per_tok=3, n_shared_experts=2, n_group=3, topk_group=2,
                     first_k_dense_replace=2, routed_scaling_factor=1.5, norm_topk_prob=False, use_qk_norm=True,
                     attention_bias=True, rms_norm_eps=1e-7, attention_dropout=0.3, initializer_range=0.05,
                     hidden_act="gelu", tie_word_embeddings=True, num_nextn_predict_layers=0,
                     rope_parameters={"rope_type": "default", "rope_theta": 5e5, "partial_rotary_factor": 1.0}),
            *hf_llama.each_scaling(dict(
                model_type="glm4_moe", vocab_size=91, hidden_size=24, num_hidden_layers=1, num_attention_heads=3,
                num_key_value_heads=3, head_dim=8, moe_intermediate_size=10, n_routed_experts=4,
                num_experts_per_tok=2, first_k_dense_replace=0, max_position_embeddings=32))]


GLM4_MOE = hf_llama.LLAMA.derive(
    "GLM-4.5", ("glm4_moe",), causal_lm("Glm4Moe"),
    "GLM-4.5 / GLM-4.6: Llama's pre-norm block with q/k/v biases, optional per-head qk-norm and half of "
    "each head rotated, its feed-forwards DeepSeek-V3's: first_k_dense_replace gated MLPs, then mixtures "
    "routed by sigmoid scores plus a correction bias among groups, with shared experts",
    priority=450, fields=FIELDS, document=document, hf_config=None,
    requires=(Requires(lambda f: f.router("decoder").score == "sigmoid",
                       "its router soft-maxes its scores; GLM-4.5's takes their sigmoids"),),
    rules=hf_llama.WEIGHTS.derive({"attention.q_norm": "self_attn.q_norm", "attention.k_norm": "self_attn.k_norm",
                                   **hf_deepseek.MIXTURE}))
