"""`tfspec summary`: parameters, FLOPs and activation memory per component, their growth with the sequence
length, measured where asked, compared across specs and plotted.
"""

from __future__ import annotations

import argparse
import json
import os

from ..errors import shown
from ..ir.api import load
from ..front.schema import Towers
from .common import DTYPES, fits, overrides, positive, UsageError, with_set, writable, one_model


def _lengths_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated lengths like 128,512,2048, got {text!r}") from None
    if not values or min(values) <= 0:
        raise argparse.ArgumentTypeError(f"expected positive lengths, got {text!r}")
    return values


def _plot_format(path: str) -> None:
    from matplotlib.figure import Figure

    formats = Figure().canvas.get_supported_filetypes()
    extension = os.path.splitext(path)[1].lstrip(".").lower()
    if extension not in formats:
        raise UsageError(f"--plot {shown(path)}: cannot tell the picture's format; end the name in "
                         + ", ".join(f".{f}" for f in sorted(formats)))


def add(sub) -> None:
    """The `summary` command's arguments."""
    summary = with_set(sub.add_parser("summary", help="parameters, forward FLOPs and activation memory per "
                                                      "component, their growth with sequence length, and "
                                                      "complexity classes"))
    summary.add_argument("files", nargs="+", metavar="FILE",
                         help="a spec; several are compared side by side (and drawn on one --plot)")
    summary.add_argument("--seq-len", type=positive, help="tokens per sequence (default: the learned positions' "
                                                           "size, else 512)")
    summary.add_argument("--src-len", type=positive, help="encoder-decoder: source length (default --seq-len)")
    summary.add_argument("--tgt-len", type=positive, help="encoder-decoder: target length (default --seq-len)")
    summary.add_argument("--batch", type=positive, default=1, help="sequences per batch (default 1)")
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
    summary.set_defaults(run=run)


def run(args) -> int:
    from ..inspect.analysis import AnalysisError, analyse, sweep
    from ..inspect.summary import format_summary, format_sweep, plot, sweep_rows

    if len(args.files) > 1 and args.measure:
        raise UsageError("--measure checks one spec against the counter: give one FILE")
    if args.plot:
        writable(args.plot, "--plot")
        _plot_format(args.plot)
    loaded = [load(path, overrides=overrides(args)) for path in args.files]
    if len(loaded) == 1 and isinstance(loaded[0], Towers) and not args.measure:
        return _towers_summary(args, loaded[0])
    specs = [one_model(spec, "summary --measure" if args.measure else "summary of several files")
             for spec in loaded]
    if args.measure:
        from ..inspect.analysis import default_length

        given = [n for n in (args.seq_len, args.src_len, args.tgt_len) if n]
        fits(specs[0], args.batch, max(given) if given else default_length(specs[0].graph()), "--measure")
    options = {"batch": args.batch, "dtype": args.dtype, "fused_attention": args.fused_attention}
    analyses, curves = [], []
    for path, spec in zip(args.files, specs):
        try:
            analyses.append(analyse(spec, seq_len=args.seq_len, src_len=args.src_len, tgt_len=args.tgt_len,
                                    **options))
            curves.append(sweep(spec, args.sweep, **options))
        except AnalysisError as exc:
            raise UsageError(f"{shown(path)}: {exc}" if len(args.files) > 1 else str(exc)) from None
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
            print(f"\nwrote {shown(args.plot)}")
    return 0


def _towers_summary(args, towers) -> int:
    """A model of towers: each tower's summary and sweep, the one reading tokens at ``--seq-len`` (the others at
    the length their input fixes), then the towers together."""
    from ..inspect.analysis import AnalysisError, analyse, sweep
    from ..inspect.summary import binary, format_summary, format_sweep, si, sweep_rows
    from ..ir.queries import fixed_length
    from ..ir.towers import Connector

    options = {"batch": args.batch, "dtype": args.dtype, "fused_attention": args.fused_attention}
    if args.src_len or args.tgt_len:
        raise UsageError("--src-len and --tgt-len are an encoder-decoder's; a tower of tokens reads --seq-len")
    parts, curves = {}, {}
    for tower in towers.towers:
        spec = tower.spec
        fixed = fixed_length(spec.graph(), spec.stacks[0].role)
        try:
            parts[tower.name] = analyse(spec, seq_len=None if fixed else args.seq_len, **options)
            curves[tower.name] = sweep(spec, args.sweep, **options) if not fixed else []
        except AnalysisError as exc:
            raise UsageError(f"tower {tower.name}: {exc}") from None
    joins = towers.parameter_count() - sum(a.total.params for a in parts.values())
    flops = sum(a.total.flops for a in parts.values()) + args.batch * sum(  # each picture through its connector
        c.flops() for c in towers.graph().of(Connector))
    memory = sum(a.total.memory for a in parts.values())
    if args.json:
        print(json.dumps({"name": towers.name, "kind": "towers", "batch": args.batch,
                          "parameters": towers.parameter_count(), "flops": flops, "memory": memory,
                          "towers": {name: {**a.to_dict(), "sweep": sweep_rows(curves[name])}
                                     for name, a in parts.items()}}, indent=2))
    else:
        for name, analysis in parts.items():
            print(f"tower {name}\n")
            print(format_summary(analysis))
            if curves[name]:
                print()
                print(format_sweep(curves[name]))
            print()
        print(f"{towers.name}: the towers together, {towers.parameter_count():,} parameters ({joins:,} in what "
              f"joins them), {si(flops, 'FLOPs')} and {binary(memory)} of activations for a forward pass at batch "
              f"{args.batch}")
    if args.plot:
        _plot(args, {f"{towers.name}/{name}": curve for name, curve in curves.items()},
              "no sweep length fits a tower of tokens' learned positions (a tower of pictures reads "
              "one length)")
    return 0


def _compare_summaries(args, analyses, curves) -> int:
    """``tfspec summary A.tfs B.tfs …``: one line each, their costs side by side over the sweep, the plot."""
    from ..inspect.summary import binary, format_comparison, lengths_text, si, spec_labels, sweep_rows

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
        _plot(args, dict(zip(labels, curves)), "no sweep length fits these specs' learned positions")
    return 0


def _plot(args, curves: dict, none_drawn: str) -> None:
    """The curves that have points, drawn to ``--plot``; ``none_drawn``: why none has."""
    from ..inspect.summary import plot

    drawn = {label: curve for label, curve in curves.items() if curve}
    if not drawn:
        raise UsageError(f"--plot: {none_drawn}")
    plot(drawn, args.plot)
    if not args.json:
        print(f"\nwrote {shown(args.plot)}")


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
            f"  saved for backward: {binary(measured.saved_bytes)} (analysis {binary(total.memory)}, "
            f"{memory_gap:+.2%})")
