"""`tfspec fmt`: print a spec in canonical form, keeping its comments.

Canonical form: one item per line group, bodies expanded one statement per line
and indented two spaces, expressions spaced as ``expr_to_text`` prints them, a
blank line between top-level items. ``parse(format_text(s)) == parse(s)``.
"""

from __future__ import annotations

from .syntax import (ConnectDecl, ContrastiveDecl, Defaults, EmbeddingDecl, HeadDecl, Include, Let, ModelDecl, Module, MtpDecl,
                     PoolerDecl, Setting, StackDecl, TowerDecl, arg_to_text, expr_to_text, parse_module,
                     split_comment)


INDENT = "  "


def format_text(text: str, file: str = "<spec>") -> str:
    """Reformat spec text; raises SpecError if it does not parse.

    >>> print(format_text("embedding t {vocab 10;dim 8}  # tiny"), end="")
    embedding t {  # tiny
      vocab 10
      dim 8
    }
    """
    module = parse_module(text, file, _expand_includes=False)
    comments = _comments(text)
    return _Printer(module, comments).run()


def _comments(text: str) -> dict[int, tuple[str, bool]]:
    """line -> (comment text, stands alone on its line)."""
    out = {}
    for lineno, line in enumerate(text.split("\n"), start=1):
        code, comment = split_comment(line)
        if comment is not None:
            out[lineno] = (comment.rstrip(), not code.strip())
    return out


class _Printer:
    def __init__(self, module: Module, comments: dict[int, tuple[str, bool]]):
        self.module = module
        self.comments = comments
        self.lines: list[str] = []  # code, and comments on lines of their own
        self.trailing: list[str | None] = []  # each line's trailing comment
        self.emitted: set[int] = set()

    def run(self) -> str:
        items = self.module.items
        for index, item in enumerate(items):
            if index and not (isinstance(item, Let) and isinstance(items[index - 1], Let)):
                self.lines.append("")
                self.trailing.append(None)
            self.standalone_before(item.span.line, "")
            self.item(item)
        self.standalone_before(10**9, "")
        return "\n".join(self.aligned()).strip("\n") + "\n"

    def aligned(self) -> list[str]:
        """The lines, the trailing comments of consecutive lines in one column (as gofmt aligns them): two spaces
        after the longest code of the run."""
        out, run = [], []

        def flush():
            width = max((len(code) for code, _ in run), default=0)
            out.extend(f"{code.ljust(width)}  {comment}" for code, comment in run)
            run.clear()

        for line, comment in zip(self.lines, self.trailing):
            if comment is None:
                flush()
                out.append(line)
            else:
                run.append((line, comment))
        flush()
        return out

    def standalone_before(self, line: int, indent: str) -> None:
        """Comments on their own lines above ``line`` that are not out yet."""
        for lineno in sorted(self.comments):
            if lineno < line and lineno not in self.emitted and self.comments[lineno][1]:
                self.emitted.add(lineno)
                self.lines.append(indent + self.comments[lineno][0])
                self.trailing.append(None)

    def emit(self, text: str, first: int, last: int | None = None) -> None:
        """One output line, with the trailing comments of source lines first..last."""
        trailing = []
        for lineno in range(first, (last or first) + 1):
            if lineno in self.comments and lineno not in self.emitted and not self.comments[lineno][1]:
                self.emitted.add(lineno)
                trailing.append(self.comments[lineno][0])
        self.lines.append(text)
        self.trailing.append(" ".join(trailing) if trailing else None)

    def item(self, item, indent: str = "") -> None:
        span = item.span
        if isinstance(item, TowerDecl):  # its items one level in, a blank line between them, as at the top level
            first = item.items[0].span.line if item.items else span.end_line
            self.emit(f"{indent}tower {item.name} {{", span.line, first - 1 if first > span.line else span.line)
            for index, inner in enumerate(item.items):
                if index:
                    self.lines.append("")
                    self.trailing.append(None)
                self.standalone_before(inner.span.line, indent + INDENT)
                self.item(inner, indent + INDENT)
            self.standalone_before(span.end_line, indent + INDENT)
            self.emit(indent + "}", span.end_line)
        elif isinstance(item, ConnectDecl):
            header = " ".join([f"connect {item.source} -> {item.target}", *map(arg_to_text, item.args)])
            self.body(header, item.body, span, indent)
        elif isinstance(item, ModelDecl):
            self.emit(f"model {item.name}", span.line)
        elif isinstance(item, Include):
            self.emit(f'include "{item.path}"', span.line, span.end_line)
        elif isinstance(item, Let):
            self.emit("let " + ", ".join(f"{b.name} = {expr_to_text(b.value)}" for b in item.bindings),
                      span.line, span.end_line)
        elif isinstance(item, Defaults):
            self.body("defaults", item.body, span, indent)
        elif isinstance(item, EmbeddingDecl):
            self.body(f"embedding {item.name}", item.body, span, indent)
        elif isinstance(item, StackDecl):
            self.body(f"{item.role} x {expr_to_text(item.repeat)}", item.body, span, indent)
        else:
            keyword = {HeadDecl: "head", MtpDecl: "mtp", PoolerDecl: "pooler", ContrastiveDecl: "contrastive"}[type(item)]
            self.emit(indent + " ".join([keyword, *map(arg_to_text, item.args)]), span.line, span.end_line)

    def body(self, header: str, body, span, indent: str = "") -> None:
        first_stmt = body[0].span.line if body else span.end_line
        self.emit(indent + header + " {", span.line, first_stmt - 1 if first_stmt > span.line else span.line)
        for stmt in body:
            self.standalone_before(stmt.span.line, indent + INDENT)
            if isinstance(stmt, Setting) and stmt.body is not None:  # a section: its own body, one level in
                self.body(" ".join([stmt.name, *map(arg_to_text, stmt.args)]), stmt.body, stmt.span, indent + INDENT)
                continue
            if isinstance(stmt, Setting):
                text = " ".join([stmt.name, *map(arg_to_text, stmt.args)])
            else:
                text = f"{stmt.target} = {expr_to_text(stmt.value)}"
            self.emit(indent + INDENT + text, stmt.span.line, stmt.span.end_line)
        self.standalone_before(span.end_line, indent + INDENT)
        self.emit(indent + "}", span.end_line)
