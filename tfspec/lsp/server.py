"""``tfspec lsp``: a Language Server Protocol server over stdio, built on ``pygls``.

It checks a spec when it is opened and, a moment after the last keystroke, when it changes, and publishes the
checker's own diagnostics (code, range, hint); it answers hovers, completions, go-to-definition, renames of
``let`` names, the outline and formatting from ``tfspec.lsp.language``. Any editor with an LSP client can start
it: ``editors/vscode`` is a small VS Code extension, and Neovim needs one ``vim.lsp.start`` call (see docs).

The protocol counts columns in UTF-16 units; ``language`` counts characters, so each position is converted with
its line's text.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

from lsprotocol import types as T
from pygls.exceptions import JsonRpcException, JsonRpcInvalidParams
from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol

from ..version import __version__
from ..errors import source_lines
from ..files import loads_json, read_regular
from ..front.api import MAX_SPEC_BYTES
from . import language as L

DEBOUNCE_SECONDS = 0.3  # a check waits this long after a change, and is dropped if another change comes
TRIGGERS = ["=", "(", " "]


def path_of(uri: str) -> str:
    """The file a ``file://`` URI names; any other URI (an unsaved buffer) as it is."""
    parsed = urlparse(uri)
    return unquote(parsed.path) if parsed.scheme == "file" else uri


def uri_of(path: str) -> str:
    return Path(path).resolve().as_uri() if not path.startswith("<") and "://" not in path else path


def to_units(line: str, column: int) -> int:
    """A character column as UTF-16 units."""
    return len(line[:column].encode("utf-16-le")) // 2


def from_units(line: str, units: int) -> int:
    """A UTF-16 column as characters."""
    count = 0
    for index, ch in enumerate(line):
        if count >= units:
            return index
        count += 2 if ord(ch) > 0xFFFF else 1
    return len(line)


def _lines(text: str | None) -> list[str]:
    return source_lines(text) if text is not None else []


def _position(lines: list[str], position: L.Position) -> T.Position:
    line, column = position
    text = lines[line] if 0 <= line < len(lines) else ""
    return T.Position(line=max(line, 0), character=to_units(text, max(column, 0)))


def _range(lines: list[str], start: L.Position, end: L.Position) -> T.Range:
    return T.Range(start=_position(lines, start), end=_position(lines, end))


MAX_MESSAGE_BYTES = 64 << 20  # the largest message read (a spec may have 1 MB; its JSON-escaped text a few)
MAX_HEADER_BYTES = 4096  # the longest header line read


class BoundedInput:
    """The client's stream as pygls reads it, bounded: a header line of at most ``MAX_HEADER_BYTES``, a message of at
    most ``MAX_MESSAGE_BYTES``. A larger Content-Length (10**18) cannot be skipped, so it ends the session as end of
    input would, with ``refused`` saying why."""

    def __init__(self, stream):
        self.stream = stream
        self.refused: str | None = None

    def readline(self) -> bytes:
        return self.stream.readline(MAX_HEADER_BYTES)

    def read(self, size: int) -> bytes:
        if size > MAX_MESSAGE_BYTES:
            self.refused = (f"a message of {size:,} bytes (its Content-Length), more than the {MAX_MESSAGE_BYTES:,} "
                            "a message may have; the session ends")
            return b""
        body = self.stream.read(size)
        try:
            message = loads_json(body)  # (nested 100,000 deep was a RecursionError that ended the server)
        except ValueError as exc:  # JSON-RPC's parse error, answered (SpecProtocol) rather than logged
            return _unreadable(-32700, f"the message is not JSON ({exc})")
        if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
            given = message.get("id") if isinstance(message, dict) else None
            what = f"version {message.get('jsonrpc')!r}" if isinstance(message, dict) else type(message).__name__
            return _unreadable(-32600, f"the message is {what}, not a JSON-RPC 2.0 object",
                               given if isinstance(given, (int, str)) and not isinstance(given, bool) else None)
        return body


def _unreadable(code: int, why: str, given=None) -> bytes:
    """A message standing for one the reader could not take: SpecProtocol answers it with ``code``."""
    return json.dumps({"jsonrpc": "2.0", UNREADABLE: [code, why, given]}).encode()


UNREADABLE = "tfspec_unreadable"  # marks a body the reader could not take as a message: [code, why]


@dataclass(frozen=True)
class Unreadable:
    """A request whose parameters do not fit the protocol's types (a position of -1 or 2**31), to be answered
    with its error rather than dropped."""

    id: object
    method: str
    error: T.ResponseError


class SpecProtocol(LanguageServerProtocol):
    """pygls' protocol, answering every request: one it cannot read gets the JSON-RPC error (InvalidParams,
    -32602), and one after ``shutdown`` gets InvalidRequest (-32600), where pygls would log and drop them; an
    ``exit`` is 0 after ``shutdown`` and 1 before it (the protocol's rule), kept in ``exit_status``."""

    exit_status = 0

    def structure_message(self, data):
        if isinstance(data, dict) and UNREADABLE in data:  # answered with its id, or null where it has none
            code, why, given = data[UNREADABLE]
            return Unreadable(given, "", T.ResponseError(code=code, message=why))
        try:
            return super().structure_message(data)
        except JsonRpcException as exc:
            if not isinstance(data, dict) or "id" not in data or not isinstance(data.get("method"), str):
                raise
            return Unreadable(data["id"], data["method"], T.ResponseError(
                code=exc.code, message=f"{data['method']}: parameters that do not fit the protocol ({exc.message})"))

    def handle_message(self, message):
        method = getattr(message, "method", None)
        if isinstance(message, Unreadable):
            self._send_response(message.id, error=message.error)
        elif self._shutdown and method is not None and method != T.EXIT and getattr(message, "id", None) is not None:
            self._send_response(message.id, error=T.ResponseError(
                code=-32600, message=f"{method}: the server is shutting down (shutdown was received)"))
        else:
            if method == T.EXIT:
                SpecProtocol.exit_status = 0 if self._shutdown else 1
            super().handle_message(message)


class SpecServer(LanguageServer):
    """The server: the documents it checked, by URI, and which other files' diagnostics each published."""

    def __init__(self):
        super().__init__("tfspec", __version__, protocol_cls=SpecProtocol)
        self.checked: dict[str, L.Document] = {}
        self.published: dict[str, set[str]] = {}  # a document's URI -> URIs it published diagnostics for
        self.pending: dict[str, asyncio.Task] = {}

    def text(self, uri: str) -> str:
        """The text of ``uri``: the client's, for a document it opened; else the file's, read as tfspec reads any
        file (a regular file of at most a spec's size), and a request about neither is an InvalidParams error."""
        opened = self.workspace.text_documents.get(unquote(uri))
        if opened is not None:
            return opened.source
        try:
            return read_regular(path_of(uri), MAX_SPEC_BYTES).decode("utf-8", errors="replace")
        except OSError as exc:
            raise JsonRpcInvalidParams(f"{uri}: not a document the client opened, nor a file tfspec reads "
                                       f"({exc.strerror or exc})") from None

    def document(self, uri: str) -> L.Document:
        """The checked document at ``uri``, checked again when its text changed since."""
        text = self.text(uri)
        doc = self.checked.get(uri)
        if doc is None or doc.text != text:
            doc = self.check(uri)
        return doc

    def check(self, uri: str) -> L.Document:
        text = self.text(uri)
        doc = L.Document.check(text, path_of(uri))
        self.checked[uri] = doc
        by_uri: dict[str, list[T.Diagnostic]] = {uri: []}
        for problem in doc.problems:
            file = problem.span.file if problem.span else doc.file
            target = uri if L.same_file(file, doc.file) else uri_of(file)
            lines = _lines(doc.sources.get(file) if target != uri else text)
            start, end = L.span_range(problem.span)
            message = problem.message + (f"\nhelp: {problem.hint}" if problem.hint else "")
            by_uri.setdefault(target, []).append(T.Diagnostic(
                range=_range(lines, start, end), message=message, code=problem.code, source="tfspec",
                severity=T.DiagnosticSeverity.Error if problem.severity == "error" else T.DiagnosticSeverity.Warning))
        for stale in self.published.get(uri, set()) - set(by_uri):
            self.text_document_publish_diagnostics(T.PublishDiagnosticsParams(uri=stale, diagnostics=[]))
        for target, diagnostics in by_uri.items():
            self.text_document_publish_diagnostics(T.PublishDiagnosticsParams(uri=target, diagnostics=diagnostics))
        self.published[uri] = set(by_uri)
        return doc

    async def check_later(self, uri: str) -> None:
        await asyncio.sleep(DEBOUNCE_SECONDS)
        self.pending.pop(uri, None)
        self.check(uri)


server = SpecServer()


@server.feature(T.TEXT_DOCUMENT_DID_OPEN)
def did_open(ls: SpecServer, params: T.DidOpenTextDocumentParams) -> None:
    ls.check(params.text_document.uri)


@server.feature(T.TEXT_DOCUMENT_DID_CHANGE)
def did_change(ls: SpecServer, params: T.DidChangeTextDocumentParams) -> None:
    uri = params.text_document.uri
    previous = ls.pending.pop(uri, None)
    if previous is not None:
        previous.cancel()
    ls.pending[uri] = asyncio.get_running_loop().create_task(ls.check_later(uri))


@server.feature(T.TEXT_DOCUMENT_DID_SAVE)
def did_save(ls: SpecServer, params: T.DidSaveTextDocumentParams) -> None:
    ls.check(params.text_document.uri)  # an included file that changed on disk is read again


@server.feature(T.TEXT_DOCUMENT_DID_CLOSE)
def did_close(ls: SpecServer, params: T.DidCloseTextDocumentParams) -> None:
    uri = params.text_document.uri
    ls.checked.pop(uri, None)
    for target in ls.published.pop(uri, {uri}):
        ls.text_document_publish_diagnostics(T.PublishDiagnosticsParams(uri=target, diagnostics=[]))


def _at(ls: SpecServer, params) -> tuple[L.Document, list[str], int, int]:
    doc = ls.document(params.text_document.uri)
    lines = _lines(doc.text)
    line = params.position.line
    column = from_units(lines[line] if line < len(lines) else "", params.position.character)
    return doc, lines, line, column


@server.feature(T.TEXT_DOCUMENT_HOVER)
def hover(ls: SpecServer, params: T.HoverParams) -> T.Hover | None:
    doc, lines, line, column = _at(ls, params)
    found = L.hover(doc, line, column)
    if found is None:
        return None
    text, (start, end) = found
    return T.Hover(contents=T.MarkupContent(kind=T.MarkupKind.Markdown, value=text), range=_range(lines, start, end))


KINDS = {"keyword": T.CompletionItemKind.Keyword, "setting": T.CompletionItemKind.Property,
         "argument": T.CompletionItemKind.Field, "variant": T.CompletionItemKind.EnumMember,
         "value": T.CompletionItemKind.Value, "name": T.CompletionItemKind.Variable}


@server.feature(T.TEXT_DOCUMENT_COMPLETION, T.CompletionOptions(trigger_characters=TRIGGERS))
def completion(ls: SpecServer, params: T.CompletionParams) -> T.CompletionList:
    """Every candidate of the place, each replacing the whole word around the cursor: the editor filters them."""
    doc, lines, line, column = _at(ls, params)
    word = _range(lines, *L.completion_word(doc, line, column))
    items = [T.CompletionItem(label=c.label, kind=KINDS[c.kind], detail=c.detail or None,
                              documentation=T.MarkupContent(kind=T.MarkupKind.Markdown, value=c.documentation)
                              if c.documentation else None, text_edit=T.TextEdit(range=word, new_text=c.label))
             for c in L.completions(doc, line, column)]
    return T.CompletionList(is_incomplete=False, items=items)


def _location(ls: SpecServer, doc: L.Document, location: L.Location) -> T.Location:
    uri = uri_of(location.file)
    text = doc.sources.get(location.file)
    if text is None and Path(location.file).is_file():
        try:
            text = read_regular(location.file, MAX_SPEC_BYTES).decode("utf-8", errors="replace")
        except OSError:  # gone, swapped for a FIFO, grown past a spec's size: the range is drawn without it
            text = None
    return T.Location(uri=uri, range=_range(_lines(text), location.start, location.end))


@server.feature(T.TEXT_DOCUMENT_DEFINITION)
def definition(ls: SpecServer, params: T.DefinitionParams) -> T.Location | None:
    doc, _, line, column = _at(ls, params)
    found = L.definition(doc, line, column)
    return _location(ls, doc, found) if found is not None else None


@server.feature(T.TEXT_DOCUMENT_PREPARE_RENAME)
def prepare_rename(ls: SpecServer, params: T.PrepareRenameParams) -> T.Range | None:
    doc, lines, line, column = _at(ls, params)
    found = L.renameable(doc, line, column)
    return _range(lines, *found) if found is not None else None


@server.feature(T.TEXT_DOCUMENT_RENAME)
def rename(ls: SpecServer, params: T.RenameParams) -> T.WorkspaceEdit:
    doc, _, line, column = _at(ls, params)
    try:
        edits = L.rename(doc, line, column, params.new_name)
    except L.RenameError as exc:
        raise ValueError(str(exc)) from None  # pygls answers with an error the editor shows
    changes = {}
    for file, ranges in edits.items():
        lines = _lines(doc.sources.get(file))
        changes[uri_of(file) if not L.same_file(file, doc.file) else params.text_document.uri] = [
            T.TextEdit(range=_range(lines, start, end), new_text=params.new_name) for start, end in ranges]
    return T.WorkspaceEdit(changes=changes)


SYMBOL_KINDS = {"model": T.SymbolKind.Module, "let": T.SymbolKind.Constant, "defaults": T.SymbolKind.Namespace,
                "embedding": T.SymbolKind.Struct, "stack": T.SymbolKind.Class, "sublayer": T.SymbolKind.Method,
                "section": T.SymbolKind.Namespace, "head": T.SymbolKind.Function, "pooler": T.SymbolKind.Function,
                "tower": T.SymbolKind.Module, "contrastive": T.SymbolKind.Function, "connect": T.SymbolKind.Function,
                "mtp": T.SymbolKind.Function}


@server.feature(T.TEXT_DOCUMENT_DOCUMENT_SYMBOL)
def document_symbols(ls: SpecServer, params: T.DocumentSymbolParams) -> list[T.DocumentSymbol]:
    doc = ls.document(params.text_document.uri)
    lines = _lines(doc.text)

    def convert(symbol: L.Symbol) -> T.DocumentSymbol:
        return T.DocumentSymbol(name=symbol.name, kind=SYMBOL_KINDS[symbol.kind], detail=symbol.detail or None,
                                range=_range(lines, *symbol.range), selection_range=_range(lines, *symbol.selection),
                                children=[convert(c) for c in symbol.children])

    return [convert(s) for s in L.symbols(doc)]


@server.feature(T.TEXT_DOCUMENT_FORMATTING)
def formatting(ls: SpecServer, params: T.DocumentFormattingParams) -> list[T.TextEdit] | None:
    doc = ls.document(params.text_document.uri)
    text = L.formatted(doc)
    if text is None or text == doc.text:
        return [] if text is not None else None
    lines = _lines(doc.text)
    end = (len(lines) - 1, len(lines[-1]))
    return [T.TextEdit(range=_range(lines, (0, 0), end), new_text=text)]


class OneLine(logging.Formatter):
    """A log record as one line, an exception as its type and message: what the editor's log of the server shows,
    never a traceback (a request that failed is answered with its error as well)."""

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage().splitlines()[0] if record.getMessage() else ""
        if record.exc_info and record.exc_info[1] is not None:
            error = record.exc_info[1]
            message += f": {type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
        return f"tfspec lsp: {record.levelname.lower()}: {message}"


def one_line_log() -> None:
    """pygls' warnings and errors on standard error, a line each; a request it could not read is answered with its
    error (``SpecProtocol``), so its deserialisation's own report is left out."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(OneLine())
    handler.addFilter(lambda record: not record.getMessage().startswith("Unable to deserialize message"))
    log = logging.getLogger("pygls")
    log.addHandler(handler)
    log.setLevel(logging.WARNING)
    log.propagate = False


def main() -> int:
    """Serve on stdin/stdout until the client says exit (or its input ends); the exit status is the protocol's:
    0 after ``shutdown`` and ``exit``, 1 for an ``exit`` without ``shutdown`` or a message past the bound."""
    stream = BoundedInput(sys.stdin.buffer)
    one_line_log()
    server.start_io(stdin=stream)
    if stream.refused:
        print(f"tfspec lsp: error: {stream.refused}", file=sys.stderr)
        return 1
    return SpecProtocol.exit_status
