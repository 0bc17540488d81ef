"""Stage 2, resolve: AST -> ``Spec``.

Evaluates ``let`` parameters (with overrides), applies defaults (built-in <
``defaults {}`` < stack settings < sublayer arguments), binds every statement's
arguments against its signature and the registries, and checks names. Every
independent problem is collected; the spec is built only when there are none.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from pydantic import BaseModel, ValidationError

from ..errors import Collector, Diagnostic, Span, SpecError, did_you_mean, one_of
from . import schema as S
from .expr import POISON, Poisoned, evaluate
from .params import (BLOCK_SETTINGS, BUILTIN_DEFAULTS, DEFAULTS_SETTINGS, EMBEDDING_SETTINGS, FAILED, HEAD_PROJECTIONS,
                     POOLER_PARAMS, REQUIRED, SCALARS, SECTIONS, STACK_SETTINGS, SUBLAYERS,
                     TOKEN_SETTINGS, WIRING_FUNCTIONS, as_bool, as_float, as_int, as_mask, as_ref, choice, Converter,
                     converter_for, head_params, optional, Param, sublayer_params, word)
from .resolve_embeddings import Embeddings
from .resolve_heads import Heads
from .resolve_towers import Joins
from .resolve_lets import Lets
from .resolve_stacks import Stacks
from .resolve_wiring import Wiring
from .syntax import (Arg, ContrastiveDecl, Defaults, EmbeddingDecl, Expr, HeadDecl, Let, ModelDecl, Module, MtpDecl,
                     PoolerDecl, StackDecl, TowerDecl, names)


class _Resolver(Lets, Embeddings, Stacks, Wiring, Heads, Joins):
    """AST -> ``Spec``: the arguments of every statement bound and checked, every problem collected. Each section of
    a spec is read by a part of its own (``resolve_lets``, ``resolve_embeddings``, ``resolve_stacks``,
    ``resolve_wiring``, ``resolve_heads``); this holds what they share and the order they run in."""

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
    def run(self, first_span: Span) -> S.Spec | S.Towers:
        items = self.module.items
        model_name = self._model_name(items)
        self._lets([i for i in items if isinstance(i, Let)])
        if any(isinstance(i, TowerDecl) for i in items):
            return self._towers(model_name, first_span)
        for join in (i for i in items if isinstance(i, ContrastiveDecl)):
            self.errors.error("structure", "a contrastive head joins two towers; this model has none", join.span,
                              "write each side as `tower NAME { ... }`")
        return self._model(model_name, first_span)

    def _model(self, model_name: str, first_span: Span) -> S.Spec:
        """The model of one or two stacks the items other than ``let``s hold (a whole spec's, or a tower's)."""
        items = self.module.items
        defaults = self._defaults([i for i in items if isinstance(i, Defaults)])
        init = defaults.pop("init", None)
        embeddings = self._embeddings([i for i in items if isinstance(i, EmbeddingDecl)], defaults)
        stacks = self._stacks([i for i in items if isinstance(i, StackDecl)], defaults, embeddings, first_span)
        head = self._single(items, HeadDecl, "head", lambda h: self._head(h, embeddings, stacks))
        pooler = self._single(items, PoolerDecl, "pooler", self._pooler)
        mtp = self._single(items, MtpDecl, "multi-token prediction", lambda d: self._mtp(d, embeddings, stacks, head,
                                                                                        pooler))
        self.errors.raise_if_any(self.sources)
        return S.Spec(name=model_name,
                      params={k: v for k, v in self.env.items() if v is not POISON},
                      embeddings=tuple(embeddings.values()),
                      encoder=stacks.get("encoder"), decoder=stacks.get("decoder"),
                      head=head, pooler=pooler, mtp=mtp, init=init, span=first_span)

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


def resolve(module: Module, overrides: dict[str, Any] | None = None) -> S.Spec | S.Towers:
    """AST -> Spec (or Towers, a model of several), or SpecError with every independent problem found."""
    first = Span(module.file, 1, 1, 1, 2)
    if module.items:
        item = module.items[0]
        first = getattr(item, "span", first)
    resolver = _Resolver(module, overrides)
    spec = resolver.run(first)
    spec._sources = resolver.sources
    # (towers of their own widths are the rule: no one d_model is meant for all)
    spec._warnings = (narrower_stacks(spec) if isinstance(spec, S.Spec) else []) + unused_lets(module)
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


# the stage's entry points, and the vocabulary of parameters (from .params) that the language server reads
__all__ = ["let_values", "narrower_stacks", "resolve", "unused_lets", "BLOCK_SETTINGS", "BUILTIN_DEFAULTS",
           "DEFAULTS_SETTINGS", "EMBEDDING_SETTINGS", "FAILED", "HEAD_PROJECTIONS", "POOLER_PARAMS",
           "REQUIRED", "SCALARS", "SECTIONS", "STACK_SETTINGS", "SUBLAYERS", "TOKEN_SETTINGS", "WIRING_FUNCTIONS",
           "as_bool", "as_float", "as_int", "as_mask", "as_ref", "choice", "Converter", "converter_for", "head_params",
           "optional", "Param", "sublayer_params", "word"]
