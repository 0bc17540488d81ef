"""Hugging Face ``DeepseekV3ForCausalLM`` and ``DeepseekV2ForCausalLM`` (and their base models) <-> a compiled spec.

DeepSeek-V2 and V3 are pre-norm RMSNorm decoders in Llama's layout with:

- multi-head latent attention (``kind=latent(kv_rank, rope_dim, q_rank=..., v_dim=...)``): keys and values
  expanded from a compressed latent of ``kv_lora_rank``, a shared rotated key of ``qk_rope_head_dim``, queries
  through a ``q_lora_rank`` bottleneck where the configuration has one; each head's query and key are
  ``qk_nope_head_dim + qk_rope_head_dim`` wide (the spec's ``head_dim``), its value ``v_head_dim``. The rotary
  dimensions pair neighbours (V2 always; V3 where ``rope_interleave``), and YaRN's ``mscale_all_dim`` scales the
  softmax (the attention's ``scale=``);
- mixtures of ``n_routed_experts`` SwiGLU experts of ``moe_intermediate_size`` plus ``n_shared_experts`` shared
  ones (one network of their summed width: ``shared=``), the first ``first_k_dense_replace`` layers a gated MLP of
  ``intermediate_size`` instead (a layer schedule). V3 routes by sigmoid scores plus a correction bias, among the
  ``topk_group`` of ``n_group`` groups whose two best scores sum highest, renormalised where ``norm_topk_prob``
  says; V2 by a softmax, ``group_limited_greedy`` among the groups whose best score is highest
  (``router=... + groups(n, k, by=max)``); both scale the weights by ``routed_scaling_factor``.

Hugging Face's latent attention projections map one to one onto ours (``q_a_proj`` → ``q_down``,
``q_a_layernorm`` → ``q_latent_norm``, ``q_b_proj`` → ``q_up``, ``kv_a_proj_with_mqa`` → ``kv_down``,
``kv_a_layernorm`` → ``kv_latent_norm``, ``kv_b_proj`` → ``kv_up``, ``o_proj`` → ``out``); the experts are stored
stacked as ours are.
"""

from __future__ import annotations

import math

from ..writer import router
from ..family import Family, causal_lm
from ...ir import nodes as ir
from .. import layouts, mtp
from ..document import Document
from . import hf_llama
from ..facts import Facts
from ..fields import Field, Fields, Fixed
from ..mapping import InteropError
from ..weights import GatedMLP, Tensor
from ..layouts import covering


def dense_layers(config) -> list[bool]:
    """Per layer: is its feed-forward a gated MLP (the first ``first_k_dense_replace``) rather than a mixture?"""
    return [i < (config.first_k_dense_replace or 0) for i in range(config.num_hidden_layers)]


def _first_dense(f) -> int:
    """How many leading layers keep a gated MLP (refused where the mixtures are not all the layers after them)."""
    dense = [not routes for routes in f.layer_routes("decoder")]
    first = dense.index(False) if False in dense else len(dense)
    if any(dense[first:]):
        raise f.refuse("a dense layer after its first mixture of experts (DeepSeek's dense layers come first: "
                       "first_k_dense_replace)")
    return first


def _dense_d_ff(f) -> int | None:
    return next((n.spec.d_ff for n in f.g.of(ir.FeedForward, stack="decoder", in_block=True)
                 if not Facts.routes(n.spec)), None)


def shared_expert_count(f) -> int:
    """n_shared_experts: the shared network's width in experts' widths."""
    shared, d_ff = f.mixture("decoder").shared, f.mixture_body("decoder").d_ff
    if shared % d_ff:
        raise f.refuse(f"its shared network's d_ff {shared} is not a whole number of experts of d_ff {d_ff}")
    return shared // d_ff


def _latent(f):
    """The options of the stack's latent attention (refused where its attention compresses no latent)."""
    options = f.attention_kind("decoder")
    if not hasattr(options, "kv_rank"):
        raise f.refuse(f"its attention is kind={f.attention('decoder').kind.name}, which compresses no latent "
                       "(kind=latent(...))")
    return options


def _v3(config) -> bool:
    return config.model_type == "deepseek_v3"


def _group_limited(config) -> bool:
    """Does the router choose among groups (V3 and GLM-4.5 always, with one group meaning none; V2 by
    ``topk_method``)?"""
    return config.model_type != "deepseek_v2" or config.topk_method == "group_limited_greedy"


# Llama's table without what DeepSeek sizes otherwise (its head dims, dense d_ff) or lacks (a window, partial rotary)
LEFT_OUT = ("num_key_value_heads", "intermediate_size", "head_dim", "rope_parameters.partial_rotary_factor",
            "sliding_window", "attention_bias", "mlp_bias")
SHARED = [
    *(e for e in hf_llama.FIELDS.entries if getattr(e, "config", None) not in LEFT_OUT),
    Field("dense_d_ff", "intermediate_size", _dense_d_ff,
          read=lambda c: c.intermediate_size if any(dense_layers(c)) else None),
    Field("first_dense", "first_k_dense_replace", _first_dense, read=dense_layers, setting=False),
    # latent attention expands keys and values for every head, as Hugging Face's SDPA path does whatever this
    # field says; its eager path reads the field (the default, 128, breaks it for any other number of heads), so
    # export writes the number of heads and import reads nothing else
    Field("kv_heads", "num_key_value_heads", lambda f: f.geometry("decoder").heads,
          read=lambda c: c.num_attention_heads, setting=False),
    Field("kv_rank", "kv_lora_rank", lambda f: _latent(f).kv_rank),
    Field("q_rank", "q_lora_rank", lambda f: _latent(f).q_rank or None, read=lambda c: c.q_lora_rank or None,
          null=True),  # V3's default is 1536: a spec without the bottleneck writes None
    Field("nope_dim", "qk_nope_head_dim", lambda f: f.geometry("decoder").head_dim - _latent(f).rope_dim),
    Field("rope_dim", "qk_rope_head_dim", lambda f: _latent(f).rope_dim),
    Field("v_dim", "v_head_dim", lambda f: f.attention_value_dim("decoder")),
    Field("attention_bias", "attention_bias", lambda f: f.attention("decoder").bias, let=False),
    Field("d_ff", "moe_intermediate_size", lambda f: f.mixture_body("decoder").d_ff),
    Field("experts", "n_routed_experts", lambda f: f.mixture("decoder").experts),
    Field("top", "num_experts_per_tok", lambda f: f.mixture("decoder").top),
    Field("shared_experts", "n_shared_experts", shared_expert_count, read=lambda c: c.n_shared_experts or 0),
    Field("routed_scale", "routed_scaling_factor", lambda f: f.router("decoder").scale),
]


def group_fields(always: bool) -> list[Field]:
    """n_group and topk_group: written by export ``always`` (V3's defaults are 8 and 4), or where the router
    limits its choice to groups (V2's are None, and read only with group_limited_greedy)."""
    def fact(option: str):
        return lambda f: getattr(f.router("decoder"), option) if always or f.router("decoder").groups > 1 \
            else None

    return [Field("groups", "n_group", fact("groups"), read=lambda c: (c.n_group or 1) if _group_limited(c) else None),
            Field("top_groups", "topk_group", fact("top_groups"),
                  read=lambda c: (c.topk_group or 1) if _group_limited(c) else None)]


IGNORED = {**hf_llama.FIELDS.ignored,
           "head_dim": "set by the configuration itself to qk_rope_head_dim (the rotary dimensions)",
           "qk_head_dim": "set by the configuration itself to qk_nope_head_dim + qk_rope_head_dim",
           "output_router_logits": "what a forward call returns; DeepSeek's causal LM adds no auxiliary loss",
           "rope_parameters.partial_rotary_factor": "DeepSeek rotates the qk_rope_head_dim dimensions, all of them"}
V3_FIELDS = Fields(
    *SHARED, *group_fields(always=True),
    Field("renormalize", "norm_topk_prob", lambda f: f.router("decoder").renormalize, let=False),
    Field("interleaved", "rope_interleave", lambda f: f.rotary("decoder").get("interleaved", False), let=False),
    mtp.field(default=1), ignored=IGNORED)
V2_FIELDS = Fields(
    *SHARED, *group_fields(always=False),
    Field("topk_method", "topk_method", lambda f: "group_limited_greedy" if f.router("decoder").groups > 1
          else "greedy", names={"greedy": "greedy", "group_limited_greedy": "group_limited_greedy"}, setting=False),
    Fixed("mlp_bias", False, "mlp_bias={value}: DeepSeek-V2's dense and shared networks would be biased and its "
                             "experts not; tfspec's mixture biases both or neither"),
    ignored={**IGNORED, "norm_topk_prob": "DeepSeek-V2's router does not read it (its weights are never "
                                          "renormalised)"})
TABLES = {"deepseek_v3": V3_FIELDS, "deepseek_v2": V2_FIELDS}
FIELDS = V3_FIELDS


def attention_scale(s, config) -> str | None:
    """The attention's ``scale``, where YaRN's ``mscale_all_dim`` changes it from 1/sqrt(head_dim)."""
    rope = hf_llama.rope(config)
    all_dim = rope.get("mscale_all_dim") if rope["rope_type"] == "yarn" else None
    factor = rope.get("factor") or 1.0
    if not all_dim or factor <= 1:
        return None
    mscale = 0.1 * all_dim * math.log(factor) + 1.0  # Hugging Face's yarn_get_mscale
    head_dim = config.qk_nope_head_dim + config.qk_rope_head_dim
    return repr(head_dim ** -0.5 * mscale * mscale)


def v3_feedforwards(document: Document, s, sparse: list[bool]) -> Document:
    """``document`` with DeepSeek-V3's feed-forwards (GLM-4.5's, DeepSeek-V3.2's) from the settings ``s``: a
    mixture choosing by sigmoid scores and a correction bias, among groups where there are several, in the layers
    ``sparse`` says, a gated MLP in the others (``layouts.scheduled_feedforwards``)."""
    groups = f"groups({s.groups}, {s.top_groups})" if s.value("groups") > 1 else None
    shared = f", shared={s.d_ff} * {s.shared_experts}" if s.value("shared_experts") else ""
    mixture = {"d_ff": s.d_ff, "kind": f"moe({s.experts}, {s.top}{shared})",
               "router": router("sigmoid", "correction", groups, "renormalize" if s.value("renormalize") else None,
                                f"scale({s.routed_scale})")}
    return layouts.scheduled_feedforwards(document, s, mixture, {"d_ff": s.dense_d_ff, "kind": "dense"}, sparse)


def said_scale(document: Document, s) -> Document:
    """``document`` with a comment saying where the attention's ``scale=`` comes from, where it has one."""
    if attention_scale(s, s.config) is None:
        return document
    return document.add("decoder", "# scale: 1/sqrt(head_dim) · (0.1 · mscale_all_dim · ln(factor) + 1)², YaRN's "
                                   "softmax scale", before="attention")


def document(s, *, padding: bool, head: bool) -> Document:
    """DeepSeek-V3's (or -V2's) spec, its first dense layers a schedule: Llama's with latent attention and mixtures
    (V3's choosing by sigmoid scores and a correction bias, V2's among groups)."""
    v3 = _v3(s.config)
    if all(dense_layers(s.config)):
        raise InteropError("no layer of this configuration is a mixture of experts (first_k_dense_replace covers "
                           "every layer)")
    groups = None
    if s.groups is not None and s.value("groups") > 1:
        groups = f"groups({s.groups}, {s.top_groups}" + (")" if v3 else ", by=max)")
    shared = f", shared={s.d_ff} * {s.shared_experts}" if s.value("shared_experts") else ""
    route = ("sigmoid", "correction") if v3 else ()
    mixture = {"d_ff": s.d_ff, "kind": f"moe({s.experts}, {s.top}{shared})",
               "router": router(*route, groups, "renormalize" if v3 and s.value("renormalize") else None,
                                f"scale({s.routed_scale})")}
    document = (hf_llama.document(s, padding=padding, head=head)
                .change("decoder", "position", hf_llama.rotary(s, interleaved=not v3 or s.value("interleaved")))
                .change("decoder", "attention", bias=None)  # (written again after the latent attention's options)
                .change("decoder", "attention", **latent_options(s, "latent", q_rank=s.q_rank)))
    document = layouts.scheduled_feedforwards(document, s, mixture, {"d_ff": s.dense_d_ff, "kind": "dense"},
                                              [not d for d in dense_layers(s.config)])
    document = said_scale(document, s)
    return mtp.with_modules(document, s, head) if v3 else document


def latent_options(s, kind: str, **options) -> dict:
    """Latent attention's options as DeepSeek's families write them: each head's width (its part without positions
    and its rotated part), the kind (``latent`` or ``dsa``) with its ranks and ``options`` (None: left out), the
    softmax scale YaRN changes, the bias."""
    said = "".join(f", {k}={v}" for k, v in options.items() if v is not None)
    return {"head_dim": f"{s.nope_dim} + {s.rope_dim}",
            "kind": f"{kind}({s.kv_rank}, {s.rope_dim}{said}, v_dim={s.v_dim})",
            "scale": attention_scale(s, s.config), "bias": s.attention_bias}

def hf_config(spec) -> dict:
    """The DeepSeek-V3 configuration ``spec`` would be (V2's where its router soft-maxes)."""
    f = Facts(spec, "DeepSeek-V3 or DeepSeek-V2")
    f.kind("decoder-only")
    model_type = "deepseek_v3" if f.router("decoder").score == "sigmoid" else "deepseek_v2"
    return {"model_type": model_type, **TABLES[model_type].config(f)}


# DeepSeek's latent attention's projections and norms, one to one onto ours
LATENT = {f"attention.{ours}": f"self_attn.{theirs}" for ours, theirs in (
    ("q_down", "q_a_proj"), ("q_up", "q_b_proj"), ("q", "q_proj"), ("kv_down", "kv_a_proj_with_mqa"),
    ("kv_up", "kv_b_proj"), ("out", "o_proj"), ("q_latent_norm", "q_a_layernorm"),
    ("kv_latent_norm", "kv_a_layernorm"))}
# a mixture's router, correction bias, stacked experts and shared experts, beside a dense layer's gated MLP
MIXTURE = {"feedforward.router": "mlp.gate",
           "feedforward.choice.correction.bias": Tensor("mlp.gate.e_score_correction_bias"),
           "feedforward.experts.up": Tensor("mlp.experts.gate_up_proj"),
           "feedforward.experts.down": Tensor("mlp.experts.down_proj"),
           "feedforward.shared": GatedMLP("mlp.shared_experts")}
EXAMPLES = {
    "DeepseekV3ForCausalLM": dict(model_type="deepseek_v3", vocab_size=90, hidden_size=32, num_hidden_layers=3,
                                  num_attention_heads=4, intermediate_size=40, moe_intermediate_size=12,
                                  n_routed_experts=8, num_experts_per_tok=3, n_group=4, topk_group=2,
                                  first_k_dense_replace=1, kv_lora_rank=12, q_lora_rank=10, qk_rope_head_dim=4,
                                  qk_nope_head_dim=6, v_head_dim=5, n_shared_experts=2, routed_scaling_factor=2.5,
                                  rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                                                   "original_max_position_embeddings": 16, "mscale": 0.9,
                                                   "mscale_all_dim": 0.8, "beta_fast": 32.0, "beta_slow": 1.0},
                                  max_position_embeddings=64),  # q through a bottleneck, YaRN's scaled softmax,
    "DeepseekV3Model": dict(model_type="deepseek_v3", vocab_size=90, hidden_size=32, num_hidden_layers=2,
                            num_attention_heads=4, moe_intermediate_size=12, n_routed_experts=4,
                            num_experts_per_tok=2, n_group=1, topk_group=1, first_k_dense_replace=0,
                            kv_lora_rank=10, q_lora_rank=None, qk_rope_head_dim=2, qk_nope_head_dim=6,
                            v_head_dim=8, n_shared_experts=1, norm_topk_prob=False, rope_interleave=False),
}

COVERAGE = [covering("deepseek_v3", num_hidden_layers=4, moe_intermediate_size=10, n_routed_experts=6,
                     num_experts_per_tok=3, n_group=3, topk_group=2, first_k_dense_replace=1, kv_lora_rank=9,
                     q_lora_rank=None, qk_rope_head_dim=4, qk_nope_head_dim=5, v_head_dim=7, n_shared_experts=2,
                     routed_scaling_factor=1.5, norm_topk_prob=False, rope_interleave=False, rms_norm_eps=1e-7,
                     attention_dropout=0.3, initializer_range=0.05, hidden_act="gelu", tie_word_embeddings=True,
                     attention_bias=True, rope_parameters={"rope_type": "default", "rope_theta": 5000.0},
                     num_nextn_predict_layers=2, architectures=["DeepseekV3ForCausalLM"]),
            *hf_llama.each_scaling(dict(
                model_type="deepseek_v3", vocab_size=91, hidden_size=24, num_hidden_layers=1, num_attention_heads=3,
                moe_intermediate_size=10, n_routed_experts=4, num_experts_per_tok=2, n_group=2, topk_group=1,
                first_k_dense_replace=0, kv_lora_rank=8, q_lora_rank=6, qk_rope_head_dim=4, qk_nope_head_dim=4,
                v_head_dim=4, max_position_embeddings=32))]


WEIGHTS = hf_llama.WEIGHTS.derive({"attention": None, **LATENT, **MIXTURE})

DEEPSEEK_V3 = Family(
    "DeepSeek-V3", ("deepseek_v3",), causal_lm("DeepseekV3"),
    "DeepSeek-V3: a pre-norm decoder with multi-head latent attention (kind=latent(kv_rank, rope_dim, "
    "q_rank=..., v_dim=...): a KV cache of the compressed latent) and mixtures of SwiGLU experts routed by "
    "sigmoid scores plus a correction bias, among the best groups of experts (router=sigmoid + correction + "
    "groups(n, k) + renormalize + scale(f)), "
    "with shared experts (shared=); the first first_k_dense_replace layers keep a gated MLP (a layer "
    "schedule)",
    priority=140, fields=FIELDS, document=document, hf_config=hf_config, rules=WEIGHTS)
