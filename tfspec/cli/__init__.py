"""The `tfspec` command line. Spec errors print like a compiler and exit 1; usage errors exit 2; Ctrl-C is one line
and 130, SIGTERM one line and 143.

One module a command (``check``, ``fmt``, ``build``, ``verify``, ``summary``, ``mask``, ``render``, ``import_``,
``export``, ``emit``, ``diff``, ``train``, ``generate``, ``prepare``, ``demo``, ``report``, ``lsp``), each with its
arguments beside its handler; ``common`` holds what several share, and ``app`` assembles the parser and runs a
command. Torch is imported only by the commands that build a model.

This module stays light: the console script imports it first, so a Ctrl-C or a SIGTERM while the rest loads still
ends in one line, not a traceback or a silent death.
"""

from __future__ import annotations

import signal
import sys


class Terminated(BaseException):
    """SIGTERM, as an exception: the command stops where it is, with one line and status 143 (a run being trained
    saves first: ``tfspec.run.trainer`` takes SIGTERM over while its loop runs)."""


def _terminate(signum, frame):
    raise Terminated


def main(argv: list[str] | None = None) -> int:
    """Run one ``tfspec`` command (``argv``; None: the process's own command line) and return its exit status.
    SIGTERM and Ctrl-C are answered from here on, before the rest of the command line loads.

    >>> main(["check", "examples/reverse.tfs"])  # doctest: +SKIP
    examples/reverse.tfs: reverse: encoder-decoder, 2+2 layers, d_model 64, 4 heads, 235,520 parameters
    0
    """
    try:
        previous = signal.signal(signal.SIGTERM, _terminate)
    except ValueError:  # not the main thread: its signals are not this call's to take
        previous = None
    try:
        try:
            try:
                from .app import main as run
            except KeyboardInterrupt:  # while the command line's modules load
                print("interrupted", file=sys.stderr)
                return 130
            return run(argv)
        except Terminated:
            from ..errors import shown

            command = next((a for a in (sys.argv[1:] if argv is None else argv) if not a.startswith("-")), None)
            print(f"tfspec{' ' + shown(command) if command else ''}: stopped by SIGTERM", file=sys.stderr)
            return 128 + signal.SIGTERM
        finally:
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)
            if argv is None:  # the process's one command is done: a Ctrl-C while it exits (its libraries' exit
                signal.signal(signal.SIGINT, signal.SIG_IGN)  # handlers) would end it by the signal, unannounced
    except KeyboardInterrupt:  # as the command returned, between its handlers and this function's end
        print("interrupted", file=sys.stderr)
        return 130


def __getattr__(name: str):
    if name == "build_parser":  # the parser, for documentation and tests
        from .app import build_parser

        return build_parser
    raise AttributeError(f"module 'tfspec.cli' has no attribute {name!r}")
