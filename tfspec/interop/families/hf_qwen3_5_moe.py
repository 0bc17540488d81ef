"""Hugging Face ``Qwen3_5MoeForCausalLM`` (Qwen3.5-MoE's text model; and its base ``Qwen3_5MoeTextModel``) <-> a
compiled spec: Qwen3-Next (``hf_qwen3_next``) by its differences.

Qwen3.5-MoE (2026) is Qwen3-Next's hybrid with three differences: every layer's feed-forward is a mixture (no
``mlp_only_layers``, ``decoder_sparse_step`` or dense ``intermediate_size``); its router always renormalises the
chosen experts' weights (no ``norm_topk_prob``); and its Gated DeltaNet keeps q, k, v, the gate z, b and a in
projections of their own, as Qwen3.5's does (``in_proj_qkv``, ``in_proj_z``, ``in_proj_b``, ``in_proj_a``: our
names). Its M-RoPE sections, as Qwen3.5's, are rotary positions on text.
"""

from __future__ import annotations

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
    mixture = (f"d_ff={s.d_ff} kind=moe({s.experts}, {s.top}, renormalize=true, aux_loss={s.aux_loss}, "
               f"shared={s.shared}, shared_gate=true)")
    return hf_qwen3_5.hybrid_document(s, mixture, head=head, padding=padding)


QWEN3_5_MOE = hf_qwen3_next.QWEN3_NEXT.derive(
    "Qwen3.5-MoE", ("qwen3_5_moe_text",),
    causal_lm("Qwen3_5Moe", base="Qwen3_5MoeTextModel"),
    "Qwen3.5-MoE (text): Qwen3-Next's hybrid of Gated DeltaNet and gated attention with a mixture in every "
    "layer (a softmax router renormalising its choice, a shared expert behind a sigmoid gate), its Gated "
    "DeltaNet's projections kept apart as Qwen3.5's are",
    module=__name__, priority=570, fields=FIELDS, document=document,
    requires=(Requires(lambda f: all(f.layer_routes("decoder")),
                       "some of its layers' feed-forwards are not mixtures: every Qwen3.5-MoE layer's is"),
              Requires(lambda f: f.mixture("decoder").renormalize,
                       "its router does not renormalise the chosen experts' weights: Qwen3.5-MoE's does "
                       "(renormalize=true)")),
    rules=hf_qwen3_next.QWEN3_NEXT.rules.derive({"mixer": hf_qwen3_5.identical_mixer}),
    carried=("rope_parameters.mrope_section", "rope_parameters.mrope_interleaved"))
