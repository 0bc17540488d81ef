"""Hugging Face ``JambaForCausalLM`` (AI21's Jamba; and its base model) <-> a compiled spec.

Jamba (2024) is a hybrid of pre-normed RMSNorm layers: every ``attn_layer_period``-th layer (from
``attn_layer_offset``) attends, with grouped-query attention without positions or biases, and the others run Mamba
(``mixer mamba(...)``: Mamba-1's selective scan, with Jamba's RMSNorms of the time step's input, B and C); every
``expert_layer_period``-th feed-forward (from ``expert_layer_offset``) is a mixture of SwiGLU experts, the chosen
ones weighted by their softmax probabilities as they are (not renormalised), the others a SwiGLU. The most common
kind of layer is the stack's; the others sections.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..family import Family, causal_lm
from ...ir import nodes as ir
from .. import hybrid
from . import hf_llama
from ..facts import Facts
from ..fields import Field, Fields, Fixed
from ..mapping import Rule, linear_rules, rule
from ..document import Document
from ..weights import Weights, GatedMLP, Projections, Tensor
from ..writer import causal_masks, schedule
from ..layouts import covering, example


_LLAMA = {e.name: e for e in hf_llama.FIELDS.fields}


def period(flags: list[bool], what: str, f) -> tuple[int, int]:
    """(period, offset) whose layers i % period == offset are exactly the ``flags`` (Jamba's rule); (layers + 1,
    layers) where none is; refused where no period gives them."""
    layers = len(flags)
    if not any(flags):
        return layers + 1, layers
    for step in range(1, layers + 1):
        for offset in range(step):
            if flags == [i % step == offset for i in range(layers)]:
                return step, offset
    raise f.refuse(f"its {what} layers are not every n-th layer from one offset, as Jamba's are")


def _mamba(f):
    options = f.mixer("decoder")
    if not hasattr(options, "dt_rank"):
        raise f.refuse(f"its layers' mixer is {f.layer_mixers('decoder')[0].kind.name}, not Mamba (mixer mamba)")
    if options.eps != f.norm_option("decoder", "eps") or not options.norms:
        raise f.refuse("its Mamba layers do not RMS-norm the time step's input, B and C with the model's eps, as "
                       "Jamba's do (norms=true)")
    if options.inner % f.embedding.dim:
        raise f.refuse(f"its Mamba layers are {options.inner} wide, not a multiple of d_model (mamba_expand)")
    return options


def _attends(f) -> list[bool]:
    return [m is None for m in f.layer_mixers("decoder")]


def _mixture(f):
    options = f.mixture("decoder")
    if f.router("decoder").parts or options.shared:
        raise f.refuse("its mixture is not Jamba's: the top experts by softmax, weighted as they are")
    return options


def _routes(f) -> list[bool]:
    return [Facts.routes(n.spec) for n in f.per_layer_nodes("decoder", ir.FeedForward, "feed-forward")]


def _dense_d_ff(f) -> int | None:
    return next((n.spec.d_ff for n in f.g.of(ir.FeedForward, stack="decoder", in_block=True)
                 if not Facts.routes(n.spec)), None)


def _expert_d_ff(f) -> int | None:
    dense, routed = _dense_d_ff(f), (f.mixture_body("decoder").d_ff if any(_routes(f)) else None)
    if dense is not None and routed is not None and dense != routed:
        raise f.refuse("its experts and its SwiGLUs differ in width: Jamba's share intermediate_size")
    return dense if dense is not None else routed


def _has_experts(c) -> bool:
    return any(n > 1 for n in c.layers_num_experts)


FIELDS = Fields(
    *(_LLAMA[n] for n in ("d_model", "heads", "kv_heads", "layers", "vocab", "eps", "p_attn_dropout", "init_std",
                          "tied")),
    Field("d_ff", "intermediate_size", _expert_d_ff),
    Field("experts", "num_experts", lambda f: _mixture(f).experts if any(_routes(f)) else None,
          read=lambda c: c.num_experts if _has_experts(c) else None),
    Field("top", "num_experts_per_tok", lambda f: _mixture(f).top if any(_routes(f)) else None,
          read=lambda c: c.num_experts_per_tok if _has_experts(c) else None),
    # the load-balancing loss, and whether Hugging Face trains with it (read where some layer has experts)
    Field("aux_loss", "router_aux_loss_coef",
          lambda f: (_mixture(f).aux_loss or None) if any(_routes(f)) else None,
          read=lambda c: c.router_aux_loss_coef if c.output_router_logits and _has_experts(c) else 0.0),
    Field("router_logits", "output_router_logits",
          lambda f: True if any(_routes(f)) and _mixture(f).aux_loss else None,
          read=lambda c: bool(c.output_router_logits and c.router_aux_loss_coef and _has_experts(c)),
          setting=False),
    Field("mamba_inner", "mamba_expand", lambda f: _mamba(f).inner // f.embedding.dim,
          read=lambda c: c.mamba_expand * c.hidden_size),
    Field("mamba_state", "mamba_d_state", lambda f: _mamba(f).state),
    Field("mamba_kernel", "mamba_d_conv", lambda f: _mamba(f).kernel),
    Field("mamba_dt_rank", "mamba_dt_rank", lambda f: _mamba(f).dt_rank or math.ceil(f.embedding.dim / 16)),
    Field("mamba_conv_bias", "mamba_conv_bias", lambda f: _mamba(f).conv_bias, let=False),
    Field("mamba_bias", "mamba_proj_bias", lambda f: _mamba(f).bias, let=False),
    Field("attention_layers", "attn_layer_period", lambda f: period(_attends(f), "attention", f)[0],
          read=lambda c: [t == "attention" for t in c.layers_block_type], setting=False),
    Field("attention_offset", "attn_layer_offset", lambda f: period(_attends(f), "attention", f)[1],
          read=lambda c: [t == "attention" for t in c.layers_block_type], setting=False),
    Field("expert_layers", "expert_layer_period", lambda f: period(_routes(f), "mixture", f)[0],
          read=lambda c: [n > 1 for n in c.layers_num_experts], setting=False),
    Field("expert_offset", "expert_layer_offset", lambda f: period(_routes(f), "mixture", f)[1],
          read=lambda c: [n > 1 for n in c.layers_num_experts], setting=False),
    Fixed("hidden_act", "silu", "hidden_act={value}: Jamba applies it in its Mamba layers' convolution as well as "
                                "in its SwiGLUs, and tfspec's convolution applies SiLU"),
    ignored={**hf_llama.FIELDS.ignored,
             "use_mamba_kernels": "whether CUDA kernels run the Mamba layers; the result is the same",
             "use_mambapy": "which torch implementation of the scan runs; the result is the same",
             "use_associative_scan": "which torch implementation of the scan runs; the result is the same"},
)


def document(s, *, padding: bool, head: bool) -> Document:
    """The spec a Jamba configuration describes: Mamba or attention, and a mixture or a SwiGLU, in each
    layer as its periods say (the most common pair the stack's, the others sections)."""
    norm = f"rmsnorm(eps={s.eps})"
    mamba = (f"mamba({s.mamba_inner}, state={s.mamba_state}, kernel={s.mamba_kernel}, dt_rank={s.mamba_dt_rank}, "
             f"conv_bias={s.mamba_conv_bias}, bias={s.mamba_bias}, norms=true, eps={s.eps})")
    attention = f"heads={s.heads}, kv_heads={s.kv_heads}, mask={causal_masks(padding=padding)}, bias=false"
    mixture = (f"kind=moe({s.experts}, {s.top}" + (f", aux_loss={s.aux_loss}" if s.value("aux_loss") else "") + ")")
    layers = list(zip(s.value("attention_layers"), s.value("expert_layers")))
    (attends, routes), sections = schedule(layers)
    own = "attention self " + attention.replace(", ", " ") if attends else f"mixer {mamba}"
    other = f"self_attn = mixer({mamba})" if attends else f"mamba = attention(self, {attention})"

    def section(layer: tuple[bool, bool]) -> str:
        return "; ".join(([other] if layer[0] != attends else []) +
                         ([f"ffn {mixture if layer[1] else 'kind=dense'}"] if layer[1] != routes else []))

    lines = "".join(f"  layers {selected} {{ {section(layer)} }}\n" for selected, layer in sections)
    document = hybrid.document(s, norm=norm, position="none", own=own, head=head,
                               feedforward=f"d_ff={s.d_ff} activation=swiglu bias=false"
                                           + (f" {mixture}" if routes else ""))
    return document.add_lines("decoder", lines)


@dataclass(frozen=True)
class MambaMixer:
    """A Mamba mixer's tensors under the checkpoint layer's ``module`` (Hugging Face's ``MambaMixer`` or Jamba's),
    which it names as tfspec does; Jamba's RMSNorms of the time step's input, B and C where tfspec's has them."""

    module: str = "mamba"

    def __call__(self, model, ours: str, theirs: str, state: dict, ours_state: dict) -> list[Rule]:
        theirs = f"{theirs}.{self.module}"
        rules = [r for part in ("in_proj", "conv1d", "x_proj", "dt_proj", "out_proj")
                 for r in linear_rules(f"{ours}.{part}", f"{theirs}.{part}", state, ours_state)]
        norms = [f"{n}_layernorm.weight" for n in ("dt", "b", "c") if f"{ours}.{n}_layernorm.weight" in ours_state
                 or f"{theirs}.{n}_layernorm.weight" in state]
        return rules + [rule(f"{ours}.{t}", f"{theirs}.{t}") for t in ("A_log", "D", *norms)]


EXAMPLES = {
    # Jamba: Mamba with attention every 2nd layer from 1, mixtures every 2nd from 0; the base model's attention in
    # layer 2 alone, its feed-forwards SwiGLUs, Mamba's projections biased
    "JambaForCausalLM": example("jamba", intermediate_size=12, num_hidden_layers=4, attn_layer_period=2,
                                attn_layer_offset=1, expert_layer_period=2, expert_layer_offset=0, num_experts=4,
                                num_experts_per_tok=2, mamba_d_state=4, mamba_d_conv=3, mamba_expand=2,
                                mamba_dt_rank=3),
    "JambaModel": dict(model_type="jamba", vocab_size=90, hidden_size=32, intermediate_size=24, num_hidden_layers=3,
                       num_attention_heads=2, num_key_value_heads=1, attn_layer_period=3, attn_layer_offset=2,
                       expert_layer_period=4, expert_layer_offset=3, mamba_d_state=6, mamba_proj_bias=True,
                       mamba_conv_bias=False),
}

COVERAGE = [covering("jamba", intermediate_size=12, num_hidden_layers=3, num_key_value_heads=1, attn_layer_period=3,
                     attn_layer_offset=0, expert_layer_period=3, expert_layer_offset=1, num_experts=3,
                     num_experts_per_tok=1, router_aux_loss_coef=0.02, output_router_logits=True, rms_norm_eps=1e-5,
                     attention_dropout=0.1, initializer_range=0.05, tie_word_embeddings=True, mamba_d_state=6,
                     mamba_d_conv=3, mamba_expand=3, mamba_dt_rank=4, mamba_conv_bias=False, mamba_proj_bias=True)]


JAMBA = Family(
    "Jamba", ("jamba",), causal_lm("Jamba"),
    "Jamba: pre-normed RMSNorm layers running Mamba (mixer mamba, with its RMSNorms of the time step, B and C) "
    "or, every attn_layer_period-th from attn_layer_offset, attention without positions; every "
    "expert_layer_period-th feed-forward a mixture of SwiGLU experts (not renormalised), the others SwiGLUs",
    priority=660, fields=FIELDS, document=document,
    # a mixture's router and stacked experts, or a SwiGLU
    rules=Weights({
        "attention": Projections(), "mixer": MambaMixer(), "feedforward": GatedMLP("feed_forward"),
        "feedforward.router": "feed_forward.router",
        "feedforward.experts.up": Tensor("feed_forward.experts.gate_up_proj"),
        "feedforward.experts.down": Tensor("feed_forward.experts.down_proj"),
        "operator_norm": "input_layernorm", "feedforward_norm": "pre_ff_layernorm"},
        top={"embeddings.tokens.tokens": "embed_tokens", "decoder.final_norm": "final_layernorm"},
        parts=hybrid.parts("Jamba")))
