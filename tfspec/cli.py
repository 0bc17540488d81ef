"""The `tfspec` command line. Spec errors print like a compiler and exit 1; usage errors exit 2.

Commands: check, fmt, build, verify, summary, render, diff. Torch is imported only by the commands that build a model.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from .api import load
from .errors import SpecError
from .files import write_atomically


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
                write_atomically(path, formatted.encode("utf-8"))
                print(f"formatted {path}")
        else:
            sys.stdout.write(formatted)
    return 1 if failed else 0


DTYPES = ("float32", "bfloat16", "float16")


def _device(name: str):
    import torch

    try:
        device = torch.device(name)
    except RuntimeError:
        raise UsageError(f"--device {name}: not a device name (cpu, cuda, cuda:1, mps)") from None
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
        v = model.embeddings[model.stack_embedding[role]].vocab
        return torch.randint(0, v, (batch, length), generator=generator).to(device)

    if model.spec.kind == "encoder-decoder":
        return ids("encoder"), ids("decoder")
    return (ids(model.spec.stacks[0].role),)


def cmd_build(args) -> int:
    import time

    import torch

    from .compiler import compile as compile_spec

    spec = load(args.file, overrides=_overrides(args))
    device = _device(args.device)
    dtype = getattr(torch, args.dtype)
    model = compile_spec(spec, device=device, dtype=dtype, seed=args.seed).eval()
    print(model)
    if args.code:
        for role in ("encoder", "decoder"):
            stack = getattr(model, role, None)
            if stack is not None:
                print(f"\n# {role} layer (generated from the graph IR)\n{stack.layers[0].code.strip()}")
    total = sum(p.numel() for p in model.parameters())
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
    print(f"forward pass on random tokens {tuple(inputs[-1].shape)}: {names} {shapes} in {elapsed * 1000:.1f} ms"
          f"{'' if finite else ' -- NON-FINITE VALUES'}")
    return 0 if finite else 1


def cmd_verify(args) -> int:
    from .compiler import compile as compile_spec
    from .verify import small_version, verify

    spec = load(args.file, overrides=_overrides(args))
    if not args.full_size:
        spec, changes = small_version(spec)
    if not args.full_size:
        print(f"{args.file}: checking {spec.name} at test size" + (f" ({', '.join(changes)})" if changes else ""))
    model = compile_spec(spec, seed=args.seed)
    results = verify(model, examples=args.examples, seed=args.seed)
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
    import os

    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise UsageError(f"{what} {path}: directory {directory} does not exist")


def cmd_summary(args) -> int:
    from .analysis import AnalysisError, analyse, sweep
    from .summary import format_summary, format_sweep, plot, sweep_rows

    spec = load(args.file, overrides=_overrides(args))
    options = {"batch": args.batch, "dtype": args.dtype, "fused_attention": args.fused_attention}
    try:
        analysis = analyse(spec, seq_len=args.seq_len, src_len=args.src_len, tgt_len=args.tgt_len, **options)
        curve = sweep(spec, args.sweep, **options)
    except AnalysisError as exc:
        raise UsageError(str(exc)) from None
    if args.plot:
        _writable(args.plot, "--plot")
    measured = _measure(spec, analysis) if args.measure else None
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
        plot(curve, args.plot)
        if not args.json:
            print(f"\nwrote {args.plot}")
    return 0


def _measure(spec, analysis):
    from .measure import measure

    if analysis.fused_attention:
        raise UsageError("--measure runs on the meta device, where attention takes the materialising math path; "
                         "drop --fused-attention to compare")
    return measure(spec, analysis.lengths, batch=analysis.batch, dtype=analysis.dtype)


def _measured_text(analysis, measured) -> str:
    from .summary import binary, si

    total = analysis.total
    flops_gap = (measured.flops - total.matmul) / total.matmul if total.matmul else 0.0
    memory_gap = (measured.saved_bytes - total.memory) / total.memory if total.memory else 0.0
    return (f"measured on the compiled model (meta device, one training-mode forward pass):\n"
            f"  FlopCounterMode: {si(measured.flops, 'FLOPs')} in matrix products "
            f"(analysis {si(total.matmul)}, {flops_gap:+.2%}); with the analysis's element-wise "
            f"{si(total.elementwise)} the total is {total.flops / measured.flops - 1:+.2%} from the counter\n"
            f"  saved for backward: {binary(measured.saved_bytes)} (analysis {binary(total.memory)}, {memory_gap:+.2%})")


def cmd_render(args) -> int:
    from .diagram import RenderError, render

    spec = load(args.file, overrides=_overrides(args))
    try:
        path = render(spec, args.output, expand=args.expand, detail=args.detail)
    except RenderError as exc:
        raise UsageError(str(exc)) from None
    print(f"wrote {path}")
    return 0


def cmd_diff(args) -> int:
    from .analysis import AnalysisError
    from .diff import diff
    from .summary import binary, si

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

    build = with_set(sub.add_parser("build", help="compile a spec, print its module tree and parameter count, "
                                                  "and run one forward pass on random tokens"))
    build.add_argument("file", metavar="FILE")
    build.add_argument("--batch", type=_positive, default=2, help="batch size of the test pass (default 2)")
    build.add_argument("--seq-len", type=_positive, default=16, help="sequence length of the test pass (default 16)")
    build.add_argument("--device", default="cpu", help="cpu (default), cuda, cuda:N, mps")
    build.add_argument("--dtype", choices=DTYPES, default="float32")
    build.add_argument("--seed", type=int, default=0, help="seed for initialisation and inputs (default 0)")
    build.add_argument("--code", action="store_true", help="also print each stack's generated layer code")
    build.set_defaults(run=cmd_build)

    verify = with_set(sub.add_parser("verify", help="check causality, permutation equivariance, padding "
                                                    "invariance, window locality and gradients on the compiled spec"))
    verify.add_argument("file", metavar="FILE")
    verify.add_argument("--examples", type=_positive, default=25, help="Hypothesis examples per property (default 25)")
    verify.add_argument("--seed", type=int, default=0)
    verify.add_argument("--full-size", action="store_true", help="check the spec at its own sizes (slow for big "
                                                                 "models); by default widths, vocabularies and "
                                                                 "layer counts are reduced")
    verify.set_defaults(run=cmd_verify)
    summary = with_set(sub.add_parser("summary", help="parameters, forward FLOPs and activation memory per "
                                                      "component, their growth with sequence length, and "
                                                      "complexity classes"))
    summary.add_argument("file", metavar="FILE")
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
    summary.add_argument("--plot", metavar="PNG", help="also draw FLOPs and memory against sequence length")
    summary.add_argument("--measure", action="store_true",
                         help="also compile on the meta device and compare with FlopCounterMode and the "
                              "tensors autograd saves")
    summary.set_defaults(run=cmd_summary)

    render = with_set(sub.add_parser("render", help="draw the architecture (Figure 1 style) with Graphviz"))
    render.add_argument("file", metavar="FILE")
    render.add_argument("-o", "--output", required=True, metavar="OUT",
                        help="output file; the suffix picks the format: .svg, .png, .pdf or .dot")
    render.add_argument("--expand", action="store_true", help="draw every layer instead of one inside 'N×'")
    render.add_argument("--detail", action="store_true", help="show tensor shapes on edges, dropout, norm options")
    render.set_defaults(run=cmd_render)

    diff = with_set(sub.add_parser("diff", help="what differs architecturally between two specs"))
    diff.add_argument("first", metavar="A")
    diff.add_argument("second", metavar="B")
    diff.add_argument("--seq-len", type=_positive, help="length at which totals are compared (default: the "
                                                        "shorter of the two specs' defaults)")
    diff.add_argument("--json", action="store_true", help="print the changes and totals as JSON")
    diff.set_defaults(run=cmd_diff)
    return parser


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except SpecError as exc:  # a spec that does not load: compiler-style message, exit 1
        print(exc.render(), file=sys.stderr)
        return 1
    except UsageError as exc:
        print(f"tfspec {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
