"""`tfspec diff`: what differs architecturally between two specs, and their totals."""

from __future__ import annotations

import json

from ..errors import shown
from ..ir.api import load
from .common import overrides, positive, UsageError, with_set


def add(sub) -> None:
    """The `diff` command's arguments."""
    diff = with_set(sub.add_parser("diff", help="what differs architecturally between two specs"))
    diff.add_argument("first", metavar="A")
    diff.add_argument("second", metavar="B")
    diff.add_argument("--seq-len", type=positive, help="length at which totals are compared (default: the "
                                                        "shorter of the two specs' defaults)")
    diff.add_argument("--json", action="store_true", help="print the changes and totals as JSON")
    diff.set_defaults(run=run)


def run(args) -> int:
    from ..inspect.analysis import AnalysisError
    from ..inspect.diff import diff
    from ..inspect.summary import binary, si

    specs = [load(path, overrides=overrides(args)) for path in (args.first, args.second)]
    try:
        result = diff(*specs, seq_len=args.seq_len)
    except AnalysisError as exc:
        raise UsageError(str(exc)) from None
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
        return 0
    first, second = result.names
    print(f"{first} ({shown(args.first)}) → {second} ({shown(args.second)})")
    if result.changes:
        print("\narchitecture:")
        for change in result.changes:
            print(f"  {change}")
    else:
        print("\nno architectural differences")
    lengths = result.seq_len if isinstance(result.seq_len, (int, str)) else " and ".join(map(str, result.seq_len))
    print(f"\ntotals (batch 1, seq_len {lengths}):")
    show = {"parameters": lambda v: f"{v:,}", "forward FLOPs": si, "activation memory (bytes)": binary}
    for what, a, b in result.totals:
        change = f" ({(b - a) / a:+.1%})" if a and a != b else ("" if a == b else "")
        print(f"  {what.replace(' (bytes)', '')}: {show[what](a)} → {show[what](b)}{change}")
    return 0
