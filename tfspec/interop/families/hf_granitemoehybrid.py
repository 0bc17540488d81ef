"""Hugging Face ``GraniteMoeHybridForCausalLM`` (IBM's Granite 4.0-H; and its base model) <-> a compiled spec.

Granite 4.0-H (2025) is a hybrid of pre-normed RMSNorm layers: as ``layer_types`` says, each mixes positions with
Mamba-2 (``mixer mamba2(...)``, the layer's ``mamba``) or with grouped-query attention, without positions by default
(``position_embedding_type`` "nope"; rotary where it is "rope"). Its feed-forward is a mixture of
``num_local_experts`` SwiGLU experts (the ``num_experts_per_tok`` best by a softmax over their logits, renormalised)
beside a shared SwiGLU of ``shared_intermediate_size`` every position runs (``shared_mlp``); with no experts, that
shared network alone. Granite's four multipliers are settings the spec states, as Granite 3's are
(``hf_granite``): the embeddings' scale, the scores' scale, each branch scaled before its residual sum
(the wiring form) and the logits divided by ``logits_scaling``.
"""

from __future__ import annotations

from ..family import Family, causal_lm
from ..weights import Weights, Projections, Tensor
from .. import hybrid, layouts

from . import hf_granite, hf_llama
from ..fields import Field, Fields, Fixed
from ..document import Document, Statement
from ..writer import causal_masks, schedule
from ..layouts import covering, example

MAMBA, ATTENTION = "linear_attention", "full_attention"
_LLAMA = {e.name: e for e in hf_llama.FIELDS.fields}
_GRANITE = {e.name: e for e in hf_granite.FIELDS.fields}


def _attends(f) -> bool:
    return any(m is None for m in f.layer_mixers("decoder"))


def _attention(f, value):
    """``value(f)`` of the decoder's attention layers; None (left out) where every layer is Mamba-2."""
    return value(f) if _attends(f) else None


def _rotates(f) -> bool:
    return _attends(f) and f.rotates(f.attention("decoder").position)


def _layer_types(f) -> list[str]:
    return [ATTENTION if mixer is None else MAMBA for mixer in f.layer_mixers("decoder")]


def _experts(c) -> int:
    return c.num_local_experts or 0


def _mixture(f):
    """The mixture's options where the feed-forwards route (None: the shared network alone, a dense one); refused
    where a mixture is not Granite's."""
    if not f.layer_routes("decoder")[0]:
        return None
    options = f.mixture("decoder")
    if not options.shared or options.shared_gate or set(f.router("decoder").parts) != {"renormalize"}:
        raise f.refuse("its mixture is not Granite's: a softmax over the chosen experts' logits (router=renormalize) "
                       "beside an ungated shared network (shared=)")
    return options


def _shared(f) -> int:
    options = _mixture(f)
    return options.shared if options is not None else f.feedforward("decoder").d_ff


FIELDS = Fields(
    *(_LLAMA[n] for n in ("d_model", "layers", "vocab", "eps", "init_std", "tied")),
    Field("heads", "num_attention_heads", lambda f: _attention(f, lambda f: f.geometry("decoder").heads)),
    Field("kv_heads", "num_key_value_heads", lambda f: _attention(f, lambda f: f.geometry("decoder").kv_heads)),
    Field("p_attn_dropout", "attention_dropout", lambda f: _attention(f, lambda f: f.attention("decoder").dropout)),
    Field("attention_bias", "attention_bias", lambda f: _attention(f, lambda f: f.attention("decoder").bias),
          read=lambda c: bool(c.attention_bias), let=False),
    Field("position", "position_embedding_type", lambda f: "rope" if _rotates(f) else "nope",
          read=lambda c: "rope" if c.position_embedding_type == "rope" else "nope", setting=False),
    Field("rope_theta", "rope_parameters.rope_theta",
          lambda f: f.rotary("decoder").get("theta", 10000.0) if _rotates(f) else None,
          read=lambda c: float(hf_llama.rope(c)["rope_theta"]) if c.position_embedding_type == "rope" else None),
    *hf_llama.scaling_fields(options=lambda f: f.rotary("decoder") if _rotates(f) else {}),
    _GRANITE["embedding_multiplier"],
    Field("attention_multiplier", "attention_multiplier", lambda f: _attention(
        f, lambda f: f.attention("decoder").scale or f.geometry("decoder").head_dim ** -0.5)),
    _GRANITE["residual_multiplier"], _GRANITE["logits_scaling"],
    Field("experts", "num_local_experts", lambda f: _mixture(f).experts if _mixture(f) else 0, read=_experts),
    Field("top", "num_experts_per_tok", lambda f: _mixture(f).top if _mixture(f) else 0,
          read=lambda c: c.num_experts_per_tok if _experts(c) else None),
    Field("d_ff", "intermediate_size", lambda f: f.mixture_body("decoder").d_ff if _mixture(f) else None,
          read=lambda c: c.intermediate_size if _experts(c) else None),
    Field("shared", "shared_intermediate_size", _shared),
    Field("aux_loss", "router_aux_loss_coef", lambda f: (_mixture(f).aux_loss or None) if _mixture(f) else None,
          read=lambda c: c.router_aux_loss_coef if c.output_router_logits and _experts(c) else 0.0),
    Field("router_logits", "output_router_logits", lambda f: True if _mixture(f) and _mixture(f).aux_loss else None,
          read=lambda c: bool(c.output_router_logits and c.router_aux_loss_coef and _experts(c)), setting=False),
    *hybrid.mamba2_fields("mamba_n_heads", "mamba_d_head", "mamba_d_state", "mamba_n_groups", "mamba_d_conv",
                          "mamba_chunk_size", "mamba_conv_bias", "mamba_proj_bias", "mamba_expand"),
    Fixed("hidden_act", "silu", "hidden_act={value}: Granite 4.0-H applies it in its Mamba-2 layers' convolution "
                                "as well as in its SwiGLUs, and tfspec's convolution applies SiLU"),
    Field("layer_types", "layer_types", _layer_types, read=lambda c: list(c.layer_types), setting=False),
    ignored={**hf_llama.FIELDS.ignored, **hybrid.MAMBA2_IGNORED},
)


def document(s, *, padding: bool, head: bool) -> Document:
    """The spec a Granite 4.0-H configuration describes: Granite's wiring with Mamba-2 in the layers
    ``layer_types`` gives it and attention in the others (the most common kind the stack's, the other a section)."""
    rotary = s.value("position") == "rope"
    mamba = hybrid.mamba2_layer(s, "eps")
    attention = (f"attention(self, heads={s.heads}, kv_heads={s.kv_heads}, mask={causal_masks(padding=padding)}, "
                 f"scale={s.attention_multiplier}, bias={s.attention_bias})")
    base, sections = schedule(s.value("layer_types"))
    operator = f"mixer(norm(x), {mamba})" if base == MAMBA else attention.replace("(self,", "(norm(x),")
    other = f"mamba = {attention}" if base == MAMBA else f"self_attn = mixer({mamba})"
    if s.value("experts"):
        feedforward = (f"d_ff={s.d_ff}, activation=swiglu, bias=false, kind=moe({s.experts}, {s.top}, "
                       f"shared={s.shared}" + (f", aux_loss={s.aux_loss}" if s.value("aux_loss") else "")
                       + "), router=renormalize")
    else:
        feedforward = f"d_ff={s.shared}, activation=swiglu, bias=false"
    wiring = (f"  x = x + residual_multiplier * {operator}\n"
              f"  x = x + residual_multiplier * feedforward(norm(x), {feedforward})")
    lines = "".join(f"  layers {layers} {{ {other} }}\n" for layers, _ in sections)
    if not head:  # the base model has no logits to scale
        s.writer.forget("logits_scaling")
    position = hf_llama.rotary(s) if rotary else "none"
    document = layouts.wired(s, norm=f"rmsnorm(eps={s.eps})", position=position, wiring=wiring,
                                     head=head).add_lines("decoder", lines)
    document = document.add("embedding tokens", Statement("scale", s.embedding_multiplier))
    if head:
        document = document.change_tail("head", scale=f"1 / {s.logits_scaling}")
    return document


EXAMPLES = {
    # Granite 4.0-H: Mamba-2 (grouped B and C) with attention in layer 1, no positions, Granite's multipliers, a
    # mixture beside the shared network; the base model dense, rotary, every projection biased
    "GraniteMoeHybridForCausalLM": example("granitemoehybrid", num_hidden_layers=4, intermediate_size=12,
                                           shared_intermediate_size=20, num_local_experts=4, num_experts_per_tok=2,
                                           mamba_n_heads=4, mamba_d_head=16, mamba_d_state=8, mamba_n_groups=2,
                                           mamba_chunk_size=8, embedding_multiplier=3.0, attention_multiplier=0.2,
                                           residual_multiplier=0.5, logits_scaling=2.5, position_embedding_type="nope",
                                           layer_types=["mamba", "attention", "mamba", "mamba"]),
    "GraniteMoeHybridModel": dict(model_type="granitemoehybrid", vocab_size=90, hidden_size=32, num_hidden_layers=3,
                                  num_attention_heads=2, num_key_value_heads=2, shared_intermediate_size=24,
                                  num_local_experts=0, num_experts_per_tok=0, mamba_n_heads=2, mamba_d_head=32,
                                  mamba_d_state=6, mamba_n_groups=1, mamba_d_conv=3, mamba_chunk_size=4,
                                  mamba_conv_bias=False, mamba_proj_bias=True, attention_bias=True,
                                  position_embedding_type="rope",
                                  layer_types=["attention", "mamba", "mamba"],
                                  rope_parameters={"rope_type": "default", "rope_theta": 5e5}),
}

COVERAGE = [covering("granitemoehybrid", num_hidden_layers=3, num_key_value_heads=1, intermediate_size=8,
                     shared_intermediate_size=12, num_local_experts=3, num_experts_per_tok=2, router_aux_loss_coef=0.02,
                     output_router_logits=True, rms_norm_eps=1e-5, initializer_range=0.05, attention_dropout=0.1,
                     attention_bias=True, embedding_multiplier=3.0, attention_multiplier=0.2, residual_multiplier=0.5,
                     logits_scaling=2.5, mamba_n_heads=3, mamba_d_head=32, mamba_d_state=6, mamba_n_groups=3,
                     mamba_d_conv=3, mamba_chunk_size=4, mamba_conv_bias=False, mamba_proj_bias=True, mamba_expand=4,
                     tie_word_embeddings=True, position_embedding_type="rope",
                     layer_types=["mamba", "attention", "attention"],
                     rope_parameters={"rope_type": "default", "rope_theta": 5e5}),
            *hf_llama.each_scaling(dict(
                model_type="granitemoehybrid", vocab_size=91, hidden_size=24, num_hidden_layers=2,
                num_attention_heads=3, num_key_value_heads=3, shared_intermediate_size=12, num_local_experts=0,
                num_experts_per_tok=0, mamba_n_heads=2, mamba_d_head=24, max_position_embeddings=32,
                position_embedding_type="rope", layer_types=["mamba", "attention"]))]


GRANITE_MOE_HYBRID = Family(
    "Granite 4.0-H", ("granitemoehybrid",),
    causal_lm("GraniteMoeHybrid"),
    "Granite 4.0-H: a hybrid of pre-normed RMSNorm layers mixing by Mamba-2 (mixer mamba2) or by grouped-query "
    "attention without positions (rotary where position_embedding_type is rope) as layer_types says, a layer "
    "schedule; a mixture of SwiGLU experts beside a shared SwiGLU (shared=), or that one alone; Granite's "
    "multipliers (the embedding's scale, the scores' scale, branches scaled in the wiring form, the head's "
    "input scale)",
    priority=590, fields=FIELDS, document=document,
    carried=("intermediate_size",),  # the experts' width, which a model without experts does not have
    # a mixture (its router and stacked experts) and the shared network (``input_linear`` our ``up``, gate rows
    # first; ``output_linear`` our ``down``), or the shared network alone
    rules=Weights({
        "attention": Projections(), "mixer": hybrid.Mamba2Mixer(),
        "feedforward.router": "block_sparse_moe.router",
        "feedforward.experts.up": Tensor("block_sparse_moe.experts.gate_up_proj"),
        "feedforward.experts.down": Tensor("block_sparse_moe.experts.down_proj"),
        **{f"feedforward{shared}.{ours}": f"shared_mlp.{theirs}" for shared in ("", ".shared")
           for ours, theirs in (("up", "input_linear"), ("down", "output_linear"))},
        "operator_norm": "input_layernorm", "feedforward_norm": "post_attention_layernorm"},
        parts=hybrid.parts("Granite 4.0-H")))
