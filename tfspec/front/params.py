"""What a spec's statements accept, for the resolver (``resolve``): each statement's and call's parameters, how each
value is read (converters, which report a wrong value at its span), the settings of each kind of block and their
built-in defaults, and the small helpers the resolver's parts share."""

from __future__ import annotations

from dataclasses import dataclass
import types
import typing
from typing import Any, Callable, Literal, Protocol, Union

from ..errors import Diagnostic, Span, SpecError, did_you_mean, one_of
from ..registry import (ACTIVATIONS, ATTENTION_KINDS, ATTENTION_STEPS, FEEDFORWARD_KINDS, INITS, INPUTS, MASKS, MIXERS,
                        NORMS, POOLS, POSITIONS, ROUTER_PARTS, Registry)
from . import schema as S
from .syntax import BinOp, Call, Expr, Name, Number

class Resolving(Protocol):
    """What reading a value asks of the resolver (``resolve._Resolver``): a number's value, and arguments bound to
    their parameters and validated."""

    def number(self, e: Expr) -> Any: ...

    def bind(self, args, params: list, what: str, span: Span, keep_defaults: bool = True) -> tuple[dict, dict]: ...

    def validated(self, model, values: dict, spans: dict, span: Span, what: str, extra: dict | None = None): ...


REQUIRED = object()


FAILED = object()  # a value whose error is already reported: users of it stay quiet


Converter = Callable[[Expr, "Resolving"], Any]


@dataclass(frozen=True)
class Param:
    """One argument a statement or call accepts."""

    name: str
    convert: Converter
    default: Any = REQUIRED
    positional: bool = False


def as_int(e: Expr, r: "Resolving") -> int:
    value = r.number(e)
    if isinstance(value, float):
        if not value.is_integer():
            raise spec_error("type", f"expected a whole number, got {value:g}", e.span)
        value = int(value)
    return value


def as_float(e: Expr, r: "Resolving") -> float:
    return float(r.number(e))


def as_bool(e: Expr, r: "Resolving") -> bool:
    if isinstance(e, Name) and e.id in ("true", "false"):
        return e.id == "true"
    got = f"'{e.id}'" if isinstance(e, Name) else what_it_is(e)
    raise spec_error("type", f"expected true or false, got {got}", e.span)


as_bool.words = ("true", "false")


def word(*options: str) -> Converter:
    def convert(e: Expr, r: "Resolving") -> str:
        if isinstance(e, Name) and e.id in options:
            return e.id
        got = f" '{e.id}'" if isinstance(e, Name) else ""
        hint = (did_you_mean(e.id, options) if isinstance(e, Name) else None) or one_of(options)
        raise spec_error("value", f"expected {' or '.join(options)}, got{got or ' ' + what_it_is(e)}", e.span, hint)
    convert.words = options  # what an editor completes here
    return convert


def as_ref(e: Expr, r: "Resolving") -> str:
    if isinstance(e, Name):
        return e.id
    raise spec_error("type", f"expected a name, got {what_it_is(e)}", e.span)


def choice(registry: Registry) -> Converter:
    """``name`` or ``name(options...)`` from a registry -> ``Choice`` with every option filled in."""

    def convert(e: Expr, r: "Resolving") -> S.Choice:
        if isinstance(e, Name):
            name, args, name_span = e.id, (), e.span
        elif isinstance(e, Call):
            name, args, name_span = e.func, e.args, e.func_span
        else:
            raise spec_error("type", f"expected a {registry.family}, got {what_it_is(e)}", e.span, one_of(registry))
        if name not in registry:
            raise spec_error("unknown-keyword", f"unknown {registry.family} '{name}'", name_span,
                             did_you_mean(name, registry) or one_of(registry))
        variant = registry[name]
        params = [Param(f, converter_for(info.annotation), REQUIRED if info.is_required() else info.default,
                        f in variant.positional)
                  for f, info in variant.Options.model_fields.items()]
        values, spans = r.bind(args, params, f"{name}()", e.span, keep_defaults=False)
        options = r.validated(variant.Options, values, spans, e.span, name)
        return S.Choice(name=name, options=options.model_dump(), span=e.span)

    convert.registry = registry  # what an editor completes here
    return convert


def converter_for(annotation) -> Converter:
    """How a spec writes an option of this type: a number, true/false, one word of an enumeration (a
    ``Literal`` of strings), or any of these or ``none`` (``int | None``)."""
    if annotation in SCALARS:
        return SCALARS[annotation]
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is Literal and all(isinstance(a, str) for a in args):
        return word(*args)
    if typing.get_origin(annotation) in (Union, types.UnionType) and type(None) in args and len(args) == 2:
        return optional(converter_for(next(a for a in args if a is not type(None))))
    # a variant's mistake, found by the registry contract test before any user meets it
    raise TypeError(f"an option of type {annotation} cannot be written in a spec (int, float, bool, a Literal of "
                    "words, or one of these | None)")


def optional(convert: Converter) -> Converter:
    """``none`` -> None; anything else as ``convert`` reads it."""
    def read(e: Expr, r: "Resolving"):
        return None if isinstance(e, Name) and e.id == "none" else convert(e, r)
    read.words = (*getattr(convert, "words", ()), "none")
    return read


SCALARS: dict[type, Converter] = {int: as_int, float: as_float, bool: as_bool}


def terms_of(e: Expr, what: str) -> list[Expr]:
    """The terms of ``a + b + c`` (choices combined with ``+``: masks, attention steps)."""
    terms: list[Expr] = []

    def flatten(x: Expr) -> None:
        if isinstance(x, BinOp) and x.op == "+":
            flatten(x.left)
            flatten(x.right)
        elif isinstance(x, BinOp):
            raise spec_error("type", f"{what} combine with '+', not '{x.op}'", x.span)
        else:
            terms.append(x)

    flatten(e)
    return terms


def choices_of(e: Expr, r: "Resolving", registry: Registry, what: str) -> tuple[S.Choice, ...]:
    """``a + b(...) + ...``: choices of ``registry`` combined with ``+``, each at most once (a ``what``)."""
    choices = [choice(registry)(t, r) for t in terms_of(e, f"{what}s")]
    seen: set[str] = set()
    for c in choices:
        if c.name in seen:
            raise spec_error("duplicate", f"{what} '{c.name}' is given twice", c.span)
        seen.add(c.name)
    return tuple(choices)


def as_steps(e: Expr, r: "Resolving") -> tuple[S.Choice, ...]:
    """``value_residual(0.5) + ...``: attention steps, each at most once; ``none``: no step (a layer schedule's
    section leaving out the stack's)."""
    if isinstance(e, Name) and e.id == "none":
        return ()
    return choices_of(e, r, ATTENTION_STEPS, "step")


as_steps.registry = ATTENTION_STEPS


def as_router(e: Expr, r: "Resolving") -> tuple[S.Choice, ...]:
    """``sigmoid + correction + renormalize``: a mixture's router parts, each at most once, one of them scoring at
    most."""
    parts = choices_of(e, r, ROUTER_PARTS, "router part")
    scoring = [p for p in parts if ROUTER_PARTS[p.name].scores]
    if len(scoring) > 1:
        raise spec_error("value", f"a router scores one way: {' and '.join(p.name for p in scoring)} both score",
                         scoring[1].span, "keep one of softmax, sigmoid and sparsemixer")
    return parts


as_router.registry = ROUTER_PARTS


def as_mask(e: Expr, r: "Resolving") -> tuple[S.Choice, ...]:
    masks = choices_of(e, r, MASKS, "mask")
    nothing = [m for m in masks if MASKS[m.name].absent]  # `none`, which means no mask: nothing to combine
    if nothing and len(masks) > 1:
        raise spec_error("mask", f"mask '{nothing[0].name}' cannot be combined with other masks", e.span)
    return () if nothing else tuple(masks)


as_mask.registry = MASKS


def what_it_is(e: Expr) -> str:
    return {Number: "a number", Name: "a name", Call: "a call", BinOp: "an expression"}.get(type(e), "an expression")


def spec_error(code: str, message: str, span: Span | None, hint: str | None = None) -> SpecError:
    return SpecError([Diagnostic(code, message, span, hint)])


BUILTIN_DEFAULTS: dict[str, Any] = {
    "residual": "post",
    "norm": S.Choice(name="layernorm", options={"eps": 1e-5, "bias": True}),
    "dropout": 0.0,
    "attn_dropout": 0.0,
    "act_dropout": 0.0,
    "activation": S.Choice(name="relu"),
    "bias": True,
    "position": S.Choice(name="none"),  # the scheme applied inside self-attention (rotary, ALiBi)
}


# Settings shared by `defaults {}` and stack bodies: each takes one value.
BLOCK_SETTINGS: dict[str, Converter] = {
    "residual": word("post", "pre", "none"),
    "norm": choice(NORMS),
    "dropout": as_float,
    "attn_dropout": as_float,
    "act_dropout": as_float,
    "activation": choice(ACTIVATIONS),
    "bias": as_bool,
    "position": choice(POSITIONS),
}


DEFAULTS_SETTINGS: dict[str, Converter] = {**BLOCK_SETTINGS, "init": choice(INITS)}  # init: whole model only


STACK_SETTINGS: dict[str, Converter] = {**BLOCK_SETTINGS, "embedding": as_ref, "final": choice(NORMS),
                                        "final_dropout": as_float, "weight_sets": as_int}


EMBEDDING_SETTINGS: dict[str, Converter] = {
    "vocab": as_int, "dim": as_int, "scale": as_float, "position": choice(POSITIONS),
    "segments": as_int, "norm": choice(NORMS), "dropout": as_float, "tokens": as_ref, "project": as_int,
    "input": choice(INPUTS),
    "per_layer": as_int, "per_layer_vocab": as_int, "per_layer_norm": choice(NORMS),
}


TOKEN_SETTINGS = ("vocab", "segments", "tokens", "scale", "per_layer", "per_layer_vocab",
                  "per_layer_norm")  # a token embedding's own


SUBLAYERS = ("attention", "feedforward", "mixer")


SECTIONS = ("layers",)  # a stack body's statements with a body of their own


WIRING_FUNCTIONS = ("attention", "feedforward", "mixer", "norm", "dropout")


def sublayer_params(kind: str, d: dict, sequential: bool) -> list[Param]:
    """The arguments of an ``attention``, ``feedforward`` or ``mixer`` statement, their defaults from ``d``."""
    if kind == "attention":
        params = [
            Param("reads", word("self", "cross"), "self", positional=True),
            Param("heads", as_int),
            Param("kind", choice(ATTENTION_KINDS), S.Choice(name="dot")),
            Param("bias", as_bool, d["bias"]),
            Param("out_bias", as_bool, None),  # None: as bias
            Param("key_bias", as_bool, None),  # None: as bias
            Param("mask", as_mask, ()),
            Param("memory", word("encoder"), None),
            Param("attn_dropout", as_float, d["attn_dropout"]),
            Param("kv_heads", as_int, None),
            Param("head_dim", as_int, None),
            Param("position", choice(POSITIONS), None),  # None: the stack's, for self-attention
            Param("qk_norm", choice(NORMS), S.Choice(name="none")),
            Param("scale", as_float, None),
            Param("steps", as_steps, ()),
            Param("kv_from", as_int, None),
        ]
    elif kind == "mixer":
        params = [Param("kind", choice(MIXERS), positional=True)]
    else:
        params = [
            Param("d_ff", as_int),
            Param("kind", choice(FEEDFORWARD_KINDS), S.Choice(name="dense")),
            Param("router", as_router, ()),
            Param("activation", choice(ACTIVATIONS), d["activation"]),
            Param("bias", as_bool, d["bias"]),
            Param("act_dropout", as_float, d["act_dropout"]),
        ]
    if sequential:  # per-sublayer overrides of the residual wiring
        params += [Param("residual", BLOCK_SETTINGS["residual"], d["residual"]),
                   Param("norm", choice(NORMS), d["norm"]),
                   Param("dropout", as_float, d["dropout"])]
    return params


HEAD_PROJECTIONS = ("tied", "linear")


def head_params(projection: str) -> list[Param]:
    """The named arguments of ``head tied(EMBEDDING) ...`` or ``head linear(N) ...``."""
    return [Param("bias", as_bool, projection == "linear"), Param("transform", choice(ACTIVATIONS), None),
            Param("norm", choice(NORMS), None), Param("scale", as_float, 1.0), Param("softcap", as_float, None),
            Param("pool", choice(POOLS), None), Param("transform_bias", as_bool, True)]


POOLER_PARAMS = [Param("activation", choice(ACTIVATIONS), S.Choice(name="tanh"), positional=True)]

# ``mtp D weight=0.3 layer=N norm=...``: ``layer`` defaults to the decoder's last, ``norm`` to its final norm
MTP_PARAMS = [Param("depth", as_int, positional=True), Param("weight", as_float, 0.3), Param("layer", as_int, None),
              Param("norm", choice(NORMS), None)]


class Namer:
    """Deterministic unique module names: self_attn, self_attn_1, ..."""

    def __init__(self):
        self.counts: dict[str, int] = {}
        self.taken: set[str] = set()

    def take(self, base: str) -> str:
        n = self.counts.get(base, 0)
        while (name := base if n == 0 else f"{base}_{n}") in self.taken:
            n += 1
        self.counts[base] = n + 1
        self.taken.add(name)
        return name

    def keep(self, name: str) -> str:
        """Take ``name`` itself (a sublayer a layer kind leaves as it was keeps its name)."""
        self.taken.add(name)
        return name


def names_in(e: Expr) -> set[str]:
    if isinstance(e, Name):
        return {e.id}
    if isinstance(e, BinOp):
        return names_in(e.left) | names_in(e.right)
    if isinstance(e, Call):
        return set().union(*(names_in(a.value) for a in e.args)) if e.args else set()
    return set()


def applications(wiring) -> list[S.Apply]:
    """Every call of a wiring-form block, in the order its names were given."""
    found: list[S.Apply] = []

    def visit(t) -> None:
        if isinstance(t, S.Apply):
            visit(t.input)
            found.append(t)
        elif isinstance(t, S.Sum):
            for term in t.terms:
                visit(term)
        elif isinstance(t, S.Scale):
            visit(t.input)

    for assign in wiring:
        visit(assign.value)
    return found


def module_name(body) -> str:
    if isinstance(body, S.Attention):
        return f"{body.reads}_attn"
    if isinstance(body, S.FeedForward):
        return "ffn"
    if isinstance(body, S.Mixer):
        return MIXERS[body.kind.name].module_name
    if isinstance(body, S.NormOp):
        return NORMS[body.norm.name].module_name
    return body.op
