"""Diagnostics: every problem in a spec is data with a source span, rendered like a compiler.

    examples/bad.tfs:7:3: error: unknown sublayer 'atention'  [unknown-keyword]
        |
      7 |   atention self heads=8
        |   ^~~~~~~~
        = help: did you mean 'attention'?

All codes live in ``CODES`` so messages and tests cannot drift apart.
"""

from __future__ import annotations

import difflib
import os
import re
import textwrap
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Iterable, Sequence

# One registry of error codes, each with what it means (shown by `tfspec explain`-style docs).
CODES: dict[str, str] = {
    "syntax": "the text does not follow the grammar",
    "io": "a spec file could not be read",
    "too-long": "a spec with more tokens than tfspec reads in a few seconds (see syntax.MAX_TOKENS)",
    "unknown-keyword": "a statement, setting or function name that does not exist here",
    "unknown-name": "a parameter, embedding or value name that is not defined",
    "unknown-argument": "an argument name that the statement or call does not take",
    "duplicate": "something defined or given twice",
    "missing": "a required statement or argument is absent",
    "type": "a value of the wrong type (e.g. a float where a whole number is needed)",
    "value": "a value out of its allowed range",
    "arithmetic": "a parameter expression that cannot be evaluated (division by zero, overflow)",
    "structure": "the model's parts do not fit together (stacks, embeddings, heads)",
    "wiring": "a block's assignments do not form a valid dataflow",
    "mask": "a mask that is illegal where it is used",
    "variant": "a variant (attention kind, position scheme, mask, norm) that does not fit where it is used",
    "shape": "tensor shapes or widths that do not agree",
    "size": "a model too large to allocate on this machine",
    "override": "a parameter override that does not apply",
    "unused": "a `let` parameter nothing reads (a warning)",
}


@dataclass(frozen=True)
class Span:
    """A region of source text: 1-based line and column, end exclusive."""

    file: str
    line: int
    column: int
    end_line: int
    end_column: int

    def __str__(self) -> str:
        return f"{shown(self.file)}:{self.line}:{self.column}"


LONGEST_WORD = 80


def excerpts(text: str) -> str:
    """``text`` with each run of more than ``LONGEST_WORD`` letters, digits, ``_`` or ``.`` (a name) cut to its
    start and end around how long it is.

    >>> excerpts("unknown parameter '" + "h" * 100 + "'")
    "unknown parameter 'hhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhhh…(100 characters)…hhhhhhhhhhhhhhhhhhhh'"
    """
    return re.sub(r"[\w.]{%d,}" % (LONGEST_WORD + 1),
                  lambda m: f"{m.group()[:40]}…({len(m.group()):,} characters)…{m.group()[-20:]}", text)


def quoted(value, width: int = 60) -> str:
    """A value as a message quotes it: as JSON writes it (``repr`` for what JSON cannot), cut to ``width``.

    >>> quoted([1, 2]), quoted("x" * 80, 10)
    ('[1, 2]', '"xxxxxx...')
    """
    import json

    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= width else text[:width - 3] + "..."


@dataclass(frozen=True)
class Diagnostic:
    code: str
    message: str
    span: Span | None
    hint: str | None = None
    severity: str = "error"

    def __post_init__(self) -> None:
        if self.code not in CODES:
            raise KeyError(f"unregistered diagnostic code {self.code!r}")
        # a name of 3 MB (a misspelt identifier, pasted text) is quoted as an excerpt, not whole in every message
        object.__setattr__(self, "message", excerpts(self.message))
        if self.hint is not None:
            object.__setattr__(self, "hint", excerpts(self.hint))

    def to_dict(self) -> dict:
        """The diagnostic as data (``--json``): code, severity, message, hint and the span's 1-based ends."""
        span = self.span
        where = {"file": span.file, "line": span.line, "column": span.column, "end_line": span.end_line,
                 "end_column": span.end_column} if span else {"file": None}
        return {"code": self.code, "severity": self.severity, "message": self.message, "hint": self.hint, **where}

    def render(self, sources: dict[str, str] | None = None, colour: bool = False) -> str:
        """The diagnostic as a compiler prints it, with the source line and a caret (``colour``: with a terminal's
        colours, as ``tfspec`` prints to one)."""
        paint = _painter(colour)
        where = paint(f"{self.span}: ", BOLD) if self.span else ""
        severity = paint(f"{self.severity}:", BOLD + (RED if self.severity == "error" else YELLOW))
        lines = [f"{where}{severity} {paint(self.message, BOLD)}  {paint(f'[{self.code}]', DIM)}"]
        text = (sources or {}).get(self.span.file) if self.span else None
        if text is not None and self.span is not None:
            gutter, numbered, caret = _excerpt(text, self.span) or (None, None, None)
            if gutter is not None:
                bar, _, rest = caret.partition("|")
                lines += [paint(gutter, BLUE), paint(numbered.split("|", 1)[0] + "|", BLUE) + numbered.split("|", 1)[1],
                          paint(bar + "|", BLUE) + paint(rest, RED if self.severity == "error" else YELLOW)]
        if self.hint:  # a long hint (a list of names) wraps, as the excerpts are clipped, to one screen's width
            hint = textwrap.wrap(self.hint, EXCERPT_WIDTH + 10, initial_indent="    = help: ",
                                 subsequent_indent="            ", break_on_hyphens=False) or ["    = help:"]
            lines += [paint(line[:11], CYAN) + line[11:] if i == 0 else line for i, line in enumerate(hint)]
        return "\n".join(lines)


BOLD, DIM, RED, YELLOW, BLUE, CYAN, RESET = "\x1b[1m", "\x1b[2m", "\x1b[31m", "\x1b[33m", "\x1b[34m", "\x1b[36m", "\x1b[0m"


def _painter(colour: bool):
    return (lambda text, style: f"{style}{text}{RESET}") if colour else (lambda text, style: text)


def colour_wanted(stream) -> bool:
    """Whether to colour what goes to ``stream``: a terminal, unless ``NO_COLOR`` is set (no-color.org) or the
    terminal is ``dumb``."""
    import os

    return (hasattr(stream, "isatty") and stream.isatty() and not os.environ.get("NO_COLOR")
            and os.environ.get("TERM") != "dumb")


EXCERPT_WIDTH = 100  # characters of a source line shown around the caret
MAX_SHOWN = 50  # diagnostics rendered in full; the rest are counted


def source_lines(text: str) -> list[str]:
    """A spec's lines as the parser numbers them: split at '\\n' only (a form feed, '\\u2028', '\\x85' or a
    lone '\\r' is inside a line), without the '\\r' of a '\\r\\n'."""
    return [line[:-1] if line.endswith("\r") else line for line in text.split("\n")]


def shown(text: object) -> str:
    """A path (or any name a user or a file gave) as tfspec prints it, on a terminal, in JSON, a plot or a page:
    control characters, format characters (a right-to-left override) and line breaks as escapes, and the bytes
    of a name that is not UTF-8 (which Python keeps as lone surrogates) as ``\\xNN``, so that a file name cannot
    set a terminal's title, clear its screen, forge a line of output or make JSON invalid; other text as it is.

    >>> shown("evil\\x1b]0;PWNED\\x07\\r\\n.tfs")
    'evil\\\\x1b]0;PWNED\\\\x07\\\\r\\\\n.tfs'
    >>> shown(b"caf\\xe9.tfs".decode("utf-8", "surrogateescape"))
    'caf\\\\xe9.tfs'
    """
    text = os.fsdecode(text) if isinstance(text, (bytes, os.PathLike)) else str(text)
    return "".join(c if c.isprintable() and not "\ud800" <= c <= "\udfff"
                   else f"\\x{ord(c) - 0xDC00:02x}" if "\udc80" <= c <= "\udcff" else ascii(c)[1:-1] for c in text)


def shown_message(message: object) -> str:
    """A message as tfspec prints it: its lines as they are, and every other character ``shown`` would escape
    escaped, so that no name inside it (a path in an error from a library) reaches the terminal raw."""
    return "\n".join(shown(line) for line in str(message).split("\n"))


def _shown(ch: str) -> str:
    """One character as an excerpt shows it: tabs as a space, other control characters as '?', so every
    character keeps one column under the caret."""
    return ch if ch.isprintable() and not "\ud800" <= ch <= "\udfff" else (" " if ch == "\t" else "?")


def _excerpt(text: str, span: Span) -> list[str]:
    lines = source_lines(text)
    if not 1 <= span.line <= len(lines):
        return []
    line = lines[span.line - 1]
    start = max(span.column - 1, 0)
    # A span over several lines is underlined to the end of its first line.
    end = span.end_column - 1 if span.end_line == span.line else len(line)
    width = max(min(end, len(line)) - start, 1)
    if len(line) > EXCERPT_WIDTH:  # a long line is clipped around the caret
        left = max(0, min(start - EXCERPT_WIDTH // 3, len(line) - EXCERPT_WIDTH))
        clipped = line[left:left + EXCERPT_WIDTH]
        prefix, suffix = ("…" if left else ""), ("…" if left + EXCERPT_WIDTH < len(line) else "")
        line, start = prefix + clipped + suffix, start - left + len(prefix)
        width = max(min(width, EXCERPT_WIDTH - (start - len(prefix))), 1)
    line = "".join(_shown(c) for c in line)
    number = str(span.line)
    pad = " " * len(number)
    return [
        f"    {pad} |",
        f"    {number} | {line}",
        f"    {pad} | {' ' * start}^{'~' * (width - 1)}",
    ]


class SpecWarning(UserWarning):
    """A valid spec that likely says something its author did not mean; ``str()`` renders it as a compiler
    prints a warning, with the source line and a caret. ``tfspec.parse`` issues it through ``warnings``."""

    def __init__(self, diagnostic: Diagnostic, sources: dict[str, str] | None = None):
        self.diagnostic, self.sources = diagnostic, dict(sources or {})
        super().__init__(diagnostic.render(self.sources))


class SpecError(Exception):
    """One or more diagnostics about a spec; ``str()`` renders them all with carets.

    ``file``, ``line``, ``column`` and ``message`` describe the first one.
    """

    def __init__(self, diagnostics: Sequence[Diagnostic], sources: dict[str, str] | None = None):
        if not diagnostics:
            raise ValueError("SpecError needs at least one diagnostic")
        self.diagnostics = list(diagnostics)
        self.sources = dict(sources or {})
        self._rendered: str | None = None
        super().__init__()

    def __repr__(self) -> str:
        return f"SpecError({self.message!r}, {len(self.diagnostics)} diagnostic(s))"

    def __str__(self) -> str:  # rendered when shown, not each time a stage adds the sources and raises again
        if self._rendered is None:
            self._rendered = self.render()
        return self._rendered

    @property
    def first(self) -> Diagnostic:
        return self.diagnostics[0]

    @property
    def file(self) -> str | None:
        return self.first.span.file if self.first.span else None

    @property
    def line(self) -> int | None:
        return self.first.span.line if self.first.span else None

    @property
    def column(self) -> int | None:
        return self.first.span.column if self.first.span else None

    @property
    def message(self) -> str:
        return self.first.message

    @property
    def codes(self) -> list[str]:
        return [d.code for d in self.diagnostics]

    def render(self, colour: bool = False) -> str:
        """Every diagnostic with its excerpt, up to ``MAX_SHOWN``; then how many there are in all."""
        body = "\n\n".join(d.render(self.sources, colour) for d in self.diagnostics[:MAX_SHOWN])
        count = len(self.diagnostics)
        if count > MAX_SHOWN:
            body += f"\n\n{count} errors ({MAX_SHOWN} shown)"
        elif count > 1:
            body += f"\n\n{count} errors"
        return body


@dataclass
class Collector:
    """Gathers independent diagnostics so one run reports them all."""

    diagnostics: list[Diagnostic] = field(default_factory=list)

    def error(self, code: str, message: str, span: Span | None, hint: str | None = None) -> None:
        self.diagnostics.append(Diagnostic(code, message, span, hint))

    def __bool__(self) -> bool:
        return bool(self.diagnostics)

    def raise_if_any(self, sources: dict[str, str] | None = None) -> None:
        if self.diagnostics:
            ordered = sorted(self.diagnostics, key=_position)
            raise SpecError(_dedupe(ordered), sources)


def _position(d: Diagnostic) -> tuple:
    s = d.span
    return (0, s.file, s.line, s.column) if s else (1, "", 0, 0)


def _dedupe(diagnostics: Iterable[Diagnostic]) -> list[Diagnostic]:
    seen, out = set(), []
    for d in diagnostics:
        if d not in seen:
            seen.add(d)
            out.append(d)
    return out


# How many candidate names the close-match searches of one spec may compare, in all: a spec with thousands of
# misspellings of thousands of names gets suggestions for its first errors (those shown) and stays fast.
SUGGESTION_BUDGET = 20_000
_suggestions_left: ContextVar[int] = ContextVar("suggestions_left", default=SUGGESTION_BUDGET)


# Names the hints that list every defined parameter may go through, in all: 1,000 errors among 1,000 names
# list them all; 9,000 among 9,000 (81 million names) took 4 s.
LISTING_BUDGET = 2_000_000
_listings_left: ContextVar[int] = ContextVar("listings_left", default=LISTING_BUDGET)


def reset_suggestions() -> None:
    """Give the next spec the whole suggestion and listing budgets (each parse starts with them)."""
    _suggestions_left.set(SUGGESTION_BUDGET)
    _listings_left.set(LISTING_BUDGET)


def _spend(budget: ContextVar[int], names: int) -> bool:
    left = budget.get()
    if names > left:
        return False
    budget.set(left - names)
    return True


def spend_listing(names: int) -> bool:
    """Take ``names`` from the spec's budget for hints that list every defined name; False (nothing taken) when
    too little is left: the hint is shortened, and a spec with thousands of errors stays fast."""
    return _spend(_listings_left, names)


def did_you_mean(word: str, candidates: Iterable[str]) -> str | None:
    """A "did you mean 'x'?" hint for a misspelled ``word``, or None when nothing is close (or the spec's
    suggestion budget is spent).

    >>> did_you_mean("atention", ["attention", "feedforward"])
    "did you mean 'attention'?"
    """
    sized = hasattr(candidates, "__len__")
    if sized and len(candidates) > _suggestions_left.get():  # decided before sorting them
        return None
    pool = sorted(set(candidates))
    if not _spend(_suggestions_left, len(pool)):
        return None
    matches = difflib.get_close_matches(word, pool, n=1, cutoff=0.6)
    if not matches:
        lowered = {c.lower(): c for c in pool}
        if word.lower() in lowered:
            matches = [lowered[word.lower()]]
    return f"did you mean '{matches[0]}'?" if matches else None


def listing(names: Iterable[str], limit: int = 30) -> str:
    """``names`` comma-separated in their order, the first ``limit`` of them and how many more.

    >>> listing(["b", "a", "c"], limit=2)
    'b, a (and 1 more)'
    """
    names = list(dict.fromkeys(names))
    more = f" (and {len(names) - limit} more)" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more


def one_of(candidates: Iterable[str]) -> str:
    """'expected one of: a, b, c' for hints when no single suggestion is close."""
    return "expected one of: " + listing(sorted(set(candidates)))


class RunError(ValueError):
    """Training or generation cannot go on (unusable data, a bad checkpoint, a diverged loss).

    The command line prints the message and exits 1; it never means a bug.
    """


class LengthError(RunError):
    """Sequences longer than the spec's learned positions, as a length option (``--seq-len``, ``--max-len``, a
    prompt) asks: the command line exits 2, as it does when ``build`` or ``summary`` refuse the same length."""


class RunWarning(UserWarning):
    """Something of a run that tfspec passed over and went on without (a damaged line of ``metrics.jsonl``); the
    command line prints it as one line, ``warning: ...``."""


class DataError(RunError):
    """Data that cannot train this model (an empty file, lengths past the positions): exit 1."""


class CheckpointError(RunError):
    """A path that is not a usable checkpoint: exit 1 with the reason."""
