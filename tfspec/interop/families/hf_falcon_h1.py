"""Hugging Face ``FalconH1ForCausalLM`` (TII's Falcon-H1; and its base model) <-> a compiled spec.

Falcon-H1 (2025) runs Mamba-2 and attention side by side in every layer: one RMSNorm feeds both, and their outputs
join the residual stream in one sum (the wiring form's ``x = x + a · mixer(b · h, ...) + c · attention(d · h, ...)``);
a SwiGLU follows, pre-normed. Its µP multipliers are constants the spec states where they act: the embeddings'
scale, each branch's input and output scale (``ssm_in``/``ssm_out``, ``attention_in``/``attention_out``,
``mlp_multipliers``' second on the feed-forward's output), each part of the Mamba-2 layer's in-projection
(``ssm_multipliers``: the mixer's ``z_scale``, ``x_scale``, ``b_scale``, ``c_scale``, ``dt_scale``), the SwiGLU's
gate (``activation=swiglu_scaled(gate_scale=...)``), the keys (``key_multiplier``, which scales the scores: the
attention's ``scale``) and the logits (the head's input ``scale``). Its Mamba-2 layers are ``mamba_d_ssm`` wide, and
norm their output before the gate, after it or not at all (``mamba_rms_norm``, ``mamba_norm_before_gate``: the
mixer's ``norm``).
"""

from __future__ import annotations

import math

from ..family import Family, causal_lm
from ..document import Document, Statement
from ..weights import Weights, GatedMLP, Projections
from ...ir import nodes as ir
from ...ir.queries import layer_template
from .. import hybrid, layouts
from . import hf_llama
from ..fields import Field, Fields, Fixed
from ..mapping import InteropError
from ..writer import causal_masks
from ..layouts import covering, example


_LLAMA = {e.name: e for e in hf_llama.FIELDS.fields}
NORMS = {"gated": (True, False), "before_gate": (True, True), "none": (False, None)}  # (rms_norm, before_gate)


def recovered(value: float) -> float:
    """A multiplier read back from a product the spec computes (the scores' scale over 1/√head_dim), as the
    configuration wrote it where the two agree to the last bits."""
    short = float(f"{value:.12g}")
    return short if math.isclose(short, value, rel_tol=1e-12) else value


def _branches(f) -> dict[str, float]:
    """The constants the first layer multiplies its branches' inputs and outputs by: ``ssm_in``, ``ssm_out``,
    ``attention_in``, ``attention_out``, ``mlp_out`` (1.0 where none)."""
    g = f.g
    found = {}
    for node in layer_template(g, "decoder", 0):
        kind = {ir.Mixer: "ssm", ir.Attention: "attention", ir.FeedForward: "mlp"}.get(type(node))
        if kind is None:
            continue
        before = g.node(node.inputs[0])
        found[f"{kind}_in"] = before.factor if isinstance(before, ir.Scale) else 1.0
        after = g.consumers(node.id)
        found[f"{kind}_out"] = after[0].factor if len(after) == 1 and isinstance(after[0], ir.Scale) else 1.0
    if {"ssm_in", "attention_in", "mlp_in"} - set(found):
        raise f.refuse("its layers do not each run Mamba-2, attention and a feed-forward, as Falcon-H1's do")
    return found


def _gate_scale(f) -> float:
    """The constant the SwiGLU's gate is multiplied by (``swiglu_scaled``'s; 1.0 for an activation without one,
    which the comparison of the exported architecture with the spec then refuses)."""
    return f.feedforward("decoder").activation.options.get("gate_scale", 1.0)


def _head_scale(f) -> float | None:
    return None if f.spec.head is None else f.spec.head.scale


FIELDS = Fields(
    *(_LLAMA[n] for n in ("d_model", "heads", "kv_heads", "layers", "d_ff", "vocab", "eps", "p_attn_dropout",
                          "init_std", "tied", "rope_theta", "attention_bias", "mlp_bias")),
    Field("head_dim", "head_dim", lambda f: f.geometry("decoder").head_dim,
          read=lambda c: getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads),
    *hf_llama.ROPE_SCALING,
    *hybrid.mamba2_fields("mamba_n_heads", "mamba_d_head", "mamba_d_state", "mamba_n_groups", "mamba_d_conv",
                          "mamba_chunk_size", "mamba_conv_bias", "mamba_proj_bias", None),
    Field("mamba_width", "mamba_d_ssm", lambda f: hybrid.mamba2(f).heads * hybrid.mamba2(f).head_dim,
          read=lambda c: c.mamba_d_ssm or int(c.mamba_expand * c.hidden_size), setting=False),
    Field("mamba_rms_norm", "mamba_rms_norm", lambda f: NORMS[hybrid.mamba2(f).norm][0],
          read=lambda c: bool(c.mamba_rms_norm), setting=False),
    Field("mamba_norm_before_gate", "mamba_norm_before_gate", lambda f: NORMS[hybrid.mamba2(f).norm][1],
          read=lambda c: bool(c.mamba_norm_before_gate) if c.mamba_rms_norm else None, setting=False),
    Field("mamba_out_bias", "projectors_bias", lambda f: hybrid.mamba2(f).bias, read=lambda c: bool(c.projectors_bias),
          setting=False),
    Fixed("projectors_bias", None, "projectors_bias={value} differs from mamba_proj_bias: tfspec's Mamba-2 biases "
          "its in and out projections alike", read=lambda c: c.projectors_bias
          if bool(c.projectors_bias) != bool(c.mamba_proj_bias) else None, required="= mamba_proj_bias"),
    Field("ssm_multipliers", "ssm_multipliers", lambda f: [getattr(hybrid.mamba2(f), f"{p}_scale") for p in "zxbc"]
          + [hybrid.mamba2(f).dt_scale], read=lambda c: [float(v) for v in c.ssm_multipliers], setting=False),
    Field("mlp_multipliers", "mlp_multipliers", lambda f: [_gate_scale(f), _branches(f)["mlp_out"]],
          read=lambda c: [float(v) for v in c.mlp_multipliers], setting=False),
    Field("embedding_multiplier", "embedding_multiplier", lambda f: f.embedding.scale),
    Field("lm_head_multiplier", "lm_head_multiplier", _head_scale),
    Field("key_multiplier", "key_multiplier",
          lambda f: recovered(f.attention("decoder").scale * math.sqrt(f.geometry("decoder").head_dim))
          if f.attention("decoder").scale else 1.0),
    Field("attention_in_multiplier", "attention_in_multiplier", lambda f: _branches(f)["attention_in"]),
    Field("attention_out_multiplier", "attention_out_multiplier", lambda f: _branches(f)["attention_out"]),
    Field("ssm_in_multiplier", "ssm_in_multiplier", lambda f: _branches(f)["ssm_in"]),
    Field("ssm_out_multiplier", "ssm_out_multiplier", lambda f: _branches(f)["ssm_out"]),
    Fixed("hidden_act", "silu", "hidden_act={value}: Falcon-H1 applies it in its Mamba-2 layers' convolution as "
                                "well as in its SwiGLUs, and tfspec's convolution applies SiLU"),
    ignored={**hf_llama.FIELDS.ignored, **hybrid.MAMBA2_IGNORED,
             "mamba_expand": "the Mamba-2 layers' width over hidden_size, read where mamba_d_ssm does not give it",
             "num_logits_to_keep": "how many positions' logits a generation step computes; the rest are unused"},
)


def document(s, *, padding: bool, head: bool) -> Document:
    """Falcon-H1's spec: Mamba-2 and attention side by side on one norm, a SwiGLU after, every µP multiplier where
    it acts."""
    w = s.writer
    norm = "none" if not s.value("mamba_rms_norm") else "before_gate" if s.value("mamba_norm_before_gate") \
        else "gated"
    scales = dict(zip(("z", "x", "b", "c", "dt"), s.value("ssm_multipliers")))
    gate, down = s.value("mlp_multipliers")
    more = f", norm={norm}" + "".join(f", {p}_scale={w(f'ssm_{p}_multiplier', v, f'ssm_multipliers[{i}]')}"
                                      for i, (p, v) in enumerate(scales.items()))
    mamba = hybrid.mamba2_layer(s, "eps", more)
    attention = (f"attention(attention_in_multiplier * h, heads={s.heads}, kv_heads={s.kv_heads}, "
                 f"head_dim={s.head_dim}, mask={causal_masks(padding=padding)}, "
                 f"scale={s.key_multiplier} / sqrt({s.head_dim}), bias={s.attention_bias})")
    gate_scale = w("mlp_gate_multiplier", gate, "mlp_multipliers[0]")
    down_scale = w("mlp_down_multiplier", down, "mlp_multipliers[1]")
    wiring = (f"  h = norm(x)\n"
              f"  x = x + ssm_out_multiplier * mixer(ssm_in_multiplier * h, {mamba}) \\\n"
              f"        + attention_out_multiplier * {attention}\n"
              f"  x = x + {down_scale} * feedforward(norm(x), d_ff={s.d_ff}, "
              f"activation=swiglu_scaled(gate_scale={gate_scale}), bias={s.mlp_bias})")
    document = layouts.wired(s, norm=f"rmsnorm(eps={s.eps})", position=hf_llama.rotary(s), wiring=wiring,
                             head=head).add("embedding tokens", Statement("scale", s.embedding_multiplier))
    if not head:  # the base model computes no logits to scale
        w.forget("lm_head_multiplier")
        return document
    return document.change_tail("head", scale=s.lm_head_multiplier)


def _parts(model) -> dict[str, str]:
    """The first layer's modules by part: its norms (``input``, ``pre_ff``), ``mamba``, ``attention``, ``mlp``."""
    g = model.spec.graph()
    parts: dict[str, str] = {}
    for node in layer_template(g, "decoder", 0):
        if isinstance(node, ir.FeedForward):
            parts["pre_ff"], parts["mlp"] = g.node(node.inputs[0]).module.name, node.name
        elif isinstance(node, ir.Mixer):
            parts["mamba"] = node.name
        elif isinstance(node, ir.Attention):
            parts["attention"] = node.name
        elif isinstance(node, ir.Norm) and "input" not in parts:
            parts["input"] = node.module.name
    if len(parts) != 5 or len(g.stacks["decoder"].kinds) != 1:
        raise InteropError(f"spec '{model.spec.name}': its layers are not Falcon-H1's (one norm before Mamba-2 and "
                           "attention side by side, one before a feed-forward, alike in every layer)")
    return parts


EXAMPLES = {
    # Falcon-H1: Mamba-2 (normed before its gate, grouped) beside attention in every layer, every µP multiplier
    # away from 1; the base model's Mamba-2 gated without a norm, its projections biased
    "FalconH1ForCausalLM": example("falcon_h1", intermediate_size=40, head_dim=8, mamba_d_ssm=48, mamba_n_heads=4,
                                   mamba_d_head=12, mamba_d_state=8, mamba_n_groups=2, mamba_chunk_size=8,
                                   mamba_rms_norm=True, mamba_norm_before_gate=True, embedding_multiplier=2.5,
                                   lm_head_multiplier=0.4, key_multiplier=0.7, attention_in_multiplier=0.9,
                                   attention_out_multiplier=1.2, ssm_in_multiplier=0.8, ssm_out_multiplier=1.1,
                                   mlp_multipliers=[0.6, 1.3], ssm_multipliers=[0.5, 1.5, 0.75, 1.25, 2.0],
                                   rope_parameters={"rope_type": "default", "rope_theta": 1e5}),
    "FalconH1Model": example("falcon_h1", intermediate_size=24, num_attention_heads=2, num_key_value_heads=1,
                             head_dim=16, mamba_d_ssm=64, mamba_n_heads=2, mamba_d_head=32, mamba_d_state=6,
                             mamba_n_groups=1, mamba_d_conv=3, mamba_chunk_size=4, mamba_rms_norm=False,
                             mamba_proj_bias=True, projectors_bias=True, mamba_conv_bias=False, attention_bias=True,
                             mlp_bias=True),
}

COVERAGE = [covering("falcon_h1", num_hidden_layers=2, num_key_value_heads=1, head_dim=16, rms_norm_eps=1e-6,
                     attention_dropout=0.1, initializer_range=0.05, attention_bias=True, mlp_bias=True,
                     tie_word_embeddings=True, mamba_d_ssm=72, mamba_n_heads=3, mamba_d_head=24, mamba_d_state=6,
                     mamba_n_groups=3, mamba_d_conv=3, mamba_chunk_size=4, mamba_conv_bias=False, mamba_proj_bias=True,
                     projectors_bias=True, mamba_rms_norm=True, mamba_norm_before_gate=False, embedding_multiplier=2.5,
                     lm_head_multiplier=0.4, key_multiplier=0.7, attention_in_multiplier=0.9,
                     attention_out_multiplier=1.2, ssm_in_multiplier=0.8, ssm_out_multiplier=1.1,
                     mlp_multipliers=[0.6, 1.3], ssm_multipliers=[0.5, 1.5, 0.75, 1.25, 2.0],
                     rope_parameters={"rope_type": "default", "rope_theta": 5e5}),
            *hf_llama.each_scaling(covering("falcon_h1", num_hidden_layers=1, num_key_value_heads=3, head_dim=8,
                                            mamba_d_ssm=48, mamba_n_heads=2, mamba_d_head=24,
                                            max_position_embeddings=32))]


FALCON_H1 = Family(
    "Falcon-H1", ("falcon_h1",), causal_lm("FalconH1"),
    "Falcon-H1: Mamba-2 (mixer mamba2, mamba_d_ssm wide, its norm as mamba_rms_norm and mamba_norm_before_gate "
    "say) and attention side by side on one RMSNorm in every layer, then a SwiGLU; its µP multipliers where "
    "they act (the wiring form's branch scales, the mixer's part scales, swiglu_scaled's gate scale, the "
    "attention's and the head's scale, the embedding's)",
    priority=620, fields=FIELDS, document=document,
    rules=Weights({"mamba": hybrid.Mamba2Mixer(), "attention": Projections(), "mlp": GatedMLP("feed_forward"),
                          "input": "input_layernorm", "pre_ff": "pre_ff_layernorm"},
                         top={"embeddings.tokens.tokens": "embed_tokens", "decoder.final_norm": "final_layernorm"},
                         parts=_parts))
