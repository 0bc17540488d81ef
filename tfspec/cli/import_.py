"""`tfspec import`: the spec a Hugging Face configuration describes, and with ``--run`` a run holding its weights."""

from __future__ import annotations

from ..errors import RunError, shown
from ..files import new_directory
from ..ir.api import load
from ..inspect.summary import summary_line
from .common import check_output, print_json, quiet_transformers, UsageError, with_json, writable, write_output


def add(sub) -> None:
    """The `import` command's arguments."""
    imports = with_json(sub.add_parser("import", help="write the spec a Hugging Face model directory's config.json "
                                                      "describes"))
    imports.add_argument("source", metavar="DIR", nargs="?", help="a Hugging Face model directory, or its config.json")
    imports.add_argument("--list", action="store_true", help="print the families, classes and configuration fields "
                                                              "import reads (Markdown; docs/hf_families.md)")
    imports.add_argument("-o", "--output", metavar="NAME.tfs", help="where to write it (default: standard output)")
    imports.add_argument("--name", help="the spec's model name (default: the directory's)")
    imports.add_argument("--tower", metavar="NAME", help="only this tower of a model of towers, where it is a model "
                         "of its own (a Gemma 3 checkpoint's text model: --tower text), exported as its own family's")
    imports.add_argument("--run", dest="run_dir", metavar="OUT", help="also write the weights as a run directory (a "
                         "step-0 checkpoint that tfspec export reads)")
    imports.set_defaults(run=run)


def run(args) -> int:
    from ..interop.families import configurations_without_torch, import_config
    from ..interop.mapping import InteropError

    if args.list:
        if args.source or args.run_dir or args.output or args.name or args.tower:
            raise UsageError("--list takes no model directory or other options")
        from ..interop.coverage import coverage_data, coverage_markdown
        if args.json:
            print_json(coverage_data())
        else:
            print(coverage_markdown(), end="")
        return 0
    if args.source is None:
        raise UsageError("import needs a model directory (or its config.json), or --list")
    check_output(args.output, ".tfs")  # before any run directory is written
    if args.whole_process and not args.run_dir:
        configurations_without_torch()  # a configuration alone: 2-3x as fast as with torch
    quiet_transformers()
    try:
        text = import_config(args.source, name=args.name, tower=args.tower)  # (checked: it names the fields)
        if args.run_dir:
            _import_run(args.source, text, args.run_dir, args.tower)
    except InteropError as exc:
        message = str(exc)
        raise RunError(message if str(args.source) in message else f"{shown(args.source)}: {message}") from None
    if args.json:
        if args.output is None:
            raise UsageError("--json describes what import wrote: give -o NAME.tfs")
        write_output(args.output, text)
        spec = load(args.output)
        print_json({"output": args.output, "run": args.run_dir, "name": spec.name, "kind": spec.kind,
                     "parameters": spec.parameter_count(), "summary": summary_line(args.output, spec)})
    elif write_output(args.output, text):
        print(f"wrote {shown(args.output)}: {summary_line(args.output, load(args.output)).split(': ', 1)[1]}")
    return 0


def _import_run(source, text: str, run_dir: str, tower: str | None = None) -> None:
    """A run directory holding the imported weights as tfspec's step-0 checkpoint (``tfspec export`` reads it)."""
    import errno
    from pathlib import Path

    from ..run import checkpoint as ckpt
    from ..interop.families import from_pretrained, tokenizer_of

    if Path(run_dir).exists() and (not Path(run_dir).is_dir() or any(Path(run_dir).iterdir())):
        raise UsageError(f"--run {shown(run_dir)}: already exists; name a new directory")
    writable(run_dir, "--run")
    quiet_transformers()
    model = from_pretrained(source, tower=tower)
    meta, files = {"hf_class": model.hf_class, "hf_carried": model.hf_carried, "imported_from": str(source)}, {}
    vocab = tokenizer_of(source, model)
    if vocab is not None:
        meta["vocab"], files = vocab.to_dict(), vocab.files()
    try:
        # written whole into a hidden sibling, then renamed into place: a failure leaves nothing, and of two imports
        # into one directory the second's rename finds the first's run there and fails, never merging with it
        with new_directory(run_dir) as work:
            try:
                ckpt.save(work, 0, model, text, meta, {}, files)
            except ckpt.CheckpointError as exc:  # (a full disk) named where the run was going, not its draft
                raise ckpt.CheckpointError(str(exc).replace(str(work), str(run_dir))) from None
    except OSError as exc:
        if exc.errno in (errno.ENOTEMPTY, errno.EEXIST):
            raise UsageError(f"--run {shown(run_dir)}: already exists (written meanwhile by another process); name "
                             "a new directory") from None
        raise
    path = ckpt.latest(run_dir)
    with_tokenizer = " and its tokenizer.json" if files else " (no tokenizer.json beside them)"
    print(f"wrote {shown(path)}: the {model.hf_class} weights{with_tokenizer}, "
          f"{sum(p.numel() for p in model.parameters()):,} parameters")
