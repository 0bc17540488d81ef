"""Hugging Face ``Lfm2MoeForCausalLM`` (Liquid AI's LFM2-MoE; and its base model) <-> a compiled spec.

LFM2-MoE is LFM2's hybrid (``hf_lfm2``: gated short convolutions and attention with qk-norms as
``layer_types`` says, pre-normed RMSNorm layers) whose feed-forwards, after the first ``num_dense_layers`` SwiGLUs of
``intermediate_size``, are mixtures: ``num_experts`` SwiGLU experts of ``moe_intermediate_size``, the
``num_experts_per_tok`` best by sigmoid scores plus a per-expert bias that steers the choice alone
(``use_expert_bias``: ``correction=true``), their weights renormalised with 1e-6 added to their sum
(``norm_topk_prob``) and scaled by ``routed_scaling_factor``. Its SwiGLU widths are the configuration's own (no
``block_auto_adjust_ff_dim``).
"""

from __future__ import annotations

from ..family import causal_lm
from ..document import Document
from ..weights import Tensor
from ...ir import nodes as ir
from . import hf_lfm2, hf_llama
from ..facts import Facts
from ..fields import Field, Fields
from ..mapping import InteropError

_LFM2 = {getattr(e, "name", None) or e.config: e for e in hf_lfm2.FIELDS.entries}
RENORMALIZE_EPS = 1e-6  # Lfm2MoeTopKRouter's


def _dense_layers(f) -> int:
    """How many first layers are SwiGLUs rather than mixtures (refused where those are not the first ones)."""
    routes = f.layer_routes("decoder")
    first = next((i for i, r in enumerate(routes) if r), len(routes))
    if not all(routes[first:]):
        raise f.refuse("its dense feed-forwards are not its first layers' (num_dense_layers)")
    return first


def _dense_d_ff(f) -> int | None:
    return next((n.spec.d_ff for n in f.g.of(ir.FeedForward, stack="decoder", in_block=True)
                 if not Facts.routes(n.spec)), None)


def _mixture(f):
    options = f.mixture("decoder")
    if options.score != "sigmoid" or options.renormalize_eps != (RENORMALIZE_EPS if options.renormalize else 0.0):
        raise f.refuse("its mixture is not LFM2-MoE's: sigmoid scores, renormalised with 1e-6 added to their sum "
                       "(score=sigmoid, renormalize_eps=1e-6)")
    return options


def _dense_count(c) -> int:
    return min(c.num_dense_layers, c.num_hidden_layers)


FIELDS = Fields(
    *(_LFM2[n] for n in ("d_model", "heads", "kv_heads", "layers", "vocab", "init_std", "tied", "rope_theta", "eps",
                         "conv_kernel", "conv_bias")),
    # (no default: Hugging Face's model cannot be built without it)
    Field("layer_types", "layer_types", hf_lfm2.layer_types_of,
          read=lambda c: list(c.layer_types) if c.layer_types is not None else None, setting=False),
    *hf_llama.ROPE_SCALING,
    Field("d_ff", "moe_intermediate_size", lambda f: f.mixture_body("decoder").d_ff,
          read=lambda c: c.moe_intermediate_size if _dense_count(c) < c.num_hidden_layers else None),
    Field("dense_d_ff", "intermediate_size", _dense_d_ff,
          read=lambda c: c.intermediate_size if _dense_count(c) else None),
    Field("dense_layers", "num_dense_layers", _dense_layers, read=_dense_count, setting=False),
    Field("experts", "num_experts", lambda f: _mixture(f).experts),
    Field("top", "num_experts_per_tok", lambda f: _mixture(f).top),
    Field("renormalize", "norm_topk_prob", lambda f: _mixture(f).renormalize, let=False),
    Field("routed_scale", "routed_scaling_factor", lambda f: _mixture(f).scale),
    Field("expert_bias", "use_expert_bias", lambda f: _mixture(f).correction, let=False),
    ignored={**hf_llama.FIELDS.ignored,
             "output_router_logits": "whether a call returns its routers' logits; LFM2-MoE adds no loss from them"},
)


def document(s, *, padding: bool, head: bool) -> Document:
    """LFM2-MoE's spec: LFM2's layers, the first ``num_dense_layers`` with a SwiGLU and the rest a mixture
    (sections where they differ from the stack's)."""
    if s.value("layer_types") is None:
        raise InteropError("the LFM2-MoE configuration has no layer_types: which layers attend is not said")
    dense = s.value("dense_layers")
    mixture = (f"d_ff={s.d_ff} kind=moe({s.experts}, {s.top}, score=sigmoid, correction={s.expert_bias}, "
               f"renormalize={s.renormalize}"
               + (f", renormalize_eps={RENORMALIZE_EPS}" if s.value("renormalize") else "")
               + f", scale={s.routed_scale})")
    layers = [(t, i >= dense) for i, t in enumerate(s.value("layer_types"))]
    return hf_lfm2.layers_document(s, layers, mixture, f"d_ff={s.dense_d_ff} kind=dense", head=head, padding=padding)


LFM2_MOE = hf_lfm2.LFM2.derive(
    "LFM2-MoE", ("lfm2_moe",), causal_lm("Lfm2Moe"),
    "LFM2-MoE: LFM2's hybrid of short convolutions and attention with qk-norms as layer_types says, its first "
    "num_dense_layers feed-forwards SwiGLUs and the rest mixtures of SwiGLU experts chosen by sigmoid scores "
    "plus an expert bias (score=sigmoid, correction=true), renormalised with 1e-6 added to their sum "
    "(renormalize_eps) and scaled",
    module=__name__, priority=630, fields=FIELDS, document=document,
    # the width no layer has where every layer is a mixture (or none is): written back as it was
    carried=("intermediate_size", "moe_intermediate_size"),
    # a mixture: its router, the expert bias that steers its choice, the stacked experts
    rules=hf_lfm2.LFM2.rules.derive({
        "feedforward.router": "feed_forward.gate",
        "feedforward.choice.correction.bias": Tensor("feed_forward.expert_bias"),
        "feedforward.experts.up": Tensor("feed_forward.experts.gate_up_proj"),
        "feedforward.experts.down": Tensor("feed_forward.experts.down_proj")}))
