"""`tfspec verify`: properties proved on the compiled model (causality, padding invariance, equivariance ...)."""

from __future__ import annotations

from ..errors import shown
from ..ir.api import load
from .common import example_count, overrides, print_json, seed_number, with_json, with_set


def add(sub) -> None:
    """The `verify` command's arguments."""
    verify = with_json(with_set(sub.add_parser("verify", help="check causality, permutation equivariance, padding "
                                                    "invariance, window locality and gradients on the compiled "
                                                    "spec")))
    verify.add_argument("file", metavar="FILE")
    verify.add_argument("--examples", type=example_count, default=25,
                        help="Hypothesis examples per property (default 25)")
    verify.add_argument("--seed", type=seed_number, default=0)
    verify.add_argument("--full-size", action="store_true", help="check the spec at its own sizes (slow for big "
                                                                 "models); by default widths, vocabularies and "
                                                                 "layer counts are reduced")
    verify.set_defaults(run=run)


def run(args) -> int:
    from ..backend.compiler import compile as compile_spec
    from ..front.schema import Towers
    from ..inspect.verify import small_version, verify, verify_towers

    spec = load(args.file, overrides=overrides(args))
    changes = []
    if not args.full_size:
        spec, changes = small_version(spec)
    if not args.full_size and not args.json:
        changed = f" ({', '.join(changes)})" if changes else ""
        print(f"{shown(args.file)}: checking {spec.name} at test size{changed}")
    model = compile_spec(spec, seed=args.seed)
    results = (verify_towers if isinstance(spec, Towers) else verify)(model, examples=args.examples, seed=args.seed)
    if args.json:
        print_json({"file": args.file, "name": spec.name, "test_size": not args.full_size, "reduced": changes,
                     "properties": [{"name": r.name, "status": r.status, "detail": r.detail} for r in results],
                     "violated": [r.name for r in results if r.status == "violated"]})
        return 1 if any(r.status == "violated" for r in results) else 0
    marks = {"held": "held    ", "violated": "VIOLATED", "not applicable": "n/a     "}
    for r in results:
        print(f"  {marks[r.status]} {r.name}: {r.detail}")
    violated = [r.name for r in results if r.status == "violated"]
    print(f"{len(violated)} of {sum(r.status != 'not applicable' for r in results)} properties violated"
          + (f": {', '.join(violated)}" if violated else ""))
    return 1 if violated else 0
