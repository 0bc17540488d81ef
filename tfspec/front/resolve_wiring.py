"""The part of the resolver that reads a block in the wiring form: named values, sums and scaled terms, calls of
sublayers, norms and dropouts."""

from __future__ import annotations

from typing import Callable

from ..errors import Collector, SpecError, did_you_mean, listing, one_of
from ..registry import NORMS
from . import schema as S
from .expr import Poisoned
from .params import (Namer, Param, SUBLAYERS, WIRING_FUNCTIONS, as_float, choice, module_name, names_in, spec_error,
                     sublayer_params, what_it_is)
from .syntax import Arg, Assignment, BinOp, Call, Expr, Name, StackDecl


class Wiring:
    """Reads a block in the wiring form (a part of ``resolve._Resolver``)."""

    # --- wiring form
    def _wiring(self, assignments: list[Assignment], d: dict, decl: StackDecl,
                changes: dict[str, list[Arg]] | None = None,
                replaced: dict[str, Call | None] | None = None) -> tuple[S.Assign, ...]:
        """The assignments as tensors; ``changes``: options a layer kind gives the call of each name;
        ``replaced``: the sublayer a layer kind calls in place of the call of each name (with the same input), or
        None where it drops the call (a term of a sum: the sum goes on without it)."""
        names = Namer()
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
            def tensor(e: Expr, term: bool = False) -> S.Tensor | None:
                """``e`` as a tensor; None for a call a layer kind drops, which only a ``term`` of a sum may be."""
                if isinstance(e, Name):
                    if e.id not in defined:
                        raise spec_error("unknown-name", f"unknown tensor '{e.id}'", e.span,
                                         did_you_mean(e.id, defined) or f"defined so far: {listing(defined)}")
                    if e.id in last_def:
                        used.add(last_def[e.id])
                    return S.Var(name=e.id, span=e.span)
                if isinstance(e, BinOp) and e.op == "+":
                    terms = []
                    for side in (e.left, e.right):
                        t = tensor(side, term=True)
                        terms.extend(t.terms if isinstance(t, S.Sum) else [t] if t is not None else [])
                    return S.Sum(terms=tuple(terms), span=e.span) if len(terms) > 1 else terms[0]
                if isinstance(e, BinOp) and e.op == "*" and is_tensor(e.left) != is_tensor(e.right):
                    number, value = (e.right, e.left) if is_tensor(e.left) else (e.left, e.right)
                    return S.Scale(factor=as_float(number, self), input=tensor(value), span=e.span)
                if isinstance(e, BinOp):
                    raise spec_error("wiring", f"'{e.op}' does not apply to tensors; blocks combine tensors with '+' "
                                     "and scale them by a number with '*'", e.span)
                if isinstance(e, Call):
                    applied = self._apply(e, tensor, d, names, changes or {}, replaced or {})
                    if applied is None and not term:
                        raise spec_error("wiring", "a `layers` section drops this call, but its value is not a term "
                                         "of a sum, which could go on without it", e.span,
                                         "drop a sublayer whose output is added to the stream "
                                         "(x = x + attention(...)), or replace it")
                    return applied
                raise spec_error("wiring", f"expected a tensor expression, got {what_it_is(e)}", e.span,
                                 "e.g. `x = x + attention(norm(x), heads=8)`")

            try:
                value = tensor(stmt.value)
            except (SpecError, Poisoned) as exc:
                if isinstance(exc, SpecError):
                    problems.diagnostics.extend(exc.diagnostics)
                used.update(last_def[n] for n in names_in(stmt.value) if n in last_def)  # no cascade
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

    def _apply(self, e: Call, tensor: Callable, d: dict, names: "Namer", changes: dict[str, list[Arg]],
               replaced: dict[str, Call | None]) -> S.Tensor | None:
        known = list(WIRING_FUNCTIONS) + NORMS.names()
        if e.func not in known:
            raise spec_error("unknown-keyword", f"unknown function '{e.func}' in wiring", e.func_span,
                             did_you_mean(e.func, known) or one_of(known))
        if not e.args or e.args[0].name is not None:
            raise spec_error("missing", f"{e.func}() needs its input tensor as the first argument", e.span,
                             f"e.g. `{e.func}(x{', ...' if e.func in SUBLAYERS else ''})`")
        source = tensor(e.args[0].value)
        body = self._applied(e, e.args[1:], d)
        name = names.take(module_name(body))
        if name in replaced:  # a layer kind's sublayer in this call's place, on the same input
            call = replaced[name]
            if call is None:  # dropped: a norm passes its input on (ModernBERT's first layer); a sublayer is gone
                return source if isinstance(body, S.NormOp) else None
            body = self._applied(Call(call.func, call.func_span, (), call.span), call.args, d)
            name = names.take(module_name(body))
        elif name in changes:  # a layer kind's options for this call replace those it is written with
            given = {a.name for a in changes[name]}
            body = self._applied(e, tuple(a for a in e.args[1:] if a.name not in given) + tuple(changes[name]), d)
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
