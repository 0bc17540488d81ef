"""The `tfspec` command line. Spec errors print like a compiler and exit 1; usage errors exit 2; Ctrl-C is one line
and 130, SIGTERM one line and 143.

One module a command (``check``, ``fmt``, ``build``, ``verify``, ``summary``, ``mask``, ``render``, ``import_``,
``export``, ``emit``, ``diff``, ``train``, ``generate``, ``prepare``, ``demo``, ``report``, ``lsp``), each with its
arguments beside its handler; ``common`` holds what several share, and ``app`` assembles the parser and runs a
command. Torch is imported only by the commands that build a model.

This module stays light: the console script imports it first, so a Ctrl-C while the rest loads still ends in one
line, not a traceback.
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    """Run one ``tfspec`` command (``argv``; None: the process's own command line) and return its exit status.

    >>> main(["check", "examples/reverse.tfs"])  # doctest: +SKIP
    examples/reverse.tfs: reverse: encoder-decoder, 2+2 layers, d_model 64, 4 heads, 235,520 parameters
    0
    """
    try:
        from .app import main as run
    except KeyboardInterrupt:  # while the command line's modules load
        print("interrupted", file=sys.stderr)
        return 130
    return run(argv)


def __getattr__(name: str):
    if name == "build_parser":  # the parser, for documentation and tests
        from .app import build_parser

        return build_parser
    raise AttributeError(f"module 'tfspec.cli' has no attribute {name!r}")
