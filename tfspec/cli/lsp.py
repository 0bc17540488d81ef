"""`tfspec lsp`: the language server, on standard input and output."""

from __future__ import annotations

from .common import UsageError


def add(sub) -> None:
    """The `lsp` command's arguments."""
    lsp = sub.add_parser("lsp", help="a Language Server Protocol server on stdin/stdout, for editors (diagnostics, "
                                     "hover, completion, go-to-definition, rename, outline, formatting)")
    lsp.set_defaults(run=run)


def run(args) -> int:
    try:
        from ..lsp.server import main as serve
    except ImportError as exc:
        raise UsageError(f"the language server needs pygls and lsprotocol ({exc.name} is missing): "
                         "pip install 'tfspec[lsp]'") from None
    return serve()
