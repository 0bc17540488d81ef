"""Hugging Face ``MiniMaxForCausalLM`` (MiniMax-01; and its base model) <-> a compiled spec.

MiniMax-01 (2025) mixes positions with lightning attention (``mixer lightning(...)``: a linear attention whose
per-head state decays at ALiBi's slopes scaled by the layer's depth) or, in the layers ``layer_types`` says, with
Mixtral's grouped-query attention (rotary, a sliding window where ``sliding_window`` is set); every feed-forward is
Mixtral's mixture of SwiGLU experts. Its layers are DeepNet's: the residual is taken after the norm and scaled,
``x = α · norm(x) + β · F(norm(x))`` (the wiring form), α and β the configuration's ``*_alpha_factor`` and
``*_beta_factor``. Hugging Face's lightning layers hold their decays as buffers (``slope_rate``, ``query_decay``,
``key_decay``, ``diagonal_decay``), which the spec computes: import checks them, export writes them.
"""

from __future__ import annotations

from ..family import Family, causal_lm
from ..weights import Weights, Projections
from ..document import Document
from ...ir import nodes as ir
from ...ir.queries import layer_template
from . import hf_llama, hf_mixtral
from ..fields import Field, Fields, Fixed
from ..mapping import InteropError
from .. import layouts
from ..writer import causal_masks, schedule
from ..layouts import covering

LINEAR, FULL = "linear_attention", "full_attention"
_MIXTRAL = {getattr(e, "name", None) or e.config: e for e in hf_mixtral.FIELDS.entries}
LIGHTNING_EPS = 1e-6  # MiniMaxLightningAttention's RMSNorm keeps its default eps


def _layers(model_or_spec) -> list[dict]:
    """Each layer's parts: ``operator`` (its lightning mixer or attention), ``attends``, the two norms (``norm``,
    ``post_norm``), ``feedforward``, and the constants its two sums scale the normed input (``alpha``,
    ``mlp_alpha``) and the branch (``beta``, ``mlp_beta``) by."""
    spec = getattr(model_or_spec, "spec", model_or_spec)
    g = spec.graph()
    found = []
    for i in range(g.stacks["decoder"].repeat):
        parts: dict = {}
        for node in layer_template(g, "decoder", g.stacks["decoder"].kind_of(i)):
            if isinstance(node, (ir.Mixer, ir.Attention, ir.FeedForward)):
                kind = "feedforward" if isinstance(node, ir.FeedForward) else "operator"
                norm = g.node(node.inputs[0])
                after = g.consumers(node.id)
                if not isinstance(norm, ir.Norm) or len(after) != 1 or not isinstance(after[0], ir.Scale):
                    raise InteropError(f"spec '{spec.name}': layer {i}'s {node.name} is not MiniMax's "
                                       "α · norm(x) + β · F(norm(x))")
                add = g.consumers(after[0].id)[0]
                residual = [g.node(n) for n in add.inputs if n != after[0].id]
                if len(residual) != 1 or not isinstance(residual[0], ir.Scale) or residual[0].inputs[0] != norm.id:
                    raise InteropError(f"spec '{spec.name}': layer {i}'s {node.name} is not MiniMax's "
                                       "α · norm(x) + β · F(norm(x))")
                prefix = "mlp_" if kind == "feedforward" else ""
                parts.update({kind: node.name, f"{prefix}norm" if kind == "feedforward" else "norm": norm.module.name,
                              f"{prefix}alpha": residual[0].factor, f"{prefix}beta": after[0].factor})
                if isinstance(node, ir.Attention):
                    parts["attends"] = True
        if {"operator", "feedforward"} - set(parts):
            raise InteropError(f"spec '{spec.name}': layer {i} lacks a mixing sublayer or a feed-forward")
        found.append(parts)
    return found


def _factor(f, kind: str, key: str) -> float:
    """The constant ``key`` of the layers of ``kind`` (lightning or full); the linear layers' where none are full."""
    layers = _layers(f.spec)
    chosen = [p[key] for p in layers if p.get("attends", False) == (kind == FULL)] or [p[key] for p in layers]
    if len(set(chosen)) > 1:
        raise f.refuse(f"its layers scale by different constants ({sorted(set(chosen))})")
    return chosen[0]


def _lightning(f):
    options = f.mixer("decoder")
    if not hasattr(options, "block"):
        raise f.refuse(f"its layers' mixer is {f.layer_mixers('decoder')[0].kind.name}, not lightning attention "
                       "(mixer lightning(...))")
    if options.layers != f.layers("decoder") or options.eps != LIGHTNING_EPS:
        raise f.refuse("its lightning attention's slopes do not span the stack's layers, or its norm's eps is not "
                       f"MiniMax's {LIGHTNING_EPS}")
    return options


def _layer_types(f) -> list[str]:
    return [FULL if mixer is None else LINEAR for mixer in f.layer_mixers("decoder")]


FIELDS = Fields(
    *(_MIXTRAL[n] for n in ("d_model", "kv_heads", "layers", "d_ff", "vocab", "eps", "p_attn_dropout", "init_std",
                            "tied", "rope_theta", "window", "experts", "top", "aux_loss", "router_logits",
                            "router_jitter_noise")),
    *hf_llama.ROPE_SCALING,
    Field("heads", "num_attention_heads", lambda f: _lightning(f).heads),
    # written by export where it is not hidden_size / heads (MiniMax's default), always in the spec
    Field("head_dim", "head_dim", lambda f: _lightning(f).head_dim
          if _lightning(f).head_dim != f.embedding.dim // _lightning(f).heads else None,
          read=lambda c: getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads),
    Field("block", "block_size", lambda f: _lightning(f).block),
    Field("layer_types", "layer_types", _layer_types, read=lambda c: list(c.layer_types), setting=False),
    Field("alpha", "linear_attn_alpha_factor", lambda f: _factor(f, LINEAR, "alpha")),
    Field("beta", "linear_attn_beta_factor", lambda f: _factor(f, LINEAR, "beta")),
    # (the full-attention layers' are the lightning layers' own, as MiniMax-Text-01's)
    Field("full_alpha", "full_attn_alpha_factor", lambda f: _factor(f, FULL, "alpha"), setting=False),
    Field("full_beta", "full_attn_beta_factor", lambda f: _factor(f, FULL, "beta"), setting=False),
    Fixed("full_attn_factors", None, "full_attn_alpha_factor and full_attn_beta_factor differ from the lightning "
          "layers' ({value}): tfspec's MiniMax layers share one pair", required="= linear_attn_*_factor",
          read=lambda c: (c.full_attn_alpha_factor, c.full_attn_beta_factor) if (
              c.full_attn_alpha_factor, c.full_attn_beta_factor) != (c.linear_attn_alpha_factor,
                                                                     c.linear_attn_beta_factor) else None),
    Field("mlp_alpha", "mlp_alpha_factor", lambda f: _factor(f, LINEAR, "mlp_alpha")),
    Field("mlp_beta", "mlp_beta_factor", lambda f: _factor(f, LINEAR, "mlp_beta")),
    Fixed("hidden_act", "silu", "hidden_act={value}: MiniMax applies it to the lightning layers' q, k and v as well "
                                "as in its SwiGLU experts, and tfspec's lightning attention applies SiLU"),
    ignored={**hf_mixtral.FIELDS.ignored},
)


def document(s, *, padding: bool, head: bool) -> Document:
    """The spec a MiniMax configuration describes: DeepNet's layers in the wiring form, lightning attention
    or Mixtral's attention as ``layer_types`` says (the most common the stack's, the other a section)."""
    lightning = f"lightning({s.heads}, head_dim={s.head_dim}, block={s.block}, layers={s.layers}, eps={LIGHTNING_EPS})"
    attention = (f"heads={s.heads}, kv_heads={s.kv_heads}, head_dim={s.head_dim}, "
                 f"mask={causal_masks(s.window, padding)}, bias=false")
    base, sections = schedule(s.value("layer_types"))
    operator = f"mixer(h, {lightning})" if base == LINEAR else f"attention(h, {attention})"
    other = f"self_attn = attention(self, {attention})" if base == LINEAR else f"self_attn = mixer({lightning})"
    mixture = (f"d_ff={s.d_ff}, activation=swiglu, bias=false, kind=moe({s.experts}, {s.top}"
               + (f", aux_loss={s.aux_loss}" if s.value("aux_loss") else "") + "), router=renormalize")
    wiring = (f"  h = norm(x)\n"
              f"  x = alpha * h + beta * {operator}\n"
              f"  h = norm(x)\n"
              f"  x = mlp_alpha * h + mlp_beta * feedforward(h, {mixture})")
    lines = "".join(f"  layers {layers} {{ {other} }}\n" for layers, _ in sections)
    document = layouts.wired(s, norm=f"rmsnorm(eps={s.eps})", position=hf_llama.rotary(s), wiring=wiring,
                                     head=head).add_lines("decoder", lines)
    return document


def _parts(model) -> list[dict[str, str]]:
    """Each layer's parts as ``Weights`` names them: its ``mixer`` or ``attention``, its ``feedforward`` and
    the norm before each (``norm``, ``mlp_norm``)."""
    return [{"attention" if parts.get("attends") else "mixer": parts["operator"],
             **{k: parts[k] for k in ("feedforward", "norm", "mlp_norm")}} for parts in _layers(model)]


def _decays(model, prefix: str, state: dict) -> dict:
    """Each lightning layer's decays as Hugging Face's ``MiniMaxLightningAttention`` holds them, from the slopes
    and block the layer computes with."""
    import torch  # here: reading a configuration (tfspec import) never loads it
    out = {}
    for i, parts in enumerate(_layers(model)):
        if parts.get("attends"):
            continue
        layer = model.get_submodule(f"decoder.layers.{i}.{parts['operator']}")
        slope, steps = layer.slope.float()[:, None, None], torch.arange(layer.block) + 1
        distance = slope * (steps[:, None] - steps[None, :])[None, None]
        out.update({f"{prefix}layers.{i}.self_attn.slope_rate": slope,
                    f"{prefix}layers.{i}.self_attn.query_decay": torch.exp(-slope * steps[:, None]),
                    f"{prefix}layers.{i}.self_attn.key_decay": torch.exp(-slope * (layer.block - steps[:, None])),
                    f"{prefix}layers.{i}.self_attn.diagonal_decay":
                        torch.exp(torch.where(distance >= 0, -distance, float("-inf")))})
    return out


EXAMPLES = {
    # MiniMax: lightning attention with Mixtral's attention in layer 1, DeepNet's scaled sums, mixtures; the base
    # model's attention in most layers, sliding, its head_dim its own
    "MiniMaxForCausalLM": dict(model_type="minimax", vocab_size=90, hidden_size=32, intermediate_size=12,
                               num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, block_size=4,
                               num_local_experts=4, num_experts_per_tok=2, full_attn_alpha_factor=1.7,
                               linear_attn_alpha_factor=1.7, mlp_alpha_factor=1.7, full_attn_beta_factor=0.8,
                               linear_attn_beta_factor=0.8, mlp_beta_factor=0.9,
                               layer_types=["linear_attention", "full_attention", "linear_attention",
                                            "linear_attention"]),
    "MiniMaxModel": dict(model_type="minimax", vocab_size=90, hidden_size=32, intermediate_size=8,
                         num_hidden_layers=3, num_attention_heads=2, num_key_value_heads=1, head_dim=12, block_size=8,
                         num_local_experts=3, num_experts_per_tok=2, sliding_window=5,
                         layer_types=["full_attention", "linear_attention", "full_attention"],
                         rope_parameters={"rope_type": "default", "rope_theta": 5e5}),
}

COVERAGE = [covering("minimax", intermediate_size=8, num_hidden_layers=3, num_key_value_heads=1, head_dim=16,
                     block_size=8, num_local_experts=3, num_experts_per_tok=1, router_aux_loss_coef=0.02,
                     output_router_logits=True, rms_norm_eps=1e-6, attention_dropout=0.1, initializer_range=0.05,
                     tie_word_embeddings=True, sliding_window=7, full_attn_alpha_factor=1.7,
                     linear_attn_alpha_factor=1.7, mlp_alpha_factor=1.5, full_attn_beta_factor=0.8,
                     linear_attn_beta_factor=0.8, mlp_beta_factor=0.9,
                     layer_types=["linear_attention", "full_attention", "full_attention"],
                     rope_parameters={"rope_type": "default", "rope_theta": 5e5}),
            *hf_llama.each_scaling(covering("minimax", intermediate_size=8, num_hidden_layers=2, num_key_value_heads=3,
                                            num_local_experts=2, num_experts_per_tok=1, max_position_embeddings=32,
                                            layer_types=["linear_attention", "full_attention"]))]


MINIMAX = Family(
    "MiniMax", ("minimax",), causal_lm("MiniMax"),
    "MiniMax-01: lightning attention (mixer lightning, slopes scaled by the layer's depth) or Mixtral's "
    "attention as layer_types says, a layer schedule; Mixtral's mixtures of SwiGLU experts; DeepNet's layers, "
    "x = α · norm(x) + β · F(norm(x)) in the wiring form",
    priority=650, fields=FIELDS, document=document, computed=_decays,
    rules=Weights({"attention": Projections(),
                          **{f"mixer.{t}": f"self_attn.{t}" for t in ("qkv_proj", "output_gate", "norm", "out_proj")},
                          **hf_mixtral.MIXTURE, "norm": "input_layernorm", "mlp_norm": "post_attention_layernorm"},
                         parts=_parts))
