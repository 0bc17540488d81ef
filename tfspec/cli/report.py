"""`tfspec report`: one self-contained HTML page of one or more specs."""

from __future__ import annotations

from ..errors import shown
from ..files import write_atomically
from ..ir.api import load
from .common import (check_output, example_count, overrides, positive, print_json, UsageError, with_json,
                     with_set)


def add(sub) -> None:
    """The `report` command's arguments."""
    report = with_json(with_set(sub.add_parser("report", help="one self-contained HTML page: the diagram, parameters "
                                                              "by block, cost against length, attention patterns, "
                                                              "verified properties; several specs side by side")))
    report.add_argument("files", nargs="+", metavar="FILE")
    report.add_argument("-o", "--output", required=True, metavar="REPORT.html")
    report.add_argument("--seq-len", type=positive, help="the length of the cost figures (default: the learned "
                                                           "positions' size, else 512)")
    report.add_argument("--no-verify", action="store_true", help="leave out the verified properties (faster)")
    report.add_argument("--examples", type=example_count, default=10, help="Hypothesis examples per verified property "
                                                                       "(default 10)")
    report.set_defaults(run=run)


def run(args) -> int:
    from ..inspect.analysis import AnalysisError
    from ..inspect.report import build, page

    if not args.output.lower().endswith((".html", ".htm")):
        raise UsageError(f"-o {shown(args.output)}: a report is an HTML page; name a .html file")
    check_output(args.output, ".html")
    paths, specs = [], []
    for path in args.files:  # a model of towers: a page for each tower, named model.tower
        spec = load(path, overrides=overrides(args))
        for name, part in spec.parts().items():
            name = name if part is spec else f"{spec.name}.{name}"
            paths.append(path)
            specs.append(part if part.name == name else part.model_copy(update={"name": name}))
    try:
        reports = build(paths, specs, seq_len=args.seq_len, verify=not args.no_verify, examples=args.examples)
    except AnalysisError as exc:
        raise UsageError(str(exc)) from None
    write_atomically(args.output, page(reports).encode("utf-8"))
    missing = sorted({f"{part}: {why}" for r in reports for part, why in r.notes.items() if part != "verify"})
    if args.json:
        print_json({"output": args.output, "specs": [r.spec.name for r in reports], "notes": missing,
                     "violated": {r.spec.name: [v.name for v in r.verified or [] if v.status == "violated"]
                                  for r in reports}})
        return 0
    for note in missing:
        print(f"note: {note}")
    print(f"wrote {shown(args.output)}: {', '.join(r.spec.name for r in reports)}")
    return 0
