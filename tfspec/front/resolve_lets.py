"""The part of the resolver that reads ``let`` parameters (with overrides) and ``defaults {}``, and the settings every
block shares."""

from __future__ import annotations

from typing import Any

from ..errors import Span, SpecError, did_you_mean, one_of
from .expr import POISON, evaluate
from .params import BUILTIN_DEFAULTS, Converter, DEFAULTS_SETTINGS, FAILED, names_in, spec_error
from .syntax import Assignment, Binding, Defaults, Expr, Let, parse_module


class Lets:
    """Reads ``let`` parameters (with overrides) and ``defaults {}``, and the settings every block shares. (a part of
    ``resolve._Resolver``)."""

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
            later = sorted(n for n in names_in(expr) if n in defined and n not in self.env)
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
                    raise spec_error("override", f"'{value}' is not a single value", None)
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
        """The built-in defaults, overridden by the ones a tower inherits from its file (``inherited``), then by
        its own (or the model's) block."""
        for extra in decls[1:]:
            self.errors.error("duplicate", "a model has one defaults block; this is a second", extra.span)
        merged = dict(BUILTIN_DEFAULTS)
        for block in (*getattr(self, "inherited", ()), *decls[:1]):
            settings = self._settings(block.body, DEFAULTS_SETTINGS, "defaults")
            for name, (value, span) in settings.items():
                if value is not FAILED and self._in_range(name, value, span):
                    merged[name] = value
        return merged

    def _in_range(self, name: str, value: Any, span: Span) -> bool:
        if name.endswith("dropout") and not 0 <= value < 1:
            self.errors.error("value", f"{name} must be in [0, 1), got {value:g}", span)
            return False
        return True
