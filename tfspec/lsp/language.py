"""What an editor asks about a spec, answered without any editor protocol: problems, hovers, completions,
definitions, renames, symbols and formatting. ``tfspec.lsp.server`` speaks the Language Server Protocol over
these; tests and other front ends can call them directly.

Positions are 0-based ``(line, column)`` pairs counted in characters (code points), as Python indexes a line;
the server converts them to the protocol's UTF-16 units.

A spec being typed rarely parses, so completion and hover read the text around the cursor with a small lexer
(which block the cursor is in, which statement, which call, which argument) and use the last parse only for
what needs it: the values of ``let`` names and the parameter counts of blocks.

>>> doc = Document.check("let d = 64\\nembedding t { vocab 10; dim d }\\ndecoder x 2 { attention self heads=4 }")
>>> [item.label for item in completions(doc, 2, 37)][:3]
['kind=', 'bias=', 'out_bias=']
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import Diagnostic, Span, SpecError, SpecWarning, source_lines
from ..front import resolve as R
from ..front import words
from ..front import schema as S
from ..front.syntax import (Arg, Assignment, ConnectDecl, ContrastiveDecl, Defaults, EmbeddingDecl, HeadDecl, Let, ModelDecl,
                            Module, MtpDecl, PoolerDecl, Setting, StackDecl, TowerDecl, names, parse_module)
from ..registry import (ACTIVATIONS, ATTENTION_KINDS, FEEDFORWARD_KINDS, INITS, INPUTS, MASKS, NORMS, POOLS, POSITIONS,
                        Registry,
                        format_value, option_docs)

Position = tuple[int, int]  # 0-based line and column, in characters
FAMILIES: tuple[Registry, ...] = (ATTENTION_KINDS, MASKS, POSITIONS, NORMS, ACTIVATIONS, FEEDFORWARD_KINDS, INITS,
                                  INPUTS, POOLS)


# ---------------------------------------------------------------- a checked document
@dataclass
class Document:
    """A spec's text with what checking it found: ``problems`` (errors and warnings), the parsed ``module``
    (None when the text does not parse) and the validated ``spec`` (None when it has errors)."""

    text: str
    file: str
    problems: list[Diagnostic] = field(default_factory=list)
    module: Module | None = None
    spec: object = None
    sources: dict[str, str] = field(default_factory=dict)  # every file's text the problems point into

    @classmethod
    def check(cls, text: str, file: str = "<spec>") -> "Document":
        """Parse and validate ``text`` as the file ``file`` (its includes are read relative to it)."""
        doc = cls(text, file, sources={file: text})
        try:
            doc.module = parse_module(text, file)
        except SpecError as exc:
            doc.problems, doc.sources = exc.diagnostics, {**exc.sources, file: text}
            return doc
        doc.sources = {**doc.module.sources, file: text}
        from ..ir.api import lower

        try:
            spec = R.resolve(doc.module)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", SpecWarning)
                lower(spec)
            doc.spec = spec
            doc.problems = list(spec._warnings) + [w.message.diagnostic for w in caught
                                                   if isinstance(w.message, SpecWarning)]
        except SpecError as exc:
            doc.problems = exc.diagnostics
            doc.sources.update(exc.sources)
        return doc

    def line(self, number: int) -> str:
        lines = source_lines(self.text)
        return lines[number] if 0 <= number < len(lines) else ""

    def position(self, offset: int) -> Position:
        """The position of a character offset (the inverse of ``offset``)."""
        before = self.text[:offset]
        return before.count("\n"), offset - (before.rfind("\n") + 1)

    def offset(self, position: Position) -> int:
        """The character offset of a position (clamped to the text)."""
        line, column = position
        starts = [0] + [m.end() for m in re.finditer("\n", self.text)]
        if line >= len(starts):
            return len(self.text)
        return min(starts[line] + column, (starts[line + 1] - 1) if line + 1 < len(starts) else len(self.text))


def span_range(span: Span | None) -> tuple[Position, Position]:
    """A span's 0-based start and end (a span-less problem sits at the start of the file)."""
    if span is None:
        return (0, 0), (0, 0)
    return (span.line - 1, span.column - 1), (span.end_line - 1, span.end_column - 1)


def same_file(span_file: str, file: str) -> bool:
    return span_file == file or (not span_file.startswith("<") and not file.startswith("<")
                                 and Path(span_file).resolve() == Path(file).resolve())


# ---------------------------------------------------------------- reading the text around the cursor
_TOKEN = re.compile(r"""(?P<comment>\#[^\n]*)|(?P<newline>\n)|(?P<continued>\\\r?\n)|(?P<space>[ \t\f\r]+)
    |(?P<string>"[^"\n]*"?)|(?P<name>[A-Za-z_][A-Za-z0-9_]*)
    |(?P<number>(\d(_?\d)*(\.(\d(_?\d)*)?)?|\.\d(_?\d)*)([eE][+-]?\d+)?)|(?P<op>\*\*|//|[{}()=,;+\-*/%×])|(?P<other>.)""",
                    re.VERBOSE)


@dataclass(frozen=True)
class Token:
    kind: str
    text: str
    start: int  # offset in the text


def tokens(text: str) -> list[Token]:
    """The spec's tokens, comments and spaces left out."""
    out = []
    for m in _TOKEN.finditer(text):
        if m.lastgroup not in ("comment", "space", "continued"):
            out.append(Token(m.lastgroup, m.group(), m.start()))
    return out


@dataclass
class Context:
    """Where the cursor is: ``place`` (a ``words`` place, or ``stack``/``section``/``defaults`` for a body),
    the current statement's tokens, the calls the cursor is inside (innermost last) and the argument it is in."""

    block: str  # "top", "defaults", "embedding", "stack", "section"
    statement: list[Token]
    calls: list[tuple[str | None, list[Token]]]  # (called name, the tokens inside its parentheses so far)

    @property
    def keyword(self) -> str | None:
        """The statement's first word."""
        return self.statement[0].text if self.statement and self.statement[0].kind == "name" else None

    def level(self) -> list[Token]:
        """The tokens of the innermost call's current argument, or of the statement outside any call."""
        if self.calls:
            inside = self.calls[-1][1]
            commas = [i for i, t in enumerate(inside) if t.text == ","]
            return inside[commas[-1] + 1:] if commas else inside
        return self.statement

    def argument(self) -> str | None:
        """The name of the ``name=`` argument whose value the cursor is in, or None (a new argument starts)."""
        level = self.level()
        for i in range(len(level) - 1, 0, -1):
            if level[i].text == "=" and level[i - 1].kind == "name":
                after = level[i + 1:]
                if not after or after[-1].kind == "op" and after[-1].text not in ")}":
                    return level[i - 1].text
                return _still_expression(after) and level[i - 1].text or None
        return None

    def at_start(self) -> bool:
        return not self.statement and not self.calls


def _still_expression(after: list[Token]) -> bool:
    """Whether tokens after an ``=`` are one unfinished expression (``causal +``), not a value and then the start
    of another argument (``8 mask``): two operands in a row end it."""
    previous_operand = False
    depth = 0
    for t in after:
        if t.text == "(":
            depth += 1
            previous_operand = False
        elif t.text == ")":
            depth -= 1
            previous_operand = True
        elif t.kind in ("name", "number", "string"):
            if previous_operand and depth == 0:
                return False
            previous_operand = True
        else:
            previous_operand = False
    return not previous_operand  # a finished value followed by nothing: the next word starts an argument


def context_at(text: str, offset: int) -> Context:
    """Read the text before ``offset`` (the partial word under the cursor left out)."""
    start = offset
    while start > 0 and (text[start - 1].isalnum() or text[start - 1] == "_"):
        start -= 1
    blocks = ["top"]
    statement: list[Token] = []
    calls: list[tuple[str | None, list[Token]]] = []
    for t in tokens(text[:start]):
        if t.text == "(":
            level = calls[-1][1] if calls else statement  # the tokens the call's name ends
            name = level[-1].text if level and level[-1].kind == "name" else None
            level.append(t)
            calls.append((name, []))
        elif t.text == ")" and calls:
            calls.pop()
            (calls[-1][1] if calls else statement).append(t)
        elif t.text == "{":
            blocks.append(_body_of(blocks[-1], statement))
            statement, calls = [], []
        elif t.text == "}":
            if len(blocks) > 1:
                blocks.pop()
            statement, calls = [], []
        elif t.kind == "newline" or t.text == ";":
            statement, calls = [], []
        elif calls:
            calls[-1][1].append(t)
        else:
            statement.append(t)
    return Context(blocks[-1], statement, calls)


def _body_of(block: str, statement: list[Token]) -> str:
    first = statement[0].text if statement else ""
    if block == "top":
        return {"defaults": "defaults", "embedding": "embedding", "encoder": "stack", "decoder": "stack"}.get(first, "top")
    return "section" if first in R.SECTIONS else block


def word_at(text: str, offset: int) -> tuple[int, int]:
    """The start and end offsets of the name (or number) under ``offset``; equal when there is none."""
    start = end = offset
    while start > 0 and (text[start - 1].isalnum() or text[start - 1] == "_"):
        start -= 1
    while end < len(text) and (text[end].isalnum() or text[end] == "_"):
        end += 1
    return start, end


# ---------------------------------------------------------------- what a place accepts
def settings_of(block: str) -> dict[str, R.Converter]:
    """The statements a body of this kind takes, each with how its value is read."""
    if block == "top":
        return {}
    if block == "embedding":
        return R.EMBEDDING_SETTINGS
    if block == "defaults":
        return R.DEFAULTS_SETTINGS
    if block == "section":
        return R.BLOCK_SETTINGS
    return R.STACK_SETTINGS


def _place_of_setting(block: str) -> str:
    return words.EMBEDDING if block == "embedding" else words.BLOCK


def statement_params(context: Context) -> tuple[str | None, list[R.Param]]:
    """The place (for docs) and the arguments of the statement the cursor is in."""
    keyword = context.keyword
    if context.block == "top":
        if keyword == "head":
            level = context.statement[1:]
            projection = level[0].text if level and level[0].text in R.HEAD_PROJECTIONS else "linear"
            return words.HEAD, R.head_params(projection)
        if keyword == "pooler":
            return words.POOLER, R.POOLER_PARAMS
        if keyword == "mtp":
            return words.MTP, R.MTP_PARAMS
        return None, []
    if keyword in R.SUBLAYERS:
        return keyword, R.sublayer_params(keyword, R.BUILTIN_DEFAULTS, sequential=True)
    return None, []


def _call_params(context: Context) -> tuple[str | None, list[R.Param]]:
    """The arguments of the innermost call: a variant's options, a wiring form's sublayer call, or a head's."""
    name = context.calls[-1][0]
    if name in R.SUBLAYERS:
        return name, R.sublayer_params(name, R.BUILTIN_DEFAULTS, sequential=False)
    variant = _variant(name, _family_here(context, outer=True))
    if variant is None:
        return None, []
    fields = variant.Options.model_fields
    return None, [R.Param(f, R.converter_for(info.annotation), R.REQUIRED if info.is_required() else info.default,
                          f in variant.positional) for f, info in fields.items()]


def _family_here(context: Context, outer: bool = False) -> Registry | None:
    """The registry the value at the cursor names (for ``outer``: the value the innermost call is)."""
    calls = context.calls[:-1] if outer else context.calls
    if calls:  # inside a call: an argument of a variant or of a wiring call
        inner = Context(context.block, context.statement, calls)
        _, params = _call_params(inner) if inner.calls else statement_params(inner)
        arg = inner.argument()
        convert = next((p.convert for p in params if p.name == arg), None)
        return getattr(convert, "registry", None)
    arg = context.argument()
    if arg is not None and not (context.keyword == "let"):
        _, params = statement_params(context)
        convert = next((p.convert for p in params if p.name == arg), None)
        return getattr(convert, "registry", None)
    convert = settings_of(context.block).get(context.keyword or "")
    if context.block == "top" and context.keyword == "pooler":
        convert = R.POOLER_PARAMS[0].convert
    return getattr(convert, "registry", None)


def _variant(name: str | None, family: Registry | None):
    if not name:
        return None
    for registry in ((family,) if family is not None else FAMILIES):
        if name in registry:
            return registry[name]
    return None


# ---------------------------------------------------------------- completion
@dataclass(frozen=True)
class Completion:
    label: str  # what is inserted
    kind: str  # "keyword", "setting", "argument", "variant", "value", "name"
    detail: str = ""  # a short line: a default, a family
    documentation: str = ""


def completions(doc: Document, line: int, column: int) -> list[Completion]:
    """What may be written in place of the word at the cursor (``completion_word``): every candidate of its place,
    those starting with what is typed before the cursor first. They are not filtered by it: an editor filters
    fuzzily itself, and inside a mistyped word (``mask=cas|ual``) a strict prefix would leave nothing."""
    offset = doc.offset((line, column))
    start, _ = word_at(doc.text, offset)
    prefix = doc.text[start:offset]
    found = _candidates(doc, context_at(doc.text, start))
    unique = list({item.label: item for item in reversed(found)}.values())[::-1]  # the first of each label
    return sorted(unique, key=lambda item: not item.label.startswith(prefix))  # stable: each group keeps its order


def completion_word(doc: Document, line: int, column: int) -> tuple[Position, Position]:
    """The word a completion replaces: the name (or number) around the cursor, whole (empty at a space)."""
    start, end = word_at(doc.text, doc.offset((line, column)))
    return doc.position(start), doc.position(end)


def _candidates(doc: Document, context: Context) -> list[Completion]:
    if context.at_start():
        if context.block == "top":
            return [Completion(k, "keyword", documentation=words.doc(words.TOP, k) or "")
                    for k in ("model", "include", "let", "defaults", "embedding", "encoder", "decoder", "head", "pooler",
                              "mtp", "tower", "contrastive", "connect")]
        names = list(settings_of(context.block))
        if context.block in ("stack", "section"):
            names += list(R.SUBLAYERS) + (list(R.SECTIONS) if context.block == "stack" else [])
        return [Completion(n, "setting", documentation=words.doc(_place_of_setting(context.block), n) or "")
                for n in names]
    if context.keyword == "let" and not context.calls:
        return _names(doc) if context.argument() else []
    if context.calls:
        params_place, params = _call_params(context)
        arg = context.argument()
        if arg is None:
            name = context.calls[-1][0]
            if name == "tied":
                return _embedding_names(doc)
            variant = _variant(name, _family_here(context, outer=True))
            docs = option_docs(variant.Options) if variant is not None else {}
            return [Completion(f"{p.name}=", "argument", _default(p), docs.get(p.name) or
                               (words.doc(params_place, p.name) if params_place else "") or "") for p in params]
        return _values(doc, next((p.convert for p in params if p.name == arg), None))
    place, params = statement_params(context)
    if context.block == "top" and context.keyword == "head" and len(context.statement) == 1:
        return [Completion(f"{p}(", "keyword", documentation=words.doc(words.HEAD, p) or "") for p in R.HEAD_PROJECTIONS]
    if params:
        arg = context.argument()
        if arg is not None:
            return _values(doc, next((p.convert for p in params if p.name == arg), None))
        given = {t.text for t, after in zip(context.statement, context.statement[1:]) if after.text == "="}
        out = [Completion(f"{p.name}=", "argument", _default(p), words.doc(place, p.name) or "")
               for p in params if not p.positional and p.name not in given]
        positional = [p for p in params if p.positional]
        if positional and len(context.statement) == 1:  # `attention self`, `pooler gelu`
            out = _values(doc, positional[0].convert) + out
        return out
    if context.block == "top":
        if context.keyword in ("encoder", "decoder") and len(context.statement) == 1:
            return [Completion("x", "keyword", documentation="`x N`: the number of layers")]
        if context.keyword in ("encoder", "decoder"):
            return _names(doc)
        return []
    convert = settings_of(context.block).get(context.keyword or "")
    if context.keyword in R.SECTIONS:
        return [Completion(f, "keyword", documentation=d) for f, d in
                (("every(", "every(STEP, from=FIRST): every STEP-th layer"), ("range(", "range(START, STOP)"))]
    return _values(doc, convert)


def _default(param: R.Param) -> str:
    if param.default is R.REQUIRED:
        return "required"
    value = param.default
    if hasattr(value, "name") and hasattr(value, "options"):
        value = value.name
    return f"default: {format_value(value) if not isinstance(value, tuple) else (', '.join(map(str, value)) or 'none')}"


def _values(doc: Document, convert) -> list[Completion]:
    """What a value read by ``convert`` may be: a family's variants, a few words, an embedding, or a number (the
    ``let`` names)."""
    if convert is None:
        return []
    registry = getattr(convert, "registry", None)
    if registry is not None:
        return [Completion(name, "variant", registry.family, registry[name].doc) for name in registry]
    if getattr(convert, "words", None):
        return [Completion(w, "value") for w in convert.words]
    if convert is R.as_ref:
        return _embedding_names(doc)
    return _names(doc)


def _lets(doc: Document) -> dict[str, object]:
    """Every ``let`` binding of the text as written (the last parse's, else found by the lexer)."""
    if doc.module is not None:
        return {b.name: b for item in doc.module.items if isinstance(item, Let) for b in item.bindings}
    found = re.findall(r"(?m)^\s*let\s+(.*)$", doc.text)
    return {m.group(1): None for line in found for m in re.finditer(r"(?:^|,)\s*([A-Za-z_]\w*)\s*=", line)}


def _names(doc: Document) -> list[Completion]:
    values = R.let_values(doc.module) if doc.module is not None else {}
    return [Completion(name, "name", f"= {format_value(values[name])}" if name in values else "let") for name in _lets(doc)]


def _embedding_names(doc: Document) -> list[Completion]:
    names = ([i.name for i in doc.module.items if isinstance(i, EmbeddingDecl)] if doc.module is not None
             else re.findall(r"(?m)^\s*embedding\s+([A-Za-z_]\w*)", doc.text))
    return [Completion(n, "name", "embedding") for n in names]


# ---------------------------------------------------------------- hover
def hover(doc: Document, line: int, column: int) -> tuple[str, tuple[Position, Position]] | None:
    """Markdown about the word under the cursor, with the word's range; None over nothing known."""
    offset = doc.offset((line, column))
    start, end = word_at(doc.text, offset)
    if start == end:
        return None
    name = doc.text[start:end]
    context = context_at(doc.text, start)
    after = doc.text[end:].lstrip(" \t")
    text = _hover_text(doc, context, name, is_argument=after.startswith("=") and not after.startswith("=="),
                       start=start)
    if text is None:
        return None
    return text, (_position(doc.text, start), _position(doc.text, end))


def _position(text: str, offset: int) -> Position:
    line = text.count("\n", 0, offset)
    return line, offset - (text.rfind("\n", 0, offset) + 1)


def _hover_text(doc: Document, context: Context, name: str, is_argument: bool, start: int) -> str | None:
    lets = _lets(doc)
    if is_argument and context.keyword == "let" and not context.calls:
        return _let_text(doc, name)
    if is_argument:  # `heads=` or `theta=`
        if context.calls:
            place, params = _call_params(context)
            variant = _variant(context.calls[-1][0], _family_here(context, outer=True))
            text = (option_docs(variant.Options).get(name) if variant is not None else None) or \
                (words.doc(place, name) if place else None)
        else:
            place, params = statement_params(context)
            text = words.doc(place, name) if place else None
        param = next((p for p in params if p.name == name), None)
        if param is None:
            return None
        return f"**{name}**" + (f" — {text}" if text else "") + f"\n\n{_default(param)}"
    if context.at_start():
        place = words.TOP if context.block == "top" else _place_of_setting(context.block)
        text = words.doc(place, name)
        if text is None:
            return None
        counted = _parameters_at(doc, start, name)
        return f"**{name}** — {text}" + (f"\n\n{counted}" if counted else "")
    if name in lets and not (context.calls and context.calls[-1][0] and _variant(name, None) is not None):
        return _let_text(doc, name)
    family = _family_here(context)
    variant = _variant(name, family) if family is not None or context.calls or context.statement else None
    if variant is not None:
        return _variant_text(variant, family)
    declared = [i for t in (doc.module.items if doc.module is not None else ())
                for i in (t.items if isinstance(t, TowerDecl) else (t,))]  # (a tower's own too)
    if name in {i.name for i in declared if isinstance(i, EmbeddingDecl)}:
        return _embedding_text(doc, name, _position(doc.text, start)[0])
    if context.block == "top" and context.keyword == "head" and name in R.HEAD_PROJECTIONS:
        return f"**{name}** — {words.doc(words.HEAD, name)}"
    return None


def _let_text(doc: Document, name: str) -> str | None:
    binding = _lets(doc).get(name)
    if name not in _lets(doc):
        return None
    from ..front.syntax import expr_to_text

    written = f"let {name} = {expr_to_text(binding.value)}" if binding is not None else f"let {name}"
    value = R.let_values(doc.module).get(name) if doc.module is not None else None
    resolved = f"\n\n= **{format_value(value)}**" if value is not None else ""
    return f"```tfspec\n{written}\n```{resolved}"


def _variant_text(variant, family: Registry | None) -> str:
    families = [r.family for r in FAMILIES if variant.name in r and r[variant.name] is variant]
    head = f"**{variant.name}** ({family.family if family else families[0]})"
    lines = [f"{head} — {variant.doc}" if variant.doc else head]
    docs = option_docs(variant.Options)
    for option, info in variant.Options.model_fields.items():
        default = "required" if info.is_required() else f"= {format_value(info.default)}"
        lines.append(f"- `{option}` {default}" + (f": {docs[option]}" if option in docs else ""))
    return "\n".join(lines[:1] + ([""] if len(lines) > 1 else []) + lines[1:])


def _model_at(doc: Document, line: int):
    """The model of one or two stacks that the (0-based) ``line`` belongs to: the spec, or the tower holding it."""
    if not isinstance(doc.spec, S.Towers):
        return doc.spec
    return next((t.spec for t in doc.spec.towers if t.span is not None and t.span.line - 1 <= line
                 <= t.span.end_line - 1), None)


def _embedding_text(doc: Document, name: str, line: int = 0) -> str:
    text = f"**embedding {name}**"
    spec = _model_at(doc, line) if doc.spec is not None else None
    if spec is not None and any(e.name == name for e in spec.embeddings):
        e = spec.embedding(name)
        what = f"input {INPUTS.label(e.input)}" if e.input is not None else f"vocab {e.vocab:,}"
        text += f" — {what}, dim {e.dim}"
    return text


def _parameters_at(doc: Document, offset: int, keyword: str) -> str | None:
    """The parameter count of the stack or sublayer whose statement starts at ``offset``."""
    if doc.spec is None:
        return None
    from .. import ir
    from ..inspect.analysis import analyse

    line, column = _position(doc.text, offset)
    spec = _model_at(doc, line)
    if spec is None:
        return None
    graph = spec.graph()
    rows = analyse(spec).rows
    if keyword in ("encoder", "decoder") and doc.module is not None:
        stack = spec.encoder if keyword == "encoder" else spec.decoder
        total = sum(r.cost.params for r in rows if r.stack == keyword)
        layers = sum(r.cost.params for r in rows if r.stack == keyword and graph.nodes[r.node]["node"].in_block)
        embedded = " its embedding included" if any(r.stack == keyword and issubclass(r.node_type, (ir.Embedding, ir.Features))
                                                    for r in rows) else ""
        return (f"{total:,} parameters in the {keyword},{embedded} ({layers:,} in its {stack.repeat} layers, "
                f"{layers // max(stack.repeat, 1):,} a layer)")
    if keyword not in R.SUBLAYERS:
        return None
    here = [r for r in rows if (span := graph.nodes[r.node]["node"].span) is not None and same_file(span.file, doc.file)
            and span.line - 1 == line and span.column - 1 == column]
    if not here:
        return None
    total = sum(r.cost.params for r in here)
    repeat = max(r.repeat for r in here)
    each = f", {total // repeat:,} in each" if repeat > 1 else ""
    return f"{total:,} parameters in {repeat} layer{'s' if repeat > 1 else ''}{each}"


# ---------------------------------------------------------------- definitions, references, rename
@dataclass(frozen=True)
class Location:
    file: str
    start: Position
    end: Position


def _location(span: Span) -> Location:
    start, end = span_range(span)
    return Location(span.file, start, end)


def definition(doc: Document, line: int, column: int) -> Location | None:
    """Where the name under the cursor is defined: a ``let``, an embedding, or the file an ``include`` names."""
    offset = doc.offset((line, column))
    include = _include_at(doc, offset)
    if include is not None:
        return include
    if doc.module is None:
        return None
    start, end = word_at(doc.text, offset)
    name = doc.text[start:end]
    binding = _lets(doc).get(name)
    if binding is not None:
        return _location(binding.name_span)
    for item in doc.module.items:
        if isinstance(item, EmbeddingDecl) and item.name == name:
            return _location(item.name_span)
    return None


def _include_at(doc: Document, offset: int) -> Location | None:
    line, column = _position(doc.text, offset)
    match = re.match(r'\s*include\s+"([^"\n]*)"', doc.line(line))
    if match is None or not match.start(1) - 1 <= column <= match.end(1) + 1:
        return None
    base = Path(doc.file).parent if not doc.file.startswith("<") else Path.cwd()
    target = base / match.group(1)
    return Location(str(target), (0, 0), (0, 0)) if target.is_file() else None


def references(doc: Document, name: str) -> list[Span]:
    """Every place the ``let`` name ``name`` is written: its binding and each use, in every file of the spec."""
    if doc.module is None or name not in _lets(doc):
        return []
    return [_lets(doc)[name].name_span] + [n.span for n in names(doc.module.items) if n.id == name]


class RenameError(ValueError):
    """A rename that cannot be done: the message says why."""


NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def rename(doc: Document, line: int, column: int, new_name: str) -> dict[str, list[tuple[Position, Position]]]:
    """The ranges, by file, to replace with ``new_name`` to rename the ``let`` under the cursor."""
    if doc.module is None:
        raise RenameError("the spec does not parse; fix its syntax first")
    start, end = word_at(doc.text, doc.offset((line, column)))
    name = doc.text[start:end]
    if name not in _lets(doc):
        raise RenameError(f"'{name}' is not a `let` name; only those are renamed" if name else "no name here")
    if not NAME.match(new_name):
        raise RenameError(f"'{new_name}' is not a name (a letter or _, then letters, digits or _)")
    if new_name in _lets(doc) and new_name != name:
        raise RenameError(f"'{new_name}' is already a `let` name")
    edits: dict[str, list[tuple[Position, Position]]] = {}
    for span in references(doc, name):
        edits.setdefault(span.file, []).append(span_range(span))
    return edits


def renameable(doc: Document, line: int, column: int) -> tuple[Position, Position] | None:
    """The range of the ``let`` name under the cursor, when it can be renamed."""
    start, end = word_at(doc.text, doc.offset((line, column)))
    if doc.module is None or doc.text[start:end] not in _lets(doc):
        return None
    return _position(doc.text, start), _position(doc.text, end)


# ---------------------------------------------------------------- symbols and formatting
@dataclass
class Symbol:
    name: str
    # "model", "let", "defaults", "embedding", "stack", "sublayer", "section", "head", "pooler", "mtp", "tower",
    # "contrastive"
    kind: str
    range: tuple[Position, Position]
    selection: tuple[Position, Position]
    detail: str = ""
    children: list["Symbol"] = field(default_factory=list)


def symbols(doc: Document) -> list[Symbol]:
    """The outline: the model, lets, defaults, embeddings, stacks with their sublayers and sections, the head."""
    if doc.module is None:
        return []
    return _item_symbols(doc, doc.module.items)


def _item_symbols(doc: Document, items) -> list[Symbol]:
    """The outline of ``items``: a tower's own items are its children."""
    out = []
    for item in items:
        if not same_file(item.span.file, doc.file):
            continue  # an included file's items belong to that file's outline
        whole = span_range(item.span)
        if isinstance(item, TowerDecl):
            out.append(Symbol(item.name, "tower", whole, span_range(item.name_span), "",
                              _item_symbols(doc, item.items)))
        elif isinstance(item, ContrastiveDecl):
            out.append(Symbol("contrastive", "contrastive", whole, whole, _args_text(item.args)))
        elif isinstance(item, ConnectDecl):
            out.append(Symbol(f"{item.source} -> {item.target}", "connect", whole, span_range(item.source_span),
                              _args_text(item.args)))
        elif isinstance(item, ModelDecl):
            out.append(Symbol(item.name, "model", whole, whole))
        elif isinstance(item, Let):
            out += [Symbol(b.name, "let", span_range(b.span), span_range(b.name_span)) for b in item.bindings]
        elif isinstance(item, Defaults):
            out.append(Symbol("defaults", "defaults", whole, whole))
        elif isinstance(item, EmbeddingDecl):
            out.append(Symbol(item.name, "embedding", whole, span_range(item.name_span)))
        elif isinstance(item, StackDecl):
            children = [Symbol(s.name, "section" if s.body is not None else "sublayer", span_range(s.span),
                               span_range(s.name_span), _args_text(s.args))
                        for s in item.body if isinstance(s, Setting) and (s.name in R.SUBLAYERS or s.body is not None)]
            children += [Symbol(s.target, "sublayer", span_range(s.span), span_range(s.target_span))
                         for s in item.body if isinstance(s, Assignment)]
            from ..front.syntax import expr_to_text

            out.append(Symbol(item.role, "stack", whole, span_range(item.role_span),
                              f"x {expr_to_text(item.repeat)}", children))
        elif isinstance(item, HeadDecl):
            out.append(Symbol("head", "head", whole, whole, _args_text(item.args)))
        elif isinstance(item, PoolerDecl):
            out.append(Symbol("pooler", "pooler", whole, whole))
        elif isinstance(item, MtpDecl):
            out.append(Symbol("mtp", "mtp", whole, whole, _args_text(item.args)))
    return out


def _args_text(args: tuple[Arg, ...]) -> str:
    from ..front.syntax import arg_to_text

    return " ".join(arg_to_text(a) for a in args)


def formatted(doc: Document) -> str | None:
    """The text in canonical form (``tfspec fmt``); None when it does not parse (its problems say why)."""
    from ..front.fmt import format_text

    try:
        return format_text(doc.text, doc.file)
    except SpecError:
        return None


__all__ = ["Completion", "Context", "Document", "Location", "RenameError", "Symbol", "completions",
           "context_at", "definition", "formatted", "hover", "references", "rename", "renameable", "symbols",
           "span_range"]
