"""The IR's container: a ``networkx.DiGraph`` whose nodes each hold one typed node (``tfspec.ir.nodes``).

Edges are the flows, for networkx's algorithms; what a flow means (its port,
its order among a node's inputs) is the consumer node's. ``lint`` checks the
invariants every stage relies on, as ``torch.fx.Graph.lint`` does.
"""

from __future__ import annotations

from functools import cached_property
from typing import TypeVar

import networkx as nx

from ..registry import Param
from .nodes import (NODE_TYPES, Add, Attention, BlockInput, BlockOutput, Input, Node, StackInfo,
                    StackParameters, describe_layers)

N = TypeVar("N", bound=Node)


class IRError(AssertionError):
    """A broken IR invariant: a bug in lowering or in a pass, never a user's mistake."""


class Graph(nx.DiGraph):
    """A model's IR. ``g.node(id)`` is the typed node; ``g.ordered()`` every node in data-flow order."""

    def parts(self) -> dict[str, "Graph"]:
        """The graphs of one or two stacks it is made of, by name: itself (a model of towers: each tower's)."""
        return {self.name: self}

    # ------------------------------------------------------------ building
    def add(self, node: Node) -> str:
        """Add ``node`` and an edge from each of its inputs; return its id."""
        if type(node) not in NODE_TYPES:
            raise IRError(f"{node.id}: {type(node).__name__} is not an IR node type")
        self.add_node(node.id, node=node)
        for source in node.inputs:
            self.add_edge(source, node.id)
        self.__dict__.pop("_order", None)
        return node.id

    def replace(self, node: Node) -> None:
        """Put ``node`` in place of the node of the same id (its inputs unchanged): a pass's annotation."""
        if self.node(node.id).inputs != node.inputs:
            raise IRError(f"{node.id}: a replacement keeps the node's inputs")
        self.nodes[node.id]["node"] = node
        self.__dict__.pop("_order", None)

    def set_stacks(self, name: str, kind: str, stacks: dict[str, StackInfo]) -> None:
        self.graph.update(name=name, kind=kind, stacks=stacks)

    # ------------------------------------------------------------ reading
    def node(self, node_id: str) -> Node:
        return self.nodes[node_id]["node"]

    @property
    def kind(self) -> str:
        """``encoder-only``, ``decoder-only`` or ``encoder-decoder``."""
        return self.graph["kind"]

    @property
    def stacks(self) -> dict[str, StackInfo]:
        """Each stack by role, encoder first."""
        return self.graph["stacks"]

    @cached_property
    def _order(self) -> tuple[Node, ...]:
        return tuple(self.node(n) for n in nx.topological_sort(self))

    def ordered(self) -> tuple[Node, ...]:
        """Every node, inputs before the nodes reading them (stable: the order they were added where free)."""
        return self._order

    def of(self, cls: type[N] | tuple[type[N], ...], *, stack: str | None = None,
           in_block: bool | None = None) -> list[N]:
        """The nodes of a type (or types), in data-flow order; optionally of one stack, in or out of its layer."""
        return [n for n in self._order if isinstance(n, cls) and (stack is None or n.stack == stack)
                and (in_block is None or n.in_block == in_block)]

    def consumers(self, node_id: str) -> list[Node]:
        """The nodes reading ``node_id``'s output."""
        return [self.node(m) for m in self.successors(node_id)]

    # ------------------------------------------------------------ invariants
    def lint(self) -> None:
        """Check the invariants every stage relies on; raise ``IRError`` naming the first broken one."""
        for n, data in self.nodes(data=True):
            node = data.get("node")
            if node is None or type(node) not in NODE_TYPES:
                raise IRError(f"{n}: holds no IR node")
            if node.id != n:
                raise IRError(f"{n}: its node says it is {node.id}")
            if len(node.ports) != len(node.inputs):
                raise IRError(f"{n}: {len(node.inputs)} inputs but {len(node.ports)} ports")
            if set(self.predecessors(n)) != set(node.inputs):
                raise IRError(f"{n}: edges {sorted(self.predecessors(n))} differ from inputs {list(node.inputs)}")
            if node.params and node.module is None:
                raise IRError(f"{n}: parameters without a module path")
            if node.module is not None and node.module.per_layer != node.in_block:
                raise IRError(f"{n}: module {node.module} {'is' if node.module.per_layer else 'is not'} a layer's, "
                              f"but the node {'is not' if not node.in_block else 'is'} in a layer")
            if not all(isinstance(p, Param) for p in node.params.values()):
                raise IRError(f"{n}: a parameter declared without its role (a shape where a Param belongs)")
            if node.in_block and node.stack not in self.stacks:
                raise IRError(f"{n}: in a layer of stack {node.stack!r}, which the graph does not have")
            if not node.inputs and not isinstance(node, (Input, StackParameters)):
                raise IRError(f"{n}: a {node.kind} node reads nothing")
            if isinstance(node, Attention) and node.memory is not None and not node.geometry.cross:
                raise IRError(f"{n}: a self-attention with memory")
            for source, port in zip(node.inputs, node.ports):
                producer = self.node(source)
                same_layer = node.in_block and producer.stack == node.stack and producer.layer_kind == node.layer_kind
                handed_on = port in ("values", "kv") and isinstance(producer, Attention) and isinstance(node, Attention) \
                    and producer.stack == node.stack and producer.layer_kind < node.layer_kind
                if producer.in_block and not same_layer and not handed_on and not isinstance(producer, BlockOutput):
                    raise IRError(f"{n}: reads {source} from inside a layer, not from the layer's exit")
        if not nx.is_directed_acyclic_graph(self):
            raise IRError("the graph has a cycle")
        for role, info in self.stacks.items():
            if sorted(i for kind in info.kinds for i in kind.layers) != list(range(info.repeat)):
                raise IRError(f"stack {role}: its kinds' layers are not each of its {info.repeat} layers once")
            if info.weights and (len(info.weights) != info.repeat or sorted(set(info.weights)) != list(
                    range(info.weight_sets)) or any(info.kind_of(i) != info.kind_of(info.weights.index(w))
                                                    for i, w in enumerate(info.weights))):
                raise IRError(f"stack {role}: its layers' weights {info.weights} are not sets 0.. each of one kind")
            by_kind: dict[int, set[str]] = {}  # (one pass: a stack of 1,200 layer kinds lints in linear time)
            for n in self.of(Node, stack=role, in_block=True):
                by_kind.setdefault(n.layer_kind, set()).add(n.id)
            for k, kind in enumerate(info.kinds):
                entry, exit_ = self.node(kind.entry), self.node(kind.exit)
                if not isinstance(entry, BlockInput) or not isinstance(exit_, BlockOutput):
                    raise IRError(f"stack {role}: kind {k}'s entry/exit are {entry.kind}/{exit_.kind}")
                inside = by_kind.get(k, set())
                if {entry.id, exit_.id} - inside:
                    raise IRError(f"stack {role}: kind {k}'s entry or exit is not one of its nodes")
                # within the kind's own nodes: what depends on its entry there (not the rest of the model below it)
                reached = nx.descendants(self.subgraph(inside), kind.entry) | {kind.entry}
                if not inside <= reached:
                    raise IRError(f"stack {role}: layer nodes {sorted(inside - reached)} do not depend on its entry")
        for node in self.of(Add):
            if len(node.inputs) < 2:
                raise IRError(f"{node.id}: a sum of {len(node.inputs)} term")

    # ------------------------------------------------------------ printing
    def format(self) -> str:
        """One line per node, in data-flow order (like torch.fx's graph printout)."""
        lines = [f"graph {self.name} ({self.kind})"]
        for role, info in self.stacks.items():
            sets = info.weight_sets
            shared = f", running {sets} set{'s' if sets > 1 else ''} of weights" if info.weights else ""
            lines.append(f"  stack {role}: {info.entry} .. {info.exit} repeated {info.repeat}×{shared}")
            if len(info.kinds) > 1:  # a layer schedule: each kind's template, and the layers it is
                lines += [f"    kind {k}: {kind.entry} .. {kind.exit}: {describe_layers(kind.layers, info.repeat)}"
                          for k, kind in enumerate(info.kinds)]
        for node in self.ordered():
            shape = f" -> ({', '.join(map(str, node.shape))})" if node.shape else ""
            tag = "  [×]" if node.in_block else ""
            lines.append(f"  {node.id} = {node.kind}({', '.join(node.inputs)}){shape}  # {node.label}{tag}")
        return "\n".join(lines)
