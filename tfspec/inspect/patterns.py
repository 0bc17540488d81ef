"""Which key each query sees: every attention's pattern as a boolean matrix, and its picture (``tfspec mask``).

A pattern is what the compiled model allows, from the same code: the masks' rules (``Mask.allowed``), here
given numpy arrays of positions, so drawing needs no torch (with an example value of each run-time input they
read, e.g. a prefix of half the sequence), and an attention kind's own pattern (``AttentionKind.sees``:
BigBird's blocks, drawn as the runtime draws them, in numpy too). Padding only removes the padded keys'
columns, so it is left out; what a picture cannot show (top-k's choice at run time,
Linformer's mixing of every key) is its note.

    >>> import tfspec
    >>> [p.sublayer for p in attention_patterns(tfspec.load("examples/vaswani_base.tfs"), seq_len=16)]
    ['encoder.self_attn', 'decoder.self_attn', 'decoder.cross_attn']
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field

import numpy as np

from .analysis import AnalysisError, _graph_of, stack_lengths
from ..ir.queries import attentions, fixed_length, length_limit
from ..files import figure_text, save_figure
from ..registry import ATTENTION_KINDS, MASKS

MAX_LENGTH = 16384  # a picture's longest side in positions (16384² pairs: a 256 MiB boolean matrix)
SMALLEST, LARGEST = 64, 8192  # default lengths: enough to see a pattern, drawn in a few seconds
PIXELS = 1024  # a longer side is drawn in tiles, each pixel the share of its tile's pairs seen


@dataclass
class AttentionPattern:
    """One attention sublayer's pattern (every layer of its stack has the same)."""

    sublayer: str  # the IR node: "decoder.self_attn"
    label: str  # what diagrams call it
    allowed: np.ndarray  # bool (queries, keys): may query i see key j
    heads: int  # query heads
    head: int | None  # the head drawn (from 0) where the kind's pattern differs per head (BigBird's), else None
    inputs: dict[str, object] = field(default_factory=dict)  # example run-time inputs the masks read
    notes: list[str] = field(default_factory=list)

    @property
    def pairs(self) -> int:
        """Query-key pairs allowed (in the head drawn, where heads differ)."""
        return int(self.allowed.sum())

    @property
    def head_text(self) -> str:
        return f"head {self.head + 1} of {self.heads}" if self.head is not None and self.heads > 1 else ""


def default_length(g) -> int:
    """The length at which every pattern shows: the largest its masks and kinds ask for (at least 64), within
    the stacks' limits (learned positions, Linformer's projections) and 8192; pictures' own length (their
    patches), where every stack's input fixes its length; a stack whose input fixes it beside another (an encoder of
    spectrograms) stays at it, and this is the other's."""
    free = [role for role in g.stacks if fixed_length(g, role) is None]
    if not free:
        return fixed_length(g, next(iter(g.stacks)))
    wanted = [SMALLEST]
    for node in attentions(g):
        kind, options = ATTENTION_KINDS.of(node.spec.kind)
        wanted += [kind.pattern_length(options)] + [m.pattern_length(o) for m, o in map(MASKS.of, node.spec.mask)]
    length = min(max(wanted), LARGEST)
    limits = [limit[0] for role in free if (limit := length_limit(g, role)) is not None]
    return min([length] + limits)


def attention_patterns(spec_or_graph, seq_len: int | None = None, src_len: int | None = None,
                       tgt_len: int | None = None, head: int = 0) -> list[AttentionPattern]:
    """Every attention sublayer's pattern at these lengths (default ``default_length``), in query head
    ``head`` (counted from 0) where a kind's pattern differs per head; raises
    ``tfspec.inspect.analysis.AnalysisError`` for a length a stack cannot take, or a head no attention has."""
    g = _graph_of(spec_or_graph)
    if seq_len is None and src_len is None and tgt_len is None:
        seq_len = default_length(g)
    lengths = stack_lengths(g, seq_len, src_len, tgt_len)
    stack, longest = max(lengths.items(), key=lambda item: item[1])
    if longest > MAX_LENGTH:  # before a (queries, keys) matrix is made: 65,537 patches held 21 GB
        raise AnalysisError(f"stack {stack} reads {longest:,} positions, whose picture would hold {longest ** 2:,} "
                            f"pairs; tfspec draws at most {MAX_LENGTH:,} positions a side (its input fixes the "
                            "length: draw a smaller version, e.g. with --set)")
    patterns = []
    for node in attentions(g):
        kind, options = ATTENTION_KINDS.of(node.spec.kind)
        masks, shape = [MASKS.of(m) for m in node.spec.mask], node.geometry
        queries = lengths[node.stack]
        keys = lengths["encoder"] if shape.cross else queries
        inputs = {i.name: i.example(queries) for m, _ in masks if m.structural for i in m.inputs if i.example}
        given = {name: np.array([value]) for name, value in inputs.items()}  # a batch of one
        allowed = np.ones((queries, keys), dtype=bool)
        for mask, mask_options in masks:  # the whole sequence: queries and keys are its positions
            rule = mask.allowed(np.arange(queries), np.arange(keys), mask_options, given)
            if rule is not None:
                allowed &= rule.reshape(rule.shape[-2:])
        if not 0 <= head < shape.heads:
            raise AnalysisError(f"{node.id} has {shape.heads} query heads; there is no head {head + 1}")
        own = kind.sees(options, shape, queries, head=head)
        if own is not None:
            allowed &= np.asarray(own, dtype=bool)
        notes = [note] if (note := kind.pattern_note(options)) else []
        if any(mask.reads_padding for mask, _ in masks):
            notes.append("padding (not drawn) hides the padded keys")
        patterns.append(AttentionPattern(node.id, node.label, allowed, shape.heads, head if own is not None
                                         else None, inputs, notes))
    return patterns


def describe(pattern: AttentionPattern) -> str:
    """One line: 'decoder.self_attn: 64 × 64, 2,080 of 4,096 pairs (51%); prefix_lengths = 32'."""
    queries, keys = pattern.allowed.shape
    share = pattern.pairs / (queries * keys)
    text = f"{pattern.sublayer}: {queries} queries × {keys} keys, {pattern.pairs:,} pairs ({share:.1%})"
    if pattern.head_text:
        text += f" in {pattern.head_text}"
    extra = [f"{name} = {_short(value)}" for name, value in pattern.inputs.items()] + pattern.notes
    return text + ("; " + "; ".join(extra) if extra else "")


def _short(value) -> str:
    if isinstance(value, list) and len(value) > 8:
        runs = []  # [0]*16 + [1]*32: written as runs
        for v in value:
            if runs and runs[-1][0] == v:
                runs[-1][1] += 1
            else:
                runs.append([v, 1])
        return " + ".join(f"[{v}]×{count}" for v, count in runs)
    return str(value)


def seen_share(allowed: np.ndarray) -> tuple[np.ndarray, int]:
    """(the share of pairs seen per pixel, (queries, keys) pooled to at most ``PIXELS`` a side; the tile side)."""
    queries, keys = allowed.shape
    tile = -(-max(queries, keys) // PIXELS)
    if tile == 1:
        return allowed.astype(np.float32), 1
    rows, columns = -(-queries // tile), -(-keys // tile)
    grid = np.zeros((rows * tile, columns * tile), dtype=np.float32)  # a ragged edge counts as pairs not seen
    grid[:queries, :keys] = allowed
    return grid.reshape(rows, tile, columns, tile).mean(axis=(1, 3)), tile


def plot_patterns(patterns: list[AttentionPattern], path: str, title: str) -> None:
    """One panel per attention sublayer, queries down and keys across, seen keys dark; written to ``path``."""
    import matplotlib.pyplot as plt

    fig = pattern_figure(patterns, title)
    try:
        save_figure(fig, path, dpi=110)
    finally:
        plt.close(fig)


def pattern_figure(patterns: list[AttentionPattern], title: str):
    """The figure ``plot_patterns`` writes (the caller closes it)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import LinearSegmentedColormap

    seen = LinearSegmentedColormap.from_list("seen", ["#ffffff", "#1f4e79"])
    columns = min(3, len(patterns))
    rows = -(-len(patterns) // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(4.4 * columns, 4.8 * rows), squeeze=False)
    for ax, pattern in zip(axes.flat, patterns):
        queries, keys = pattern.allowed.shape
        share, tile = seen_share(pattern.allowed)
        ax.imshow(share, cmap=seen, vmin=0, vmax=1, interpolation="nearest", aspect="auto",
                  extent=(-0.5, keys - 0.5, queries - 0.5, -0.5))
        head = f", {pattern.head_text}" if pattern.head_text else ""
        ax.set_title(figure_text(f"{pattern.sublayer}{head}") + "\n" + textwrap.fill(figure_text(pattern.label), 56),
                     fontsize=8)
        ax.set_xlabel(f"key ({pattern.pairs / (queries * keys):.1%} of pairs seen)", fontsize=8)
        ax.set_ylabel("query", fontsize=8)
        ax.tick_params(labelsize=7)
        notes = [f"{name} = {_short(value)}" for name, value in pattern.inputs.items()] + pattern.notes
        if tile > 1:
            notes.append(f"a pixel: the share of {tile} × {tile} pairs seen")
        if notes:
            ax.text(0.0, -0.2, "\n".join(map(figure_text, notes)), transform=ax.transAxes, fontsize=7, va="top",
                    wrap=True)
    for ax in list(axes.flat)[len(patterns):]:
        ax.axis("off")
    fig.suptitle(figure_text(title), fontsize=10)
    fig.tight_layout()
    return fig
