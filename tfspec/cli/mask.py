"""`tfspec mask`: which key each query sees, drawn for every attention of a spec."""

from __future__ import annotations

import os

from ..errors import shown
from ..ir.api import load
from ..front.schema import Towers
from .common import overrides, positive, print_json, UsageError, with_json, with_set, writable


def add(sub) -> None:
    """The `mask` command's arguments."""
    mask = with_json(with_set(sub.add_parser("mask", help="draw which key each query sees, for every attention "
                                                          "sublayer")))
    mask.add_argument("file", metavar="FILE")
    mask.add_argument("-o", "--output", required=True, metavar="OUT", help="the picture: .png, .svg or .pdf")
    mask.add_argument("--seq-len", type=positive, help="tokens per sequence (default: a length that shows every "
                                                         "pattern, within the spec's limits)")
    mask.add_argument("--src-len", type=positive, help="encoder-decoder: source length")
    mask.add_argument("--tgt-len", type=positive, help="encoder-decoder: target length")
    mask.add_argument("--head", type=positive, default=1, help="the query head drawn where heads see different "
                                                                "keys (BigBird's random blocks; default 1)")
    mask.set_defaults(run=run)


def _tower_patterns(args, towers) -> list:
    """Every tower's patterns, each sublayer named with its tower (``text.decoder.self_attn``): a tower of tokens at
    ``--seq-len``, one of pictures at the length its input makes."""
    import dataclasses

    from ..inspect.analysis import AnalysisError
    from ..inspect.patterns import attention_patterns
    from ..ir.queries import fixed_length

    if args.src_len or args.tgt_len:
        raise UsageError("--src-len and --tgt-len are an encoder-decoder's; a tower of tokens reads --seq-len")
    patterns, heads = [], []
    for tower in towers.towers:
        g = tower.spec.graph()
        fixed = fixed_length(g, tower.spec.stacks[0].role)
        try:
            found = attention_patterns(tower.spec, seq_len=None if fixed else args.seq_len, head=args.head - 1)
        except AnalysisError as exc:
            if "head" not in str(exc):
                raise AnalysisError(f"tower {tower.name}: {exc}") from None
            heads.append(f"tower {tower.name}: {exc}")
            continue
        patterns += [dataclasses.replace(p, sublayer=f"{tower.name}.{p.sublayer}") for p in found]
    if heads and not patterns:
        raise AnalysisError("; ".join(heads))
    return patterns


def run(args) -> int:
    from ..inspect.analysis import AnalysisError
    from ..inspect.patterns import MAX_LENGTH, attention_patterns, describe, plot_patterns

    extension = os.path.splitext(args.output)[1].lower()
    if extension not in (".png", ".svg", ".pdf"):
        raise UsageError(f"-o {shown(args.output)}: write a .png, .svg or .pdf picture")
    writable(args.output, "-o")
    if os.path.isdir(args.output):
        raise UsageError(f"-o {shown(args.output)}: is a directory; name the picture to write")
    longest = max(n for n in (args.seq_len, args.src_len, args.tgt_len, 0) if n is not None)
    if longest > MAX_LENGTH:
        raise UsageError(f"a picture of {longest} positions would hold {longest ** 2:,} pairs; "
                         f"use a length <= {MAX_LENGTH}")
    spec = load(args.file, overrides=overrides(args))
    try:
        patterns = _tower_patterns(args, spec) if isinstance(spec, Towers) else attention_patterns(
            spec, seq_len=args.seq_len, src_len=args.src_len, tgt_len=args.tgt_len, head=args.head - 1)
    except AnalysisError as exc:
        raise UsageError(str(exc)) from None
    if not patterns:
        raise UsageError(f"{shown(args.file)}: {spec.name} has no attention to draw")
    plot_patterns(patterns, args.output, f"{spec.name}: which key each query sees")
    if args.json:
        print_json({"output": args.output, "patterns": [
            {"sublayer": p.sublayer, "label": p.label, "queries": p.allowed.shape[0], "keys": p.allowed.shape[1],
             "pairs_seen": p.pairs, "description": describe(p)} for p in patterns]})
        return 0
    for pattern in patterns:
        print(describe(pattern))
    print(f"wrote {shown(args.output)}")
    return 0
