"""Parameter arithmetic: a tiny evaluator over the AST (spec text is never eval'd).

Numbers are ints or floats; ``/`` is true division, ``//`` floor division.
Functions: sqrt, min, max, floor, ceil, log2. Results beyond 1e18 are refused so
a typo like ``10 ** 10 ** 10`` cannot hang the checker.
"""

from __future__ import annotations

import math

from ..errors import Diagnostic, SpecError, did_you_mean, listing, spend_listing
from .syntax import BinOp, Call, Expr, Name, Neg, Number, String

LIMIT = 1e18
Num = int | float


class Poisoned(Exception):
    """A value whose definition already failed: its users report nothing more."""


POISON = object()


def _check(value: Num, span) -> Num:
    if not isinstance(value, (int, float)):  # a complex number never gets here; kept as a guard for new functions
        raise SpecError([Diagnostic("arithmetic", f"not a real number ({value})", span)])
    if isinstance(value, float) and not math.isfinite(value) or abs(value) > LIMIT:
        raise SpecError([Diagnostic("arithmetic", "number is too large (beyond 1e18)", span)])
    return value


def _unary(fn):
    def call(args, span):
        if len(args) != 1:
            raise SpecError([Diagnostic("arithmetic", "takes exactly one argument", span)])
        return fn(args[0], span)
    return call


def _sqrt(v, span):
    if v < 0:
        raise SpecError([Diagnostic("arithmetic", f"sqrt of a negative number ({v})", span)])
    return math.sqrt(v)


def _log2(v, span):
    if v <= 0:
        raise SpecError([Diagnostic("arithmetic", f"log2 of a non-positive number ({v})", span)])
    return math.log2(v)


def _many(fn):
    def call(args, span):
        if not args:
            raise SpecError([Diagnostic("arithmetic", "needs at least one argument", span)])
        return fn(args)
    return call


FUNCTIONS = {
    "sqrt": _unary(_sqrt),
    "log2": _unary(_log2),
    "floor": _unary(lambda v, s: math.floor(v)),
    "ceil": _unary(lambda v, s: math.ceil(v)),
    "min": _many(min),
    "max": _many(max),
}


def evaluate(e: Expr, env: dict[str, object]) -> Num:
    """Evaluate a numeric expression; names come from ``env`` (the ``let`` parameters).

    >>> from tfspec.front.syntax import parse_module
    >>> binding = parse_module("let a = 4 * (2 + 1)").items[0].bindings[0]
    >>> evaluate(binding.value, {})
    12
    """
    if isinstance(e, Number):
        return _check(e.value, e.span)
    if isinstance(e, Name):
        if e.id not in env:
            if e.id in ("true", "false"):
                raise SpecError([Diagnostic("type", f"expected a number, got '{e.id}'", e.span)])
            raise SpecError([Diagnostic("unknown-name", f"unknown parameter '{e.id}'", e.span,
                                        did_you_mean(e.id, env) or _defined(env))])
        value = env[e.id]
        if value is POISON:
            raise Poisoned
        return value  # type: ignore[return-value]
    if isinstance(e, Neg):
        return -evaluate(e.operand, env)
    if isinstance(e, String):
        raise SpecError([Diagnostic("type", "expected a number, got a string", e.span)])
    if isinstance(e, Call):
        fn = FUNCTIONS.get(e.func)
        if fn is None:
            raise SpecError([Diagnostic("unknown-keyword", f"unknown function '{e.func}' in arithmetic", e.func_span,
                                        did_you_mean(e.func, FUNCTIONS) or "functions: " + ", ".join(sorted(FUNCTIONS)))])
        for a in e.args:
            if a.name is not None:
                raise SpecError([Diagnostic("unknown-argument", f"{e.func}() takes no keyword arguments", a.span)])
        try:
            return _check(fn([evaluate(a.value, env) for a in e.args], e.span), e.span)
        except OverflowError:
            raise SpecError([Diagnostic("arithmetic", "number is too large (beyond 1e18)", e.span)]) from None
    assert isinstance(e, BinOp)
    left, right = evaluate(e.left, env), evaluate(e.right, env)
    if e.op in ("/", "//", "%") and right == 0:
        raise SpecError([Diagnostic("arithmetic", "division by zero", e.span)])
    if e.op == "**":
        if left == 0 and right < 0:
            raise SpecError([Diagnostic("arithmetic", "division by zero", e.span)])
        if left < 0 and right != int(right):
            raise SpecError([Diagnostic("arithmetic", f"a negative number to a fractional power ({left} ** {right}) "
                                                      "is not a real number", e.span)])
        if left != 0 and right * math.log10(abs(left)) > 18:  # decided before computing: 9 ** 9 ** 9 never runs
            raise SpecError([Diagnostic("arithmetic", "number is too large (beyond 1e18)", e.span)])
    try:
        result = {
            "+": lambda: left + right,
            "-": lambda: left - right,
            "*": lambda: left * right,
            "/": lambda: left / right,
            "//": lambda: left // right,
            "%": lambda: left % right,
            "**": lambda: left ** right,
        }[e.op]()
    except OverflowError:  # operands within 1e18 whose float result is not (1e18 / 1e-300)
        raise SpecError([Diagnostic("arithmetic", "number is too large (beyond 1e18)", e.span)]) from None
    return _check(result, e.span)


def _defined(env) -> str | None:
    if not spend_listing(len(env)):
        return "no parameter of that name is defined"
    names = [n for n, v in env.items() if v is not POISON]
    return ("defined parameters: " + listing(names)) if names else "no parameters are defined; add `let name = value`"
