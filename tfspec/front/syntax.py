"""Stage 1, syntax: spec text -> a small AST whose every node knows its source span.

The grammar is ``grammars/tfspec.lark`` (shipped in the wheel as ``tfspec.grammars``),
loaded once as an LALR parser. Lark's exceptions never escape this module: they
become ``SpecError``s with a caret and, for a misspelled keyword, a suggestion.
``include "other.tfs"`` items are expanded here, so later stages see one module.
"""

from __future__ import annotations

import functools
import re
import stat
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Iterator, Union

from lark import Lark, Token, Transformer, Tree, v_args
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken, VisitError

from ..errors import Diagnostic, Span, SpecError, did_you_mean, reset_suggestions, shown


# ---------------------------------------------------------------- AST nodes
@dataclass(frozen=True)
class Number:
    value: int | float
    span: Span
    text: str = ""  # as written, so the formatter keeps `1e-6` and `37_000`


@dataclass(frozen=True)
class Name:
    id: str
    span: Span


@dataclass(frozen=True)
class String:
    value: str
    span: Span


@dataclass(frozen=True)
class Arg:
    name: str | None  # None for a positional argument
    name_span: Span | None
    value: "Expr"
    span: Span


@dataclass(frozen=True)
class Call:
    func: str
    func_span: Span
    args: tuple[Arg, ...]
    span: Span


@dataclass(frozen=True)
class BinOp:
    op: str  # one of + - * / // % **
    left: "Expr"
    right: "Expr"
    span: Span


@dataclass(frozen=True)
class Neg:
    operand: "Expr"
    span: Span


Expr = Union[Number, Name, String, Call, BinOp, Neg]


@dataclass(frozen=True)
class Setting:
    """A statement inside a body: ``attention self heads=8``, ``dropout 0.1``; a section has a body of its own
    (``layers every(2) { self_attn mask=causal }``)."""

    name: str
    name_span: Span
    args: tuple[Arg, ...]
    span: Span
    body: tuple["Statement", ...] | None = None


@dataclass(frozen=True)
class Assignment:
    """A wiring statement inside a stack body: ``x = x + attention(norm(x))``."""

    target: str
    target_span: Span
    value: Expr
    span: Span


Statement = Union[Setting, Assignment]


@dataclass(frozen=True)
class ModelDecl:
    name: str
    span: Span


@dataclass(frozen=True)
class Include:
    path: str
    span: Span


@dataclass(frozen=True)
class Binding:
    name: str
    name_span: Span
    value: Expr
    span: Span


@dataclass(frozen=True)
class Let:
    bindings: tuple[Binding, ...]
    span: Span


@dataclass(frozen=True)
class Defaults:
    body: tuple[Statement, ...]
    span: Span


@dataclass(frozen=True)
class EmbeddingDecl:
    name: str
    name_span: Span
    body: tuple[Statement, ...]
    span: Span


@dataclass(frozen=True)
class StackDecl:
    role: str  # "encoder" | "decoder"
    role_span: Span
    repeat: Expr
    body: tuple[Statement, ...]
    span: Span


@dataclass(frozen=True)
class HeadDecl:
    args: tuple[Arg, ...]
    span: Span


@dataclass(frozen=True)
class PoolerDecl:
    args: tuple[Arg, ...]
    span: Span


@dataclass(frozen=True)
class MtpDecl:
    args: tuple[Arg, ...]
    span: Span


@dataclass(frozen=True)
class TowerDecl:
    """``tower NAME { ... }``: the items of one tower (``defaults``, embeddings, stacks, a head, a pooler)."""
    name: str
    name_span: Span
    items: tuple
    span: Span


@dataclass(frozen=True)
class ContrastiveDecl:
    args: tuple[Arg, ...]
    span: Span


@dataclass(frozen=True)
class ConnectDecl:
    """``connect SOURCE -> TARGET args { steps }``."""
    source: str
    source_span: Span
    target: str
    target_span: Span
    args: tuple[Arg, ...]
    body: tuple[Statement, ...]
    span: Span


Item = Union[ModelDecl, Include, Let, Defaults, EmbeddingDecl, StackDecl, HeadDecl, PoolerDecl, MtpDecl, TowerDecl,
             ContrastiveDecl, ConnectDecl]


@dataclass(frozen=True)
class Module:
    items: tuple[Item, ...]
    file: str
    sources: dict  # file -> text, for every file that contributed items (includes too)


# ---------------------------------------------------------------- parsing
@functools.cache
def _parser() -> Lark:
    grammar = grammar_text()
    return Lark(grammar, parser="lalr", propagate_positions=True, maybe_placeholders=True,
                cache=parser_cache(grammar) or False)


def parser_cache(grammar: str) -> str | None:
    """Where the built parser is kept between runs, which saves building its tables (most of a small ``check``):
    a file in the user's own cache directory, named by the grammar and Lark's version. Lark's cache is a pickle,
    so it is used only where no one else can write; None: nowhere to trust (or no POSIX owner to ask)."""
    import hashlib
    import os

    import lark

    try:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tfspec"
        base.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = base.stat()
    except (OSError, RuntimeError):  # a read-only, missing or unknown home
        return None
    if not hasattr(os, "getuid") or info.st_uid != os.getuid() or info.st_mode & 0o022:
        return None
    digest = hashlib.sha256(f"{grammar}\0{lark.__version__}".encode()).hexdigest()[:16]
    return str(base / f"parser-{digest}.lark")


def grammar_text() -> str:
    """The grammar as shipped, for docs and `tfspec grammar`: the installed package's, or a source checkout's
    ``grammars/`` when tfspec runs from one uninstalled (``PYTHONPATH=.`` on the GPU machine)."""
    try:
        return resources.files("tfspec.grammars").joinpath("tfspec.lark").read_text(encoding="utf-8")
    except ModuleNotFoundError:
        return (Path(__file__).resolve().parents[2] / "grammars" / "tfspec.lark").read_text(encoding="utf-8")


MAX_DEPTH = 200  # nesting levels of a spec's syntax tree; later stages walk it recursively
MAX_INCLUDE_BYTES = 1 << 20  # one included file
MAX_INCLUDES = 100  # include reads for one spec, a file named twice counted twice
MAX_INCLUDED_BYTES = 8 << 20  # text read through includes for one spec, all files together
MAX_TOKENS = 20_000  # tokens of one spec, its includes counted in: checking and formatting take up to ~90 µs each


@dataclass
class _IncludeReads:
    """What one spec's includes have read so far, all levels together: a file named many times, or many
    files each under the cap, cannot add up to more than the budget."""
    files: int = 0
    bytes: int = 0
    tokens: int = 0  # of the spec and every file it includes


def parse_module(text: str, file: str = "<spec>", *, _including: tuple[str, ...] = (),
                 _expand_includes: bool = True, _reads: _IncludeReads | None = None) -> Module:
    """Parse spec text into a ``Module``; includes are read relative to ``file`` (see ``_read_include``)."""
    if not _including:
        reset_suggestions()
    reads = _reads if _reads is not None else _IncludeReads()
    deep_bracket = _bracket_too_deep(text, file)
    if deep_bracket is not None:  # found by one regular-expression scan, before Lark builds a tree that deep
        raise _too_deep_error(deep_bracket, text)
    too_long = _past_token_budget(text, file, reads)
    if too_long is not None:  # counted by one bounded scan, before Lark spends ~10 µs on each token
        raise SpecError([Diagnostic("too-long", f"more than {MAX_TOKENS:,} tokens in one spec (its includes counted "
                                            "in)", too_long, "split the model into smaller specs, or name repeated "
                                            "parts with `let`")], {file: text})
    try:
        tree = _parser().parse(text)
    except UnexpectedInput as exc:
        raise SpecError([_syntax_diagnostic(exc, text, file)], {file: text}) from None
    too_deep = _too_deep(tree)
    if too_deep is not None:
        raise _too_deep_error(_span(file, too_deep), text)
    try:
        items = _ToAst(file).transform(tree)
    except VisitError as exc:  # our own callbacks raise SpecError; Lark wraps them
        if isinstance(exc.orig_exc, SpecError):
            raise SpecError(exc.orig_exc.diagnostics, {file: text}) from None
        raise
    sources = {file: text}
    expanded: list[Item] = []
    for item in items:
        if isinstance(item, Include) and _expand_includes:
            included = _read_include(item, file, sources, _including + (file,), reads)
            expanded.extend(included.items)
            sources.update(included.sources)
        else:
            expanded.append(item)
    return Module(tuple(expanded), file, sources)


def _too_deep_error(span: Span, text: str) -> SpecError:
    return SpecError([Diagnostic("syntax", f"nested too deeply (more than {MAX_DEPTH} levels)", span,
                                 "name a part with `let`, or write it flatter")], {span.file: text})


_TOKEN = re.compile(r'"[^"\n]*"|#[^\n]*|[\w.]+|\S')  # at least one per token Lark sees; comments and strings one


def _past_token_budget(text: str, file: str, reads: _IncludeReads) -> Span | None:
    """Where ``text`` takes the spec past ``MAX_TOKENS`` (adding its tokens to ``reads``), or None; the scan
    stops there, so a huge file costs no more than the budget."""
    for match in _TOKEN.finditer(text):
        reads.tokens += 1
        if reads.tokens > MAX_TOKENS:
            return _span_at(text, file, match.start())
    return None


def _span_at(text: str, file: str, offset: int) -> Span:
    """The one-character span at ``offset``, lines counted as the parser counts them (at ``\\n`` only)."""
    line = text.count("\n", 0, offset) + 1
    column = offset - text.rfind("\n", 0, offset)
    return Span(file, line, column, line, column + 1)


_BRACKETS_STRINGS_COMMENTS = re.compile(r'[(){}\[\]]|"[^"\n]*"|#[^\n]*')


def _bracket_too_deep(text: str, file: str) -> Span | None:
    """Where brackets first open more than ``MAX_DEPTH`` deep (outside strings and comments), or None."""
    depth = 0
    for match in _BRACKETS_STRINGS_COMMENTS.finditer(text):
        bracket = match.group()
        if bracket in "({[":
            depth += 1
            if depth > MAX_DEPTH:
                return _span_at(text, file, match.start())
        elif bracket in ")}]":
            depth = max(depth - 1, 0)
    return None


def _too_deep(tree: Tree):
    """The position (``meta``) of the first node nested deeper than ``MAX_DEPTH``, or None; iterative, so a
    deep tree cannot overflow the stack that measures it."""
    stack = [(tree, 1, tree.meta)]
    while stack:
        node, depth, meta = stack.pop()
        meta = node.meta if not getattr(node.meta, "empty", True) else meta
        if depth > MAX_DEPTH:
            return meta
        stack.extend((child, depth + 1, meta) for child in node.children if isinstance(child, Tree))
    return None


def _read_include(item: Include, file: str, sources: dict, chain: tuple[str, ...], reads: _IncludeReads) -> Module:
    """The module an ``include`` names. The policy: a relative path to a regular UTF-8 file of at most 1 MiB
    inside the directory tree of the spec that names it (a spec given as text: the working directory); no
    absolute paths, no ``..`` or link out of that tree, no devices, FIFOs or directories, no cycles, and at
    most ``MAX_INCLUDES`` reads and ``MAX_INCLUDED_BYTES`` in all. A refused file is never read, so no error quotes it."""
    def refuse(code: str, why: str) -> SpecError:
        return SpecError([Diagnostic(code, f"include '{shown(item.path)}': {why}", item.span)], sources)

    if not item.path or "\x00" in item.path or any("\ud800" <= c <= "\udfff" for c in item.path):
        raise refuse("value", "not a file name (empty, a NUL byte or a lone surrogate)")
    if Path(item.path).is_absolute():
        raise refuse("value", "an absolute path; includes are relative to the spec's directory")
    base = (Path(file).parent if not file.startswith("<") else Path.cwd()).resolve()
    path = base / item.path
    try:
        real = path.resolve()
    except (OSError, RuntimeError) as exc:  # a symlink loop
        raise refuse("io", f"cannot resolve the path: {exc}") from None
    if real != base and base not in real.parents:
        raise refuse("value", "outside the spec's directory tree; includes stay inside it")
    if str(real) in {str(Path(c).resolve()) for c in chain if not c.startswith("<")}:
        raise SpecError([Diagnostic("structure", f"include cycle: '{item.path}' includes itself", item.span)], sources)
    reads.files += 1
    if reads.files > MAX_INCLUDES:
        raise refuse("structure", f"more than {MAX_INCLUDES} includes are read for one spec")
    try:
        info = real.stat()
    except OSError as exc:
        raise SpecError([Diagnostic("io", f"cannot read included file '{shown(item.path)}': "
                                          f"{exc.strerror or type(exc).__name__}", item.span)], sources) from None
    if not stat.S_ISREG(info.st_mode):
        kind = "a directory" if stat.S_ISDIR(info.st_mode) else "not a regular file (a device, FIFO or socket)"
        raise refuse("io", f"{kind}; an include names a spec file")
    if info.st_size > MAX_INCLUDE_BYTES:
        raise refuse("io", f"{info.st_size:,} bytes; an included spec may have at most {MAX_INCLUDE_BYTES:,}")
    if reads.bytes + info.st_size > MAX_INCLUDED_BYTES:
        raise refuse("io", f"the includes of one spec may read at most {MAX_INCLUDED_BYTES:,} bytes in all, and "
                           f"{reads.bytes:,} were read before this file of {info.st_size:,}")
    try:
        with open(real, "rb") as handle:
            data = handle.read(MAX_INCLUDE_BYTES + 1)
        if len(data) > MAX_INCLUDE_BYTES:
            raise refuse("io", f"more than {MAX_INCLUDE_BYTES:,} bytes; an included spec may have at most that")
        reads.bytes += len(data)
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise refuse("io", "not UTF-8 text") from None
    except OSError as exc:
        raise refuse("io", f"cannot read: {exc.strerror or type(exc).__name__}") from None
    try:
        return parse_module(text, str(path), _including=chain, _reads=reads)
    except SpecError as exc:
        raise SpecError(exc.diagnostics, {**sources, **exc.sources}) from None


# ---------------------------------------------------------------- syntax errors
_TERMINAL_WORDS = {
    "NAME": "a name",
    "NUMBER": "a number",
    "STRING": "a string",
    "_NL": "a new line",
    "$END": "the end of the file",
    "_TIMES": "'x'",
}


def _describe(terminal: str) -> str:
    if terminal in _TERMINAL_WORDS:
        return _TERMINAL_WORDS[terminal]
    for t in _parser().terminals:
        if t.name == terminal and t.pattern.type == "str":
            return f"'{t.pattern.value}'"
    return terminal.lower()


def _keywords(expected: set[str]) -> dict[str, str]:
    """Keyword literals among the expected terminals: {'encoder': 'ENCODER', ...}."""
    out = {}
    for t in _parser().terminals:
        if t.name in expected and t.pattern.type == "str" and t.pattern.value.isidentifier():
            out[t.pattern.value] = t.name
    return out


def _syntax_diagnostic(exc: UnexpectedInput, text: str, file: str) -> Diagnostic:
    line, column = exc.line, exc.column
    if isinstance(exc, UnexpectedToken) and exc.token.type == "$END" or isinstance(exc, UnexpectedEOF):
        unclosed = _unclosed_brace(text, file)
        if unclosed is not None:
            return Diagnostic("syntax", "'{' is never closed", unclosed, "add '}' to end this body")
        line, column = _end_position(text)
        expected = getattr(exc, "expected", None) or getattr(exc, "accepts", None) or set()
        return Diagnostic("syntax", "unexpected end of file", Span(file, line, column, line, column + 1),
                          _expected_hint(set(expected)))
    if isinstance(exc, UnexpectedCharacters):
        char = text[exc.pos_in_stream] if exc.pos_in_stream < len(text) else ""
        span = Span(file, line, column, line, column + 1)
        if char == '"':
            return Diagnostic("syntax", "unterminated string", span, 'close it with " on the same line')
        return Diagnostic("syntax", f"unexpected character {char!r}", span,
                          "names are letters, digits and '_'; comments start with '#'")
    assert isinstance(exc, UnexpectedToken)
    token = exc.token
    value = str(token)
    span = Span(file, token.line, token.column, token.end_line or token.line,
                token.end_column or token.column + max(len(value), 1))
    expected = set(exc.expected) | set(getattr(exc, "accepts", None) or ())
    keywords = _keywords(expected)
    if token.type == "_NL":
        return Diagnostic("syntax", "unexpected end of line", span, _expected_hint(expected))
    if token.type == "NAME" and keywords:  # a misspelled keyword where only keywords fit
        what = "statement" if {"model", "let"} & set(keywords) else "keyword"
        return Diagnostic("unknown-keyword", f"unknown {what} '{value}'", span,
                          did_you_mean(value, keywords) or "a spec is made of: " + ", ".join(sorted(keywords)))
    return Diagnostic("syntax", f"unexpected {_token_words(token)}", span, _expected_hint(expected))


def _token_words(token: Token) -> str:
    if token.type in ("NAME", "NUMBER", "STRING"):
        return f"{_TERMINAL_WORDS[token.type][2:]} '{token}'"
    return f"'{token}'"


def _expected_hint(expected: set[str]) -> str | None:
    words = sorted({_describe(t) for t in expected if t not in ("COMMENT",)})
    if not words:
        return None
    if len(words) > 8:
        words = words[:8] + ["..."]
    return "expected " + (words[0] if len(words) == 1 else "one of: " + ", ".join(words))


def _end_position(text: str) -> tuple[int, int]:
    lines = text.split("\n")
    return len(lines), len(lines[-1]) + 1


def split_comment(line: str) -> tuple[str, str | None]:
    """A source line's code and its ``# comment`` (None if none); a '#' inside a string is text."""
    in_string = False
    for i, ch in enumerate(line):
        if ch == '"':
            in_string = not in_string
        elif ch == "#" and not in_string:
            return line[:i], line[i:]
    return line, None


def _unclosed_brace(text: str, file: str) -> Span | None:
    stack: list[tuple[int, int]] = []
    for lineno, line in enumerate(text.split("\n"), start=1):
        code, _ = split_comment(line)
        code = re.sub(r'"[^"]*"?', lambda m: " " * len(m.group()), code)  # braces in strings are text
        for col, ch in enumerate(code, start=1):
            if ch == "{":
                stack.append((lineno, col))
            elif ch == "}" and stack:
                stack.pop()
    if not stack:
        return None
    lineno, col = stack[-1]
    return Span(file, lineno, col, lineno, col + 1)


# ---------------------------------------------------------------- tree -> AST
def _span(file: str, meta) -> Span:
    return Span(file, meta.line, meta.column, meta.end_line, meta.end_column)


def _tspan(file: str, tok: Token) -> Span:
    return Span(file, tok.line, tok.column, tok.end_line, tok.end_column)


def _number(tok: Token, file: str) -> int | float:
    text = str(tok)
    try:
        if any(c in text for c in ".eE"):
            value = float(text)
            if value in (float("inf"),):
                raise ValueError
            return value
        return int(text)
    except ValueError:
        raise SpecError([Diagnostic("syntax", f"number '{text[:20]}' is too large", _tspan(file, tok))]) from None


@v_args(meta=True)
class _ToAst(Transformer):
    def __init__(self, file: str):
        super().__init__()
        self.file = file

    def _s(self, meta) -> Span:
        return _span(self.file, meta)

    # expressions
    def number(self, meta, c):
        return Number(_number(c[0], self.file), _tspan(self.file, c[0]), str(c[0]))

    def string(self, meta, c):
        return String(str(c[0])[1:-1], _tspan(self.file, c[0]))

    def name(self, meta, c):
        return Name(str(c[0]), _tspan(self.file, c[0]))

    def call(self, meta, c):
        args = tuple(a for a in c[1:] if a is not None)
        return Call(str(c[0]), _tspan(self.file, c[0]), args, self._s(meta))

    def _binop(op):  # noqa: N805 - builds methods below
        def method(self, meta, c):
            return BinOp(op, c[0], c[1], self._s(meta))
        return method

    add, sub, mul = _binop("+"), _binop("-"), _binop("*")
    div, floordiv, mod, pow = _binop("/"), _binop("//"), _binop("%"), _binop("**")

    def neg(self, meta, c):
        return Neg(c[0], self._s(meta))

    def positional(self, meta, c):
        return Arg(None, None, c[0], self._s(meta))

    def keyword(self, meta, c):
        return Arg(str(c[0]), _tspan(self.file, c[0]), c[1], self._s(meta))

    # statements
    def setting(self, meta, c):
        return Setting(str(c[0]), _tspan(self.file, c[0]), tuple(c[1:]), self._s(meta))

    def section(self, meta, c):
        return Setting(str(c[0]), _tspan(self.file, c[0]), tuple(c[1:-1]), self._s(meta), c[-1])

    def assignment(self, meta, c):
        return Assignment(str(c[0]), _tspan(self.file, c[0]), c[1], self._s(meta))

    def body(self, meta, c):
        return tuple(c)

    # items
    def start(self, meta, c):
        return list(c)

    def model_decl(self, meta, c):
        return ModelDecl(str(c[0]), _tspan(self.file, c[0]))

    def include_decl(self, meta, c):
        return Include(str(c[0])[1:-1], self._s(meta))

    def binding(self, meta, c):
        return Binding(str(c[0]), _tspan(self.file, c[0]), c[1], self._s(meta))

    def let_decl(self, meta, c):
        return Let(tuple(c), self._s(meta))

    def defaults_decl(self, meta, c):
        return Defaults(c[0], self._s(meta))

    def embedding_decl(self, meta, c):
        return EmbeddingDecl(str(c[0]), _tspan(self.file, c[0]), c[1], self._s(meta))

    def stack_role(self, meta, c):
        return c[0]

    def stack_decl(self, meta, c):
        role = c[0]
        return StackDecl(str(role), _tspan(self.file, role), c[1], c[2], self._s(meta))

    def head_decl(self, meta, c):
        return HeadDecl(tuple(c), self._s(meta))

    def pooler_decl(self, meta, c):
        return PoolerDecl(tuple(c), self._s(meta))

    def mtp_decl(self, meta, c):
        return MtpDecl(tuple(c), self._s(meta))

    def tower_decl(self, meta, c):
        return TowerDecl(str(c[0]), _tspan(self.file, c[0]), tuple(c[1:]), self._s(meta))

    def contrastive_decl(self, meta, c):
        return ContrastiveDecl(tuple(c), self._s(meta))

    def connect_decl(self, meta, c):
        return ConnectDecl(str(c[0]), _tspan(self.file, c[0]), str(c[1]), _tspan(self.file, c[1]), tuple(c[2:-1]),
                           c[-1], self._s(meta))


def names(items, calls: bool = False) -> Iterator[Name]:
    """Every name written as a value in ``items`` (a module's items, statements, arguments or expressions): the
    ``let`` parameters an expression reads, the words of a setting (``causal``, ``pre``), wiring variables; with
    ``calls``, the name of each call too (``window`` of ``window(4096)``).

    >>> [n.id for n in names(parse_module("let a = 2, b = a * c").items)]
    ['a', 'c']
    """
    stack = list(items) if isinstance(items, (list, tuple)) else [items]
    stack.reverse()
    while stack:
        node = stack.pop()
        if isinstance(node, Name):
            yield node
            continue
        if calls and isinstance(node, Call):
            yield Name(node.func, node.func_span)
        children = ()
        if isinstance(node, Let):
            children = [b.value for b in node.bindings]
        elif isinstance(node, StackDecl):
            children = [node.repeat, *node.body]
        elif isinstance(node, (Defaults, EmbeddingDecl)):
            children = node.body
        elif isinstance(node, TowerDecl):
            children = node.items
        elif isinstance(node, ConnectDecl):
            children = [*node.args, *node.body]
        elif isinstance(node, (HeadDecl, PoolerDecl, ContrastiveDecl, Call)):
            children = node.args
        elif isinstance(node, Setting):
            children = [*node.args, *(node.body or ())]
        elif isinstance(node, (Arg, Assignment)):
            children = [node.value]
        elif isinstance(node, BinOp):
            children = [node.left, node.right]
        elif isinstance(node, Neg):
            children = [node.operand]
        stack.extend(reversed(children))


def expr_to_text(e: Expr) -> str:
    """Canonical source text of an expression (used in messages and by the formatter)."""
    if isinstance(e, Number):
        return e.text or (repr(e.value) if isinstance(e.value, float) else str(e.value))
    if isinstance(e, Name):
        return e.id
    if isinstance(e, String):
        return f'"{e.value}"'
    if isinstance(e, Neg):
        return f"-{_paren(e.operand, 4)}"  # `-a ** b` already means -(a ** b)
    if isinstance(e, Call):
        return f"{e.func}({', '.join(arg_to_text(a) for a in e.args)})"
    prec = _PRECEDENCE[e.op]
    right = _paren(e.right, prec + (0 if e.op == "**" else 1))
    left = _paren(e.left, prec + (1 if e.op == "**" else 0))
    return f"{left} {e.op} {right}"


_PRECEDENCE = {"+": 1, "-": 1, "*": 2, "/": 2, "//": 2, "%": 2, "**": 4}


def _paren(e: Expr, min_prec: int) -> str:
    text = expr_to_text(e)
    prec = _PRECEDENCE.get(e.op, 9) if isinstance(e, BinOp) else (3 if isinstance(e, Neg) else 9)
    return f"({text})" if prec < min_prec else text


def arg_to_text(a: Arg) -> str:
    return f"{a.name}={expr_to_text(a.value)}" if a.name else expr_to_text(a.value)
