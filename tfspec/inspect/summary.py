"""Presenting an analysis: the ``tfspec summary`` tables, its JSON, and the cost-vs-length plot."""

from __future__ import annotations

from .analysis import Analysis
from ..front import schema as S
from ..ir import nodes as ir
from ..ir.queries import active_parameters, attentions, training_only_parameters
from ..ir.towers import Connector, Contrastive
from ..errors import shown
from ..files import figure_text, save_figure


def si(value: float, unit: str = "") -> str:
    """1234567 -> '1.23 M'; past the prefixes, powers of ten: 1.68e+28 (and never more than four digits before
    the point).

    >>> si(1234567), si(2.5e30, "B")
    ('1.23 M', '2.50e+30 B')
    """
    if abs(value) >= 1e27:
        return f"{value:.2e} {unit}".rstrip()
    for factor, prefix in ((1e24, "Y"), (1e21, "Z"), (1e18, "E"), (1e15, "P"), (1e12, "T"), (1e9, "G"),
                           (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.2f} {prefix}{unit}"
    return f"{value:.0f} {unit}".rstrip()


def binary(nbytes: float) -> str:
    """Bytes in KiB ... YiB; past them, powers of ten.

    >>> binary(3 * 2 ** 20), binary(2 ** 90)
    ('3.00 MiB', '1.24e+27 B')
    """
    if nbytes >= 1 << 90:
        return f"{nbytes:.2e} B"
    for power, prefix in ((80, "YiB"), (70, "ZiB"), (60, "EiB"), (50, "PiB"), (40, "TiB"), (30, "GiB"), (20, "MiB"),
                          (10, "KiB")):
        if nbytes >= 1 << power:
            return f"{nbytes / (1 << power):.2f} {prefix}"
    return f"{nbytes:.0f} B"


def _table(header: list[str], rows: list[list[str]], right: set[int]) -> list[str]:
    widths = [max(len(r[i]) for r in [header] + rows) for i in range(len(header))]

    def line(cells):
        return "  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths))).rstrip()

    return [line(header), line(["-" * w for w in widths])] + [line(r) for r in rows]


def lengths_text(a: Analysis) -> str:
    if len(a.lengths) == 2:
        return f"src_len {a.lengths['encoder']}, tgt_len {a.lengths['decoder']}"
    return f"seq_len {next(iter(a.lengths.values()))}"


def format_summary(a: Analysis, label_width: int = 50) -> str:
    """The per-component table, totals, training figures and complexity classes."""
    out = [f"{a.name}: {a.kind}, batch {a.batch}, {lengths_text(a)}, {a.dtype} activations"
           + (", fused attention" if a.fused_attention else ""), ""]
    rows = []
    for r in a.rows:
        label = r.label if len(r.label) <= label_width else r.label[: label_width - 1] + "…"
        c = r.cost
        rows.append([r.node, label, f"{r.repeat}×" if r.repeat > 1 else "", f"{c.params:,}", si(c.flops),
                     si(c.flops_mask_aware), binary(c.memory)])
    t = a.total
    rows.append(["total", "", "", f"{t.params:,}", si(t.flops), si(t.flops_mask_aware), binary(t.memory)])
    out += _table(["component", "what", "", "parameters", "fwd FLOPs", "mask-aware", "act. memory"], rows,
                  {2, 3, 4, 5, 6})
    if a.active_params != t.params:  # a mixture of experts: what a position reads, of all there are
        out += ["", f"parameters: {a.active_params:,} active per position / {t.params:,} in all "
                    f"({a.active_params / t.params:.1%}); FLOPs count the active ones"]
    if a.kv_cache_bytes:  # what decoding keeps, against what every head's own keys and values would take
        n = a.lengths["decoder"]
        line = f"KV cache after {n} tokens: {binary(a.kv_cache_bytes)} ({binary(a.kv_cache_bytes / n)} per token)"
        if a.kv_cache_multi_head_bytes != a.kv_cache_bytes:
            line += (f"; multi-head attention of the same heads would keep {binary(a.kv_cache_multi_head_bytes)} "
                     f"({a.kv_cache_multi_head_bytes / a.kv_cache_bytes:.1f}×)")
        out += ["", line]
    if a.state_bytes:  # what the mixers keep while decoding: the same after any number of tokens
        out += ["", f"mixer states while decoding: {binary(a.state_bytes)}, whatever the length"]
    if a.all_attention_bytes:  # a hybrid against the all-attention model of its shape
        n, kept = a.lengths["decoder"], a.kv_cache_bytes + a.state_bytes
        out.append(f"decoding state after {n} tokens: {binary(kept)}; with attention in every layer "
                   f"{binary(a.all_attention_bytes)} ({a.all_attention_bytes / kept:.1f}×)")
    train = a.training()
    extra = a.training_only
    out += ["",
            f"forward: {si(t.flops, 'FLOPs')} = {si(t.matmul)} in matrix products (what FlopCounterMode counts)"
            f" + {si(t.elementwise)} element-wise"]
    if extra.flops:  # what training alone runs beside the model
        out.append(f"multi-token prediction, training only: {si(extra.flops, 'FLOPs')} more per forward "
                   f"({extra.flops / t.flops:.1%}), in the training step below; its activations not counted")
    out += [f"mask-aware: {si(t.flops_mask_aware, 'FLOPs')}, scoring only the query-key pairs the masks allow",
            f"training step ≈ 3 × forward{' (both)' if extra.flops else ''} = "
            f"{si(train['flops_forward_backward'], 'FLOPs')}; "
            f"weights + grads + Adam moments {binary(train['weights_grads_adam_bytes'])}; "
            f"activations {binary(t.memory)}"
            + ("" if a.fused_attention else " (attention probabilities materialised; --fused-attention for "
                                              "flash-style kernels)"),
            ""]
    out += _table(["layer type", "per layer", "sequential ops", "max path length", ""],
                  [[c.layer, c.per_layer, c.sequential, c.path, c.note] for c in a.complexity], set())
    out.append("n: sequence length, m: source length, d: width, d_ff: feed-forward width, r: keys per query")
    return "\n".join(out)


def attention_share(a: Analysis) -> float:
    attention = a.cost_of(ir.Attention).flops
    return attention / a.total.flops if a.total.flops else 0.0


def sweep_rows(analyses: list[Analysis]) -> list[dict]:
    return [{"lengths": a.lengths, "flops": a.total.flops, "flops_mask_aware": a.total.flops_mask_aware,
             "memory": a.total.memory, "attention_share": round(attention_share(a), 4)} for a in analyses]


def format_sweep(analyses: list[Analysis]) -> str:
    # the stacks the sweep lengthens, and those their input holds at one length (an encoder of spectrograms)
    swept = [r for r in analyses[0].lengths if len({a.lengths[r] for a in analyses}) > 1] or list(analyses[0].lengths)
    held = [f"the {r} at its {n}" for r, n in analyses[0].lengths.items() if r not in swept]
    rows = [[str(max(a.lengths[r] for r in swept)), si(a.total.flops), si(a.total.flops_mask_aware),
             f"{attention_share(a):.0%}", binary(a.total.memory)]
            for a in analyses]
    every = f"the {' and '.join(swept)} at that length, {', '.join(held)}" if held else "every stack at that length"
    return "\n".join([f"how the cost grows with sequence length ({every}):"]
                     + _table(["length", "fwd FLOPs", "mask-aware", "in attention", "act. memory"], rows,
                              {0, 1, 2, 3, 4}))


def spec_labels(names: list[str], paths: list[str]) -> list[str]:
    """Short, distinct labels for several specs: their model names, or their paths where names repeat."""
    return names if len(set(names)) == len(names) else [shown(p) for p in paths]


def format_comparison(curves: dict[str, list[Analysis]]) -> str:
    """Forward FLOPs and activation memory of several specs at each sweep length, then where each one
    becomes cheaper than the first."""
    by_length = [{max(a.lengths.values()): a for a in curve} for curve in curves.values()]
    lengths = sorted(set().union(*by_length))
    labels = list(curves)
    header = ["length"] + [f"{label} FLOPs" for label in labels] + [f"{label} memory" for label in labels]
    rows = [[str(n)] + [si(c[n].total.flops) if n in c else "-" for c in by_length]
            + [binary(c[n].total.memory) if n in c else "-" for c in by_length] for n in lengths]
    out = ["forward FLOPs and activation memory against sequence length (every stack at that length):"]
    out += _table(header, rows, set(range(len(header))))
    if len(labels) > 1:
        out += ["", f"against {labels[0]} (the first), at the lengths both cover:"]
        for label, costs in zip(labels[1:], by_length[1:]):
            flops = _cheaper_from(by_length[0], costs, lambda a: a.total.flops)
            memory = _cheaper_from(by_length[0], costs, lambda a: a.total.memory)
            out.append(f"  {label}: FLOPs {flops}; memory {memory}")
    return "\n".join(out)


def _cheaper_from(first: dict[int, Analysis], other: dict[int, Analysis], cost) -> str:
    """'fewer from n = 2048 (0.52× at 8192)': the shortest length from which ``other`` costs less than
    ``first`` at every longer length both cover."""
    common = sorted(set(first) & set(other))
    if not common:
        return "not compared (no common length)"
    cheaper = [cost(other[n]) < cost(first[n]) for n in common]
    longest = common[-1]
    ratio = f"{cost(other[longest]) / cost(first[longest]):.2f}× at {longest}" if cost(first[longest]) else ""
    if not cheaper[-1]:
        return f"more or equal up to n = {longest} ({ratio})"
    start = len(cheaper)
    while start > 0 and cheaper[start - 1]:
        start -= 1
    where = "at every length" if start == 0 else f"from n = {common[start]}"
    return f"less {where} ({ratio})"


def human_axes(ax, bytes_: bool = False) -> None:
    """A cost chart's log axes in people's units: lengths 64, 256, 1k, 4k; FLOPs as 1.00 G; bytes at powers of
    two, as 256 MiB and 1 GiB."""
    import matplotlib.ticker as ticker

    ax.set_xscale("log", base=2)
    ax.set_xlabel("sequence length")
    ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda x, _: f"{x / 1024:g}k" if x >= 1024 else f"{x:g}"))
    if bytes_:
        ax.set_yscale("log", base=2)
        ax.yaxis.set_major_locator(ticker.LogLocator(base=2, numticks=7))
        ax.yaxis.set_minor_locator(ticker.NullLocator())
        ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda y, _: binary(y).replace(".00 ", " ")))
    else:
        ax.set_yscale("log")
        ax.yaxis.set_major_locator(ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_minor_formatter(ticker.NullFormatter())
        ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda y, _: si(y).replace(".00 ", " ")))


def plot(curves: dict[str, list[Analysis]], path: str) -> None:
    """FLOPs and activation memory against sequence length, log-log, one line per spec, written to ``path``.
    With one spec, also the mask-aware FLOPs (what a kernel skipping masked pairs would do)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.5))
    for (name, analyses), color in zip(curves.items(), plt.rcParams["axes.prop_cycle"].by_key()["color"] * 4):
        label = figure_text(name)
        lengths = [max(a.lengths.values()) for a in analyses]
        left.plot(lengths, [a.total.flops for a in analyses], "o-", color=color, label=label)
        if len(curves) == 1:
            left.plot(lengths, [a.total.flops_mask_aware for a in analyses], "s--", color=color,
                      label=f"{label}, mask-aware")
        right.plot(lengths, [a.total.memory for a in analyses], "o-", color=color, label=label)
    left.set_ylabel("FLOPs per forward pass")
    right.set_ylabel("activations kept for backward")
    for ax, in_bytes in ((left, False), (right, True)):
        human_axes(ax, bytes_=in_bytes)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize="small")
    a = next(iter(curves.values()))[0]
    fused = ", fused attention" if a.fused_attention else ""
    fig.suptitle(f"{', '.join(map(figure_text, curves))}: batch {a.batch}, {a.dtype}{fused}")
    fig.tight_layout()
    try:
        save_figure(fig, path, dpi=120)
    finally:
        plt.close(fig)


def summary_line(path: str, spec) -> str:
    """`tfspec check`'s line: "PATH: NAME: KIND, 4 layers (2 kinds), d_model 64, 4 heads, 1,234 parameters"; of a
    model of towers, each tower's in brackets and what joins them."""
    if isinstance(spec, S.Towers):
        g = spec.graph()
        parts = [f"tower {t.name} ({tower_line(t.spec)})" for t in spec.towers]
        join = "".join(f", contrastive ({j.loss})" for j in g.of(Contrastive))
        join += "".join(f", {c.source} → {c.target} at token {c.image_token}" for c in g.of(Connector))
        return f"{shown(path)}: {spec.name}: {len(parts)} towers: {', '.join(parts)}{join}, " \
               f"{spec.parameter_count():,} parameters"
    return f"{shown(path)}: {spec.name}: {tower_line(spec)}"


def tower_line(spec) -> str:
    """The part of the summary line after the name: "decoder-only, 4 layers, d_model 64, ..."."""
    g = spec.graph()
    layers = "+".join(str(g.stacks[s.role].repeat) for s in spec.stacks)
    kinds = "+".join(str(len(g.stacks[s.role].kinds)) for s in spec.stacks)
    noun = "layer" if [g.stacks[s.role].repeat for s in spec.stacks] == [1] else "layers"
    if any(len(info.kinds) > 1 for info in g.stacks.values()):  # a schedule: how many kinds of layer
        layers += f" {noun} ({kinds} kinds)"
    else:
        layers += f" {noun}"
    if any(info.weights for info in g.stacks.values()):  # layers sharing weights: how many sets they run
        sets = [g.stacks[s.role].weight_sets for s in spec.stacks]
        layers += f" on {'+'.join(map(str, sets))} weight set{'s' if sum(sets) > 1 else ''}"
    heads = sorted({node.spec.heads for node in attentions(g)})
    widths = sorted({info.width for info in g.stacks.values()})
    mixers = sorted({node.spec.kind.name for node in g.of(ir.Mixer)})
    head_text = ", ".join((["/".join(map(str, heads)) + (" head" if heads == [1] else " heads")] if heads else [])
                          + ([f"{'/'.join(mixers)} mixer{'s' if len(mixers) > 1 else ''}"] if mixers else [])) \
        or "no attention"
    training_only = training_only_parameters(g)
    total, active = spec.parameter_count() - training_only, active_parameters(g)
    count = f"{total:,} parameters" + (f" ({active:,} active)" if active != total else "")
    if training_only:  # DeepSeek's way: 671B + 14B of multi-token prediction
        count += f" + {training_only:,} for multi-token prediction"
    return f"{spec.kind}, {layers}, d_model {'/'.join(map(str, widths))}, {head_text}, {count}"
