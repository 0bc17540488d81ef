"""`tfspec fmt`: specs in canonical form, printed, checked (``--check``) or rewritten (``--write``)."""

from __future__ import annotations

import sys

from ..errors import colour_wanted, shown, SpecError
from ..files import read_regular, write_atomically
from ..front.api import MAX_SPEC_BYTES
from .common import print_json, with_json


def add(sub) -> None:
    """The `fmt` command's arguments."""
    fmt = with_json(sub.add_parser("fmt", help="print specs in canonical form (comments kept)"))
    fmt.add_argument("files", nargs="+", metavar="FILE")
    mode = fmt.add_mutually_exclusive_group()
    mode.add_argument("--write", "-w", action="store_true", help="rewrite the files in place")
    mode.add_argument("--check", action="store_true", help="exit 1 if any file is not formatted")
    fmt.set_defaults(run=run)


def run(args) -> int:
    from ..front.fmt import format_text

    failed, results = 0, []
    for path in args.files:
        try:
            text = read_regular(path, MAX_SPEC_BYTES).decode("utf-8")
            formatted = format_text(text, path)
        except SpecError as exc:
            print(exc.render(colour_wanted(sys.stderr)), file=sys.stderr)
            failed += 1
            continue
        except (OSError, UnicodeDecodeError) as exc:
            print(f"{shown(path)}: error: cannot read: {getattr(exc, 'strerror', None) or exc}", file=sys.stderr)
            failed += 1
            continue
        if args.json:
            results.append({"file": path, "formatted": formatted == text,
                            **({"text": formatted} if not (args.check or args.write) else {})})
            failed += bool(args.check and formatted != text)
            if args.write and formatted != text:
                write_atomically(path, formatted.encode("utf-8"))
        elif args.check:
            if formatted != text:
                print(f"{shown(path)}: not formatted")
                failed += 1
        elif args.write:
            if formatted != text:
                write_atomically(path, formatted.encode("utf-8"))
                print(f"formatted {shown(path)}")
        else:
            sys.stdout.write(formatted)
    if args.json:
        print_json(results)
    return 1 if failed else 0
