"""The `tfspec` command line. Spec errors print like a compiler and exit 1; usage errors exit 2."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from .api import load
from .errors import SpecError


def parse_set(item: str) -> tuple[str, Any]:
    """``--set layers=2`` -> ("layers", 2); a non-number stays text and is parsed as an expression."""
    name, sep, value = item.partition("=")
    name, value = name.strip(), value.strip()
    if not sep or not name or not value:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {item!r}")
    for kind in (int, float):
        try:
            return name, kind(value)
        except ValueError:
            pass
    return name, value


def _overrides(args) -> dict[str, Any]:
    return dict(args.set or [])


def summary_line(path: str, spec) -> str:
    g = spec.graph()
    stacks = g.graph["stacks"]
    layers = "+".join(str(stacks[s.role]["repeat"]) for s in spec.stacks)
    heads = sorted({a["spec"].heads for _, a in g.nodes(data=True) if a["op"] == "attention"})
    widths = sorted({info["width"] for info in stacks.values()})
    head_text = "/".join(map(str, heads)) + " heads" if heads else "no attention"
    return (f"{path}: {spec.name}: {spec.kind}, {layers} layers, d_model {'/'.join(map(str, widths))}, "
            f"{head_text}, {spec.parameter_count():,} parameters")


def cmd_check(args) -> int:
    failed = 0
    for path in args.files:
        try:
            spec = load(path, overrides=_overrides(args))
        except SpecError as exc:
            print(exc.render(), file=sys.stderr)
            failed += 1
            continue
        if args.dump:
            print(_dump(spec, args.dump))
        else:
            print(summary_line(path, spec))
    return 1 if failed else 0


def cmd_fmt(args) -> int:
    from .fmt import format_text

    failed = 0
    for path in args.files:
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
            formatted = format_text(text, path)
        except SpecError as exc:
            print(exc.render(), file=sys.stderr)
            failed += 1
            continue
        except (OSError, UnicodeDecodeError) as exc:
            print(f"{path}: error: cannot read: {getattr(exc, 'strerror', None) or exc}", file=sys.stderr)
            failed += 1
            continue
        if args.check:
            if formatted != text:
                print(f"{path}: not formatted")
                failed += 1
        elif args.write:
            if formatted != text:
                _write_atomically(path, formatted)
                print(f"formatted {path}")
        else:
            sys.stdout.write(formatted)
    return 1 if failed else 0


def _write_atomically(path: str, text: str) -> None:
    import os
    import tempfile

    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tfspec-fmt-")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def _dump(spec, what: str) -> str:
    if what == "spec":
        return json.dumps(spec.model_dump(), indent=2)
    from .graph import format_graph

    return format_graph(spec.graph())


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tfspec", description="Define, check and build Transformer architectures.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def with_set(p):
        p.add_argument("--set", action="append", type=parse_set, metavar="NAME=VALUE",
                       help="override a `let` parameter, e.g. --set layers=2 (repeatable)")
        return p

    check = with_set(sub.add_parser("check", help="parse and validate specs; print a summary line for each"))
    check.add_argument("files", nargs="+", metavar="FILE")
    check.add_argument("--dump", choices=["spec", "graph"], help="print the resolved spec (JSON) or the graph IR")
    check.set_defaults(run=cmd_check)

    fmt = sub.add_parser("fmt", help="print specs in canonical form (comments kept)")
    fmt.add_argument("files", nargs="+", metavar="FILE")
    mode = fmt.add_mutually_exclusive_group()
    mode.add_argument("--write", "-w", action="store_true", help="rewrite the files in place")
    mode.add_argument("--check", action="store_true", help="exit 1 if any file is not formatted")
    fmt.set_defaults(run=cmd_fmt)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
