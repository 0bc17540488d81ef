"""Hugging Face ``Qwen3NextForCausalLM`` (Qwen3-Next; and its base model) <-> a compiled spec.

Qwen3-Next (2025) is Qwen3.5's hybrid (``hf_qwen3_5``: Gated DeltaNet and gated attention as
``layer_types`` says, (1 + w) RMSNorms) whose feed-forwards are Qwen2-MoE's mixtures: ``num_experts`` SwiGLU
experts of ``moe_intermediate_size``, the ``num_experts_per_tok`` best by a softmax (renormalised where
``norm_topk_prob`` says), beside a shared expert of ``shared_expert_intermediate_size`` scaled by a sigmoid gate;
the layers of ``mlp_only_layers`` (or off every ``decoder_sparse_step``-th) a gated MLP of ``intermediate_size``.
Its Gated DeltaNet stores q, k, v and the gate z in one projection, and b and a in another, grouped by key head
(``in_proj_qkvz``, ``in_proj_ba``): their rows are reordered into ours, which keep them apart as Qwen3.5 does.
"""

from __future__ import annotations

from ..family import causal_lm
from ..document import Document
from . import hf_llama, hf_mixtral, hf_qwen3_5, hf_qwen_moe
from ..fields import Field, Fields
from ..mapping import Rule, rule
from ..layouts import covering

_QWEN3_5 = {getattr(e, "name", None): e for e in hf_qwen3_5.FIELDS.entries}

FIELDS = Fields(
    *(e for name, e in _QWEN3_5.items() if name not in ("d_ff", None)),
    *(e for e in hf_qwen3_5.FIELDS.entries if getattr(e, "name", None) is None),  # (its Fixed entries)
    *hf_qwen_moe.mixture_fields("num_experts"),
    Field("shared", "shared_expert_intermediate_size", lambda f: f.mixture("decoder").shared),
    ignored={**hf_llama.FIELDS.ignored,
             "full_attention_interval": "the period of the default layer_types, which layer_types states"},
)


def document(s, *, padding: bool, head: bool) -> Document:
    """Qwen3-Next's spec: Qwen3.5's hybrid with Qwen2-MoE's mixtures, its dense layers (``mlp_only_layers``)
    sections of their own."""
    mixture = (f"d_ff={s.d_ff} kind=moe({s.experts}, {s.top}, aux_loss={s.aux_loss}, shared={s.shared}, "
               "shared_gate=true)" + (" router=renormalize" if s.value("renormalize") else ""))
    return hf_qwen3_5.hybrid_document(s, mixture, head=head, padding=padding,
                                      sparse=list(hf_qwen_moe.sparse_layers(s.config)),
                                      dense=f"d_ff={s.dense_d_ff} kind=dense")


def grouped_mixer(model, ours: str, theirs: str, state: dict, ours_state: dict) -> list[Rule]:
    """Qwen3-Next's Gated DeltaNet (the layer's ``linear_attn``): ``in_proj_qkvz``'s rows, each key head's [q; k;
    its value heads' v; their z], into our ``in_proj_qkv`` ([all q; all k; all v]) and ``in_proj_z``;
    ``in_proj_ba``'s, each key head's [its value heads' b; their a], into ``in_proj_b`` and ``in_proj_a``; the rest
    by name."""
    mixer, theirs = model.get_submodule(ours), f"{theirs}.linear_attn"
    keys, values, dk, dv = mixer.key_heads, mixer.heads, mixer.key_dim, mixer.value_dim
    group = values // keys
    per_head = 2 * dk + 2 * group * dv

    def rows(offset: int, width: int) -> list[int]:  # one slice of every key head's rows
        return [h * per_head + offset + j for h in range(keys) for j in range(width)]

    qkvz = rows(0, dk) + rows(dk, dk) + rows(2 * dk, group * dv) + rows(2 * dk + group * dv, group * dv)
    ba = [h * 2 * group + j for h in range(keys) for j in range(group)] + \
        [h * 2 * group + group + j for h in range(keys) for j in range(group)]
    return [rule((f"{ours}.in_proj_qkv.weight", f"{ours}.in_proj_z.weight"), f"{theirs}.in_proj_qkvz.weight",
                 rows=tuple(qkvz)),
            rule((f"{ours}.in_proj_b.weight", f"{ours}.in_proj_a.weight"), f"{theirs}.in_proj_ba.weight",
                 rows=tuple(ba)),
            *(rule(f"{ours}.{t}", f"{theirs}.{t}") for t in hf_qwen3_5.MIXER_TENSORS if not t.startswith("in_proj"))]


EXAMPLES = {
    # Qwen3-Next: the hybrid with Qwen2-MoE's mixtures (a shared expert behind a sigmoid gate), layer 0 a gated MLP;
    # its Gated DeltaNet's projections grouped by key head; the base model's value heads two to a key head
    "Qwen3NextForCausalLM": dict(model_type="qwen3_next", vocab_size=90, hidden_size=32, intermediate_size=40,
                                 num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                                 linear_num_value_heads=4, linear_num_key_heads=2, linear_key_head_dim=6,
                                 linear_value_head_dim=5, linear_conv_kernel_dim=3, moe_intermediate_size=12,
                                 shared_expert_intermediate_size=20, num_experts=4, num_experts_per_tok=2,
                                 mlp_only_layers=[0],
                                 layer_types=["linear_attention", "full_attention", "linear_attention",
                                              "full_attention"],
                                 rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                                  "partial_rotary_factor": 0.25}),
    "Qwen3NextModel": dict(model_type="qwen3_next", vocab_size=90, hidden_size=32, num_hidden_layers=3,
                           num_attention_heads=2, num_key_value_heads=1, head_dim=16, linear_num_value_heads=4,
                           linear_num_key_heads=2, linear_key_head_dim=4, linear_value_head_dim=6,
                           moe_intermediate_size=12, shared_expert_intermediate_size=16, num_experts=3,
                           num_experts_per_tok=2, norm_topk_prob=False,
                           layer_types=["linear_attention", "linear_attention", "full_attention"]),
}

COVERAGE = [covering("qwen3_next", intermediate_size=36, num_hidden_layers=4, num_key_value_heads=1, head_dim=12,
                     linear_num_value_heads=4, linear_num_key_heads=2, linear_key_head_dim=6, linear_value_head_dim=5,
                     linear_conv_kernel_dim=3, rms_norm_eps=1e-5, attention_bias=True, attention_dropout=0.1,
                     initializer_range=0.05, tie_word_embeddings=True, moe_intermediate_size=10,
                     shared_expert_intermediate_size=14, num_experts=5, num_experts_per_tok=3, norm_topk_prob=False,
                     router_aux_loss_coef=0.02, output_router_logits=True, mlp_only_layers=[1],
                     layer_types=["linear_attention", "full_attention", "full_attention", "linear_attention"],
                     rope_parameters={"rope_type": "default", "rope_theta": 5e5, "partial_rotary_factor": 0.5}),
            covering("qwen3_next", intermediate_size=36, num_hidden_layers=4, num_key_value_heads=3, head_dim=8,
                     linear_num_value_heads=2, linear_num_key_heads=2, linear_key_head_dim=4, linear_value_head_dim=4,
                     moe_intermediate_size=10, shared_expert_intermediate_size=14, num_experts=4, num_experts_per_tok=2,
                     decoder_sparse_step=2, layer_types=["linear_attention", "full_attention"] * 2),
            *hf_llama.each_scaling(dict(
                model_type="qwen3_next", vocab_size=91, hidden_size=24, num_hidden_layers=2, num_attention_heads=3,
                num_key_value_heads=3, head_dim=16, moe_intermediate_size=10, shared_expert_intermediate_size=14,
                num_experts=4, num_experts_per_tok=2, linear_num_value_heads=2, linear_num_key_heads=2,
                linear_key_head_dim=4, linear_value_head_dim=4, max_position_embeddings=32,
                layer_types=["linear_attention", "full_attention"]))]


QWEN3_NEXT = hf_qwen3_5.QWEN3_5.derive(
    "Qwen3-Next", ("qwen3_next",), causal_lm("Qwen3Next"),
    "Qwen3-Next: Qwen3.5's hybrid of Gated DeltaNet (mixer gated_deltanet) and gated attention (steps="
    "output_gate) as layer_types says, with Qwen2-MoE's mixtures (a softmax router, a shared expert behind a "
    "sigmoid gate: shared=, shared_gate=true), mlp_only_layers a gated MLP; (1 + w) RMSNorms",
    priority=560, fields=FIELDS, document=document, carried=(),
    # its Gated DeltaNet's projections fused by key head; a mixture or, layer by layer, a gated MLP
    rules=hf_qwen3_5.WEIGHTS.derive({"mixer": grouped_mixer, **hf_mixtral.MIXTURE}))
