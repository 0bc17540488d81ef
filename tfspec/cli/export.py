"""`tfspec export`: a run's or checkpoint's model for other tools (Hugging Face, ONNX, a plain PyTorch file)."""

from __future__ import annotations

from ..errors import RunError, shown
from .common import print_json, UsageError, with_json, writable


def add(sub) -> None:
    """The `export` command's arguments."""
    export = with_json(sub.add_parser("export", help="write a run's (or checkpoint's) model for other tools: "
                                                     "Hugging Face, a standalone PyTorch file, ONNX"))
    export.add_argument("source", metavar="RUN_OR_CHECKPOINT")
    export.add_argument("--to", choices=["hf", "torch", "onnx"], required=True,
                        help="hf: a transformers model directory; torch: tfspec emit's file and its weights; onnx")
    export.add_argument("-o", "--output", required=True, metavar="DIR", help="a new directory to write")
    export.set_defaults(run=run)


def run(args) -> int:
    from pathlib import Path

    from ..interop.export import ExportError, export

    out = Path(args.output)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UsageError(f"-o {shown(out)}: already exists{'' if out.is_dir() else ' (a file)'}; name a new directory")
    writable(str(out), "-o")
    try:
        written = export(args.source, out, to=args.to)
    except ExportError as exc:
        raise RunError(str(exc)) from None
    if args.json:
        print_json({"output": str(out), "to": args.to, "written": written,
                     "files": sorted(p.name for p in out.iterdir())})
    else:
        print(f"wrote {shown(out)}: {written}")
    return 0
