"""Hugging Face ``Lfm2MoeForCausalLM`` (Liquid AI's LFM2-MoE; and its base model) <-> a compiled spec.

LFM2-MoE is LFM2's hybrid (``hf_lfm2``: gated short convolutions and attention with qk-norms as
``layer_types`` says, pre-normed RMSNorm layers) whose feed-forwards, after the first ``num_dense_layers`` SwiGLUs of
``intermediate_size``, are mixtures: ``num_experts`` SwiGLU experts of ``moe_intermediate_size``, the
``num_experts_per_tok`` best by sigmoid scores plus a per-expert bias that steers the choice alone
(``use_expert_bias``: ``router=sigmoid + correction + ...``), their weights renormalised with 1e-6 added to their sum
(``norm_topk_prob``) and scaled by ``routed_scaling_factor``. Its SwiGLU widths are the configuration's own (no
``block_auto_adjust_ff_dim``).
"""

from __future__ import annotations

from ..writer import router
from ..family import Requires, causal_lm
from ..document import Document
from ..weights import Tensor
from ...ir import nodes as ir
from . import hf_lfm2, hf_llama
from ..facts import Facts
from ..fields import Field, Fields
from ..mapping import InteropError
from ..layouts import covering, example

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


# LFM2-MoE's router: sigmoid scores, renormalised (where it is) with 1e-6 added to their sum
ROUTER = Requires(lambda f: f.router("decoder").score == "sigmoid" and f.router("decoder").option(
    "renormalize", "eps", RENORMALIZE_EPS) == RENORMALIZE_EPS, "its mixture is not LFM2-MoE's: sigmoid scores, "
    "renormalised with 1e-6 added to their sum (router=sigmoid + renormalize(1e-6))")


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
    Field("experts", "num_experts", lambda f: f.mixture("decoder").experts),
    Field("top", "num_experts_per_tok", lambda f: f.mixture("decoder").top),
    Field("renormalize", "norm_topk_prob", lambda f: f.router("decoder").renormalize, let=False),
    Field("routed_scale", "routed_scaling_factor", lambda f: f.router("decoder").scale),
    Field("expert_bias", "use_expert_bias", lambda f: f.router("decoder").correction, let=False),
    ignored={**hf_llama.FIELDS.ignored,
             "output_router_logits": "whether a call returns its routers' logits; LFM2-MoE adds no loss from them"},
)


def document(s, *, padding: bool, head: bool) -> Document:
    """LFM2-MoE's spec: LFM2's layers, the first ``num_dense_layers`` with a SwiGLU and the rest a mixture
    (sections where they differ from the stack's)."""
    if s.value("layer_types") is None:
        raise InteropError("the LFM2-MoE configuration has no layer_types: which layers attend is not said")
    dense = s.value("dense_layers")
    route = router("sigmoid", "correction" if s.value("expert_bias") else None,
                   f"renormalize({RENORMALIZE_EPS})" if s.value("renormalize") else None, f"scale({s.routed_scale})")
    mixture = f"d_ff={s.d_ff} kind=moe({s.experts}, {s.top}) router={route}"
    layers = [(t, i >= dense) for i, t in enumerate(s.value("layer_types"))]
    return hf_lfm2.layers_document(s, layers, mixture, f"d_ff={s.dense_d_ff} kind=dense", head=head, padding=padding)


EXAMPLES = {
    # LFM2-MoE: a SwiGLU in layer 0, then mixtures by sigmoid scores and an expert bias; the base model's all
    # mixtures, renormalised, without the bias
    "Lfm2MoeForCausalLM": example("lfm2_moe", intermediate_size=40, moe_intermediate_size=12, num_hidden_layers=4,
                                  conv_L_cache=3, num_dense_layers=1, num_experts=4, num_experts_per_tok=2,
                                  routed_scaling_factor=1.5, tie_word_embeddings=False,
                                  layer_types=["conv", "full_attention", "conv", "conv"]),
    "Lfm2MoeModel": example("lfm2_moe", intermediate_size=40, moe_intermediate_size=16, num_hidden_layers=3,
                            num_attention_heads=2, conv_L_cache=4, num_dense_layers=0, num_experts=3,
                            num_experts_per_tok=2, use_expert_bias=False, norm_eps=1e-6,
                            layer_types=["full_attention", "conv", "conv"],
                            rope_parameters={"rope_type": "default", "rope_theta": 5e5}),
}

COVERAGE = [covering("lfm2_moe", moe_intermediate_size=8, num_hidden_layers=3, num_key_value_heads=1, conv_L_cache=4,
                     num_dense_layers=2, num_experts=3, num_experts_per_tok=2, norm_topk_prob=False,
                     routed_scaling_factor=2.5, use_expert_bias=False, norm_eps=1e-6, initializer_range=0.05,
                     tie_word_embeddings=False, layer_types=["conv", "full_attention", "full_attention"],
                     rope_parameters={"rope_type": "default", "rope_theta": 5e5}),
            *hf_llama.each_scaling(covering("lfm2_moe", moe_intermediate_size=8, num_hidden_layers=2,
                                            num_key_value_heads=3, num_dense_layers=0, num_experts=2,
                                            num_experts_per_tok=1, max_position_embeddings=32,
                                            layer_types=["conv", "full_attention"]))]


LFM2_MOE = hf_lfm2.LFM2.derive(
    "LFM2-MoE", ("lfm2_moe",), causal_lm("Lfm2Moe"),
    "LFM2-MoE: LFM2's hybrid of short convolutions and attention with qk-norms as layer_types says, its first "
    "num_dense_layers feed-forwards SwiGLUs and the rest mixtures of SwiGLU experts chosen by sigmoid scores "
    "plus an expert bias, renormalised with 1e-6 added to their sum and scaled (router=sigmoid + correction "
    "+ renormalize(1e-6) + scale(f))",
    priority=630, fields=FIELDS, document=document, requires=(ROUTER,),
    # the width no layer has where every layer is a mixture (or none is): written back as it was
    carried=("intermediate_size", "moe_intermediate_size"),
    # a mixture: its router, the expert bias that steers its choice, the stacked experts
    rules=hf_lfm2.LFM2.rules.derive({
        "feedforward.router": "feed_forward.gate",
        "feedforward.choice.correction.bias": Tensor("feed_forward.expert_bias"),
        "feedforward.experts.up": Tensor("feed_forward.experts.gate_up_proj"),
        "feedforward.experts.down": Tensor("feed_forward.experts.down_proj")}))
