"""Stage 2, resolve: AST -> ``Spec``.

Evaluates ``let`` parameters (with overrides), applies defaults (built-in <
``defaults {}`` < stack settings < sublayer arguments), binds every statement's
arguments against its signature and the registries, and checks names. Every
independent problem is collected; the spec is built only when there are none.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
import types
import typing
from typing import Any, Callable, Literal, Union

from pydantic import BaseModel, ValidationError

from . import schema as S
from ..errors import Collector, Diagnostic, Span, SpecError, did_you_mean, listing, one_of
from .expr import POISON, Poisoned, evaluate
from ..registry import ACTIVATIONS, ATTENTION_KINDS, FEEDFORWARD_KINDS, INITS, MASKS, NORMS, POSITIONS, Registry
from .syntax import (Arg, Assignment, BinOp, Binding, Call, Defaults, EmbeddingDecl, Expr, HeadDecl, Let,
                     ModelDecl, Module, Name, Number, PoolerDecl, Setting, StackDecl, names, parse_module)

REQUIRED = object()
FAILED = object()  # a value whose error is already reported: users of it stay quiet
Converter = Callable[[Expr, "_Resolver"], Any]


@dataclass(frozen=True)
class Param:
    """One argument a statement or call accepts."""

    name: str
    convert: Converter
    default: Any = REQUIRED
    positional: bool = False


# ---------------------------------------------------------------- value converters
def as_int(e: Expr, r: "_Resolver") -> int:
    value = r.number(e)
    if isinstance(value, float):
        if not value.is_integer():
            raise _err("type", f"expected a whole number, got {value:g}", e.span)
        value = int(value)
    return value


def as_float(e: Expr, r: "_Resolver") -> float:
    return float(r.number(e))


def as_bool(e: Expr, r: "_Resolver") -> bool:
    if isinstance(e, Name) and e.id in ("true", "false"):
        return e.id == "true"
    got = f"'{e.id}'" if isinstance(e, Name) else _what(e)
    raise _err("type", f"expected true or false, got {got}", e.span)


as_bool.words = ("true", "false")


def word(*options: str) -> Converter:
    def convert(e: Expr, r: "_Resolver") -> str:
        if isinstance(e, Name) and e.id in options:
            return e.id
        got = f" '{e.id}'" if isinstance(e, Name) else ""
        hint = (did_you_mean(e.id, options) if isinstance(e, Name) else None) or one_of(options)
        raise _err("value", f"expected {' or '.join(options)}, got{got or ' ' + _what(e)}", e.span, hint)
    convert.words = options  # what an editor completes here
    return convert


def as_ref(e: Expr, r: "_Resolver") -> str:
    if isinstance(e, Name):
        return e.id
    raise _err("type", f"expected a name, got {_what(e)}", e.span)


def choice(registry: Registry) -> Converter:
    """``name`` or ``name(options...)`` from a registry -> ``Choice`` with every option filled in."""

    def convert(e: Expr, r: "_Resolver") -> S.Choice:
        if isinstance(e, Name):
            name, args, name_span = e.id, (), e.span
        elif isinstance(e, Call):
            name, args, name_span = e.func, e.args, e.func_span
        else:
            raise _err("type", f"expected a {registry.family}, got {_what(e)}", e.span, one_of(registry))
        if name not in registry:
            raise _err("unknown-keyword", f"unknown {registry.family} '{name}'", name_span,
                       did_you_mean(name, registry) or one_of(registry))
        variant = registry[name]
        params = [Param(f, _converter_for(info.annotation), REQUIRED if info.is_required() else info.default,
                        f in variant.positional)
                  for f, info in variant.Options.model_fields.items()]
        values, spans = r.bind(args, params, f"{name}()", e.span, keep_defaults=False)
        options = r.validated(variant.Options, values, spans, e.span, name)
        return S.Choice(name=name, options=options.model_dump(), span=e.span)

    convert.registry = registry  # what an editor completes here
    return convert


def _converter_for(annotation) -> Converter:
    """How a spec writes an option of this type: a number, true/false, one word of an enumeration (a
    ``Literal`` of strings), or any of these or ``none`` (``int | None``)."""
    if annotation in SCALARS:
        return SCALARS[annotation]
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is Literal and all(isinstance(a, str) for a in args):
        return word(*args)
    if typing.get_origin(annotation) in (Union, types.UnionType) and type(None) in args and len(args) == 2:
        return optional(_converter_for(next(a for a in args if a is not type(None))))
    # a variant's mistake, found by the registry contract test before any user meets it
    raise TypeError(f"an option of type {annotation} cannot be written in a spec (int, float, bool, a Literal of "
                    "words, or one of these | None)")


def optional(convert: Converter) -> Converter:
    """``none`` -> None; anything else as ``convert`` reads it."""
    def read(e: Expr, r: "_Resolver"):
        return None if isinstance(e, Name) and e.id == "none" else convert(e, r)
    read.words = (*getattr(convert, "words", ()), "none")
    return read


SCALARS: dict[type, Converter] = {int: as_int, float: as_float, bool: as_bool}


def as_mask(e: Expr, r: "_Resolver") -> tuple[S.Choice, ...]:
    terms: list[Expr] = []

    def flatten(x: Expr) -> None:
        if isinstance(x, BinOp) and x.op == "+":
            flatten(x.left)
            flatten(x.right)
        elif isinstance(x, BinOp):
            raise _err("type", f"masks combine with '+', not '{x.op}'", x.span)
        else:
            terms.append(x)

    flatten(e)
    masks = [choice(MASKS)(t, r) for t in terms]
    seen: dict[str, S.Choice] = {}
    for m in masks:
        if m.name in seen:
            raise _err("duplicate", f"mask '{m.name}' is given twice", m.span)
        seen[m.name] = m
    nothing = [m for m in masks if MASKS[m.name].absent]  # `none`, which means no mask: nothing to combine
    if nothing and len(masks) > 1:
        raise _err("mask", f"mask '{nothing[0].name}' cannot be combined with other masks", e.span)
    return () if nothing else tuple(masks)


as_mask.registry = MASKS


def _what(e: Expr) -> str:
    return {Number: "a number", Name: "a name", Call: "a call", BinOp: "an expression"}.get(type(e), "an expression")


def _err(code: str, message: str, span: Span | None, hint: str | None = None) -> SpecError:
    return SpecError([Diagnostic(code, message, span, hint)])


# ---------------------------------------------------------------- signatures
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
    "image": as_int, "patch": as_int, "channels": as_int, "class_token": as_bool,
}
IMAGE_SETTINGS = ("image", "patch", "channels", "class_token")  # an image embedding's own
TOKEN_SETTINGS = ("vocab", "segments", "tokens", "scale")  # a token embedding's own
SUBLAYERS = ("attention", "feedforward")
SECTIONS = ("layers",)  # a stack body's statements with a body of their own
WIRING_FUNCTIONS = ("attention", "feedforward", "norm", "dropout")


def sublayer_params(kind: str, d: dict, sequential: bool) -> list[Param]:
    """The arguments of an ``attention`` or ``feedforward`` statement, their defaults from ``d``."""
    if kind == "attention":
        params = [
            Param("reads", word("self", "cross"), "self", positional=True),
            Param("heads", as_int),
            Param("kind", choice(ATTENTION_KINDS), S.Choice(name="dot")),
            Param("bias", as_bool, d["bias"]),
            Param("out_bias", as_bool, None),  # None: as bias
            Param("mask", as_mask, ()),
            Param("memory", word("encoder"), None),
            Param("attn_dropout", as_float, d["attn_dropout"]),
            Param("kv_heads", as_int, None),
            Param("head_dim", as_int, None),
            Param("position", choice(POSITIONS), None),  # None: the stack's, for self-attention
            Param("qk_norm", choice(NORMS), S.Choice(name="none")),
            Param("qk_norm_width", word("head", "full"), "head"),
            Param("scale", as_float, None),
        ]
    else:
        params = [
            Param("d_ff", as_int),
            Param("kind", choice(FEEDFORWARD_KINDS), S.Choice(name="dense")),
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
            Param("pool", word("first", "mean"), None)]


POOLER_PARAMS = [Param("activation", choice(ACTIVATIONS), S.Choice(name="tanh"), positional=True)]


# ---------------------------------------------------------------- the resolver
class _Resolver:
    def __init__(self, module: Module, overrides: dict[str, Any] | None):
        self.module = module
        self.sources = dict(module.sources)
        self.errors = Collector()
        self.env: dict[str, object] = {}
        self.overrides = dict(overrides or {})

    # --- helpers used by converters
    def number(self, e: Expr):
        return evaluate(e, self.env)

    def attempt(self, fn: Callable[[], Any], fallback: Any = None) -> Any:
        """Run one independent check; record its diagnostics and carry on."""
        try:
            return fn()
        except SpecError as exc:
            self.errors.diagnostics.extend(exc.diagnostics)
            self.sources.update(exc.sources)
        except Poisoned:
            pass
        return fallback

    def bind(self, args: tuple[Arg, ...], params: list[Param], what: str, span: Span,
             keep_defaults: bool = True) -> tuple[dict[str, Any], dict[str, Span]]:
        """Match positional and keyword arguments to ``params``, converting each value.

        Raises one SpecError with every problem in the argument list.
        """
        by_name = {p.name: p for p in params}
        positional = [p for p in params if p.positional]
        values: dict[str, Any] = {}
        spans: dict[str, Span] = {}
        problems = Collector()
        failed = False
        for arg in args:
            if arg.name is None:
                taken = [p for p in positional if p.name not in values and p.name not in spans]
                if not taken:
                    hint = ("arguments here are named: " + ", ".join(f"{p.name}=..." for p in params)) if params else None
                    problems.error("unknown-argument", f"{what} takes no{' more' if positional else ''} positional arguments",
                                   arg.span, hint)
                    continue
                param = taken[0]
            else:
                param = by_name.get(arg.name)
                if param is None:
                    problems.error("unknown-argument", f"{what} has no argument '{arg.name}'", arg.name_span,
                                   did_you_mean(arg.name, by_name) or (one_of(by_name) if by_name else f"{what} takes no arguments"))
                    continue
                if param.name in spans:
                    problems.error("duplicate", f"argument '{arg.name}' is given twice", arg.span)
                    continue
            spans[param.name] = arg.value.span
            try:
                values[param.name] = param.convert(arg.value, self)
            except SpecError as exc:
                problems.diagnostics.extend(exc.diagnostics)
            except Poisoned:
                failed = True
        for p in params:
            if p.name not in spans and p.default is REQUIRED:
                problems.error("missing", f"{what} needs '{p.name}'", span,
                               f"add {p.name}=..." if not p.positional else f"give {p.name}")
            elif p.name not in spans and keep_defaults:
                values[p.name] = p.default
        problems.raise_if_any()
        if failed:
            raise Poisoned
        return values, spans

    def validated(self, model: type[BaseModel], values: dict, spans: dict[str, Span], span: Span, what: str,
                  extra: dict | None = None):
        """Build a pydantic model; its range errors become diagnostics at the offending argument."""
        extra = dict(extra or {})
        if issubclass(model, S.Node):
            extra.setdefault("arg_spans", {k: v for k, v in spans.items() if v is not None})
        try:
            return model(**values, **extra)
        except ValidationError as exc:
            problems = Collector()
            for err in exc.errors():
                field = str(err["loc"][0]) if err["loc"] else ""
                value = values.get(field)
                got = f", got {value}" if value is not None and err["type"] != "missing" else ""
                if err["type"] == "value_error" and not field:  # options checked together: one sentence
                    problems.error("value", f"{what}: {_explain(err)}", span)
                    continue
                problems.error("value", f"{what}: {field} {_explain(err)}{got}", spans.get(field, span))
            problems.raise_if_any()

    # --- stages
    def run(self, first_span: Span) -> S.Spec:
        items = self.module.items
        model_name = self._model_name(items)
        self._lets([i for i in items if isinstance(i, Let)])
        defaults = self._defaults([i for i in items if isinstance(i, Defaults)])
        init = defaults.pop("init", None)
        embeddings = self._embeddings([i for i in items if isinstance(i, EmbeddingDecl)], defaults)
        stacks = self._stacks([i for i in items if isinstance(i, StackDecl)], defaults, embeddings, first_span)
        head = self._single(items, HeadDecl, "head", lambda h: self._head(h, embeddings, stacks))
        pooler = self._single(items, PoolerDecl, "pooler", self._pooler)
        self.errors.raise_if_any(self.sources)
        return S.Spec(name=model_name,
                      params={k: v for k, v in self.env.items() if v is not POISON},
                      embeddings=tuple(embeddings.values()),
                      encoder=stacks.get("encoder"), decoder=stacks.get("decoder"),
                      head=head, pooler=pooler, init=init, span=first_span)

    def _model_name(self, items) -> str:
        decls = [i for i in items if isinstance(i, ModelDecl)]
        for extra in decls[1:]:
            self.errors.error("duplicate", "the model is named twice", extra.span, f"first named '{decls[0].name}'")
        if decls:
            return decls[0].name
        stem = Path(self.module.file).stem
        return stem if stem.isidentifier() else "model"

    def _single(self, items, cls, what: str, build: Callable):
        decls = [i for i in items if isinstance(i, cls)]
        for extra in decls[1:]:
            self.errors.error("duplicate", f"a model has one {what}; this is a second", extra.span)
        return self.attempt(lambda: build(decls[0])) if decls else None

    def _lets(self, lets: list[Let]) -> None:
        bindings: list[Binding] = [b for let in lets for b in let.bindings]
        defined = {b.name for b in bindings}
        override_exprs = self._override_exprs(defined)
        seen: dict[str, Binding] = {}
        for b in bindings:
            if b.name in seen:
                self.errors.error("duplicate", f"parameter '{b.name}' is defined twice", b.name_span,
                                  f"first defined at line {seen[b.name].span.line}")
                continue
            seen[b.name] = b
            expr = override_exprs.get(b.name, b.value)
            later = sorted(n for n in _names_in(expr) if n in defined and n not in self.env)
            if b.name in later:
                self.errors.error("unknown-name", f"parameter '{b.name}' is defined in terms of itself", expr.span,
                                  "give it a value built from numbers and earlier parameters")
                self.env[b.name] = POISON
                continue
            if later:
                where = next(x for x in bindings if x.name == later[0])
                self.errors.error("unknown-name", f"parameter '{later[0]}' is used before it is defined",
                                  expr.span, f"'{later[0]}' is defined at line {where.span.line}; move it above")
                self.env[b.name] = POISON
                continue
            self.env[b.name] = POISON
            self.env[b.name] = self.attempt(lambda: evaluate(expr, self.env), POISON)

    def _override_exprs(self, defined: set[str]) -> dict[str, Expr]:
        exprs: dict[str, Expr] = {}
        for name, value in self.overrides.items():
            if name not in defined:
                hint = did_you_mean(name, defined) or (one_of(defined) if defined else "this spec has no `let` parameters")
                self.errors.error("override", f"cannot set '{name}': {self.module.file} has no parameter '{name}'",
                                  None, hint)
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float, str)):
                self.errors.error("override", f"cannot set '{name}' to {value!r}: expected a number or an expression", None)
                continue
            text = f"let {name} = {value}"
            try:
                binding = parse_module(text, f"--set {name}").items
                exprs[name] = binding[0].bindings[0].value  # type: ignore[union-attr]
                if len(binding) != 1 or len(binding[0].bindings) != 1:  # type: ignore[union-attr]
                    raise _err("override", f"'{value}' is not a single value", None)
            except SpecError as exc:
                self.errors.diagnostics.extend(exc.diagnostics)
                self.sources.update(exc.sources or {f"--set {name}": text})
            else:
                self.sources[f"--set {name}"] = text
        return exprs

    def _settings(self, body, table: dict[str, Converter], what: str, extra_words=(),
                  wiring: bool = False) -> dict[str, tuple[Any, Span]]:
        """Statements of the form ``name value``; returns name -> (value, span)."""
        out: dict[str, tuple[Any, Span]] = {}
        for stmt in body:
            if isinstance(stmt, Assignment) and wiring:
                continue
            if isinstance(stmt, Assignment):
                self.errors.error("wiring", f"assignments belong in a stack body, not in {what}", stmt.span)
                continue
            if stmt.name in extra_words:
                continue
            if stmt.body is not None:
                self.errors.error("structure", f"'{stmt.name}' takes no block in {what}", stmt.name_span,
                                  "`layers SELECTION { ... }` sections belong in a stack body" if stmt.name == "layers"
                                  else f"write `{stmt.name} VALUE`")
                continue
            convert = table.get(stmt.name)
            if convert is None:
                self.errors.error("unknown-keyword", f"unknown setting '{stmt.name}' in {what}", stmt.name_span,
                                  did_you_mean(stmt.name, list(table) + list(extra_words)) or one_of(list(table) + list(extra_words)))
                continue
            if stmt.name in out:
                self.errors.error("duplicate", f"'{stmt.name}' is set twice in {what}", stmt.name_span,
                                  f"first set at line {out[stmt.name][1].line}")
                continue
            if len(stmt.args) != 1 or stmt.args[0].name is not None:
                self.errors.error("type", f"'{stmt.name}' takes exactly one value", stmt.span,
                                  f"write `{stmt.name} VALUE`")
                continue
            value = self.attempt(lambda: convert(stmt.args[0].value, self), FAILED)
            out[stmt.name] = (value, stmt.args[0].value.span)  # FAILED: already reported
        return out

    def _defaults(self, decls: list[Defaults]) -> dict[str, Any]:
        for extra in decls[1:]:
            self.errors.error("duplicate", "a model has one defaults block; this is a second", extra.span)
        merged = dict(BUILTIN_DEFAULTS)
        if decls:
            settings = self._settings(decls[0].body, DEFAULTS_SETTINGS, "defaults")
            for name, (value, span) in settings.items():
                if value is not FAILED and self._in_range(name, value, span):
                    merged[name] = value
        return merged

    def _in_range(self, name: str, value: Any, span: Span) -> bool:
        if name.endswith("dropout") and not 0 <= value < 1:
            self.errors.error("value", f"{name} must be in [0, 1), got {value:g}", span)
            return False
        return True

    def _embeddings(self, decls: list[EmbeddingDecl], defaults: dict) -> dict[str, S.Embedding]:
        out: dict[str, S.Embedding] = {}
        for decl in decls:
            if decl.name in out:
                self.errors.error("duplicate", f"embedding '{decl.name}' is defined twice", decl.name_span)
                continue
            settings = self._settings(decl.body, EMBEDDING_SETTINGS, f"embedding '{decl.name}'")
            values = {k: v for k, (v, _) in settings.items()}
            spans = {k: s for k, (_, s) in settings.items()}
            if any(v is FAILED for v in values.values()):
                continue
            if "tokens" in values and not self._shared_tokens(decl, values, spans, out):
                continue
            if any(k in values for k in IMAGE_SETTINGS) and not self._image(decl, values, spans):
                continue
            missing = [k for k in (("dim",) if "image" in values else ("vocab", "dim")) if k not in values]
            for k in missing:
                self.errors.error("missing", f"embedding '{decl.name}' needs '{k}'", decl.name_span, f"add `{k} N` to its body")
            if missing:
                continue
            values.setdefault("position", S.Choice(name="none"))
            values.setdefault("norm", S.Choice(name="none"))
            values.setdefault("dropout", defaults["dropout"])
            emb = self.attempt(lambda: self.validated(S.Embedding, values, spans, decl.span, f"embedding '{decl.name}'",
                                                      {"name": decl.name, "span": decl.name_span}))
            if emb is not None:
                out[decl.name] = emb
        return out

    def _image(self, decl: EmbeddingDecl, values: dict, spans: dict) -> bool:
        """An image embedding's settings: ``image`` and ``patch`` given, the image a whole number of patches, and
        none of a token table's settings. False: refused (reported)."""
        ok = True
        if "image" not in values:
            given = next(k for k in IMAGE_SETTINGS if k in values)
            self.errors.error("missing", f"`{given}` belongs to an image embedding, which needs 'image'", spans[given],
                              "add `image N` (the side of its square pictures, in pixels), or drop it")
            return False
        for key in TOKEN_SETTINGS:
            if key in values:
                self.errors.error("structure", f"embedding '{decl.name}' reads images, which have no token table: "
                                  f"`{key}` does not apply", spans[key], f"drop `{key}`, or `image` for tokens")
                ok = False
        if "patch" not in values:
            self.errors.error("missing", f"embedding '{decl.name}' needs 'patch'", decl.name_span,
                              "add `patch N`: the side of the square patches its pictures are cut into (ViT: 16)")
            return False
        if ok and values["image"] % values["patch"]:
            image, patch = values["image"], values["patch"]
            sides = [p for p in range(1, image + 1) if image % p == 0]
            self.errors.error("shape", f"image {image} is not a whole number of {patch}-pixel patches", spans["patch"],
                              f"try patch {min(sides, key=lambda p: (abs(p - patch), p))}")
            ok = False
        return ok

    def _shared_tokens(self, decl: EmbeddingDecl, values: dict, spans: dict, earlier: dict) -> bool:
        """``tokens OTHER``: the token table of an embedding defined above (BART's two embeddings read one); its
        vocab and dim, which this one need not repeat and may not change. False: refused (reported)."""
        source = values["tokens"]
        if source not in earlier:
            defined = [d.name for d in self.module.items if isinstance(d, EmbeddingDecl)]
            where = "defined below this one; define it first" if source in defined else (
                did_you_mean(source, list(earlier)) or one_of(list(earlier)) if earlier else "define it first")
            self.errors.error("unknown-name", f"tokens {source}: no embedding '{source}' above this one",
                              spans["tokens"], where)
            return False
        if earlier[source].shares is not None:
            self.errors.error("structure", f"tokens {source}: '{source}' reads the tokens of "
                              f"'{earlier[source].shares}'", spans["tokens"], f"write `tokens {earlier[source].shares}`")
            return False
        for key in ("vocab", "dim"):
            mine, theirs = values.get(key), getattr(earlier[source], key)
            if mine is not None and mine != theirs:
                self.errors.error("value", f"embedding '{decl.name}' has {key} {mine}, but the token table of "
                                  f"'{source}' it reads has {theirs}", spans[key], f"drop `{key}`: it is the table's")
                return False
            values[key] = theirs
        values["shares"] = values.pop("tokens")
        return True

    def _stacks(self, decls: list[StackDecl], defaults: dict, embeddings: dict, first_span: Span) -> dict[str, S.Stack]:
        out: dict[str, S.Stack] = {}
        roles_seen: dict[str, StackDecl] = {}
        for decl in decls:
            if decl.role in roles_seen:
                self.errors.error("duplicate", f"a model has one {decl.role} stack; this is a second", decl.role_span,
                                  f"the first is at line {roles_seen[decl.role].span.line}")
                continue
            roles_seen[decl.role] = decl
            stack = self.attempt(lambda: self._stack(decl, defaults, embeddings))
            if stack is not None:
                out[decl.role] = stack
        if not decls:
            self.errors.error("structure", "the spec defines no stack", first_span,
                              "add `encoder x N { ... }` and/or `decoder x N { ... }`")
        if not embeddings and not any(isinstance(i, EmbeddingDecl) for i in self.module.items):
            self.errors.error("structure", "the spec defines no embedding", first_span,
                              "add `embedding tokens { vocab V; dim D }`")
        return out

    def _stack(self, decl: StackDecl, defaults: dict, embeddings: dict) -> S.Stack:
        local = Collector()
        repeat = self.attempt(lambda: as_int(decl.repeat, self))
        settings = self._settings(decl.body, STACK_SETTINGS, f"the {decl.role} stack",
                                  extra_words=SUBLAYERS + SECTIONS, wiring=True)
        # A failed setting is already reported; resolve the sublayers anyway to report theirs too.
        poisoned = any(v is FAILED for v, _ in settings.values())
        settings = {k: (v, span) for k, (v, span) in settings.items() if v is not FAILED}
        valid = {k: v for k, (v, span) in settings.items() if self._in_range(k, v, span)}
        d = {**defaults, **{k: v for k, v in valid.items() if k in BLOCK_SETTINGS}}
        embedding = self._stack_embedding(decl, settings, embeddings)
        sublayer_stmts = [s for s in decl.body if isinstance(s, Setting) and s.name in SUBLAYERS]
        assignments = [s for s in decl.body if isinstance(s, Assignment)]
        if sublayer_stmts and assignments:
            local.error("wiring", "a block is written either as sublayer statements or as assignments, not both",
                        assignments[0].span, f"sublayer statement at line {sublayer_stmts[0].span.line}")
            local.raise_if_any()
        unknown = [s for s in decl.body if isinstance(s, Setting) and s.name not in STACK_SETTINGS
                   and s.name not in SUBLAYERS + SECTIONS]
        sections = [s for s in decl.body if isinstance(s, Setting) and s.name in SECTIONS]
        if not sublayer_stmts and not assignments and unknown:
            raise Poisoned  # the unknown statement is reported; "no sublayers" would only echo it
        if not sublayer_stmts and not assignments:
            raise _err("structure", f"the {decl.role} stack has no sublayers", decl.role_span,
                       "add e.g. `attention self heads=8` and `feedforward d_ff=2048`")
        if assignments:
            block = S.Block(wiring=self._wiring(assignments, d, decl))
        else:
            block = S.Block(sublayers=tuple(self._sublayers(sublayer_stmts, d)))
        if repeat is None or embedding is None or poisoned:
            raise Poisoned
        kinds, schedule = (), ()
        if sections:
            block, kinds, schedule = self._schedule(decl, repeat, d, sublayer_stmts or assignments, block, sections)
        final = settings.get("final", (S.Choice(name="none"), None))[0]
        final_dropout, final_dropout_span = settings.get("final_dropout", (0.0, decl.span))
        weight_sets, weight_sets_span = settings.get("weight_sets", (None, None))
        if weight_sets is not None:
            self._weight_sets_fit(weight_sets, weight_sets_span, repeat, schedule)
        return self.validated(S.Stack, {"repeat": repeat, "final_dropout": final_dropout, "weight_sets": weight_sets},
                              {"repeat": decl.repeat.span, "final_dropout": final_dropout_span,
                               "weight_sets": weight_sets_span}, decl.span,
                              f"{decl.role} stack", {"role": decl.role, "embedding": embedding, "block": block,
                                                     "final_norm": final, "span": decl.role_span,
                                                     "kinds": kinds, "schedule": schedule})

    @staticmethod
    def _weight_sets_fit(sets: int, span: Span, repeat: int, schedule: tuple[int, ...]) -> None:
        """``weight_sets N``: at most one set per layer, and the layers running one set all of one kind."""
        if not 0 < sets <= repeat:
            raise _err("value", f"weight_sets {sets}: the stack has {repeat} layers", span,
                       f"give 1 (every layer runs one layer's weights) to {repeat} (each its own)")
        runs: dict[int, list[int]] = {}
        for i in range(repeat):
            runs.setdefault(i * sets // repeat, []).append(i)
        for layers in runs.values():
            kinds = {schedule[i] for i in layers} if schedule else {0}
            if len(kinds) > 1:
                raise _err("value", f"weight_sets {sets}: layers {layers[0]}–{layers[-1]} run one set of weights, "
                                    "but `layers` sections make them different kinds of layer", span,
                           "a set of weights is one kind of layer: choose weight_sets so that each run of layers "
                           "sharing it is one kind, or drop the sections")

    # --- layer schedules
    def _schedule(self, decl: StackDecl, repeat: int, d: dict, stmts: list[Setting] | list[Assignment],
                  base: S.Block, sections: list[Setting]) -> tuple[S.Block, tuple[S.Block, ...], tuple[int, ...]]:
        """The layer kinds ``layers`` sections make, in the order layers first have them (the first is the stack's
        ``block``, the others its ``kinds``), and each layer's kind; no schedule when every layer is alike.
        ``stmts``: the block's sublayer statements, or its assignments (the wiring form)."""
        if not base.wiring and len(base.sublayers) != len(stmts):
            raise Poisoned  # a sublayer failed, and is reported: its overrides would only echo that
        names = [sub.name for sub in base.sublayers] or [a.name for a in _applications(base.wiring)]
        per_layer: list[S.Block] = [base] * repeat
        chosen_by: dict[int, Setting] = {}
        for section in sections:
            layers = self._layer_selection(section, repeat)
            for i in layers:
                if i in chosen_by:
                    raise _err("duplicate", f"layer {i} is chosen by two `layers` sections", section.span,
                               f"the other is at line {chosen_by[i].span.line}; a layer has one kind")
                chosen_by[i] = section
            block = self._layer_kind(section, d, stmts, names, decl)
            for i in layers:
                per_layer[i] = block
        kinds: list[S.Block] = []
        for block in per_layer:
            if block not in kinds:
                kinds.append(block)
        if len(kinds) == 1:  # every layer alike (sections that change nothing, or every layer the same way)
            return kinds[0], (), ()
        return kinds[0], tuple(kinds[1:]), tuple(kinds.index(block) for block in per_layer)

    def _layer_selection(self, section: Setting, repeat: int) -> list[int]:
        """``layers 3``, ``layers 0 2``, ``layers range(0, 3)``, ``layers every(4, from=3)``: the indices, each
        checked against the stack's ``repeat`` layers."""
        if section.body is None:
            raise _err("structure", "`layers` takes a selection and a block of changes", section.span,
                       "write e.g. `layers every(2) { self_attn mask=causal }`")
        if not section.args:
            raise _err("structure", "`layers` needs a selection of layers", section.name_span,
                       "e.g. `layers 3`, `layers range(0, 3)`, `layers every(4, from=3)`")
        chosen: list[int] = []
        for arg in section.args:
            e = arg.value
            if arg.name is not None:
                raise _err("type", "a layer selection is positional", arg.span,
                           "e.g. `layers 3`, `layers range(0, 3)`, `layers every(4, from=3)`")
            if isinstance(e, Call) and e.func in ("every", "range"):
                params = ([Param("step", as_int, positional=True), Param("from", as_int, 0, positional=True)]
                          if e.func == "every" else
                          [Param("start", as_int, positional=True), Param("stop", as_int, None, positional=True)])
                values, spans = self.bind(e.args, params, f"{e.func}()", e.span)
                if e.func == "every":
                    if values["step"] < 1:
                        raise _err("value", f"every() takes a step of at least 1, got {values['step']}",
                                   spans["step"])
                    indices, where = range(values["from"], repeat, values["step"]), spans.get("from", e.span)
                    if values["from"] < 0 or values["from"] >= repeat:
                        raise _err("value", f"layer {values['from']} is outside the stack's {repeat} layers "
                                            f"(0 to {repeat - 1})", where)
                else:
                    start, stop = (0, values["start"]) if values["stop"] is None else (values["start"], values["stop"])
                    if not 0 <= start < stop <= repeat:
                        raise _err("value", f"range({start}, {stop}) is not a range of the stack's {repeat} layers "
                                            f"(0 to {repeat - 1}, the end excluded)", e.span)
                    indices = range(start, stop)
                chosen += indices
            elif isinstance(e, Call):
                raise _err("unknown-keyword", f"unknown layer selection '{e.func}'", e.func_span,
                           did_you_mean(e.func, ("every", "range")) or "use every(STEP, from=FIRST) or range(START, STOP)")
            else:
                i = as_int(e, self)
                if not 0 <= i < repeat:
                    raise _err("value", f"layer {i} is outside the stack's {repeat} layers (0 to {repeat - 1})", e.span)
                chosen.append(i)
        duplicates = sorted({i for i in chosen if chosen.count(i) > 1})
        if duplicates:
            raise _err("duplicate", f"layer {duplicates[0]} is selected twice in one `layers` section", section.span)
        return chosen

    def _layer_kind(self, section: Setting, d: dict, stmts: list[Setting] | list[Assignment], names: list[str],
                    decl: StackDecl) -> S.Block:
        """The stack's block with a section's changes: block settings (``position none``) as this kind's
        defaults, and ``SUBLAYER option=value`` overriding those options of the sublayer (or, in the wiring
        form, the call) of that name."""
        local = Collector()
        block_settings = [s for s in section.body if isinstance(s, Setting) and s.name in BLOCK_SETTINGS]
        values = self._settings(block_settings, BLOCK_SETTINGS, "a `layers` section")
        kind_defaults = {**d, **{k: v for k, (v, span) in values.items() if v is not FAILED}}
        changes: dict[str, list[Arg]] = {}
        for stmt in section.body:
            if isinstance(stmt, Assignment) or stmt.body is not None:
                local.error("structure", "a `layers` section holds settings and sublayer changes", stmt.span,
                            "e.g. `self_attn mask=causal` or `position none`")
            elif stmt.name in BLOCK_SETTINGS:
                continue
            elif stmt.name not in names:
                local.error("unknown-name", f"no sublayer '{stmt.name}' in this stack's layers", stmt.name_span,
                            did_you_mean(stmt.name, names + list(BLOCK_SETTINGS)) or one_of(names))
            elif any(a.name is None for a in stmt.args):
                local.error("type", f"a change to {stmt.name} names its options", stmt.span,
                            f"e.g. `{stmt.name} mask=causal`")
            else:
                changes.setdefault(stmt.name, []).extend(stmt.args)
        local.raise_if_any()
        if stmts and isinstance(stmts[0], Assignment):
            return S.Block(wiring=self._wiring(stmts, kind_defaults, decl, changes))
        changed = []
        for stmt, name in zip(stmts, names):
            extra = changes.get(name, [])
            replaced = {a.name for a in extra}
            args = tuple(a for a in stmt.args if a.name is None or a.name not in replaced) + tuple(extra)
            changed.append(Setting(stmt.name, stmt.name_span, args, stmt.span))
        sublayers = self._sublayers(changed, kind_defaults)
        if len(sublayers) != len(changed):
            raise Poisoned
        return S.Block(sublayers=tuple(sublayers))

    def _stack_embedding(self, decl: StackDecl, settings: dict, embeddings: dict) -> str | None:
        if "embedding" in settings:
            name, span = settings["embedding"]
            if name not in embeddings:
                declared = [i.name for i in self.module.items if isinstance(i, EmbeddingDecl)]
                if name not in declared:
                    self.errors.error("unknown-name", f"unknown embedding '{name}'", span,
                                      did_you_mean(name, declared) or (one_of(declared) if declared else None))
                return None
            return name
        declared = [i.name for i in self.module.items if isinstance(i, EmbeddingDecl)]
        if len(declared) == 1:
            return declared[0] if declared[0] in embeddings else None
        if len(declared) > 1:
            self.errors.error("structure", f"the {decl.role} stack must say which embedding it reads", decl.role_span,
                              f"add `embedding NAME` to its body; embeddings: {', '.join(declared)}")
        return None

    def _sublayers(self, stmts: list[Setting], d: dict) -> list[S.Sublayer]:
        names = _Namer()
        out = []
        for stmt in stmts:
            sub = self.attempt(lambda: self._sublayer(stmt, d, names))
            if sub is not None:
                out.append(sub)
        return out

    def _sublayer(self, stmt: Setting, d: dict, names: "_Namer") -> S.Sublayer:
        values, spans = self.bind(stmt.args, sublayer_params(stmt.name, d, True), stmt.name, stmt.name_span)
        body = self._operation(stmt.name, values, spans, stmt, d)
        name = names.take(_module_name(body))
        wrap = {k: values[k] for k in ("residual", "norm", "dropout")}
        return self.validated(S.Sublayer, {**wrap, "name": name, "body": body}, spans, stmt.span, stmt.name,
                              {"span": stmt.span})

    def _operation(self, kind: str, values: dict, spans: dict, stmt, d: dict) -> S.Attention | S.FeedForward:
        if kind == "attention":
            if values["memory"] is not None and values["reads"] == "self":
                raise _err("structure", "memory= is for cross-attention", spans["memory"],
                           "write `attention cross ...` to read the encoder's output")
            fields = {k: values[k] for k in ("reads", "heads", "kind", "bias", "mask", "kv_heads", "head_dim",
                                             "qk_norm", "qk_norm_width", "scale")}
            fields["dropout"] = values["attn_dropout"]
            fields["out_bias"] = values["bias"] if values["out_bias"] is None else values["out_bias"]
            # a stack's position scheme is for its self-attentions: a cross-attention's keys are another sequence
            fields["position"] = values["position"] or (d["position"] if values["reads"] == "self"
                                                        else S.Choice(name="none"))
            return self.validated(S.Attention, fields, {**spans, "dropout": spans.get("attn_dropout")}, stmt.span,
                                  "attention", {"span": stmt.span})
        fields = {k: values[k] for k in ("d_ff", "activation", "bias", "kind")}
        fields["dropout"] = values["act_dropout"]
        return self.validated(S.FeedForward, fields, {**spans, "dropout": spans.get("act_dropout")}, stmt.span,
                              "feedforward", {"span": stmt.span})

    # --- wiring form
    def _wiring(self, assignments: list[Assignment], d: dict, decl: StackDecl,
                changes: dict[str, list[Arg]] | None = None) -> tuple[S.Assign, ...]:
        """The assignments as tensors; ``changes``: options a layer kind gives the call of each name."""
        names = _Namer()
        defined: dict[str, Assignment | None] = {"x": None}
        used: set[int] = set()
        last_def: dict[str, int] = {}
        out = []
        problems = Collector()

        def is_tensor(e: Expr) -> bool:
            """A tensor expression (a defined tensor, a function call, a sum); otherwise a number."""
            if isinstance(e, Name):
                return e.id in defined
            if isinstance(e, BinOp):
                return is_tensor(e.left) or is_tensor(e.right)
            return isinstance(e, Call)

        for index, stmt in enumerate(assignments):
            def tensor(e: Expr) -> S.Tensor:
                if isinstance(e, Name):
                    if e.id not in defined:
                        raise _err("unknown-name", f"unknown tensor '{e.id}'", e.span,
                                   did_you_mean(e.id, defined) or f"defined so far: {listing(defined)}")
                    if e.id in last_def:
                        used.add(last_def[e.id])
                    return S.Var(name=e.id, span=e.span)
                if isinstance(e, BinOp) and e.op == "+":
                    terms = []
                    for side in (e.left, e.right):
                        t = tensor(side)
                        terms.extend(t.terms if isinstance(t, S.Sum) else [t])
                    return S.Sum(terms=tuple(terms), span=e.span)
                if isinstance(e, BinOp) and e.op == "*" and is_tensor(e.left) != is_tensor(e.right):
                    number, value = (e.right, e.left) if is_tensor(e.left) else (e.left, e.right)
                    return S.Scale(factor=as_float(number, self), input=tensor(value), span=e.span)
                if isinstance(e, BinOp):
                    raise _err("wiring", f"'{e.op}' does not apply to tensors; blocks combine tensors with '+' "
                               "and scale them by a number with '*'", e.span)
                if isinstance(e, Call):
                    return self._apply(e, tensor, d, names, changes or {})
                raise _err("wiring", f"expected a tensor expression, got {_what(e)}", e.span,
                           "e.g. `x = x + attention(norm(x), heads=8)`")

            try:
                value = tensor(stmt.value)
            except (SpecError, Poisoned) as exc:
                if isinstance(exc, SpecError):
                    problems.diagnostics.extend(exc.diagnostics)
                used.update(last_def[n] for n in _names_in(stmt.value) if n in last_def)  # no cascade
                defined.setdefault(stmt.target, stmt)
                last_def.setdefault(stmt.target, index)
                used.add(last_def[stmt.target])
                continue
            if stmt.target in last_def and last_def[stmt.target] not in used and stmt.target != "x":
                prev = assignments[last_def[stmt.target]]
                problems.error("wiring", f"'{prev.target}' is computed but never used", prev.target_span)
            defined[stmt.target] = stmt
            last_def[stmt.target] = index
            out.append(S.Assign(target=stmt.target, value=value, span=stmt.span))

        if "x" not in last_def:
            problems.error("wiring", "the block never assigns x, so each layer would be the identity",
                           decl.role_span, "end the block with `x = ...`")
        elif not problems:  # after a failed statement, "never used" would only echo that failure
            for name, index in last_def.items():
                if name != "x" and index not in used:
                    problems.error("wiring", f"'{name}' is computed but never used", assignments[index].target_span,
                                   "the block's output is the last value of x")
        problems.raise_if_any()
        return tuple(out)

    def _apply(self, e: Call, tensor: Callable, d: dict, names: "_Namer", changes: dict[str, list[Arg]]) -> S.Apply:
        known = list(WIRING_FUNCTIONS) + NORMS.names()
        if e.func not in known:
            raise _err("unknown-keyword", f"unknown function '{e.func}' in wiring", e.func_span,
                       did_you_mean(e.func, known) or one_of(known))
        if not e.args or e.args[0].name is not None:
            raise _err("missing", f"{e.func}() needs its input tensor as the first argument", e.span,
                       f"e.g. `{e.func}(x{', ...' if e.func in SUBLAYERS else ''})`")
        source = tensor(e.args[0].value)
        body = self._applied(e, e.args[1:], d)
        name = names.take(_module_name(body))
        if name in changes:  # a layer kind's options for this call replace those it is written with
            replaced = {a.name for a in changes[name]}
            body = self._applied(e, tuple(a for a in e.args[1:] if a.name not in replaced) + tuple(changes[name]), d)
        return S.Apply(name=name, body=body, input=source, span=e.span)

    def _applied(self, e: Call, rest, d: dict):
        """The operation a wiring call applies, given its options ``rest``."""
        if e.func in SUBLAYERS:
            values, spans = self.bind(rest, sublayer_params(e.func, d, False), f"{e.func}()", e.func_span)
            body = self._operation(e.func, values, spans, e, d)
        elif e.func == "dropout":
            values, spans = self.bind(rest, [Param("p", as_float, d["dropout"], positional=True)], "dropout()", e.func_span)
            body = self.validated(S.DropoutOp, values, spans, e.span, "dropout", {"span": e.span})
        elif e.func == "norm":
            self.bind(rest, [], "norm()", e.func_span)
            body = S.NormOp(norm=d["norm"], span=e.span)
        else:  # a registry norm by name: layernorm(h, eps=1e-6)
            bare = Call(e.func, e.func_span, rest, e.span)
            body = S.NormOp(norm=choice(NORMS)(bare, self), span=e.span)
        return body

    # --- head and pooler
    def _head(self, decl: HeadDecl, embeddings: dict, stacks: dict) -> S.Head:
        positional = [a for a in decl.args if a.name is None]
        if not positional:
            raise _err("missing", "head needs a projection: tied(EMBEDDING) or linear", decl.span,
                       "e.g. `head tied(tokens)`")
        proj = positional[0].value
        func = proj.id if isinstance(proj, Name) else proj.func if isinstance(proj, Call) else None
        proj_args = proj.args if isinstance(proj, Call) else ()
        if func not in HEAD_PROJECTIONS:
            raise _err("unknown-keyword", f"unknown head projection '{func or _what(proj)}'", proj.span,
                       did_you_mean(func or "", HEAD_PROJECTIONS) or "expected tied(EMBEDDING) or linear")
        values, spans = self.bind(tuple(a for a in decl.args if a is not positional[0]), head_params(func), "head",
                                  decl.span)
        last = stacks.get("decoder") or stacks.get("encoder")
        tied_to = None
        if func == "tied":
            bound, bspans = self.bind(proj_args, [Param("embedding", as_ref, positional=True)], "tied()", proj.span)
            target = bound["embedding"]
            declared = [i.name for i in self.module.items if isinstance(i, EmbeddingDecl)]
            if target not in declared:
                raise _err("unknown-name", f"unknown embedding '{target}'", bspans["embedding"],
                           did_you_mean(target, declared) or (one_of(declared) if declared else None))
            if target not in embeddings:
                raise Poisoned
            if embeddings[target].image is not None:
                raise _err("structure", f"a head cannot be tied to embedding '{target}': it reads images, through "
                           "no token table", bspans["embedding"], "use linear(N), N the number of classes")
            tied_to = embeddings[target].shares or target  # the table itself, where the embedding reads another's
            out = embeddings[target].vocab
            spans["out"] = proj.span
        else:
            bound, bspans = self.bind(proj_args, [Param("out", as_int, None, positional=True)], "linear()", proj.span)
            out = bound["out"]
            spans["out"] = bspans.get("out", proj.span)
            if out is None:
                if last is None or last.embedding not in embeddings:
                    raise Poisoned
                out = embeddings[last.embedding].vocab
                if out is None:
                    raise _err("missing", "head linear over images needs its number of outputs", proj.span,
                               "write linear(N), N the number of classes")
        if values["transform"] is not None and ACTIVATIONS[values["transform"].name].up_features(1) != 1:
            raise _err("value", "a gated activation needs two projections; the head's transform has one",
                       spans["transform"])
        if values["norm"] is not None and values["transform"] is None:
            raise _err("structure", "head norm= applies to its transform; add transform=ACTIVATION", spans["norm"])
        features = None  # a transform into a tied table of another width (ALBERT's head); without one, validate
        if tied_to is not None and last is not None and last.embedding in embeddings and values["transform"]:
            width, table = embeddings[last.embedding].width, embeddings[tied_to].dim
            features = table if table != width else None
        return self.validated(S.Head, {"tied_to": tied_to, "out": out, "bias": values["bias"],
                                       "transform": values["transform"], "transform_norm": values["norm"],
                                       "scale": values["scale"], "softcap": values["softcap"], "features": features,
                                       "pool": values["pool"]},
                              spans, decl.span, "head", {"span": decl.span})

    def _pooler(self, decl: PoolerDecl) -> S.Pooler:
        values, spans = self.bind(decl.args, POOLER_PARAMS, "pooler", decl.span)
        if ACTIVATIONS[values["activation"].name].up_features(1) != 1:
            raise _err("value", "a gated activation needs two projections; the pooler has one", spans["activation"])
        return S.Pooler(activation=values["activation"], span=decl.span)


class _Namer:
    """Deterministic unique module names: self_attn, self_attn_1, ..."""

    def __init__(self):
        self.counts: dict[str, int] = {}

    def take(self, base: str) -> str:
        n = self.counts.get(base, 0)
        self.counts[base] = n + 1
        return base if n == 0 else f"{base}_{n}"


def _names_in(e: Expr) -> set[str]:
    if isinstance(e, Name):
        return {e.id}
    if isinstance(e, BinOp):
        return _names_in(e.left) | _names_in(e.right)
    if isinstance(e, Call):
        return set().union(*(_names_in(a.value) for a in e.args)) if e.args else set()
    return set()


def _applications(wiring) -> list[S.Apply]:
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


def _module_name(body) -> str:
    if isinstance(body, S.Attention):
        return f"{body.reads}_attn"
    if isinstance(body, S.FeedForward):
        return "ffn"
    return body.op


def _explain(err: dict) -> str:
    ctx = err.get("ctx") or {}
    return {
        "greater_than": lambda: f"must be greater than {ctx.get('gt')}",
        "greater_than_equal": lambda: f"must be at least {ctx.get('ge')}",
        "less_than": lambda: f"must be less than {ctx.get('lt')}",
        "less_than_equal": lambda: f"must be at most {ctx.get('le'):,}" if isinstance(ctx.get("le"), int) else f"must be at most {ctx.get('le')}",
        "missing": lambda: "is required",
        "value_error": lambda: str((ctx.get("error") or err["msg"])),  # a validator's own sentence
    }.get(err["type"], lambda: err["msg"].lower())()


def resolve(module: Module, overrides: dict[str, Any] | None = None) -> S.Spec:
    """AST -> Spec, or SpecError with every independent problem found."""
    first = Span(module.file, 1, 1, 1, 2)
    if module.items:
        item = module.items[0]
        first = getattr(item, "span", first)
    resolver = _Resolver(module, overrides)
    spec = resolver.run(first)
    spec._sources = resolver.sources
    spec._warnings = narrower_stacks(spec) + unused_lets(module)
    return spec


def let_values(module: Module) -> dict[str, int | float]:
    """The value of every ``let`` name that evaluates, whatever else in the spec is wrong (an editor shows them
    while the spec is being written)."""
    resolver = _Resolver(module, None)
    resolver._lets([i for i in module.items if isinstance(i, Let)])
    return {k: v for k, v in resolver.env.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def unused_lets(module: Module) -> list[Diagnostic]:
    """A ``let`` parameter nothing reads: likely a name misspelled where it was meant to be used (or a size that
    changes nothing). Warnings, located at the name."""
    used = {n.id for n in names(module.items)}
    unused = [b for item in module.items if isinstance(item, Let) for b in item.bindings if b.name not in used]
    shown = [Diagnostic("unused", f"parameter '{b.name}' is never used", b.name_span,
                        "remove it, or use it where it was meant to be", severity="warning")
             for b in unused[:MAX_UNUSED_SHOWN]]
    if len(unused) > MAX_UNUSED_SHOWN:  # a generated spec's thousands: one warning says how many more
        rest = unused[MAX_UNUSED_SHOWN:]
        shown.append(Diagnostic("unused", f"{len(rest):,} more parameters are never used, from '{rest[0].name}' on",
                                rest[0].name_span, severity="warning"))
    return shown


MAX_UNUSED_SHOWN = 10  # unused-parameter warnings shown one by one


def narrower_stacks(spec: S.Spec) -> list[Diagnostic]:
    """A stack narrower or wider than the spec's ``let d_model`` because its embedding's ``dim`` is another width
    and nothing projects it: the whole stack then runs at the table's width, which an author who meant a
    factorised embedding (ALBERT's) did not mean. Warnings, located at the ``dim``."""
    d_model = spec.params.get("d_model")
    found = []
    for stack in spec.stacks:
        emb = spec.embedding(stack.embedding)
        if isinstance(d_model, int) and emb.project is None and emb.dim != d_model and emb.shares is None:
            found.append(Diagnostic(
                "shape", f"embedding '{emb.name}' has dim {emb.dim}, so the {stack.role} stack runs {emb.dim} wide, "
                         f"not d_model = {d_model}", emb.arg_spans.get("dim", emb.span),
                f"for a {emb.dim}-wide token table under a {d_model}-wide stack add `project d_model` (ALBERT's "
                "factorised embedding); else write `dim d_model`", severity="warning"))
    return found
