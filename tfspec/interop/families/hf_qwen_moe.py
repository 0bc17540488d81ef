"""Hugging Face ``Qwen3MoeForCausalLM`` and ``Qwen2MoeForCausalLM`` (and their base models) <-> a compiled spec.

Both are Qwen's decoders (Llama's layout) whose feed-forwards are mixtures of ``num_experts`` SwiGLU experts of
``moe_intermediate_size``, each position routed to its ``num_experts_per_tok`` best by a softmax, the chosen
weights renormalised where ``norm_topk_prob`` says (``router=renormalize``); the layers in
``mlp_only_layers``, or off every ``decoder_sparse_step``-th, keep a gated MLP of ``intermediate_size``
instead -- a layer schedule (``layers 0 { ffn d_ff=dense_d_ff kind=dense }``), which export writes back as
``mlp_only_layers``. Qwen3-MoE normalises each head's queries and keys (``qk_norm=rmsnorm``); Qwen2-MoE biases
its q/k/v projections and adds a shared expert of ``shared_expert_intermediate_size`` scaled by a sigmoid gate
(``shared=..., shared_gate=true``). The mixtures' tensors map through ``hf_mixtral``'s rules.
"""

from __future__ import annotations

from ..family import Family, causal_lm
from ...ir import nodes as ir
from .. import layouts
from . import hf_llama, hf_mixtral
from ..facts import Facts
from ..fields import Field, Fields, Fixed
from ..mapping import InteropError
from ..writer import every_step
from ..document import Document
from ..layouts import covering, example


def sparse_layers(config) -> tuple[bool, ...]:
    """Per layer: is its feed-forward a mixture (Hugging Face's rule)?"""
    only = set(getattr(config, "mlp_only_layers", None) or [])
    step = config.decoder_sparse_step
    return tuple(i not in only and config.num_experts > 0 and (i + 1) % step == 0
                 for i in range(config.num_hidden_layers))


def _sparse_step(f) -> int:
    """``decoder_sparse_step`` where it alone says which layers are mixtures (every step-th), else 1."""
    return every_step(f.layer_routes("decoder"), 1)


def _dense_layers(f) -> list[int]:
    """``mlp_only_layers``: the layers ``decoder_sparse_step`` leaves mixtures of experts that are not."""
    step = _sparse_step(f)
    return [i for i, sparse in enumerate(f.layer_routes("decoder")) if not sparse and (i + 1) % step == 0]


def dense_width(f) -> int | None:
    return next((n.spec.d_ff for n in f.g.of(ir.FeedForward, stack="decoder", in_block=True)
                 if not Facts.routes(n.spec)), None)


def _window(config):
    window = getattr(config, "sliding_window", None)
    return int(window) if window is not None and getattr(config, "use_sliding_window", False) else None


SHARED = [e for e in hf_llama.FIELDS.entries
          if getattr(e, "config", None) not in ("intermediate_size", "mlp_bias", "attention_bias", "head_dim",
                                                "sliding_window", "rope_parameters.partial_rotary_factor")]
def mixture_fields(experts: str) -> list[Field]:
    """The mixture's fields, its number of experts under the name ``experts`` (Qwen3-MoE stores num_experts as
    num_local_experts)."""
    return [
        Field("d_ff", "moe_intermediate_size", lambda f: f.mixture_body("decoder").d_ff),
        Field("dense_d_ff", "intermediate_size", dense_width,
              read=lambda c: c.intermediate_size if not all(sparse_layers(c)) else None),
        Field("experts", experts, lambda f: f.mixture("decoder").experts),
        Field("top", "num_experts_per_tok", lambda f: f.mixture("decoder").top),
        Field("renormalize", "norm_topk_prob", lambda f: f.router("decoder").renormalize, let=False),
        *hf_mixtral.MOE_FIELDS[2:4],  # the load-balancing loss, and whether Hugging Face trains with it
        # which layers are mixtures, written back as mlp_only_layers (both read as the layers they make sparse)
        Field("mlp_only_layers", "mlp_only_layers", _dense_layers, read=sparse_layers, setting=False),
        Field("decoder_sparse_step", "decoder_sparse_step", _sparse_step, read=sparse_layers, setting=False),
    ]
QWEN3_MOE_FIELDS = Fields(
    *SHARED, *mixture_fields("num_local_experts"),
    Field("head_dim", "head_dim", hf_mixtral.exported_head_dim, read=hf_llama.written_head_dim),
    Field("window", "sliding_window", lambda f: f.window("decoder"), read=_window),
    Field("use_sliding_window", "use_sliding_window", lambda f: f.window("decoder") is not None or None,
          read=lambda c: _window(c) is not None, setting=False),
    Field("attention_bias", "attention_bias", lambda f: f.attention("decoder").bias or None,
          read=lambda c: bool(c.attention_bias), let=False),
    ignored={**hf_llama.FIELDS.ignored,
             "rope_parameters.partial_rotary_factor": "Qwen3-MoE's rotary embedding rotates every dimension"})
QWEN2_MOE_FIELDS = Fields(
    *SHARED, *mixture_fields("num_experts"),
    Field("shared", "shared_expert_intermediate_size", lambda f: f.mixture("decoder").shared),
    Fixed("qkv_bias", True, "qkv_bias={value}: tfspec imports Qwen2-MoE with its biased q/k/v projections"),
    Fixed("use_sliding_window", False, "use_sliding_window={value}: Qwen2-MoE's per-layer sliding windows are "
                                       "not imported", read=lambda c: bool(c.use_sliding_window)),
    ignored={**hf_llama.FIELDS.ignored,
             "sliding_window": "read only with use_sliding_window, which is refused",
             "max_window_layers": "read only with use_sliding_window, which is refused",
             "layer_types": "which layers slide, read only with use_sliding_window, which is refused",
             "rope_parameters.partial_rotary_factor": "Qwen2-MoE's rotary embedding rotates every dimension"})
TABLES = {"qwen3_moe": QWEN3_MOE_FIELDS, "qwen2_moe": QWEN2_MOE_FIELDS}
FIELDS = QWEN3_MOE_FIELDS  # the Qwen3-MoE family's table; hf_qwen2_moe names Qwen2-MoE's


def scheduled_mixtures(s, document: Document, shared: str = "") -> Document:
    """``document`` whose feed-forwards are the configuration's mixtures (with ``shared``'s options: Qwen2-MoE's
    shared expert) where it makes them, its dense layers a schedule."""
    if not any(sparse_layers(s.config)):
        raise InteropError("no layer of this configuration is a mixture of experts (num_experts, mlp_only_layers, "
                           "decoder_sparse_step): import it as the dense model it is")
    mixture = {"d_ff": s.d_ff, "kind": f"moe({s.experts}, {s.top}, aux_loss={s.aux_loss}{shared})",
               "router": "renormalize" if s.value("renormalize") else None}
    return layouts.scheduled_feedforwards(document, s, mixture, {"d_ff": s.dense_d_ff, "kind": "dense"},
                                          list(sparse_layers(s.config)))


def document(s, *, padding: bool, head: bool) -> Document:
    """Qwen3-MoE's spec: Llama's with Qwen3's qk-norms, its feed-forwards mixtures but in its dense layers."""
    return scheduled_mixtures(s, hf_llama.document(s, padding=padding, head=head).change(
        "decoder", "attention", qk_norm=f"rmsnorm(eps={s.eps})"))


def hf_config(spec) -> dict:
    """The Qwen3-MoE configuration ``spec`` would be (Qwen2-MoE's where its mixture has a shared expert)."""
    f = Facts(spec, "Qwen3-MoE or Qwen2-MoE")
    f.kind("decoder-only")
    model_type = "qwen2_moe" if f.mixture("decoder").shared else "qwen3_moe"
    return {"model_type": model_type, **TABLES[model_type].config(f)}


EXAMPLES = {
    "Qwen3MoeForCausalLM": example("qwen3_moe", num_hidden_layers=3, head_dim=16, intermediate_size=40,
                                   moe_intermediate_size=24, num_experts=4, num_experts_per_tok=2, norm_topk_prob=True,
                                   mlp_only_layers=[1]),  # layer 1 a gated MLP,
    "Qwen3MoeModel": dict(model_type="qwen3_moe", vocab_size=90, hidden_size=32, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=4, moe_intermediate_size=24, num_experts=3,
                          num_experts_per_tok=2, attention_bias=True, use_sliding_window=True, sliding_window=5),
}

COVERAGE = [covering("qwen3_moe", num_hidden_layers=4, num_key_value_heads=1, head_dim=10, moe_intermediate_size=20,
                     num_experts=5, num_experts_per_tok=3, norm_topk_prob=True, mlp_only_layers=[2],
                     decoder_sparse_step=2, output_router_logits=True, router_aux_loss_coef=0.05, rms_norm_eps=1e-7,
                     attention_dropout=0.3, initializer_range=0.05, hidden_act="gelu", tie_word_embeddings=True,
                     attention_bias=True, use_sliding_window=True, sliding_window=5,
                     rope_parameters={"rope_type": "default", "rope_theta": 5000.0},
                     architectures=["Qwen3MoeForCausalLM"]),
            *hf_llama.each_scaling(dict(
                model_type="qwen3_moe", vocab_size=91, hidden_size=24, num_hidden_layers=1, num_attention_heads=3,
                num_key_value_heads=3, moe_intermediate_size=20, num_experts=2, num_experts_per_tok=1,
                max_position_embeddings=32))]


QWEN3_MOE = Family(
    "Qwen3-MoE", ("qwen3_moe",), causal_lm("Qwen3Moe"),
    "Qwen3-MoE: Qwen3's decoder (each head's queries and keys RMS-normed) whose feed-forwards are mixtures of "
    "SwiGLU experts routed by a softmax, renormalised where norm_topk_prob says; the layers of "
    "mlp_only_layers (or off every decoder_sparse_step-th) keep a gated MLP (a layer schedule)",
    priority=180, fields=FIELDS, document=document, hf_config=hf_config, rules=hf_mixtral.WEIGHTS)
