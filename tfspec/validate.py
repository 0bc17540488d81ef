"""Stage 4, validate: small passes over the graph IR, each adding diagnostics.

The pass list reads top to bottom; every pass runs, so one `tfspec check`
reports every independent problem.
"""

from __future__ import annotations

import math
import os
from typing import Callable

import networkx as nx

from . import schema as S
from .analysis import count_parameters
from .errors import Collector
from .graph import lower
from .registry import MASKS


def check_acyclic(g: nx.DiGraph, spec: S.Spec, errors: Collector) -> None:
    """The IR is a DAG: a repeat is an attribute of a stack, never a back-edge."""
    if not nx.is_directed_acyclic_graph(g):
        cycle = nx.find_cycle(g)
        errors.error("wiring", "the graph has a cycle: " + " -> ".join(u for u, _ in cycle), spec.span)


def check_cross_attention_memory(g: nx.DiGraph, spec: S.Spec, errors: Collector) -> None:
    """Every cross-attention reads memory: the output of an encoder, from inside a decoder."""
    for n, a in g.nodes(data=True):
        if a["op"] != "attention" or a["spec"].reads != "cross":
            continue
        if a["stack"] == "encoder":
            errors.error("structure", "cross-attention in an encoder stack has no memory to read",
                         a["span"], "only a decoder attends to an encoder's output; use `attention self ...` here")
        elif a.get("memory") is None:
            errors.error("structure", "cross-attention needs an encoder's output as memory, but this model has no encoder",
                         a["span"], "remove this sublayer for a decoder-only model, or add `encoder x N { ... }`")


def check_heads_divide_width(g: nx.DiGraph, spec: S.Spec, errors: Collector) -> None:
    """d_model % heads == 0: each head works on d_model / heads dimensions."""
    for n, a in g.nodes(data=True):
        if a["op"] != "attention":
            continue
        width, heads = a["width"], a["spec"].heads
        if width % heads:
            divisors = [h for h in range(1, width + 1) if width % h == 0]
            nearest = min(divisors, key=lambda h: (abs(h - heads), h))
            errors.error("shape", f"d_model {width} is not divisible by heads={heads}",
                         a["spec"].arg_spans.get("heads", a["span"]),
                         f"each head needs d_model / heads dimensions; try heads={nearest}")


def _broadcast(shapes: list[tuple]) -> tuple | None:
    rank = max(len(s) for s in shapes)
    out = []
    for dims in zip(*[(1,) * (rank - len(s)) + tuple(s) for s in shapes]):
        real = {d for d in dims if d != 1}
        if len(real) > 1:
            return None
        out.append(real.pop() if real else 1)
    return tuple(out)


def infer_shapes(g: nx.DiGraph, spec: S.Spec, errors: Collector) -> None:
    """Symbolic (batch, length, width) shapes along every edge, checked at every node."""
    for n in nx.topological_sort(g):
        a = g.nodes[n]
        ins = [g.nodes[i].get("shape") for i in a["inputs"]]
        if any(s is None for s in ins):
            continue  # an earlier node already failed
        op = a["op"]
        shape = a.get("shape")
        if op == "embedding" or op == "position":
            shape = (*ins[0], a["width"]) if op == "embedding" else (ins[0][-1], a["width"])
        elif op == "add":
            shape = _broadcast(ins)
            if shape is None:
                errors.error("shape", "cannot add tensors of shapes " + " and ".join(map(str, ins)), a["span"])
        elif op == "head":
            shape = (*ins[0][:-1], a["spec"].out)
        elif op == "pooler":
            shape = (ins[0][0], ins[0][-1])
        elif op in ("output",):
            shape = ins[0]
        elif op != "input":
            shape = ins[0]
            if op in ("attention", "feedforward", "norm", "head") and shape[-1] != a["width"]:
                errors.error("shape", f"{a['label']} expects width {a['width']}, gets {shape[-1]}", a["span"])
                shape = None
        a["shape"] = shape
        for i in a["inputs"]:
            g.edges[i, n]["shape"] = g.nodes[i]["shape"]


def check_tied_head(g: nx.DiGraph, spec: S.Spec, errors: Collector) -> None:
    """A tied head reuses the embedding matrix (vocab x dim): its input width must be that dim."""
    if "head" not in g or spec.head is None or spec.head.tied_to is None:
        return
    head = g.nodes["head"]
    emb = spec.embedding(spec.head.tied_to)
    if head["width"] != emb.dim:
        errors.error("shape", f"head is tied to embedding '{emb.name}' of dim {emb.dim}, "
                              f"but the last stack's width is {head['width']}", head["span"],
                     f"tie to an embedding of dim {head['width']}, or use `head linear`")


def check_embeddings_read(g: nx.DiGraph, spec: S.Spec, errors: Collector) -> None:
    """Every embedding is read by a stack: one that only a head ties to would be an untied head in disguise."""
    read = {s.embedding for s in spec.stacks}
    for emb in spec.embeddings:
        if emb.name not in read:
            errors.error("structure", f"embedding '{emb.name}' is not read by any stack", emb.span,
                         f"read it with `embedding {emb.name}` in a stack body, or remove it")


def check_masks(g: nx.DiGraph, spec: S.Spec, errors: Collector) -> None:
    """Masks are legal where used: causal/window compare positions of one sequence, so not in cross-attention."""
    for n, a in g.nodes(data=True):
        if a["op"] != "attention" or a["spec"].reads != "cross":
            continue
        for mask in a["spec"].mask:
            if not MASKS[mask.name].allowed_in_cross:
                errors.error("mask", f"'{mask.name}' mask on cross-attention: queries and keys are positions "
                                     "of different sequences", mask.span or a["span"],
                             "cross-attention takes mask=padding (the source's padding) or no mask")


def machine_memory_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 1 << 40


def check_sizes(g: nx.DiGraph, spec: S.Spec, errors: Collector) -> None:
    """Refuse, before allocating anything, a model whose float32 weights exceed this machine's memory."""
    params = count_parameters(g)
    need, have = params * 4, machine_memory_bytes()
    if need > have:
        biggest = max((n for n in g if g.nodes[n]["params"]),
                      key=lambda n: sum(math.prod(s) for s in g.nodes[n]["params"].values()))
        errors.error("size", f"the model has {params:,} parameters ({need / 2**30:,.1f} GiB in float32), more than "
                             f"this machine's {have / 2**30:,.1f} GiB of memory",
                     g.nodes[biggest]["span"] or spec.span,
                     "shrink it, e.g. with --set; the largest part is shown here")


PASSES: list[Callable[[nx.DiGraph, S.Spec, Collector], None]] = [
    check_acyclic,                 # the IR is a DAG
    check_cross_attention_memory,  # every cross-attention has a memory source
    check_heads_divide_width,      # d_model % heads == 0
    infer_shapes,                  # symbolic shapes along every edge
    check_tied_head,               # tied head matches its embedding
    check_embeddings_read,         # no embedding that no stack reads
    check_masks,                   # causal/window not on cross-attention
    check_sizes,                   # fits in this machine's memory
]


def lower_and_validate(spec: S.Spec, sources: dict | None = None) -> nx.DiGraph:
    """Lower a spec and run every pass; raise SpecError listing all problems found."""
    g = lower(spec)
    errors = Collector()
    for check in PASSES:
        check(g, spec, errors)
    errors.raise_if_any(sources)
    return g
