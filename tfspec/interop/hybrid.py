"""What the hybrid families share (layers mixing by a token mixer or by attention, as ``layer_types`` says): each
layer's sublayers by part, read from the graph, the spec of a pre-normed hybrid decoder, and the Mamba-2 layer that
Mamba-2, Granite 4.0-H, Bamba and Nemotron-H store alike under names of their own in their configurations."""

from __future__ import annotations

import sys

from dataclasses import dataclass
from typing import Callable

from ..ir import nodes as ir
from ..ir.queries import layer_template, residual_placement
from . import layouts
from .document import Block, Document, Statement
from .family import Family, causal_lm
from .fields import Field, Fixed
from .mapping import InteropError, Rule, linear_rules, rule
from .weights import Weights


def layer_parts(model, layer: int, family: str) -> dict[str, str]:
    """Layer ``layer``'s ``operator`` (its mixer or attention) and ``feedforward``, the norm before each
    (``operator_norm``, ``feedforward_norm``), and ``attends``: whether the operator is attention; refused where a
    sublayer is not pre-normed, as ``family``'s are."""
    g = model.spec.graph()
    found: dict[str, str] = {}
    for node in layer_template(g, "decoder", g.stacks["decoder"].kind_of(layer)):
        if isinstance(node, (ir.Attention, ir.Mixer, ir.FeedForward)):
            part = "feedforward" if isinstance(node, ir.FeedForward) else "operator"
            norm = g.node(node.inputs[0])
            if residual_placement(g, node).placement != "pre-norm" or not isinstance(norm, ir.Norm):
                raise InteropError(f"spec '{model.spec.name}': layer {layer}'s {node.name} is not pre-normed, as "
                                   f"{family}'s sublayers are")
            found[part], found[f"{part}_norm"] = node.name, norm.module.name
            if isinstance(node, ir.Attention):
                found["attends"] = node.name
    return found


def parts(family: str) -> Callable:
    """The ``Weights.parts`` of a pre-normed hybrid decoder (``layer_parts``): each layer's ``attention`` or
    ``mixer``, its ``operator_norm``, its ``feedforward`` and ``feedforward_norm``."""
    def each(model) -> list[dict[str, str]]:
        found = [layer_parts(model, i, family) for i in range(len(model.decoder.layers))]
        return [{"attention" if "attends" in p else "mixer": p["operator"],
                 **{k: p[k] for k in ("operator_norm", "feedforward", "feedforward_norm") if k in p}} for p in found]

    return each


def document(s, *, norm: str, position: str, own: str, feedforward: str, head: bool,
             attn_dropout: bool = True) -> Document:
    """A pre-normed hybrid decoder's spec from the settings ``s`` (``d_model``, ``layers``, ``vocab``,
    ``init_std``, ``tied``; ``p_attn_dropout`` where ``attn_dropout``): ``norm`` everywhere, the stack's
    ``position``, its ``own`` mixing sublayer (a ``mixer`` or ``attention`` statement as the language writes it) and
    ``feedforward`` arguments; the causal LM's head where ``head``. A family adds the ``layers`` sections of its
    other kinds of layer."""
    defaults = [Statement("residual", "pre"), Statement("norm", norm),
                *([Statement("attn_dropout", s.p_attn_dropout)] if attn_dropout else []),
                Statement("init", f"normal(std={s.init_std})")]
    return Document.of(
        Block("defaults", *defaults),
        Block("embedding tokens", Statement("vocab", s.vocab), Statement("dim", s.d_model),
              Statement("position", "none")),
        Block(f"decoder x {s.layers}", Statement("position", position), own, Statement("feedforward", feedforward),
              Statement("final", norm)),
        tail=(layouts.causal_lm_head(s),) if head else ())


# fields of the models whose layers are one normed mixer alone (Mamba's, Mamba-2's) that change no computation
MIXERS_ALONE_IGNORED = {
    "residual_in_fp32": "keeps the residual stream in float32 under half precision (a float32 model's is float32 "
                        "anyway); tfspec's stream has the model's dtype",
    "rescale_prenorm_residual": "scales a new model's out_proj draw; a checkpoint holds out_proj",
}


def mixers_alone(s, mixer: str, *, head: bool) -> Document:
    """The spec of a model whose layers are one RMS-normed ``mixer`` call alone (Mamba's, Mamba-2's), from the
    settings ``s`` (``d_model``, ``layers``, ``vocab``, ``init_std``, ``eps``, ``tied``)."""
    norm = f"rmsnorm(eps={s.eps})"
    return Document.of(
        Block("defaults", Statement("residual", "pre"), Statement("norm", norm),
              Statement("init", f"normal(std={s.init_std})")),
        Block("embedding tokens", Statement("vocab", s.vocab), Statement("dim", s.d_model),
              Statement("position", "none")),
        Block(f"decoder x {s.layers}", Statement("mixer", mixer), Statement("final", norm)),
        tail=(layouts.causal_lm_head(s),) if head else ())


def only_mixers(f, family: str) -> None:
    """Refused where a layer attends or has a feed-forward: ``family``'s layers are one mixer each."""
    f.kind("decoder-only")
    if any(m is None for m in f.layer_mixers("decoder")):
        raise f.refuse(f"some of its layers attend: {family}'s layers are one {family} mixer each")
    if f.g.of(ir.FeedForward, stack="decoder", in_block=True):
        raise f.refuse(f"its layers have feed-forwards: {family}'s layers are one {family} mixer each")


def mixers_alone_family(name: str, model_type: str, conventions: str, priority: int, fields, document, hf_config,
                        mixer) -> Family:
    """The family of a model whose layers are one normed mixer alone (Mamba's, Mamba-2's), declared by the module
    that calls this: its causal LM and base model (``<Name>ForCausalLM``, ``<Name>Model``) under ``backbone.``,
    each layer's ``mixer`` and its ``norm``."""
    cls = name.replace("-", "")  # Mamba-2's classes: Mamba2ForCausalLM, Mamba2Model
    return Family(name, (model_type,), causal_lm(cls), conventions, priority=priority, fields=fields, document=document,
                  hf_config=hf_config, prefix="backbone.", module=sys._getframe(1).f_globals["__name__"],
                  rules=Weights({"mixer": mixer, "operator_norm": "norm"},
                                top={"embeddings.tokens.tokens": "embeddings", "decoder.final_norm": "norm_f"},
                                parts=parts(name)))


def mamba2(f):
    """The options of the decoder's Mamba-2 layers (refused where its mixers are another kind, or where their
    gated norm's eps is not the model's, which one configuration field holds for both)."""
    options = f.mixer("decoder")
    if not (hasattr(options, "state") and hasattr(options, "head_dim")):  # (Mamba-1's has no heads)
        raise f.refuse(f"its layers' mixer is {f.layer_mixers('decoder')[0].kind.name}, not Mamba-2 "
                       "(mixer mamba2(...))")
    eps = f.norm_option("decoder", "eps")
    if eps is not None and options.eps != eps:
        raise f.refuse(f"its Mamba-2 layers' gated norm has eps={options.eps}, its norms eps={eps}: one "
                       "configuration field holds both")
    return options


def _expand(f, d_model: int) -> int:
    width = mamba2(f).heads * mamba2(f).head_dim
    if width % d_model:
        raise f.refuse(f"its Mamba-2 layers are {width} wide (heads × head_dim), not a multiple of d_model {d_model}, "
                       "which the configuration's expand multiplies")
    return width // d_model


def mamba2_fields(heads: str, head_dim: str, state: str, groups: str, kernel: str, chunk: str, conv_bias: str,
                  bias: str, expand: str | None) -> list:
    """The configuration fields of a family's Mamba-2 layers, by the names its configuration gives them (Granite's
    ``mamba_n_heads``, Mamba-2's ``num_heads``, ...): the spec's ``mamba_*`` settings. ``expand`` (the layer's
    width over d_model; None: the family states the width itself) is what heads × head_dim make it; SiLU is the
    convolution's activation; the time step is not clamped (``time_step_limit`` (0, inf), which the recurrent step
    Hugging Face decodes with ignores)."""
    return [
        Field("mamba_heads", heads, lambda f: mamba2(f).heads),
        Field("mamba_head_dim", head_dim, lambda f: mamba2(f).head_dim),
        Field("mamba_state", state, lambda f: mamba2(f).state),
        Field("mamba_groups", groups, lambda f: mamba2(f).groups),
        Field("mamba_kernel", kernel, lambda f: mamba2(f).kernel),
        Field("mamba_chunk", chunk, lambda f: mamba2(f).chunk),
        Field("mamba_conv_bias", conv_bias, lambda f: mamba2(f).conv_bias, let=False),
        Field("mamba_bias", bias, lambda f: mamba2(f).bias, let=False),
        *([Field("mamba_expand", expand, lambda f: _expand(f, f.embedding.dim), setting=False)] if expand else []),
        Fixed("time_step_limit", (0.0, float("inf")),
              "time_step_limit={value}: Hugging Face clamps the time step to it in a prompt and not while decoding; "
              "tfspec's Mamba-2 does neither", read=lambda c: tuple(c.time_step_limit or (0.0, float("inf")))),
    ]


MAMBA2_IGNORED = {
    "time_step_min": "the least time step a new model's dt_bias is drawn for; a checkpoint holds dt_bias",
    "time_step_max": "the greatest time step a new model's dt_bias is drawn for; a checkpoint holds dt_bias",
    "time_step_floor": "the floor of a new model's drawn time steps; a checkpoint holds dt_bias",
}


def mamba2_layer(s, eps: str, more: str = "") -> str:
    """The ``mamba2(...)`` call of a configuration's settings ``s`` (``mamba_*``), its gated norm's ``eps``;
    ``more``: options after those (Falcon-H1's norm and scales)."""
    return (f"mamba2({s.mamba_heads}, head_dim={s.mamba_head_dim}, state={s.mamba_state}, groups={s.mamba_groups}, "
            f"kernel={s.mamba_kernel}, chunk={s.mamba_chunk}, conv_bias={s.mamba_conv_bias}, bias={s.mamba_bias}, "
            f"eps={eps}{more})")


@dataclass(frozen=True)
class Mamba2Mixer:
    """A Mamba-2 layer's tensors under the checkpoint layer's ``module``, which every family names as tfspec does
    (its norm's weight where it has a norm: Falcon-H1's may not)."""

    module: str = "mamba"

    def __call__(self, model, ours: str, theirs: str, state: dict, ours_state: dict) -> list[Rule]:
        theirs = f"{theirs}.{self.module}"
        rules = linear_rules(f"{ours}.in_proj", f"{theirs}.in_proj", state, ours_state)
        rules += linear_rules(f"{ours}.conv1d", f"{theirs}.conv1d", state, ours_state)
        rules += [rule(f"{ours}.{t}", f"{theirs}.{t}") for t in ("dt_bias", "A_log", "D")]
        if f"{ours}.norm.weight" in ours_state or f"{theirs}.norm.weight" in state:
            rules.append(rule(f"{ours}.norm.weight", f"{theirs}.norm.weight"))
        return rules + linear_rules(f"{ours}.out_proj", f"{theirs}.out_proj", state, ours_state)
