"""What differs architecturally between two specs, read from their graph IRs.

Each spec is described as facts keyed by where they live ("decoder.ffn
activation", "embedding tokens vocab", "decoder final norm"); the residual
placement of each sublayer (pre-norm, post-norm, none, parallel) is read from the
wiring itself, so a sequential spec and a hand-wired one compare by what they
compute, not how they were written. A change shared by every sublayer of a stack
is reported once.

>>> from tfspec import load
>>> d = diff(load("examples/gpt1.tfs"), load("examples/gpt2_small.tfs"))
>>> [str(c) for c in d.changes if "residual" in c.what]
['decoder: residual post-norm → pre-norm (every sublayer)']
"""

from __future__ import annotations

from dataclasses import dataclass

from .analysis import analyse
from ..front import schema as S
from ..ir import nodes as ir
from ..ir.graph import Graph
from ..ir.queries import default_length, describe_layers, fixed_length, residual_placement, sublayers
from ..registry import (ACTIVATIONS, ATTENTION_KINDS, ATTENTION_STEPS, FEEDFORWARD_KINDS, INPUTS, MASKS, MIXERS, NORMS,
                        CONNECTOR_STEPS, POOLS, POSITIONS, ROUTER_PARTS)

Facts = dict[tuple[str, str], str]  # (where, what) -> value


@dataclass
class Change:
    where: str
    what: str
    before: str | None  # None: absent in the first spec
    after: str | None

    def __str__(self) -> str:
        if self.before is None:
            return f"{self.where}: added {self.what} {self.after}".rstrip()
        if self.after is None:
            return f"{self.where}: removed {self.what} {self.before}".rstrip()
        return f"{self.where}: {self.what} {self.before} → {self.after}"


@dataclass
class Diff:
    names: tuple[str, str]
    changes: list[Change]
    totals: list[tuple[str, int, int]]  # (what, first, second)
    # the length both were analysed at, or each one's (an input fixes its own); of towers, each tower's ("text 77,
    # vision 50")
    seq_len: int | str | tuple[int | str, int | str]

    def to_dict(self) -> dict:
        return {"names": list(self.names), "seq_len": self.seq_len,
                "changes": [{"where": c.where, "what": c.what, "before": c.before, "after": c.after}
                            for c in self.changes],
                "totals": [{"what": w, "before": a, "after": b} for w, a, b in self.totals]}


def diff(first, second, *, seq_len: int | None = None) -> Diff:
    """Architectural changes from ``first`` to ``second`` (two ``Spec``s), plus parameter/FLOP/memory totals.

    Totals are compared at ``seq_len`` (default: the shorter of the two specs' default lengths); a spec whose input
    fixes its length (pictures) at that one, unless ``seq_len`` is given.
    """
    if isinstance(first, S.Towers) or isinstance(second, S.Towers):
        return _towers_diff(first, second, seq_len)
    g1, g2 = first.graph(), second.graph()
    changes = architecture_changes(first, second)
    n = seq_len or min(default_length(g1), default_length(g2))
    lengths = tuple(n if seq_len or all(fixed_length(g, r) is None for r in g.stacks) else default_length(g)
                    for g in (g1, g2))
    a1, a2 = analyse(first, seq_len=lengths[0]), analyse(second, seq_len=lengths[1])
    totals = [("parameters", a1.total.params, a2.total.params),
              ("forward FLOPs", a1.total.flops, a2.total.flops),
              ("activation memory (bytes)", a1.total.memory, a2.total.memory)]
    return Diff((first.name, second.name), changes, totals, n if lengths[0] == lengths[1] else lengths)


def _towers_diff(first, second, seq_len: int | None) -> Diff:
    """Two models of which one at least is towers: each tower costed at ``seq_len`` where its input lets it
    (its default length otherwise), the totals the towers' sums and the joins' parameters."""
    def totals(model):
        lengths = {name: seq_len if seq_len and all(fixed_length(spec.graph(), r) is None
                                                    for r in spec.graph().stacks) else default_length(spec.graph())
                   for name, spec in model.parts().items()}
        analyses = [analyse(spec, seq_len=lengths[name]) for name, spec in model.parts().items()]
        return (model.parameter_count(), sum(a.total.flops for a in analyses), sum(a.total.memory for a in analyses),
                ", ".join(f"{name} {length}" for name, length in lengths.items()))

    (p1, f1, m1, n1), (p2, f2, m2, n2) = totals(first), totals(second)
    rows = [("parameters", p1, p2), ("forward FLOPs", f1, f2), ("activation memory (bytes)", m1, m2)]
    return Diff((first.name, second.name), architecture_changes(first, second), rows, n1 if n1 == n2 else (n1, n2))


def architecture_changes(first, second) -> list[Change]:
    """The architectural changes alone (no totals): what ``diff`` lists, and what interop compares. Of two models of
    towers: each tower's, where prefixed ``tower NAME:``, and the joins'."""
    if isinstance(first, S.Towers) or isinstance(second, S.Towers):
        return _tower_changes(first, second)
    return _collapse(_compare(describe(first), describe(second)), first.graph(), second.graph())


def _tower_changes(first, second) -> list[Change]:
    kinds = [m.kind for m in (first, second)]
    if kinds[0] != kinds[1]:
        return [Change("model", "kind", *kinds)]
    towers = [m.parts() for m in (first, second)]
    changes = []
    for name in dict.fromkeys([*towers[0], *towers[1]]):
        a, b = towers[0].get(name), towers[1].get(name)
        if a is None or b is None:
            changes.append(Change("towers", "tower", None if a is None else name, None if b is None else name))
            continue
        changes += [Change(f"tower {name}: {c.where}", c.what, c.before, c.after) for c in architecture_changes(a, b)]
    joins = [{**_join_facts(m.contrastive), **_connector_facts(m.connectors)} for m in (first, second)]
    return changes + _compare(*joins)


def _connector_facts(connectors) -> Facts:
    facts: Facts = {}
    for c in connectors:
        where = f"connect {c.source}"
        facts.update({(where, "into"): c.target, (where, "image token"): str(c.image_token),
                      (where, "reads"): "the output" if c.layer is None else f"layer {c.layer}",
                      (where, "drops"): "the first vector" if c.drop == "first" else "nothing",
                      (where, "steps"): "; ".join(CONNECTOR_STEPS.label(s) for s in c.steps) or "none"})
    return facts


def _join_facts(join: S.Contrastive | None) -> Facts:
    if join is None:
        return {}
    # (the learned scale's and bias's initial values are an init's: shown, and not compared by interop)
    return {("contrastive", "towers"): " and ".join(join.towers), ("contrastive", "loss"): join.loss,
            ("contrastive", "bias"): "none" if join.bias is None else "learned",
            ("contrastive", "init"): f"log scale {join.scale:g}" + ("" if join.bias is None else f", bias {join.bias:g}")}


def describe(spec) -> Facts:
    """The architectural facts of a spec, from its IR."""
    g = spec.graph()
    facts: Facts = {("model", "kind"): g.kind}
    if spec.init is not None:
        facts[("model", "init")] = str(spec.init)
    for emb in spec.embeddings:
        where = f"embedding {emb.name}"
        if emb.input is not None:  # pictures, or another input kind's
            facts[(where, "input")] = INPUTS.label(emb.input)
        else:
            facts[(where, "vocab")] = f"{emb.vocab:,}"
        facts.update({(where, "dim"): str(emb.dim),
                      (where, "position"): POSITIONS.label(emb.position), (where, "scale"): f"{emb.scale:.4g}",
                      (where, "norm"): NORMS.label(emb.norm), (where, "dropout"): f"{emb.dropout:g}",
                      (where, "token table"): f"{emb.shares}'s" if emb.shares else "its own",
                      (where, "projected to"): str(emb.project) if emb.project else "none"})
        if emb.segments:
            facts[(where, "segments")] = str(emb.segments)
    for role, info in g.stacks.items():
        facts[(role, "layers")] = str(info.repeat)
        facts[(role, "weight sets")] = str(info.weight_sets)
        if len(info.kinds) > 1:
            facts[(role, "schedule")] = _schedule(g, role)
        facts[(role, "width")] = str(info.width)
        facts[(role, "reads embedding")] = info.embedding
        stack = spec.decoder if role == "decoder" else spec.encoder
        facts[(role, "final norm")] = NORMS.label(stack.final_norm)
        facts[(role, "final dropout")] = f"{stack.final_dropout:g}"
        for node in sublayers(g, role, kind=0):
            facts.update(_sublayer_facts(g, node))
    if spec.head is not None:
        head = spec.head
        facts[("head", "projection")] = f"tied to '{head.tied_to}'" if head.tied_to else \
            f"linear({head.out:,})" if head.projects else "none (the pooled vectors)"
        facts[("head", "bias")] = str(head.bias).lower()
        facts[("head", "input scale")] = f"{head.scale:g}"
        facts[("head", "soft cap")] = "none" if head.softcap is None else f"{head.softcap:g}"
        facts[("head", "reads")] = "every position" if head.pool is None else _pool_reads(head.pool)
        if head.transform is not None:
            facts[("head", "transform")] = (f"{head.transform} + {head.transform_norm or 'no norm'}"
                                            + ("" if head.transform_bias else ", no bias"))
    else:
        facts[("head", "projection")] = "none (hidden states)"
    if spec.pooler is not None:
        facts[("pooler", "activation")] = str(spec.pooler.activation)
    for node in g.of(ir.MultiTokenPrediction):  # training's modules: their layer's kind, as its layer's facts say
        facts[("mtp", "modules")] = str(node.spec.depth)
        facts[("mtp", "norm")] = NORMS.label(node.spec.norm)
        facts[("mtp", "loss weight")] = f"{node.spec.weight:g}"
        kinds = g.stacks["decoder"].kinds
        facts[("mtp", "layer")] = ("the decoder's" if len(kinds) == 1 else
                                   f"as decoder {describe_layers(kinds[node.copies].layers, g.stacks['decoder'].repeat)}")
    return facts


def _schedule(g: Graph, role: str) -> str:
    """A layer schedule as what each further kind of layer changes: "layer 3: self_attn mask causal"; a sublayer in
    another's place by its label, one it drops as "no NAME"."""
    info = g.stacks[role]
    base = {n.name: _sublayer_facts(g, n) for n in sublayers(g, role, kind=0)}
    parts = []
    for k in range(1, len(info.kinds)):
        changes = []
        present = sublayers(g, role, kind=k)
        for node in present:
            if node.name not in base:  # a sublayer in another's place (a mixer's layer turned into attention)
                changes.append(f"{node.name} ({node.label})")
                continue
            theirs = {what: v for (_, what), v in base[node.name].items()}
            changes += [f"{node.name} {what} {v}" for (_, what), v in _sublayer_facts(g, node).items()
                        if theirs.get(what) != v]
        changes += [f"no {name}" for name in base if name not in {n.name for n in present}]
        parts.append(f"{describe_layers(info.kinds[k].layers, info.repeat)}: {', '.join(changes)}")
    return "; ".join(parts)


def _sublayer_facts(g: Graph, node: ir.Attention | ir.FeedForward | ir.Mixer) -> Facts:
    spec, where = node.spec, node.id
    facts: Facts = {}
    if isinstance(node, ir.Attention):
        facts[(where, "reads")] = spec.reads
        shape = node.geometry
        facts[(where, "heads")] = str(spec.heads)
        facts[(where, "kv heads")] = str(shape.kv_heads)
        facts[(where, "head dim")] = str(shape.head_dim)
        facts[(where, "kind")] = ATTENTION_KINDS.label(spec.kind)
        # masks combine by intersection: the order they are written in means nothing
        facts[(where, "mask")] = " + ".join(sorted(MASKS.label(m) for m in spec.mask)) if spec.mask else "none"
        facts[(where, "position")] = POSITIONS.label(spec.position)
        facts[(where, "qk norm")] = NORMS.label(spec.qk_norm)
        facts[(where, "scale")] = "1/sqrt(head dim)" if spec.scale is None else f"{spec.scale:g}"
        facts[(where, "attention dropout")] = f"{spec.dropout:g}"
        facts[(where, "output bias")] = str(spec.out_bias).lower()
        if spec.bias:
            facts[(where, "key bias")] = str(spec.key_bias).lower()
        facts[(where, "steps")] = " + ".join(ATTENTION_STEPS.label(c) for c in spec.steps) or "none"
        if spec.exports:
            facts[(where, "hands on")] = ", ".join({"kv": "keys and values"}.get(e, e) for e in spec.exports)
        if spec.kv_from is not None:
            facts[(where, "keys and values")] = f"layer {spec.kv_from}'s"
    elif isinstance(node, ir.Mixer):
        facts[(where, "mixer")] = MIXERS.label(spec.kind)
    else:
        facts[(where, "d_ff")] = str(spec.d_ff)
        facts[(where, "kind")] = FEEDFORWARD_KINDS.label(spec.kind)
        if FEEDFORWARD_KINDS[spec.kind.name].routes:
            facts[(where, "router")] = " + ".join(ROUTER_PARTS.label(c) for c in spec.router) or "softmax"
        facts[(where, "activation")] = ACTIVATIONS.label(spec.activation)
        facts[(where, "inner dropout")] = f"{spec.dropout:g}"
    if not isinstance(node, ir.Mixer):  # (a mixer's biases are its kind's options)
        facts[(where, "bias")] = str(spec.bias).lower()
    placement = residual_placement(g, node)
    facts[(where, "residual")] = placement.placement
    facts[(where, "residual scale")] = f"{placement.scale:g}"
    facts[(where, "norm")] = NORMS.label(placement.norm) if placement.norm is not None else "none"
    facts[(where, "dropout")] = f"{placement.dropout:g}"
    return facts


def _compare(f1: Facts, f2: Facts) -> list[Change]:
    keys = list(dict.fromkeys([*f1, *f2]))
    return [Change(where, what, f1.get((where, what)), f2.get((where, what)))
            for where, what in keys if f1.get((where, what)) != f2.get((where, what))]


def _collapse(changes: list[Change], g1: Graph, g2: Graph) -> list[Change]:
    """One line for a change every sublayer of a stack shares; whole missing sublayers as one line each."""
    out: list[Change] = []
    done: set[int] = set()
    for role in dict.fromkeys([*g1.stacks, *g2.stacks]):
        both = {n.id for n in sublayers(g1, role, kind=0)} | {n.id for n in sublayers(g2, role, kind=0)}
        if len(both) < 2:
            continue
        groups: dict[tuple, list[int]] = {}
        for i, c in enumerate(changes):
            if c.where in both:
                groups.setdefault((c.what, c.before, c.after), []).append(i)
        for (what, before, after), members in groups.items():
            if {changes[i].where for i in members} == both and before is not None and after is not None:
                out.append(Change(role, what, before, after + " (every sublayer)"))
                done.update(members)
    by_node: dict[str, list[int]] = {}
    for i, c in enumerate(changes):
        if i not in done:
            by_node.setdefault(c.where, []).append(i)
    for where, members in by_node.items():
        cs = [changes[i] for i in members]
        what = "sublayer" if "." in where else "multi-token prediction" if where == "mtp" else "stack"
        if all(c.before is None for c in cs) and where not in g1.stacks and where not in g1 \
                and where not in ("model", "head", "pooler"):
            out.append(Change(where, what, None, _summary(cs, "after")))
        elif all(c.after is None for c in cs) and where not in g2.stacks and where not in g2 \
                and where not in ("model", "head", "pooler"):
            out.append(Change(where, what, _summary(cs, "before"), None))
        else:
            out.extend(cs)
    order = {c: i for i, c in enumerate(dict.fromkeys(c.where.split(".")[0] for c in changes))}
    return sorted(out, key=lambda c: order.get(c.where.split(".")[0], 0))


def _summary(changes: list[Change], side: str) -> str:
    return "(" + ", ".join(f"{c.what} {getattr(c, side)}" for c in changes) + ")"


def _pool_reads(choice) -> str:
    """``token(7)``: the first position of token 7."""
    variant, options = POOLS.of(choice)
    return f"{variant.label(options)}: {variant.describe(options)}"
