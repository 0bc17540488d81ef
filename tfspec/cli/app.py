"""The command line assembled: the parser (each command's arguments from its module), and the run of one command,
which turns every error a user can cause into one message and an exit status.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import warnings

from ..errors import colour_wanted, LengthError, RunError, RunWarning, shown, shown_message, SpecError, SpecWarning
from . import (build, check, demo, diff, emit, export, fmt, generate, import_, lsp, mask, prepare, render, report,
               summary, train, verify)
from .common import UsageError


class _Parser(argparse.ArgumentParser):
    """argparse's parser with "did you mean …?" for a mistyped command (``tfspec chekc``) or option
    (``--sett``)."""

    def error(self, message: str):
        import difflib

        choice = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
        if choice:
            options = re.findall(r"'?([\w-]+)'?", choice.group(2))
            close = difflib.get_close_matches(choice.group(1), options, n=1, cutoff=0.6)
            if close:
                message += f"; did you mean '{close[0]}'?"
        unknown = re.match(r"unrecognized arguments: (.*)", message)
        if unknown:
            known = [o for action in self._actions for o in action.option_strings if o.startswith("--")]
            for word in unknown.group(1).split():
                close = difflib.get_close_matches(word.split("=")[0], known, n=1, cutoff=0.6)
                if word.startswith("-") and close:
                    message += f"; did you mean '{close[0]}' (for '{word}')?"
                    break
        super().error(message)

    def parse_args(self, args=None, namespace=None):
        """As argparse's, an unrecognised option reported by the command it was given to (whose options the
        suggestion is drawn from)."""
        namespace, extras = self.parse_known_args(args, namespace)
        if extras:
            commands = next((a.choices for a in self._actions if isinstance(a, argparse._SubParsersAction)), {})
            command = commands.get(getattr(namespace, "command", None))
            (command or self).error(f"unrecognized arguments: {' '.join(extras)}")
        return namespace


# one module a command, each with its arguments (``add``) beside its handler (``run``), in --help's order
COMMANDS = (check, fmt, build, verify, summary, mask, render, import_, export, emit, diff, train, generate, prepare,
            demo, report, lsp)


def build_parser() -> argparse.ArgumentParser:
    """The command line: each command's arguments are added by ``add`` in its module, beside its handler."""
    from ..version import __version__

    parser = _Parser(prog="tfspec", description="Define, check and build Transformer architectures.")
    parser.add_argument("--version", action="version", version=f"tfspec {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)
    for command in COMMANDS:
        command.add(sub)
    return parser


def _lost_worker(exc: BaseException) -> str | None:
    if "WORLD_SIZE" not in os.environ:  # not a torchrun worker
        return None
    from ..run.distributed import lost_worker

    return lost_worker(exc)


def _no_nul(args) -> None:
    """No path or text holds a NUL byte (open() and friends raise on one): a usage error naming the option."""
    for name, value in vars(args).items():
        items = value if isinstance(value, list) else [value]
        for item in [part for i in items for part in (i if isinstance(i, tuple) else (i,))]:  # --set's pairs
            if name != "argv" and isinstance(item, str) and "\x00" in item:
                option = name if name in ("file", "files", "source", "checkpoint", "first", "second", "data") \
                    else "--" + name.replace("_", "-")
                raise UsageError(f"{option}: {item!r} holds a NUL byte, which no path or text can")


def _keep_undecodable_bytes() -> None:
    """A path or text given as bytes that are not UTF-8 (Python keeps them as surrogates) prints as those
    bytes, instead of ending the command with a UnicodeEncodeError."""
    for stream in (sys.stdout, sys.stderr):
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="surrogateescape")


def _show_spec_warnings() -> None:
    """A spec's warnings print as a compiler prints them (the source line and a caret), and a run's as one line
    (``warning: ...``), not as Python warnings."""
    default = warnings.showwarning
    if getattr(default, "shows_spec_warnings", False):  # (main called again in one process)
        return

    def show(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, SpecWarning):
            print(message.diagnostic.render(message.sources, colour_wanted(sys.stderr))
                  if isinstance(message, SpecWarning) else message, file=sys.stderr)
        elif issubclass(category, RunWarning):
            print(f"warning: {shown_message(message)}", file=sys.stderr)
        else:
            default(message, category, filename, lineno, file, line)

    show.shows_spec_warnings = True
    warnings.showwarning = show


def main(argv: list[str] | None = None) -> int:
    """Run one command; its exit status. ``argv`` None: the process's own command line, a process that runs
    this one command (so ``import`` may load transformers without torch, see ``configurations_without_torch``).
    SIGTERM is ``tfspec.cli.main``'s to answer, from before this module loads."""
    try:
        return _main(argv)
    except KeyboardInterrupt:  # while the parser is built or reads the command line (a command's own: in _main)
        print("interrupted", file=sys.stderr)
        return 130


def _main(argv: list[str] | None) -> int:
    _show_spec_warnings()
    args = build_parser().parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    args.whole_process = argv is None  # the process's own command line: it runs this one command, then exits
    _keep_undecodable_bytes()
    try:
        _no_nul(args)
        return args.run(args)
    except SpecError as exc:  # a spec that does not load: compiler-style message, exit 1
        print(exc.render(colour_wanted(sys.stderr)), file=sys.stderr)
        return 1
    except (UsageError, LengthError) as exc:
        print(f"tfspec {args.command}: error: {shown_message(exc)}", file=sys.stderr)
        return 2
    except RunError as exc:  # data or a checkpoint that cannot serve: the reason, exit 1
        print(f"tfspec {args.command}: error: {shown_message(exc)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except UnicodeError as exc:  # a name given in bytes that are not UTF-8, where tfspec must write it as text
        where = getattr(exc, "object", None)
        what = f"{where[exc.start:exc.end]!r} in " if where is not None else ""
        print(f"tfspec {args.command}: error: {what}a name or text given is not UTF-8; tfspec writes names and "
              "text as UTF-8", file=sys.stderr)
        return 1
    except OSError as exc:  # a path the checks before could not foresee (a disk full, a file removed meanwhile)
        where = f"{shown(exc.filename)}: " if getattr(exc, "filename", None) else ""
        print(f"tfspec {args.command}: error: {where}{shown_message(exc.strerror or exc)}", file=sys.stderr)
        return 1
    except Exception as exc:  # noqa: BLE001 - a worker whose peer died sees its collective fail
        lost = _lost_worker(exc)
        if lost is None:
            raise
        print(f"tfspec {args.command}: error: [rank {os.environ['RANK']}] another worker is gone ({lost}); "
              "the run stops at its last checkpoint", file=sys.stderr)
        return 1
