"""The `tfspec` command line. Spec errors print like a compiler and exit 1; usage errors exit 2.

Commands: check, fmt, build, verify, summary, mask, render, import, export, emit, diff, train, generate, demo.
Torch is imported only by the commands that build a model.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import warnings
from typing import Any

from ..front.api import MAX_SPEC_BYTES, load, parse
from ..errors import LengthError, RunError, SpecError, SpecWarning, colour_wanted
from ..files import check_writable, new_directory, read_regular, removed_on_failure, write_atomically
from ..inspect.summary import summary_line
from ..run.watch import LOGGERS, missing as missing_logger

TASKS = ("copy", "reverse", "sort")  # tfspec.run.data.TASKS, named here so --help does not import torch
DEFAULT_GLOB = "*.txt"  # tfspec.run.corpus.DEFAULT_GLOB, likewise
TASK_HELP = {"copy": "the target is the source", "reverse": "the source backwards",
             "sort": "the source's symbols in ascending order"}


def parse_set(item: str) -> tuple[str, Any]:
    """``--set layers=2`` -> ("layers", 2); a non-number stays text and is parsed as an expression."""
    name, sep, value = item.partition("=")
    name, value = name.strip(), value.strip()
    if not sep or not name or not value:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {item!r}")
    for kind in (int, float):
        try:
            number = kind(value)
        except ValueError:
            continue
        # beyond a float (1e400) it stays as written: the spec's parser names it, as the user wrote it
        return name, number if number == number and abs(number) != float("inf") else value
    return name, value


def _overrides(args) -> dict[str, Any]:
    return dict(args.set or [])


def _add_check(sub) -> None:
    """The `check` command's arguments."""
    check = _with_json(_with_set(sub.add_parser("check", help="parse and validate specs; print a summary line for "
                                                             "each")))
    check.add_argument("files", nargs="+", metavar="FILE")
    check.add_argument("--dump", choices=["spec", "graph"], help="print the resolved spec (JSON) or the graph IR")
    check.set_defaults(run=cmd_check)


def cmd_check(args) -> int:
    if args.json and args.dump:
        raise UsageError("--dump prints the spec or the graph; --json the check's results: give one")
    failed, results = 0, []
    for path in args.files:
        try:
            with warnings.catch_warnings(record=args.json) as caught:  # --json: the warnings go into the result
                if args.json:
                    warnings.simplefilter("always", SpecWarning)
                spec = load(path, overrides=_overrides(args))
        except SpecError as exc:
            if args.json:
                results.append({"file": path, "ok": False, "diagnostics": [d.to_dict() for d in exc.diagnostics]})
            else:
                print(exc.render(colour_wanted(sys.stderr)), file=sys.stderr)
            failed += 1
            continue
        if args.json:
            from ..ir.queries import active_parameters

            found = [w.message.diagnostic.to_dict() for w in caught or [] if isinstance(w.message, SpecWarning)]
            results.append({"file": path, "ok": True, "name": spec.name, "kind": spec.kind,
                            "parameters": spec.parameter_count(), "active_parameters": active_parameters(spec.graph()),
                            "summary": summary_line(path, spec), "diagnostics": found})
        elif args.dump:
            print(_dump(spec, args.dump))
        else:
            print(summary_line(path, spec))
    if args.json:
        _print_json(results)
    return 1 if failed else 0


def _add_fmt(sub) -> None:
    """The `fmt` command's arguments."""
    fmt = _with_json(sub.add_parser("fmt", help="print specs in canonical form (comments kept)"))
    fmt.add_argument("files", nargs="+", metavar="FILE")
    mode = fmt.add_mutually_exclusive_group()
    mode.add_argument("--write", "-w", action="store_true", help="rewrite the files in place")
    mode.add_argument("--check", action="store_true", help="exit 1 if any file is not formatted")
    fmt.set_defaults(run=cmd_fmt)


def cmd_fmt(args) -> int:
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
            print(f"{path}: error: cannot read: {getattr(exc, 'strerror', None) or exc}", file=sys.stderr)
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
                print(f"{path}: not formatted")
                failed += 1
        elif args.write:
            if formatted != text:
                write_atomically(path, formatted.encode("utf-8"))
                print(f"formatted {path}")
        else:
            sys.stdout.write(formatted)
    if args.json:
        _print_json(results)
    return 1 if failed else 0


DTYPES = ("float32", "bfloat16", "float16")


def _device(name: str):
    import torch

    try:
        device = torch.device(name)
    except RuntimeError:
        raise UsageError(f"--device {name}: not a device name (cpu, cuda, cuda:1, mps)") from None
    if device.type == "meta":
        raise UsageError(f"--device {name}: meta tensors hold no values, so nothing can run on them; use cpu or cuda")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UsageError(f"--device {name}: CUDA is not available on this machine")
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise UsageError(f"--device {name}: MPS is not available on this machine")
    return device


class UsageError(Exception):
    """A bad command-line argument: printed, exit status 2."""


def _random_inputs(model, batch: int, length: int, device, generator):
    import torch

    def ids(role):
        embedding = model.embeddings[model.stack_embedding[role]]
        if embedding.vocab is None:  # pictures
            side = embedding.image
            return torch.randn(batch, embedding.channels, side, side, generator=generator).to(device)
        return torch.randint(0, embedding.vocab, (batch, length), generator=generator).to(device)

    if model.spec.kind == "encoder-decoder":
        return ids("encoder"), ids("decoder")
    return (ids(model.spec.stacks[0].role),)


def _add_build(sub) -> None:
    """The `build` command's arguments."""
    build = _with_json(_with_set(sub.add_parser("build", help="compile a spec, print its module tree and parameter count, "
                                                  "and run one forward pass on random tokens")))
    build.add_argument("file", metavar="FILE")
    build.add_argument("--batch", type=_positive, default=2, help="batch size of the test pass (default 2)")
    build.add_argument("--seq-len", type=_positive, default=16, help="sequence length of the test pass (default 16)")
    build.add_argument("--device", default="cpu", help="cpu (default), cuda, cuda:N, mps")
    build.add_argument("--dtype", choices=DTYPES, default="float32")
    build.add_argument("--seed", type=_seed, default=0, help="seed for initialisation and inputs (default 0)")
    build.add_argument("--code", action="store_true",
                       help="also print the generated forward code of the model and of each kind of layer")
    build.set_defaults(run=cmd_build)


def cmd_build(args) -> int:
    import time

    import torch

    from ..backend.compiler import compile as compile_spec

    spec = load(args.file, overrides=_overrides(args))
    device = _device(args.device)
    from ..ir.queries import fixed_length
    fixed = [n for role in spec.graph().stacks if (n := fixed_length(spec.graph(), role)) is not None]
    args.seq_len = fixed[0] if fixed else args.seq_len  # pictures make their own length
    _fits(spec, args.batch, args.seq_len, "--batch × --seq-len", device)
    dtype = getattr(torch, args.dtype)
    model = compile_spec(spec, device=device, dtype=dtype, seed=args.seed).eval()
    if not args.json:
        print(model)
    if args.code and not args.json:
        print(f"\n# the model's forward (generated from the graph IR)\n{model.program.code.strip()}")
        for role in ("encoder", "decoder"):
            stack = getattr(model, role, None)
            kinds = {type(layer).__name__: layer for layer in stack.layers} if stack is not None else {}
            for name, layer in kinds.items():  # one of each kind of layer (a schedule's differ)
                print(f"\n# {role} layer, {name} (generated from the graph IR)\n{layer.code.strip()}")
    total = sum(p.numel() for p in model.parameters())
    if not args.json:
        print(f"\n{spec.name}: {total:,} parameters ({spec.kind}; {args.dtype} on {device})")
    if total != spec.parameter_count():  # the compiler and the IR analysis must agree
        print(f"error: the IR analysis counts {spec.parameter_count():,}", file=sys.stderr)
        return 1
    inputs = _random_inputs(model, args.batch, args.seq_len, device, torch.Generator().manual_seed(args.seed))
    try:
        start = time.perf_counter()
        with torch.no_grad():
            out = model(*inputs)
        if device.type == "cuda":
            torch.cuda.synchronize()
        elapsed = time.perf_counter() - start
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    outputs = out if isinstance(out, tuple) else (out,)
    shapes = ", ".join(str(tuple(o.shape)) for o in outputs)
    names = " and ".join(["logits" if spec.head else "hidden states"] + (["pooled"] if spec.pooler else []))
    finite = all(torch.isfinite(o).all().item() for o in outputs)
    what = "pictures" if inputs[-1].is_floating_point() else "tokens"
    if args.json:
        _print_json({"name": spec.name, "kind": spec.kind, "parameters": total, "dtype": args.dtype,
                     "device": str(device), "input": {what: list(inputs[-1].shape)},
                     "outputs": {n: list(o.shape) for n, o in zip(names.split(" and "), outputs)},
                     "milliseconds": round(elapsed * 1000, 3), "finite": finite})
    else:
        print(f"forward pass on random {what} {tuple(inputs[-1].shape)}: {names} {shapes} in {elapsed * 1000:.1f} ms"
              f"{'' if finite else ' -- NON-FINITE VALUES'}")
    return 0 if finite else 1


def _add_verify(sub) -> None:
    """The `verify` command's arguments."""
    verify = _with_json(_with_set(sub.add_parser("verify", help="check causality, permutation equivariance, padding "
                                                    "invariance, window locality and gradients on the compiled "
                                                    "spec")))
    verify.add_argument("file", metavar="FILE")
    verify.add_argument("--examples", type=_examples, default=25, help="Hypothesis examples per property (default 25)")
    verify.add_argument("--seed", type=_seed, default=0)
    verify.add_argument("--full-size", action="store_true", help="check the spec at its own sizes (slow for big "
                                                                 "models); by default widths, vocabularies and "
                                                                 "layer counts are reduced")
    verify.set_defaults(run=cmd_verify)


def cmd_verify(args) -> int:
    from ..backend.compiler import compile as compile_spec
    from ..inspect.verify import small_version, verify

    spec = load(args.file, overrides=_overrides(args))
    changes = []
    if not args.full_size:
        spec, changes = small_version(spec)
    if not args.full_size and not args.json:
        print(f"{args.file}: checking {spec.name} at test size" + (f" ({', '.join(changes)})" if changes else ""))
    model = compile_spec(spec, seed=args.seed)
    results = verify(model, examples=args.examples, seed=args.seed)
    if args.json:
        _print_json({"file": args.file, "name": spec.name, "test_size": not args.full_size, "reduced": changes,
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


def _lengths_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated lengths like 128,512,2048, got {text!r}") from None
    if not values or min(values) <= 0:
        raise argparse.ArgumentTypeError(f"expected positive lengths, got {text!r}")
    return values


def _writable(path: str, what: str) -> None:
    problem = check_writable(path)
    if problem is not None:
        raise UsageError(f"{what} {path}: {problem}")


def _plot_format(path: str) -> None:
    from matplotlib.figure import Figure

    formats = Figure().canvas.get_supported_filetypes()
    extension = os.path.splitext(path)[1].lstrip(".").lower()
    if extension not in formats:
        raise UsageError(f"--plot {path}: cannot tell the picture's format; end the name in "
                         + ", ".join(f".{f}" for f in sorted(formats)))


def _fits(spec, batch: int, length: int, what: str, device=None, beyond_positions_ok: bool = False) -> None:
    """Refuse up front a batch of ``length``-token sequences that the analysis says will not fit: its activation
    memory (``tfspec summary``'s estimate, an upper bound for a forward pass) and the token ids, against the
    memory left on ``device``; the message gives the figures."""
    from ..inspect.analysis import AnalysisError, analyse
    from ..backend.compiler import available_memory_bytes

    try:
        activations = analyse(spec, seq_len=length, batch=batch).total.memory
    except AnalysisError as exc:  # a length past the learned positions
        if beyond_positions_ok:  # the command stops there, or says why in its own words
            return
        raise UsageError(f"{what}: {exc}") from None
    need, have = activations + 16 * batch * length, available_memory_bytes(device)
    if need > have:
        raise UsageError(f"{what}: a batch of {batch:,} × {length:,} tokens needs about {_gib(need)} of memory "
                         f"(activations, as tfspec summary estimates them), but {_gib(have)} is available; "
                         "use fewer or shorter sequences")


def _gib(n: float) -> str:
    return f"{n / 2 ** 30:,.1f} GiB" if n < 2 ** 50 else f"{n / 2 ** 30:.2e} GiB"


def _add_summary(sub) -> None:
    """The `summary` command's arguments."""
    summary = _with_set(sub.add_parser("summary", help="parameters, forward FLOPs and activation memory per "
                                                      "component, their growth with sequence length, and "
                                                      "complexity classes"))
    summary.add_argument("files", nargs="+", metavar="FILE",
                         help="a spec; several are compared side by side (and drawn on one --plot)")
    summary.add_argument("--seq-len", type=_positive, help="tokens per sequence (default: the learned positions' "
                                                           "size, else 512)")
    summary.add_argument("--src-len", type=_positive, help="encoder-decoder: source length (default --seq-len)")
    summary.add_argument("--tgt-len", type=_positive, help="encoder-decoder: target length (default --seq-len)")
    summary.add_argument("--batch", type=_positive, default=1, help="sequences per batch (default 1)")
    summary.add_argument("--dtype", choices=DTYPES, default="float32", help="activation dtype for memory")
    summary.add_argument("--fused-attention", action="store_true",
                         help="count memory for a fused (flash) attention kernel: no T×T probabilities kept")
    summary.add_argument("--sweep", type=_lengths_list, metavar="N,N,...",
                         help="sequence lengths of the growth table (default powers of two 64..8192)")
    summary.add_argument("--json", action="store_true", help="print everything as JSON")
    summary.add_argument("--plot", metavar="PNG", help="also draw FLOPs and memory against sequence length "
                                                             "(every FILE on one chart)")
    summary.add_argument("--measure", action="store_true",
                         help="also compile on the meta device and compare with FlopCounterMode and the "
                              "tensors autograd saves")
    summary.set_defaults(run=cmd_summary)


def cmd_summary(args) -> int:
    from ..inspect.analysis import AnalysisError, analyse, sweep
    from ..inspect.summary import format_summary, format_sweep, plot, sweep_rows

    if len(args.files) > 1 and args.measure:
        raise UsageError("--measure checks one spec against the counter: give one FILE")
    if args.plot:
        _writable(args.plot, "--plot")
        _plot_format(args.plot)
    specs = [load(path, overrides=_overrides(args)) for path in args.files]
    if args.measure:
        from ..inspect.analysis import default_length

        given = [n for n in (args.seq_len, args.src_len, args.tgt_len) if n]
        _fits(specs[0], args.batch, max(given) if given else default_length(specs[0].graph()), "--measure")
    options = {"batch": args.batch, "dtype": args.dtype, "fused_attention": args.fused_attention}
    analyses, curves = [], []
    for path, spec in zip(args.files, specs):
        try:
            analyses.append(analyse(spec, seq_len=args.seq_len, src_len=args.src_len, tgt_len=args.tgt_len,
                                    **options))
            curves.append(sweep(spec, args.sweep, **options))
        except AnalysisError as exc:
            raise UsageError(f"{path}: {exc}" if len(args.files) > 1 else str(exc)) from None
    if len(specs) > 1:
        return _compare_summaries(args, analyses, curves)
    analysis, curve = analyses[0], curves[0]
    measured = _measure(specs[0], analysis) if args.measure else None
    if args.json:
        data = {**analysis.to_dict(), "sweep": sweep_rows(curve)}
        if measured is not None:
            data["measured"] = {"flops": measured.flops, "flops_by_op": measured.flops_by_op,
                                "saved_bytes": measured.saved_bytes}
        print(json.dumps(data, indent=2))
    else:
        print(format_summary(analysis))
        if curve:
            print()
            print(format_sweep(curve))
        if measured is not None:
            print()
            print(_measured_text(analysis, measured))
    if args.plot:
        if not curve:
            raise UsageError("--plot: no sweep length fits this spec's learned positions")
        plot({analysis.name: curve}, args.plot)
        if not args.json:
            print(f"\nwrote {args.plot}")
    return 0


def _compare_summaries(args, analyses, curves) -> int:
    """``tfspec summary A.tfs B.tfs …``: one line each, their costs side by side over the sweep, the plot."""
    from ..inspect.summary import binary, format_comparison, lengths_text, plot, si, spec_labels, sweep_rows

    labels = spec_labels([a.name for a in analyses], args.files)
    if args.json:
        print(json.dumps({"specs": [{"file": path, **a.to_dict(), "sweep": sweep_rows(curve)}
                                    for path, a, curve in zip(args.files, analyses, curves)]}, indent=2))
    else:
        for label, a in zip(labels, analyses):
            t = a.total
            print(f"{label}: {a.kind}, {t.params:,} parameters; at {lengths_text(a)}: "
                  f"{si(t.flops, 'FLOPs')} forward, {binary(t.memory)} activations")
        print()
        print(format_comparison(dict(zip(labels, curves))))
    if args.plot:
        drawn = {label: curve for label, curve in zip(labels, curves) if curve}
        if not drawn:
            raise UsageError("--plot: no sweep length fits these specs' learned positions")
        plot(drawn, args.plot)
        if not args.json:
            print(f"\nwrote {args.plot}")
    return 0


def _measure(spec, analysis):
    from ..inspect.measure import measure

    if analysis.fused_attention:
        raise UsageError("--measure runs on the meta device, where attention takes the materialising math path; "
                         "drop --fused-attention to compare")
    return measure(spec, analysis.lengths, batch=analysis.batch, dtype=analysis.dtype)


def _measured_text(analysis, measured) -> str:
    from ..inspect.summary import binary, si

    total = analysis.total
    flops_gap = (measured.flops - total.matmul) / total.matmul if total.matmul else 0.0
    memory_gap = (measured.saved_bytes - total.memory) / total.memory if total.memory else 0.0
    return (f"measured on the compiled model (meta device, one training-mode forward pass):\n"
            f"  FlopCounterMode: {si(measured.flops, 'FLOPs')} in matrix products "
            f"(analysis {si(total.matmul)}, {flops_gap:+.2%}); with the analysis's element-wise "
            f"{si(total.elementwise)} the total is {total.flops / measured.flops - 1:+.2%} from the counter\n"
            f"  saved for backward: {binary(measured.saved_bytes)} (analysis {binary(total.memory)}, {memory_gap:+.2%})")


def _add_render(sub) -> None:
    """The `render` command's arguments."""
    render = _with_json(_with_set(sub.add_parser("render", help="draw the architecture (Figure 1 style) with Graphviz")))
    render.add_argument("file", metavar="FILE")
    render.add_argument("-o", "--output", required=True, metavar="OUT",
                        help="output file; the suffix picks the format: .svg, .png, .pdf or .dot")
    render.add_argument("--expand", action="store_true", help="draw every layer instead of one inside 'N×'")
    render.add_argument("--detail", action="store_true", help="show tensor shapes on edges, dropout, norm options")
    render.set_defaults(run=cmd_render)


def cmd_render(args) -> int:
    from ..inspect.diagram import RenderError, render

    spec = load(args.file, overrides=_overrides(args))
    _writable(args.output, "-o")
    try:
        path = render(spec, args.output, expand=args.expand, detail=args.detail)
    except RenderError as exc:
        raise UsageError(str(exc)) from None
    if args.json:
        _print_json({"output": str(path), "name": spec.name})
    else:
        print(f"wrote {path}")
    return 0


def _add_mask(sub) -> None:
    """The `mask` command's arguments."""
    mask = _with_json(_with_set(sub.add_parser("mask", help="draw which key each query sees, for every attention "
                                                          "sublayer")))
    mask.add_argument("file", metavar="FILE")
    mask.add_argument("-o", "--output", required=True, metavar="OUT", help="the picture: .png, .svg or .pdf")
    mask.add_argument("--seq-len", type=_positive, help="tokens per sequence (default: a length that shows every "
                                                         "pattern, within the spec's limits)")
    mask.add_argument("--src-len", type=_positive, help="encoder-decoder: source length")
    mask.add_argument("--tgt-len", type=_positive, help="encoder-decoder: target length")
    mask.add_argument("--head", type=_positive, default=1, help="the query head drawn where heads see different "
                                                                "keys (BigBird's random blocks; default 1)")
    mask.set_defaults(run=cmd_mask)


def cmd_mask(args) -> int:
    from ..inspect.analysis import AnalysisError
    from ..inspect.patterns import MAX_LENGTH, attention_patterns, describe, plot_patterns

    extension = os.path.splitext(args.output)[1].lower()
    if extension not in (".png", ".svg", ".pdf"):
        raise UsageError(f"-o {args.output}: write a .png, .svg or .pdf picture")
    _writable(args.output, "-o")
    if os.path.isdir(args.output):
        raise UsageError(f"-o {args.output}: is a directory; name the picture to write")
    longest = max(n for n in (args.seq_len, args.src_len, args.tgt_len, 0) if n is not None)
    if longest > MAX_LENGTH:
        raise UsageError(f"a picture of {longest} positions would hold {longest ** 2:,} pairs; "
                         f"use a length <= {MAX_LENGTH}")
    spec = load(args.file, overrides=_overrides(args))
    try:
        patterns = attention_patterns(spec, seq_len=args.seq_len, src_len=args.src_len, tgt_len=args.tgt_len,
                                      head=args.head - 1)
    except AnalysisError as exc:
        raise UsageError(str(exc)) from None
    if not patterns:
        raise UsageError(f"{args.file}: {spec.name} has no attention to draw")
    plot_patterns(patterns, args.output, f"{spec.name}: which key each query sees")
    if args.json:
        _print_json({"output": args.output, "patterns": [
            {"sublayer": p.sublayer, "label": p.label, "queries": p.allowed.shape[0], "keys": p.allowed.shape[1],
             "pairs_seen": p.pairs, "description": describe(p)} for p in patterns]})
        return 0
    for pattern in patterns:
        print(describe(pattern))
    print(f"wrote {args.output}")
    return 0


def _add_import(sub) -> None:
    """The `import` command's arguments."""
    imports = _with_json(sub.add_parser("import", help="write the spec a Hugging Face model directory's config.json "
                                                       "describes"))
    imports.add_argument("source", metavar="DIR", nargs="?", help="a Hugging Face model directory, or its config.json")
    imports.add_argument("--list", action="store_true", help="print the families, classes and configuration fields "
                                                              "import reads (Markdown; docs/hf_families.md)")
    imports.add_argument("-o", "--output", metavar="NAME.tfs", help="where to write it (default: standard output)")
    imports.add_argument("--name", help="the spec's model name (default: the directory's)")
    imports.add_argument("--run", dest="run_dir", metavar="OUT", help="also write the weights as a run directory (a step-0 "
                                                      "checkpoint that tfspec export reads)")
    imports.set_defaults(run=cmd_import)


def cmd_import(args) -> int:
    from ..interop.families import configurations_without_torch, import_config
    from ..interop.mapping import InteropError

    if args.list:
        if args.source or args.run_dir or args.output or args.name:
            raise UsageError("--list takes no model directory or other options")
        from ..interop.coverage import coverage_data, coverage_markdown
        if args.json:
            _print_json(coverage_data())
        else:
            print(coverage_markdown(), end="")
        return 0
    if args.source is None:
        raise UsageError("import needs a model directory (or its config.json), or --list")
    _check_output(args.output, ".tfs")  # before any run directory is written
    if args.whole_process and not args.run_dir:
        configurations_without_torch()  # a configuration alone: 2-3x as fast as with torch
    try:
        text = import_config(args.source, name=args.name)
        parse(text, file=args.output or "<imported>")  # what import writes always checks
        if args.run_dir:
            _import_run(args.source, text, args.run_dir)
    except InteropError as exc:
        message = str(exc)
        raise RunError(message if str(args.source) in message else f"{args.source}: {message}") from None
    if args.json:
        if args.output is None:
            raise UsageError("--json describes what import wrote: give -o NAME.tfs")
        _write_output(args.output, text)
        spec = load(args.output)
        _print_json({"output": args.output, "run": args.run_dir, "name": spec.name, "kind": spec.kind,
                     "parameters": spec.parameter_count(), "summary": summary_line(args.output, spec)})
    elif _write_output(args.output, text):
        print(f"wrote {args.output}: {summary_line(args.output, load(args.output)).split(': ', 1)[1]}")
    return 0


def _check_output(output: str | None, suffix: str) -> None:
    """``-o``: standard output (None or -), or a file that can be written (not a directory)."""
    if output is None or output == "-":
        return
    _writable(output, "-o")
    if os.path.isdir(output):
        raise UsageError(f"-o {output}: is a directory; name the {suffix} file to write")


def _write_output(output: str | None, text: str) -> bool:
    """Write ``text`` to ``-o`` atomically (checked by ``_check_output``), or to standard output; True: a file."""
    if output is None or output == "-":
        sys.stdout.write(text)
        return False
    write_atomically(output, text.encode("utf-8"))  # a failure names the file: exit 1, the old file kept
    return True


def _quiet_transformers() -> None:
    """No progress bars from transformers while a command loads or writes a model (its output is ours)."""
    try:
        from transformers.utils import logging
    except ImportError:  # reported where it is needed
        return
    logging.disable_progress_bar()


def _import_run(source, text: str, run_dir: str) -> None:
    """A run directory holding the imported weights as tfspec's step-0 checkpoint (``tfspec export`` reads it)."""
    from pathlib import Path

    from ..run import checkpoint as ckpt
    from ..interop.families import from_pretrained, tokenizer_of

    if Path(run_dir).exists() and (not Path(run_dir).is_dir() or any(Path(run_dir).iterdir())):
        raise UsageError(f"--run {run_dir}: already exists; name a new directory")
    _writable(run_dir, "--run")
    _quiet_transformers()
    model = from_pretrained(source)
    meta, files = {"hf_class": model.hf_class, "hf_carried": model.hf_carried, "imported_from": str(source)}, {}
    vocab = tokenizer_of(source, model)
    if vocab is not None:
        meta["vocab"], files = vocab.to_dict(), vocab.files()
    with removed_on_failure(run_dir):  # a failed write leaves no half-made run
        path = ckpt.save(Path(run_dir), 0, model, text, meta, {}, files)
    with_tokenizer = " and its tokenizer.json" if files else " (no tokenizer.json beside them)"
    print(f"wrote {path}: the {model.hf_class} weights{with_tokenizer}, "
          f"{sum(p.numel() for p in model.parameters()):,} parameters")


def _add_export(sub) -> None:
    """The `export` command's arguments."""
    export = _with_json(sub.add_parser("export", help="write a run's (or checkpoint's) model for other tools: "
                                                      "Hugging Face, a standalone PyTorch file, ONNX"))
    export.add_argument("source", metavar="RUN_OR_CHECKPOINT")
    export.add_argument("--to", choices=["hf", "torch", "onnx"], required=True,
                        help="hf: a transformers model directory; torch: tfspec emit's file and its weights; onnx")
    export.add_argument("-o", "--output", required=True, metavar="DIR", help="a new directory to write")
    export.set_defaults(run=cmd_export)


def cmd_export(args) -> int:
    from pathlib import Path

    from ..interop.export import ExportError, export

    out = Path(args.output)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UsageError(f"-o {out}: already exists{'' if out.is_dir() else ' (a file)'}; name a new directory")
    _writable(str(out), "-o")
    try:
        written = export(args.source, out, to=args.to)
    except ExportError as exc:
        raise RunError(str(exc)) from None
    if args.json:
        _print_json({"output": str(out), "to": args.to, "written": written,
                     "files": sorted(p.name for p in out.iterdir())})
    else:
        print(f"wrote {out}: {written}")
    return 0


def _add_emit(sub) -> None:
    """The `emit` command's arguments."""
    emit = _with_json(_with_set(sub.add_parser("emit", help="write the model as one standalone, readable PyTorch file "
                                                "(torch only) that loads the compiled model's state_dict")))
    emit.add_argument("file", metavar="SPEC")
    emit.add_argument("-o", "--output", metavar="MODEL.py", help="where to write it (default: standard output)")
    emit.set_defaults(run=cmd_emit)


def cmd_emit(args) -> int:
    from ..backend.standalone import emit

    spec = load(args.file, overrides=_overrides(args))
    source = emit(spec, origin=" ".join([args.file] + [f"--set {k}={v}" for k, v in _overrides(args).items()]))
    _check_output(args.output, ".py")
    if args.json and args.output in (None, "-"):
        raise UsageError("--json describes what emit wrote: give -o MODEL.py")
    if not _write_output(args.output, source):
        return 0
    if args.json:
        _print_json({"output": args.output, "name": spec.name, "parameters": spec.parameter_count()})
        return 0
    print(f"wrote {args.output}: class Model, {spec.parameter_count():,} parameters when built; "
          "load a compiled model's state_dict into it")
    return 0


def _add_diff(sub) -> None:
    """The `diff` command's arguments."""
    diff = _with_set(sub.add_parser("diff", help="what differs architecturally between two specs"))
    diff.add_argument("first", metavar="A")
    diff.add_argument("second", metavar="B")
    diff.add_argument("--seq-len", type=_positive, help="length at which totals are compared (default: the "
                                                        "shorter of the two specs' defaults)")
    diff.add_argument("--json", action="store_true", help="print the changes and totals as JSON")
    diff.set_defaults(run=cmd_diff)


def cmd_diff(args) -> int:
    from ..inspect.analysis import AnalysisError
    from ..inspect.diff import diff
    from ..inspect.summary import binary, si

    specs = [load(path, overrides=_overrides(args)) for path in (args.first, args.second)]
    try:
        result = diff(*specs, seq_len=args.seq_len)
    except AnalysisError as exc:
        raise UsageError(str(exc)) from None
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
        return 0
    first, second = result.names
    print(f"{first} ({args.first}) → {second} ({args.second})")
    if result.changes:
        print("\narchitecture:")
        for change in result.changes:
            print(f"  {change}")
    else:
        print("\nno architectural differences")
    print(f"\ntotals (batch 1, seq_len {result.seq_len}):")
    show = {"parameters": lambda v: f"{v:,}", "forward FLOPs": si, "activation memory (bytes)": binary}
    for what, a, b in result.totals:
        change = f" ({(b - a) / a:+.1%})" if a and a != b else ("" if a == b else "")
        print(f"  {what.replace(' (bytes)', '')}: {show[what](a)} → {show[what](b)}{change}")
    return 0


TRAIN_OPTIONS = ("task", "data", "glob", "field", "eval_data", "tokenizer", "init", "symbols", "min_len", "max_len",
                 "seq_len", "steps", "batch", "accumulate",
                 "lr", "warmup", "grad_clip", "label_smoothing", "weight_decay", "seed", "dtype", "eval_every",
                 "eval_size", "save_every", "log_every", "log", "lora", "activation_checkpointing", "compile")


def _train_config(args):
    from ..run.train import TrainConfig

    given = {k: getattr(args, k) for k in TRAIN_OPTIONS if getattr(args, k) is not None}
    spelled = {}  # the option the user wrote, for a field it sets under another name
    if args.data is None and "seq_len" in given and "max_len" not in given:  # a task's longest source
        given["max_len"] = given.pop("seq_len")
        spelled["max_len"] = "seq_len"
        if "min_len" not in given:
            given["min_len"] = min(TrainConfig.model_fields["min_len"].default, given["max_len"])
    if args.data is not None and "task" in given:
        raise UsageError("--data and --task are alternatives: text to learn, or a built-in task")
    if args.data is not None and len(args.data) > 2:
        raise UsageError(f"--data takes one path, or two aligned files of sentence pairs; got {len(args.data)}")
    if args.data is None and (args.glob or args.field):
        raise UsageError(f"--{'glob' if args.glob else 'field'} says how to read --data; give --data")
    if "lora" in given:
        from ..run.lora import missing as missing_lora

        why = missing_lora()
        if why:
            raise UsageError(why)
        if args.strategy == "fsdp":
            raise UsageError("--lora with --strategy fsdp is not supported; use ddp (the default)")
    if "log" in given:
        given["log"] = tuple(dict.fromkeys(given["log"]))
        why = missing_logger(given["log"])
        if why:
            raise UsageError(why)
    from pydantic import ValidationError

    try:
        return TrainConfig(**given, device=str(_device(args.device)))
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            message = error["msg"].removeprefix("Value error, ")
            field = spelled.get(str(error["loc"][0]), str(error["loc"][0])) if error["loc"] else ""
            problems.append(f"--{field.replace('_', '-')}: {message}" if field else message)
        raise UsageError("; ".join(problems)) from None


def _fresh_run_dir(spec_name: str, what: str) -> str:
    base = os.path.join("runs", f"{spec_name}-{what}")
    path, n = base, 1
    while os.path.exists(path):
        n += 1
        path = f"{base}-{n}"
    return path


def _add_train(sub) -> None:
    """The `train` command's arguments."""
    train = _with_json(_with_set(sub.add_parser("train", help="train a spec on a built-in task or a text file, "
                                                             "with checkpoints, evaluation and a loss curve")))
    train.add_argument("file", nargs="?", metavar="SPEC")
    data = train.add_argument_group("data (default: the reverse task)")
    data.add_argument("--task", choices=sorted(TASKS), help="built-in task: " +
                      "; ".join(f"{k}: {v}" for k, v in sorted(TASK_HELP.items())))
    data.add_argument("--data", "--text", nargs="+", metavar="PATH", type=_data_path,
                      help="learn text: decoder-only as a language model, encoder-only by masked-language "
                           "modelling, encoder-decoder from sentence pairs. PATH: a text file, a JSONL file, a "
                           "directory (its files matching --glob, recursively), a directory made by tfspec "
                           "prepare; pairs: lines of source<TAB>target, or two aligned files (PATH TARGET)")
    data.add_argument("--glob", help=f"a directory's files to read (default {DEFAULT_GLOB!r})")
    data.add_argument("--field", help="a JSONL record's text (default 'text'; pairs: SOURCE,TARGET)")
    data.add_argument("--eval-data", metavar="PATH", type=_data_path,
                      help="held-out text or pairs, read as --data (default: the last tenth of --data)")
    data.add_argument("--tokenizer", metavar="KIND", help="how a text becomes tokens: bytes (default), chars, "
                      "bpe:N (a byte-level BPE of N tokens learned from the text) or PATH/tokenizer.json; "
                      "saved in every checkpoint")
    data.add_argument("--init", metavar="RUN_OR_DIR", help="start from these weights (fine-tuning): a run, a "
                      "checkpoint or a Hugging Face model directory; SPEC may then be left out")
    data.add_argument("--symbols", type=_positive, help="task alphabet size, 2-52 (default 26)")
    data.add_argument("--min-len", type=_positive, help="task: shortest source (default 4)")
    data.add_argument("--max-len", type=_positive, help="task: longest source (default 24)")
    data.add_argument("--seq-len", type=_positive, help="text: window length (default 256, or the learned "
                                                        "positions); task: the longest source")
    opt = train.add_argument_group("optimisation (defaults: the architecture's paper)")
    opt.add_argument("--steps", type=_positive, help="optimizer steps (default 2000)")
    opt.add_argument("--batch", type=_positive, help="sequences per micro-batch, all workers together (default 64)")
    opt.add_argument("--accumulate", type=_positive, help="micro-batches per optimizer step (default 1)")
    opt.add_argument("--lr", type=_range(0, 10, low_open=True), help="peak learning rate, in (0, 10]")
    opt.add_argument("--warmup", type=_natural, help="warm-up steps")
    opt.add_argument("--grad-clip", type=_range(0, 1e6), help="clip the gradient norm (0: never), at most 1e6")
    opt.add_argument("--label-smoothing", type=_range(0, 1, high_open=True), help="in [0, 1)")
    opt.add_argument("--weight-decay", type=_range(0, 10), help="in [0, 10]")
    opt.add_argument("--seed", type=_seed, help="seed of initialisation, data and dropout (default 0)")
    opt.add_argument("--device", help="cpu (default), cuda, cuda:N, mps")
    opt.add_argument("--dtype", choices=DTYPES, help="float32 (default); bfloat16/float16 train under autocast")
    tune = train.add_argument_group("fine-tuning and memory")
    tune.add_argument("--lora", type=_lora, metavar="SETTINGS", help="train low-rank adapters only (peft), e.g. "
                      "r=8,alpha=16,targets=q,v (defaults: r=8, alpha=16, dropout=0, targets=q,v); checkpoints "
                      "hold the merged weights")
    tune.add_argument("--activation-checkpointing", action="store_true", default=None,
                      help="keep only each layer's input for backward and recompute the rest: less memory, ~1/3 "
                           "more compute, the same gradients")
    tune.add_argument("--compile", action="store_true", default=None, help="torch.compile the model (slow to "
                      "start, faster steps)")
    run = train.add_argument_group("run")
    run.add_argument("--out", metavar="DIR", help="run directory (default runs/NAME-TASK, numbered if taken)")
    run.add_argument("--resume", metavar="DIR", help="continue the run in DIR from its latest checkpoint")
    run.add_argument("--nproc", type=_positive, help="train in N worker processes started by torchrun (as "
                     "`torchrun --nproc-per-node N -m tfspec train ...` does); each takes 1/N of every --batch")
    run.add_argument("--strategy", choices=("ddp", "fsdp"), help="several workers: DistributedDataParallel "
                     "(default) or FSDP2's fully_shard")
    run.add_argument("--eval-every", type=_positive, help="steps between held-out evaluations (default 250)")
    run.add_argument("--eval-size", type=_positive, help="held-out sequences per evaluation (default 500)")
    run.add_argument("--save-every", type=_positive, help="steps between checkpoints (default 500)")
    run.add_argument("--log-every", type=_positive, help="without a progress bar (output not a terminal, or "
                     "--no-progress): a line every N steps with loss, lr, tokens/s and ETA (default: 100 a run)")
    run.add_argument("--no-progress", action="store_true", help="no progress bar")
    run.add_argument("--log", action="append", choices=LOGGERS, help="also write the run for TensorBoard "
                     "(event files in RUN/tensorboard: tensorboard --logdir RUN)")
    run.add_argument("--accept-edits", action="store_true", help="--resume/--init: take a checkpoint whose spec.tfs "
                                                                  "or weights changed since it was saved")
    train.set_defaults(run=cmd_train)


def cmd_train(args) -> int:
    from ..run.distributed import World, broadcast, join, launched, leave
    from ..run.train import resume, train

    if args.nproc is not None and args.nproc > 1 and not launched():
        return _launch_workers(args)
    if args.strategy is not None and not launched():
        raise UsageError(f"--strategy {args.strategy} shares a run among workers; give --nproc N as well")
    world = World()
    if launched():
        world = join(args.strategy or "ddp", str(_device(args.device or "cpu")))
        if args.nproc is not None and args.nproc != world.size:
            raise UsageError(f"--nproc {args.nproc}: torchrun started {world.size} workers; drop --nproc")
    where = sys.stderr if args.json else sys.stdout  # --json: the log apart from the result
    say = (lambda line: print(line, file=where, flush=True)) if world.main else (lambda line: None)
    if args.resume:
        _check_resume(args)
        run_dir = args.resume
        run = resume(run_dir, steps=args.steps, device=str(_device(args.device)) if args.device else None,
                     progress=not args.no_progress, log=say, accept_edits=args.accept_edits, world=world)
    else:
        spec, config, initial, run_dir = _new_run(args, load_initial=True)
        run_dir = broadcast(run_dir, world)  # one directory, named by rank 0
        pictures = spec.embedding(spec.stacks[0].embedding).image is not None
        data = (f"--data {' '.join(config.data)}" if config.data else "the generated digits" if pictures
                else f"the {config.task} task")
        start = f", from the weights of {config.init}" if config.init else ""
        say(f"training {spec.name} ({spec.kind}, {spec.parameter_count():,} parameters) on {data}{start}; "
            f"run directory {run_dir}")
        run = train(args.file, config, run_dir, overrides=_overrides(args), progress=not args.no_progress,
                    log=say, initial=initial, world=world)
    if world.main:
        _report(run, run_dir, args.json)
    leave(world)  # only when the run went well: a worker that fails exits, and torchrun stops the others
    return 130 if run.interrupted else 0


def _check_resume(args) -> None:
    if args.file:
        raise UsageError("give either a SPEC to start a run or --resume DIR to continue one, not both")
    given = [k for k in TRAIN_OPTIONS if getattr(args, k) is not None and k != "steps"] + (["set"] if args.set else [])
    if given:
        raise UsageError(f"--resume continues the saved configuration; drop --{given[0].replace('_', '-')} "
                         "(only --steps, --device, --nproc and --strategy may change)")


def _new_run(args, load_initial: bool):
    """(spec, config, initial weights, run directory) of a new run, every option checked; without
    ``load_initial`` (the launcher) ``--init`` weights are left for the workers to read."""
    from ..backend.compiler import available_memory_bytes

    if not args.file and not args.init:
        raise UsageError("give a SPEC to train, --init weights to fine-tune, or --resume DIR")
    args.device = args.device or "cpu"
    config = _train_config(args)
    initial = None
    if args.init and load_initial:
        from ..run.train import initial_weights

        _quiet_transformers()  # a Hugging Face directory is read with transformers: no progress bars of its own
        initial = initial_weights(args.init, accept_edits=args.accept_edits)
    if args.file:
        spec = load(args.file, overrides=_overrides(args))
    elif initial is not None:  # the spec the initial weights came with
        spec = parse(initial.spec_text, file=initial.name, overrides={**initial.overrides, **_overrides(args)})
    else:
        return None, config, None, args.out
    if args.out and os.path.exists(args.out) and not os.path.isdir(args.out):
        raise UsageError(f"--out {args.out}: a file, not a run directory")
    length = (config.seq_len or 256) if config.data else config.max_len + 2
    from ..ir.queries import fixed_length
    pictures = fixed_length(spec.graph(), spec.stacks[0].role)
    if pictures is not None:  # a model of pictures classifies the generated digits
        given = [f"--{name.replace('_', '-')}" for name in ("task", "data", "tokenizer", "seq_len", "max_len")
                 if getattr(args, name, None) is not None]
        if given:
            raise UsageError(f"{spec.name} reads pictures and trains on the generated digits; "
                             f"{', '.join(given)} describe{'s' if len(given) == 1 else ''} token sequences")
        length = pictures
    _fits(spec, config.batch, length, "--batch × --seq-len", config.device, beyond_positions_ok=True)
    if config.eval_size * length * 16 > available_memory_bytes(config.device) // 4:
        raise UsageError(f"--eval-size {config.eval_size:,}: the held-out set alone would take "
                         f"{_gib(config.eval_size * length * 16)}; use fewer sequences")
    task = "digits" if pictures is not None else "text" if config.data else config.task
    return spec, config, initial, args.out or _fresh_run_dir(spec.name, task)


def _launch_workers(args) -> int:
    """``--nproc N``: the options checked here, then the same command in N workers started by torchrun."""
    from ..run.distributed import launch

    device = _device(args.device or "cpu")
    available = (_cuda_devices() if device.type == "cuda" else os.cpu_count() or 1)
    if args.nproc > available:
        what = "GPUs" if device.type == "cuda" else "CPU cores"
        raise UsageError(f"--nproc {args.nproc}: this machine has {available} {what}, and each worker takes one")
    if args.resume:
        _check_resume(args)
        extra = []
    else:
        _, config, _, run_dir = _new_run(args, load_initial=False)
        if config.batch % args.nproc:
            raise UsageError(f"--batch {config.batch} is the global batch, shared equally among --nproc "
                             f"{args.nproc} workers; make it a multiple of {args.nproc}")
        extra = [] if args.out or run_dir is None else ["--out", run_dir]
    argv, skip = [], False
    for i, arg in enumerate(args.argv):  # the command as given, less --nproc N
        if skip:
            skip = False
        elif arg == "--nproc":
            skip = True
        elif not arg.startswith("--nproc="):
            argv.append(arg)
    return launch(argv + extra, args.nproc)


def _report(run, run_dir, as_json: bool = False) -> None:
    if as_json:
        _print_json({"run": str(run_dir), "step": run.step, "steps": run.objective.config.steps,
                     "finished": run.step >= run.objective.config.steps, "interrupted": run.interrupted,
                     "seconds": round(run.seconds, 3), "checkpoint": str(run.checkpoint) if run.checkpoint else None,
                     "last_loss": run.losses[-1] if run.losses else None,
                     "evaluation": run.evaluations[-1] if run.evaluations else None,
                     "metrics": f"{run_dir}/metrics.jsonl"})
        return
    state = "interrupted" if run.interrupted else "stopped"
    if run.step < run.objective.config.steps:
        print(f"{state} at step {run.step} of {run.objective.config.steps}; continue with: "
              f"tfspec train --resume {run_dir}")
    else:
        print(f"finished {run.step} steps in {run.seconds:.1f} s")
    if run.checkpoint is not None:
        print(f"checkpoint: {run.checkpoint}")
    print(f"metrics: {run_dir}/metrics.jsonl, loss curve: {run_dir}/loss.png")


MAX_COUNT = 10_000


def _device_of(model):
    return next(model.parameters()).device


def _add_generate(sub) -> None:
    """The `generate` command's arguments."""
    generate = _with_json(sub.add_parser("generate", help="decode from a trained checkpoint: greedy, sampling or "
                                                          "beam search"))
    generate.add_argument("checkpoint", metavar="CHECKPOINT", help="a run directory (its latest checkpoint) or "
                                                                  "a checkpoint directory")
    generate.add_argument("--input", "--prompt", action="append", metavar="TEXT",
                          help="a source to transform (task models) or a prompt to continue (text models); "
                               "repeatable. Task models default to held-out examples")
    generate.add_argument("--count", type=_positive, default=5, help="held-out examples without --input (default 5)")
    generate.add_argument("--max-new", type=_positive, help="most tokens to generate (default: the task's "
                                                            "longest target + 1, or 200 for text)")
    generate.add_argument("--temperature", type=_temperature, help="sample at this temperature (0: greedy; "
                                                                   "1 when only --top-k/--top-p are given)")
    generate.add_argument("--top-k", type=_positive, help="sample among the k most likely tokens (more than the "
                                                          "vocabulary: all of them)")
    generate.add_argument("--top-p", type=_unit, help="sample from the smallest set holding this much probability")
    generate.add_argument("--beam", type=_beam, nargs="?", const=4, help=f"beam search (default width 4, at most "
                                                                         f"{MAX_BEAM})")
    generate.add_argument("--alpha", type=_range(0, 10), default=0.6, help="beam length penalty in [0, 10] "
                                                                          "(default 0.6)")
    generate.add_argument("--seed", type=_seed, default=0, help="sampling seed (default 0)")
    generate.add_argument("--device", default="cpu")
    generate.add_argument("--accept-edits", action="store_true", help="take a checkpoint whose spec.tfs or "
                                                                       "weights changed since it was saved")
    generate.add_argument("--no-cache", action="store_true", help="recompute the whole prefix each step "
                                                                  "(slower; the KV cache gives the same logits)")
    generate.add_argument("--compile", action="store_true", help="decode through a static KV cache and a step "
                                                                 "torch.compile compiles once (pays off over long "
                                                                 "outputs: compiling takes seconds)")
    generate.set_defaults(run=cmd_generate)


def cmd_generate(args) -> int:
    import torch

    from ..run import checkpoint as ckpt
    from ..run.decoding import Strategy, complete

    for text in args.input or []:
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:  # bytes that are not UTF-8 arrive as surrogates
            byte = text[exc.start].encode("utf-8", "surrogateescape")
            raise UsageError(f"--input: not UTF-8 text (byte 0x{byte.hex()} at character {exc.start}); the model "
                             "reads text") from None
    saved = ckpt.load(args.checkpoint, accept_edits=args.accept_edits)
    if "vocab" not in saved.meta:
        raise RunError(f"{saved.path}: imported from {saved.meta.get('imported_from', 'elsewhere')} without a "
                       "tokenizer.json, so there is no vocabulary to encode text with")
    model = saved.model(device=_device(args.device))
    vocab = saved.vocabulary()
    kind = model.spec.kind
    # an imported model (no training configuration) continues a prompt, or maps an input to an output
    config = saved.config()
    if kind == "encoder-only":
        raise RunError(f"{saved.path}: an encoder-only model (a masked-language model, a classifier) has no decoder "
                       "to generate with")
    if args.compile and args.no_cache:
        raise UsageError("--compile decodes over a KV cache; it does not combine with --no-cache")
    if args.beam is not None and (args.temperature is not None or args.top_k or args.top_p):
        raise UsageError("--beam searches for the most likely output; it does not combine with sampling options")
    prompted = config is not None and config.data is None
    temperature = args.temperature if args.temperature is not None else (1.0 if args.top_k or args.top_p else 0.0)
    strategy = Strategy(temperature, args.top_k, args.top_p, args.beam, args.alpha)
    generator = torch.Generator().manual_seed(args.seed)
    max_new = args.max_new or ((config.max_len + 1) if prompted else 200)
    if args.count > MAX_COUNT:
        raise UsageError(f"--count {args.count:,}: at most {MAX_COUNT:,} held-out examples are decoded in one call")
    # a prompt has at most as many tokens as bytes: an upper bound for any tokenizer
    longest = max([len(x.encode("utf-8")) for x in args.input or []] + [config.max_len if config else 0])
    _fits(model.spec, len(args.input or []) or args.count, longest + max_new + 2, "--max-new", _device_of(model),
          beyond_positions_ok=True)
    references = {}
    inputs = args.input
    if not inputs:
        if not prompted:
            raise UsageError("give a prompt to continue: --input TEXT")
        from ..run.data import EVAL, TaskData, generator_for

        tasks = TaskData(config.task, vocab, config.min_len, config.max_len)
        src, tgt, lengths = tasks.pairs(args.count, generator_for(args.seed, EVAL, 1 << 21), True)
        inputs = [vocab.decode(src[i, : lengths[i]].tolist()) for i in range(args.count)]
        references = {x: vocab.decode(tgt[i, : lengths[i]].tolist()) for i, x in enumerate(inputs)}
    how = (f"beam search (beam {args.beam}, alpha {args.alpha:g})" if args.beam else
           "greedy decoding" if not temperature else
           f"sampling (temperature {temperature:g}" + (f", top-k {args.top_k}" if args.top_k else "")
           + (f", top-p {args.top_p:g}" if args.top_p else "") + ")")
    if not args.json:
        print(f"{saved.path} (step {saved.step}): {model.spec.name}, {kind}; {how}")
    try:
        results = complete(model, vocab, inputs, prompted=prompted, max_new=max_new, strategy=strategy,
                           generator=generator, use_cache=False if args.no_cache else None,
                           strict=args.max_new is not None, compile=args.compile)  # asked for: all of it, or a refusal up front
    except LengthError:  # no room left after the prompt
        raise
    except ValueError as exc:  # text outside the vocabulary, an empty prompt
        raise RunError(str(exc)) from None
    if args.json:
        _print_json({"checkpoint": str(saved.path), "step": saved.step, "name": model.spec.name, "decoding": how,
                     "results": [{"input": r.input, "output": r.output, "score": r.score, "cut_at": r.cut_at,
                                  **({"reference": references[r.input], "correct": references[r.input] == r.output}
                                     if r.input in references else {})} for r in results]})
        return 0
    for r in results:
        if prompted or kind == "encoder-decoder":  # an input mapped to an output
            line = f"  {r.input} -> {r.output}"
            if r.input in references:
                ok = "✓" if references[r.input] == r.output else f"✗ (expected {references[r.input]})"
                line += f"  {ok}"
        else:
            line = r.input + r.output
        if r.score is not None:
            line += f"  [score {r.score:.3f}]"
        print(line)
        if r.cut_at is not None:
            print(f"note: stopped after {r.cut_at} tokens, where the learned positions "
                  f"({model.max_len['decoder']}) end; give --max-new to have all of it or a refusal", file=sys.stderr)
    return 0


def _add_prepare(sub) -> None:
    """The `prepare` command's arguments."""
    prep = _with_json(sub.add_parser("prepare", help="tokenise text once into a memory-mapped token file that train "
                                                     "--data streams (a corpus larger than memory trains)"))
    prep.add_argument("data", nargs="+", metavar="PATH", type=_data_path,
                      help="a text file, a JSONL file or a directory (its files matching --glob, recursively)")
    prep.add_argument("-o", "--output", required=True, metavar="DIR", help="the prepared directory; made again "
                      "only when the files or the tokenizer changed")
    prep.add_argument("--tokenizer", metavar="KIND", help="bytes (default), chars, bpe:N or PATH/tokenizer.json")
    prep.add_argument("--glob", help=f"a directory's files to read (default {DEFAULT_GLOB!r})")
    prep.add_argument("--field", help="a JSONL record's text (default 'text')")
    prep.set_defaults(run=cmd_prepare)


def cmd_prepare(args) -> int:
    from ..run.corpus import DEFAULT_GLOB as glob, Source, prepare

    if len(args.data) > 1:
        raise UsageError("prepare reads one PATH (a file, a JSONL file or a directory); sentence pairs are read "
                         "as they are, by train --data")
    if os.path.exists(args.output) and not os.path.isdir(args.output):
        raise UsageError(f"-o {args.output}: a file; name a directory to prepare into")
    source = Source(tuple(args.data), args.glob or glob, args.field or "text")
    prepared = prepare(source, args.tokenizer, args.output,
                       log=lambda line: print(line, file=sys.stderr if args.json else sys.stdout, flush=True))
    if args.json:
        _print_json({"output": args.output, **{k: v for k, v in prepared.meta.items() if k != "format"}})
    return 0


def _add_demo(sub) -> None:
    """The `demo` command's arguments."""
    demo = sub.add_parser("demo", help="the tour: check the examples, summarise and draw Vaswani et al.'s model, "
                                       "train a small one to reverse sequences and decode with it")
    demo.add_argument("--out", default="out/demo", metavar="DIR", help="output directory (default out/demo)")
    demo.add_argument("--examples", metavar="DIR", help="the examples directory (default: the repository's)")
    demo.add_argument("--steps", type=_positive, help="most training steps (default: the demo's budget)")
    demo.add_argument("--no-progress", action="store_true")
    demo.set_defaults(run=cmd_demo)


def cmd_demo(args) -> int:
    from .demo import run_demo

    return run_demo(args.out, args.examples, args.steps, progress=not args.no_progress)


def _add_report(sub) -> None:
    """The `report` command's arguments."""
    report = _with_json(_with_set(sub.add_parser("report", help="one self-contained HTML page: the diagram, parameters by "
                                                    "block, cost against length, attention patterns, verified "
                                                    "properties; several specs side by side")))
    report.add_argument("files", nargs="+", metavar="FILE")
    report.add_argument("-o", "--output", required=True, metavar="REPORT.html")
    report.add_argument("--seq-len", type=_positive, help="the length of the cost figures (default: the learned "
                                                           "positions' size, else 512)")
    report.add_argument("--no-verify", action="store_true", help="leave out the verified properties (faster)")
    report.add_argument("--examples", type=_examples, default=10, help="Hypothesis examples per verified property "
                                                                       "(default 10)")
    report.set_defaults(run=cmd_report)


def cmd_report(args) -> int:
    from ..inspect.analysis import AnalysisError
    from ..inspect.report import build, page

    if not args.output.lower().endswith((".html", ".htm")):
        raise UsageError(f"-o {args.output}: a report is an HTML page; name a .html file")
    _check_output(args.output, ".html")
    specs = [load(path, overrides=_overrides(args)) for path in args.files]
    try:
        reports = build(args.files, specs, seq_len=args.seq_len, verify=not args.no_verify, examples=args.examples)
    except AnalysisError as exc:
        raise UsageError(str(exc)) from None
    write_atomically(args.output, page(reports).encode("utf-8"))
    missing = sorted({f"{part}: {why}" for r in reports for part, why in r.notes.items() if part != "verify"})
    if args.json:
        _print_json({"output": args.output, "specs": [r.spec.name for r in reports], "notes": missing,
                     "violated": {r.spec.name: [v.name for v in r.verified or [] if v.status == "violated"]
                                  for r in reports}})
        return 0
    for note in missing:
        print(f"note: {note}")
    print(f"wrote {args.output}: {', '.join(r.spec.name for r in reports)}")
    return 0


def _add_lsp(sub) -> None:
    """The `lsp` command's arguments."""
    lsp = sub.add_parser("lsp", help="a Language Server Protocol server on stdin/stdout, for editors (diagnostics, "
                                     "hover, completion, go-to-definition, rename, outline, formatting)")
    lsp.set_defaults(run=cmd_lsp)


def cmd_lsp(args) -> int:
    try:
        from ..lsp.server import main as serve
    except ImportError as exc:
        raise UsageError(f"the language server needs pygls and lsprotocol ({exc.name} is missing): "
                         "pip install 'tfspec[lsp]'") from None
    return serve()


def _dump(spec, what: str) -> str:
    if what == "spec":
        return json.dumps(spec.model_dump(), indent=2)
    return spec.graph().format()


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


def build_parser() -> argparse.ArgumentParser:
    """The command line: each command's arguments are added by the function beside its handler."""
    from ..version import __version__

    parser = _Parser(prog="tfspec", description="Define, check and build Transformer architectures.")
    parser.add_argument("--version", action="version", version=f"tfspec {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=_Parser)
    for add in (_add_check, _add_fmt, _add_build, _add_verify, _add_summary, _add_mask, _add_render, _add_import,
                _add_export, _add_emit, _add_diff, _add_train, _add_generate, _add_prepare, _add_demo, _add_report, _add_lsp):
        add(sub)
    return parser


def _with_json(p):
    p.add_argument("--json", action="store_true", help="print the result as JSON on standard output")
    return p


def _print_json(data) -> None:
    print(json.dumps(data, indent=2, ensure_ascii=False))


def _with_set(p):
    p.add_argument("--set", action="append", type=parse_set, metavar="NAME=VALUE",
                   help="override a `let` parameter, e.g. --set layers=2 (repeatable)")
    return p


def _number(text: str, ok, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
    if not ok(value):
        raise argparse.ArgumentTypeError(f"expected {what}, got {text}")
    return value


def _range(low: float, high: float, low_open: bool = False, high_open: bool = False):
    """An argparse type for a number in [low, high] (``low_open``: above low; ``high_open``: below high)."""
    what = f"a number in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"

    def check(v: float) -> bool:
        return (low < v if low_open else low <= v) and (v < high if high_open else v <= high)
    return lambda text: _number(text, check, what)


MAX_BEAM = 100  # hypotheses per input: each is a forward pass per step (a million took minutes without end)


def _beam(text: str) -> int:
    value = _positive(text)
    if value > MAX_BEAM:
        raise argparse.ArgumentTypeError(f"expected a beam width from 1 to {MAX_BEAM}, got {value}")
    return value


def _unit(text: str) -> float:
    return _number(text, lambda v: 0 < v <= 1, "a probability in (0, 1]")


def _examples(text: str) -> int:
    value = _positive(text)
    if value > 10_000:
        raise argparse.ArgumentTypeError(f"expected at most 10000 examples per property, got {value}")
    return value


def _lora(text: str):
    from pydantic import ValidationError

    from ..run.lora import parse_settings

    try:
        return parse_settings(text)
    except ValidationError as exc:
        error = exc.errors()[0]
        raise argparse.ArgumentTypeError(f"{'.'.join(map(str, error['loc']))}: {error['msg']}") from None
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _seed(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if not 0 <= value < 2 ** 63:
        raise argparse.ArgumentTypeError(f"expected a seed from 0 to 2**63 - 1, got {text}")
    return value


def _temperature(text: str) -> float:
    return _number(text, lambda v: 0 <= v <= 1e4, "a temperature from 0 (greedy) to 10000")


def _cuda_devices() -> int:
    import torch

    return torch.cuda.device_count()


def _lost_worker(exc: BaseException) -> str | None:
    if "WORLD_SIZE" not in os.environ:  # not a torchrun worker
        return None
    from ..run.distributed import lost_worker

    return lost_worker(exc)


def _data_path(text: str) -> str:
    if not text or "\x00" in text:
        raise argparse.ArgumentTypeError(f"not a path: {text!r}")
    return text


def _natural(text: str) -> int:
    return 0 if text.strip() == "0" else _positive(text)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


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
    """A spec's warnings print as a compiler prints them (the source line and a caret), not as Python warnings."""
    default = warnings.showwarning
    if getattr(default, "shows_spec_warnings", False):  # (main called again in one process)
        return

    def show(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, SpecWarning):
            print(message.diagnostic.render(message.sources, colour_wanted(sys.stderr)) if isinstance(message, SpecWarning)
                  else message, file=sys.stderr)
        else:
            default(message, category, filename, lineno, file, line)

    show.shows_spec_warnings = True
    warnings.showwarning = show


def main(argv: list[str] | None = None) -> int:
    """Run one command; its exit status. ``argv`` None: the process's own command line, a process that runs
    this one command (so ``import`` may load transformers without torch, see ``configurations_without_torch``)."""
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
        print(f"tfspec {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except RunError as exc:  # data or a checkpoint that cannot serve: the reason, exit 1
        print(f"tfspec {args.command}: error: {exc}", file=sys.stderr)
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
        where = f"{exc.filename}: " if getattr(exc, "filename", None) else ""
        print(f"tfspec {args.command}: error: {where}{exc.strerror or exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # noqa: BLE001 - a worker whose peer died sees its collective fail
        lost = _lost_worker(exc)
        if lost is None:
            raise
        print(f"tfspec {args.command}: error: [rank {os.environ['RANK']}] another worker is gone ({lost}); "
              "the run stops at its last checkpoint", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
