"""Hugging Face ``Qwen3_5MoeForCausalLM`` (Qwen3.5-MoE's text model; and its base ``Qwen3_5MoeTextModel``) <-> a
compiled spec: Qwen3-Next (``hf_qwen3_next``) by its differences.

Qwen3.5-MoE (2026) is Qwen3-Next's hybrid with three differences: every layer's feed-forward is a mixture (no
``mlp_only_layers``, ``decoder_sparse_step`` or dense ``intermediate_size``); its router always renormalises the
chosen experts' weights (no ``norm_topk_prob``); and its Gated DeltaNet keeps q, k, v, the gate z, b and a in
projections of their own, as Qwen3.5's does (``in_proj_qkv``, ``in_proj_z``, ``in_proj_b``, ``in_proj_a``: our
names). Its M-RoPE sections, as Qwen3.5's, are rotary positions on text.
"""

from __future__ import annotations

from . import hf_llama
from ..family import Requires, causal_lm
from . import hf_qwen3_5, hf_qwen3_next
from ..document import Document
from ..fields import Fields, Fixed

DENSE_LAYER_FIELDS = ("intermediate_size", "norm_topk_prob", "mlp_only_layers", "decoder_sparse_step")

FIELDS = Fields(
    *(e for e in hf_qwen3_next.FIELDS.entries if getattr(e, "config", None) not in DENSE_LAYER_FIELDS),
    Fixed("norm_topk_prob", True, "a router that does not renormalise its chosen experts' weights: Qwen3.5-MoE's "
          "always does", read=lambda c: True),
    ignored={**hf_qwen3_next.FIELDS.ignored, **{k: v for k, v in hf_qwen3_5.FIELDS.ignored.items()
                                                if k.startswith("rope_parameters.mrope")}},
)


def document(s, *, padding: bool, head: bool) -> Document:
    """Qwen3.5-MoE's text spec: Qwen3-Next's with a mixture in every layer."""
    mixture = (f"d_ff={s.d_ff} kind=moe({s.experts}, {s.top}, aux_loss={s.aux_loss}, shared={s.shared}, "
               "shared_gate=true) router=renormalize")
    return hf_qwen3_5.hybrid_document(s, mixture, head=head, padding=padding)


# tiny configurations of its classes, each built, saved and compared with Hugging Face's by the tests: Qwen3-Next's
# with a mixture in every layer (no dense layers, a router that always renormalises), its base model's attention
# biased
EXAMPLES = {moe: {**{k: v for k, v in hf_qwen3_next.EXAMPLES[next_].items()
                     if k not in ("intermediate_size", "mlp_only_layers", "norm_topk_prob")},
                  "model_type": "qwen3_5_moe_text"}
            for next_, moe in (("Qwen3NextForCausalLM", "Qwen3_5MoeForCausalLM"),
                               ("Qwen3NextModel", "Qwen3_5MoeTextModel"))}
EXAMPLES["Qwen3_5MoeForCausalLM"]["rope_parameters"] = {"rope_type": "default", "rope_theta": 10000.0,
                                                        "partial_rotary_factor": 0.25, "mrope_section": [1, 1, 0]}
EXAMPLES["Qwen3_5MoeTextModel"]["attention_bias"] = True

COVERAGE = [dict(model_type="qwen3_5_moe_text", vocab_size=91, hidden_size=24, num_hidden_layers=3,
                 num_attention_heads=3, num_key_value_heads=1, head_dim=12, linear_num_value_heads=4,
                 linear_num_key_heads=2, linear_key_head_dim=6, linear_value_head_dim=5,
                 linear_conv_kernel_dim=3, rms_norm_eps=1e-5, attention_bias=True, attention_dropout=0.1,
                 initializer_range=0.05, tie_word_embeddings=True, moe_intermediate_size=10,
                 shared_expert_intermediate_size=14, num_experts=5, num_experts_per_tok=3,
                 router_aux_loss_coef=0.02, output_router_logits=True,
                 layer_types=["full_attention", "linear_attention", "full_attention"],
                 rope_parameters={"rope_type": "default", "rope_theta": 5e5,
                                  "partial_rotary_factor": 0.5, "mrope_section": [2, 2, 2],
                                  "mrope_interleaved": True}),
            *hf_llama.each_scaling(dict(
                model_type="qwen3_5_moe_text", vocab_size=91, hidden_size=24, num_hidden_layers=2,
                num_attention_heads=3, num_key_value_heads=3, head_dim=16, moe_intermediate_size=10,
                shared_expert_intermediate_size=14, num_experts=4, num_experts_per_tok=2, linear_num_value_heads=2,
                linear_num_key_heads=2, linear_key_head_dim=4, linear_value_head_dim=4, max_position_embeddings=32,
                layer_types=["linear_attention", "full_attention"]))]


QWEN3_5_MOE = hf_qwen3_next.QWEN3_NEXT.derive(
    "Qwen3.5-MoE", ("qwen3_5_moe_text",),
    causal_lm("Qwen3_5Moe", base="Qwen3_5MoeTextModel"),
    "Qwen3.5-MoE (text): Qwen3-Next's hybrid of Gated DeltaNet and gated attention with a mixture in every "
    "layer (a softmax router renormalising its choice, a shared expert behind a sigmoid gate), its Gated "
    "DeltaNet's projections kept apart as Qwen3.5's are",
    priority=570, fields=FIELDS, document=document,
    requires=(Requires(lambda f: all(f.layer_routes("decoder")),
                       "some of its layers' feed-forwards are not mixtures: every Qwen3.5-MoE layer's is"),
              Requires(lambda f: f.router("decoder").renormalize,
                       "its router does not renormalise the chosen experts' weights: Qwen3.5-MoE's does "
                       "(router=renormalize)")),
    rules=hf_qwen3_next.QWEN3_NEXT.rules.derive({"mixer": hf_qwen3_5.identical_mixer}),
    carried=("rope_parameters.mrope_section", "rope_parameters.mrope_interleaved"))
