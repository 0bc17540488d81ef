"""`tfspec emit`: the model as one standalone PyTorch file."""

from __future__ import annotations

from ..errors import shown
from ..ir.api import load
from .common import check_output, overrides, print_json, UsageError, with_json, with_set, write_output


def add(sub) -> None:
    """The `emit` command's arguments."""
    emit = with_json(with_set(sub.add_parser("emit", help="write the model as one standalone, readable PyTorch file "
                                                "(torch only) that loads the compiled model's state_dict")))
    emit.add_argument("file", metavar="SPEC")
    emit.add_argument("-o", "--output", metavar="MODEL.py", help="where to write it (default: standard output)")
    emit.set_defaults(run=run)


def run(args) -> int:
    from ..backend.standalone import emit

    spec = load(args.file, overrides=overrides(args))
    source = emit(spec, origin=" ".join([args.file] + [f"--set {k}={v}" for k, v in overrides(args).items()]))
    check_output(args.output, ".py")
    if args.json and args.output in (None, "-"):
        raise UsageError("--json describes what emit wrote: give -o MODEL.py")
    if not write_output(args.output, source):
        return 0
    if args.json:
        print_json({"output": args.output, "name": spec.name, "parameters": spec.parameter_count()})
        return 0
    print(f"wrote {shown(args.output)}: class Model, {spec.parameter_count():,} parameters when built; "
          "load a compiled model's state_dict into it")
    return 0
