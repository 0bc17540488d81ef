"""Analysis of the graph IR: parameter counts (FLOPs and memory follow in the analysis issue)."""

from __future__ import annotations

import math

import networkx as nx


def layer_repeat(g: nx.DiGraph, node: str) -> int:
    a = g.nodes[node]
    return g.graph["stacks"][a["stack"]]["repeat"] if a["in_block"] else 1


def parameter_table(g: nx.DiGraph) -> dict[str, tuple[int, ...]]:
    """Every parameter tensor by its full name (the compiled module's state-dict name).

    Shared weights appear once, under their owner's name; a template layer's
    tensors are listed once per repeat (``decoder.layers.0.ffn.up.weight``, ...).
    """
    table: dict[str, tuple[int, ...]] = {}
    for n in nx.topological_sort(g):
        a = g.nodes[n]
        if not a["params"]:
            continue
        repeats = range(layer_repeat(g, n)) if a["in_block"] else [None]
        for i in repeats:
            module = a["module"].format(i=i) if i is not None else a["module"]
            for name, shape in a["params"].items():
                table.setdefault(f"{module}.{name}", tuple(shape))
    return table


def count_parameters(g: nx.DiGraph) -> int:
    """Total parameters, shared (tied) weights counted once."""
    seen: set[str] = set()
    total = 0
    for n, a in g.nodes(data=True):
        if not a["params"] or a["module"] in seen:
            continue
        seen.add(a["module"])
        total += sum(math.prod(s) for s in a["params"].values()) * layer_repeat(g, n)
    return total
