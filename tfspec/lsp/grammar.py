"""The TextMate grammar editors colour specs with (``editors/vscode/syntaxes/tfspec.tmLanguage.json``), written
from the language's own tables: the keywords, the settings ``resolve`` reads and every registered variant name.

    python -m tfspec.lsp.grammar > editors/vscode/syntaxes/tfspec.tmLanguage.json

A test checks that the shipped file is what this writes, so a new variant or setting is coloured once it
exists.
"""

from __future__ import annotations

import json
import re

from ..front import resolve as R
from .language import FAMILIES

KEYWORDS = ("model", "include", "let", "defaults", "embedding", "encoder", "decoder", "head", "pooler",
            "mtp", "tower", "contrastive", "connect")
CONSTANTS = ("true", "false", "none", "self", "cross", "pre", "post", "first", "mean", "encoder")


def _words(names) -> str:
    return "|".join(sorted({re.escape(n) for n in names}, key=lambda n: (-len(n), n)))


def grammar() -> dict:
    """The grammar as a JSON-able dict."""
    settings = set(R.STACK_SETTINGS) | set(R.DEFAULTS_SETTINGS) | set(R.EMBEDDING_SETTINGS) | set(R.SECTIONS)
    variants = {name for family in FAMILIES for name in family} - set(CONSTANTS)
    return {
        "$schema": "https://raw.githubusercontent.com/martinring/tmlanguage/master/tmlanguage.json",
        "name": "tfspec",
        "scopeName": "source.tfspec",
        "fileTypes": ["tfs"],
        "patterns": [{"include": "#comment"}, {"include": "#string"}, {"include": "#item"},
                     {"include": "#statement"}, {"include": "#value"}],
        "repository": {
            "comment": {"name": "comment.line.number-sign.tfspec", "match": "#.*$"},
            "string": {"name": "string.quoted.double.tfspec", "match": "\"[^\"\\n]*\""},
            "item": {"patterns": [
                {"match": "^\\s*(encoder|decoder)\\s+(x|×)(?=\\s)",
                 "captures": {"1": {"name": "keyword.control.stack.tfspec"},
                              "2": {"name": "keyword.operator.repeat.tfspec"}}},
                {"match": "^\\s*(embedding)\\s+([A-Za-z_][A-Za-z0-9_]*)",
                 "captures": {"1": {"name": "keyword.control.item.tfspec"},
                              "2": {"name": "entity.name.type.embedding.tfspec"}}},
                {"match": f"^\\s*({_words(KEYWORDS)})\\b", "captures": {"1": {"name": "keyword.control.item.tfspec"}}},
            ]},
            "statement": {"patterns": [
                {"match": f"(?:^|[{{;]\\s*)\\s*({_words(R.SUBLAYERS)})\\b",
                 "captures": {"1": {"name": "entity.name.function.sublayer.tfspec"}}},
                {"match": f"(?:^|[{{;]\\s*)\\s*({_words(settings)})\\b",
                 "captures": {"1": {"name": "support.type.property-name.setting.tfspec"}}},
                {"match": "\\b([A-Za-z_][A-Za-z0-9_]*)\\s*(=)(?!=)",
                 "captures": {"1": {"name": "variable.parameter.argument.tfspec"},
                              "2": {"name": "keyword.operator.assignment.tfspec"}}},
            ]},
            "value": {"patterns": [
                {"name": "support.function.variant.tfspec", "match": f"\\b({_words(variants)})\\b"},
                {"name": "support.function.tfspec", "match": f"\\b({_words(R.HEAD_PROJECTIONS + ('every', 'range'))})"
                                                             "(?=\\s*\\()"},
                {"name": "constant.language.tfspec", "match": f"\\b({_words(CONSTANTS)})\\b"},
                {"name": "constant.numeric.tfspec",
                 "match": "(?<![A-Za-z_])(\\d(_?\\d)*(\\.(\\d(_?\\d)*)?)?|\\.\\d(_?\\d)*)([eE][+-]?\\d+)?"},
                {"name": "keyword.operator.arithmetic.tfspec", "match": "\\*\\*|//|[-+*/%]"},
                {"name": "variable.other.tfspec", "match": "\\b[A-Za-z_][A-Za-z0-9_]*\\b"},
            ]},
        },
    }


def text() -> str:
    return json.dumps(grammar(), indent=2, ensure_ascii=False) + "\n"


def _rules(g: dict) -> list[dict]:
    """The grammar's match rules in the order an editor tries them (includes expanded)."""
    out = []

    def expand(patterns):
        for p in patterns:
            if "include" in p:
                expand(g["repository"][p["include"][1:]].get("patterns", [g["repository"][p["include"][1:]]]))
            else:
                out.append(p)

    expand(g["patterns"])
    return out


def highlight(source: str, g: dict | None = None) -> list[tuple[int, int, int, str]]:
    """``(line, start, end, scope)`` for every coloured piece, found as a TextMate editor finds them: on each
    line, from the current column, the rule matching earliest (the first listed on a tie) colours its match.

    >>> [(s, e, scope) for _, s, e, scope in highlight("let d = 4  # width")][:2]
    [(0, 3, 'keyword.control.item.tfspec'), (4, 5, 'variable.parameter.argument.tfspec')]
    """
    rules = [(re.compile(r["match"]), r) for r in _rules(g or grammar())]
    found = []
    for number, line in enumerate(source.split("\n")):
        column = 0
        while column <= len(line):
            best = None
            for pattern, rule in rules:
                m = pattern.search(line, column)
                if m and (best is None or m.start() < best[0].start()):
                    best = (m, rule)
            if best is None:
                break
            m, rule = best
            if "name" in rule:
                found.append((number, m.start(), m.end(), rule["name"]))
            for group, capture in rule.get("captures", {}).items():
                if m.group(int(group)) is not None:
                    found.append((number, m.start(int(group)), m.end(int(group)), capture["name"]))
            column = m.end() if m.end() > m.start() else m.end() + 1
    return found


# VS Code's Dark+ colours for the scopes the grammar gives
THEME = {"comment": "#6A9955", "string": "#CE9178", "keyword.control": "#C586C0", "keyword.operator": "#D4D4D4",
         "entity.name.type": "#4EC9B0", "entity.name.function": "#DCDCAA", "support.type.property-name": "#9CDCFE",
         "variable.parameter": "#9CDCFE", "support.function": "#DCDCAA", "constant.language": "#569CD6",
         "constant.numeric": "#B5CEA8", "variable.other": "#9CDCFE"}


def colour(scope: str) -> str:
    return next((c for prefix, c in sorted(THEME.items(), key=lambda kv: -len(kv[0])) if scope.startswith(prefix)),
                "#D4D4D4")


def svg(source: str, title: str = "") -> str:
    """The source as an editor with VS Code's dark theme shows it, coloured by the grammar: an SVG picture."""
    from html import escape

    lines = source.rstrip("\n").split("\n")
    pieces: dict[int, list[tuple[int, int, str]]] = {}
    for number, start, end, scope in highlight(source):
        pieces.setdefault(number, []).append((start, end, scope))
    char, height, top = 8.4, 19, 36
    width = int(max(map(len, lines), default=0) * char + 80)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{top + height * len(lines) + 12}" '
           'font-family="DejaVu Sans Mono, Menlo, Consolas, monospace" font-size="14">',
           '<rect width="100%" height="100%" fill="#1E1E1E"/><rect width="100%" height="26" fill="#2D2D2D"/>',
           f'<text x="12" y="18" fill="#CCCCCC" font-size="12">{escape(title)}</text>']
    for number, line in enumerate(lines):
        y = top + height * number + 12
        out.append(f'<text x="8" y="{y}" fill="#858585" font-size="12">{number + 1:>3}</text>')
        spans, column = [], 0
        for start, end, scope in sorted(pieces.get(number, [])):
            if start < column:
                continue
            if start > column:
                spans.append((line[column:start], "#D4D4D4"))
            spans.append((line[start:end], colour(scope)))
            column = end
        spans.append((line[column:], "#D4D4D4"))
        text = "".join(f'<tspan fill="{c}">{escape(t)}</tspan>' for t, c in spans if t)
        out.append(f'<text x="44" y="{y}" xml:space="preserve">{text}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    import sys

    if sys.argv[1:2] == ["--svg"] and len(sys.argv) == 3:
        with open(sys.argv[2], encoding="utf-8") as handle:
            print(svg(handle.read(), sys.argv[2]), end="")
    else:
        print(text(), end="")
