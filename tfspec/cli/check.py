"""`tfspec check`: parse and validate specs, each a summary line or every problem with its caret (``--json``: data)."""

from __future__ import annotations

import json
import sys
import warnings

from ..errors import colour_wanted, SpecError, SpecWarning
from ..ir.api import load
from ..inspect.summary import summary_line
from .common import overrides, print_json, UsageError, with_json, with_set


def add(sub) -> None:
    """The `check` command's arguments."""
    check = with_json(with_set(sub.add_parser("check", help="parse and validate specs; print a summary line for "
                                                            "each")))
    check.add_argument("files", nargs="+", metavar="FILE")
    check.add_argument("--dump", choices=["spec", "graph"], help="print the resolved spec (JSON) or the graph IR")
    check.set_defaults(run=run)


def run(args) -> int:
    if args.json and args.dump:
        raise UsageError("--dump prints the spec or the graph; --json the check's results: give one")
    failed, results = 0, []
    for path in args.files:
        try:
            with warnings.catch_warnings(record=args.json) as caught:  # --json: the warnings go into the result
                if args.json:
                    warnings.simplefilter("always", SpecWarning)
                spec = load(path, overrides=overrides(args))
        except SpecError as exc:
            if args.json:
                results.append({"file": path, "ok": False, "diagnostics": [d.to_dict() for d in exc.diagnostics]})
            else:
                print(exc.render(colour_wanted(sys.stderr)), file=sys.stderr)
            failed += 1
            continue
        if args.json:
            found = [w.message.diagnostic.to_dict() for w in caught or [] if isinstance(w.message, SpecWarning)]
            results.append({"file": path, "ok": True, "name": spec.name, "kind": spec.kind, **_counts(spec.graph()),
                            "summary": summary_line(path, spec), "diagnostics": found})
        elif args.dump:
            print(_dump(spec, args.dump))
        else:
            print(summary_line(path, spec))
    if args.json:
        print_json(results)
    return 1 if failed else 0


def _counts(g) -> dict:
    """Its parameters (``g``: its IR): all, those one token's computation reads, those only training runs; of
    towers, each tower's too."""
    from ..ir import TowersGraph
    from ..ir.queries import active_parameters, count_parameters, training_only_parameters
    from ..ir.towers import count_tower_parameters

    if isinstance(g, TowersGraph):
        towers = {name: _counts(tower) for name, tower in g.towers.items()}
        total = count_tower_parameters(g)
        joins = total - sum(c["parameters"] for c in towers.values())
        return {"parameters": total,
                "active_parameters": sum(c["active_parameters"] for c in towers.values()) + joins,
                "training_only_parameters": sum(c["training_only_parameters"] for c in towers.values()),
                "towers": towers}
    return {"parameters": count_parameters(g), "active_parameters": active_parameters(g),
            "training_only_parameters": training_only_parameters(g)}


def _dump(spec, what: str) -> str:
    if what == "spec":
        return json.dumps(spec.model_dump(), indent=2)
    return spec.graph().format()
