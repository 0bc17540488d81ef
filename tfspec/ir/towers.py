"""The IR of a model of several towers: a ``networkx.DiGraph`` of typed nodes (``Tower``, ``Connector``,
``Contrastive``) whose edges are the flows between towers. A tower holds its own validated ``Graph``; a join says
which of its towers' nodes it reads and feeds, and owns its parameters as any IR node does.

>>> from tfspec import load
>>> g = load("examples/vlm_digits.tfs").graph()
>>> connector, = g.of(Connector)
>>> connector.reads, connector.reads_layer, connector.into, connector.module.at(None)  # layer=-1 of 2
('encoder.block_output', 1, 'decoder.embed', 'connectors.vision')
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import Callable, ClassVar, Mapping, TypeVar

import networkx as nx

from ..errors import Collector, Span, SpecError
from ..front import schema as S
from ..registry import CONNECTOR_STEPS, Param
from .graph import Graph, IRError
from .nodes import Embedding, ModulePath, Output
from .queries import count_parameters
from .validate import lower_and_validate

J = TypeVar("J", bound="Join")


@dataclass(frozen=True, kw_only=True, eq=False)
class Join:
    """What every node of a model of towers has: ``inputs``, the ids of the nodes whose output it reads (a tower
    reads the connectors feeding it; a join the towers it joins); ``module`` and ``params`` as a graph node's."""

    kind: ClassVar[str]
    id: str
    label: str
    inputs: tuple[str, ...] = ()
    module: ModulePath | None = None
    params: Mapping[str, Param] = field(default_factory=dict)
    span: Span | None = None


@dataclass(frozen=True, kw_only=True, eq=False)
class Tower(Join):
    """One tower: its own graph IR, its weights under ``towers.NAME``."""

    kind: ClassVar[str] = "tower"
    graph: Graph

    @property
    def role(self) -> str:
        """Its last stack's role (its decoder, where it has two): the stack a connector reads or feeds."""
        return list(self.graph.stacks)[-1]


@dataclass(frozen=True)
class ConnectorStep:
    """One step of a connector at the vectors it reads: ``length`` of them an example, each ``width`` wide."""

    choice: S.Choice
    width: int
    length: int

    @property
    def out_width(self) -> int:
        variant, options = CONNECTOR_STEPS.of(self.choice)
        return variant.width(self.width, options)

    @property
    def out_length(self) -> int:
        variant, options = CONNECTOR_STEPS.of(self.choice)
        return variant.length(self.length, options)

    @property
    def params(self) -> dict[str, Param]:
        variant, options = CONNECTOR_STEPS.of(self.choice)
        return variant.params(self.width, options)

    @property
    def flops(self) -> int:
        """Its forward FLOPs for one example, matrix products and the rest together."""
        variant, options = CONNECTOR_STEPS.of(self.choice)
        return sum(variant.flops(self.width, self.length, options))


@dataclass(frozen=True, kw_only=True, eq=False)
class Connector(Join):
    """One tower's vectors into another's token embeddings (``connect SOURCE -> TARGET { steps }``).

    ``reads``: the node of the source's graph whose vectors it takes, ``reads_layer`` the layer whose copy of that
    node it is (None: a node outside the layers, the stack's normed output or its input); ``into``: the target's
    ``Embedding`` its vectors replace at the positions of ``image_token``; ``drop_first``: less the first vector (a
    class token); ``steps`` in order, each at the width and length it reads."""

    kind: ClassVar[str] = "connector"
    source: str
    target: str
    reads: str
    reads_layer: int | None
    layer: int | None  # as written, Hugging Face's ``hidden_states[layer]``; None: the stack's output
    reads_width: int  # the width of the vectors it reads
    reads_length: int  # how many it reads an example
    into: str
    image_token: int
    drop_first: bool
    steps: tuple[ConnectorStep, ...]

    @property
    def out_width(self) -> int:
        return self.steps[-1].out_width if self.steps else self.reads_width

    @property
    def vectors(self) -> int:
        """The vectors it gives the target for each example of its source."""
        return self.steps[-1].out_length if self.steps else self.reads_length - self.drop_first

    def flops(self) -> int:
        """Its forward FLOPs for one example of its source."""
        return sum(step.flops for step in self.steps)


@dataclass(frozen=True, kw_only=True, eq=False)
class Contrastive(Join):
    """Two towers' pooled vectors (``reads``: each tower's output node) normalised and compared,
    ``exp(scale) · cos + bias``; the loss ``softmax`` (CLIP) or ``sigmoid`` (SigLIP)."""

    kind: ClassVar[str] = "contrastive"
    reads: tuple[str, str]
    loss: str
    scale: float
    bias: float | None


TOWER_NODE_TYPES = frozenset({Tower, Connector, Contrastive})


class TowersGraph(nx.DiGraph):
    """A model of towers' IR. ``g.node(id)`` is the typed node, ``g.towers`` each tower's ``Graph`` by name,
    ``g.of(Connector)`` the nodes of a type in data-flow order."""

    def add(self, node: Join) -> str:
        if type(node) not in TOWER_NODE_TYPES:
            raise IRError(f"{node.id}: {type(node).__name__} is not a node of a model of towers")
        self.add_node(node.id, node=node)
        for source in node.inputs:
            self.add_edge(source, node.id)
        self.__dict__.pop("_order", None)
        return node.id

    def node(self, node_id: str) -> Join:
        return self.nodes[node_id]["node"]

    def parts(self) -> dict[str, Graph]:
        """Each tower's graph by name (``Graph.parts``: a model of one or two stacks is its own one part)."""
        return dict(self.towers)

    @property
    def kind(self) -> str:
        return "towers"

    @cached_property
    def _order(self) -> tuple[Join, ...]:
        added = {n: i for i, n in enumerate(self.nodes)}
        return tuple(self.node(n) for n in nx.lexicographical_topological_sort(self, key=added.get))

    def ordered(self) -> tuple[Join, ...]:
        """Every node, inputs before their readers (else in the order added: towers as declared)."""
        return self._order

    def of(self, cls: type[J] | tuple[type[J], ...]) -> list[J]:
        return [n for n in self._order if isinstance(n, cls)]

    @property
    def towers(self) -> dict[str, Graph]:
        """Each tower's graph by name, in the order declared."""
        return {t.id: t.graph for t in self.nodes_of(Tower)}

    def nodes_of(self, cls: type[J]) -> list[J]:
        """The nodes of a type in the order they were added (towers: as declared)."""
        return [self.node(n) for n in self.nodes if isinstance(self.node(n), cls)]

    def lint(self) -> None:
        """The invariants the stages reading a model of towers rely on; ``IRError`` naming the first broken."""
        for n, data in self.nodes(data=True):
            node = data.get("node")
            if node is None or type(node) not in TOWER_NODE_TYPES or node.id != n:
                raise IRError(f"{n}: holds no node of a model of towers under its id")
            if set(self.predecessors(n)) != set(node.inputs):
                raise IRError(f"{n}: edges {sorted(self.predecessors(n))} differ from inputs {list(node.inputs)}")
            if node.params and node.module is None:
                raise IRError(f"{n}: parameters without a module path")
            if isinstance(node, Tower):
                node.graph.lint()
                if any(not isinstance(self.node(i), Connector) or self.node(i).target != n for i in node.inputs):
                    raise IRError(f"tower {n}: reads something other than a connector into it")
            elif isinstance(node, Connector):
                self._lint_connector(node)
            elif isinstance(node, Contrastive):
                for name, reads in zip(node.inputs, node.reads):
                    if not isinstance(self.node(name), Tower) or reads not in self.towers[name]:
                        raise IRError(f"{n}: reads {reads} of {name}, which is no node of a tower")
                    if not isinstance(self.towers[name].node(reads), Output):
                        raise IRError(f"{n}: reads {name}'s {reads}, not its output")
        if not nx.is_directed_acyclic_graph(self):
            raise IRError("the towers feed each other in a cycle")

    def _lint_connector(self, node: Connector) -> None:
        if node.inputs != (node.source,) or not isinstance(self.node(node.source), Tower):
            raise IRError(f"{node.id}: reads {list(node.inputs)}, not its source tower {node.source}")
        if node.target not in self or node.id not in self.node(node.target).inputs:
            raise IRError(f"{node.id}: tower {node.target} does not read it")
        source, target = self.towers[node.source], self.towers[node.target]
        if node.reads not in source:
            raise IRError(f"{node.id}: reads {node.reads}, which tower {node.source} does not have")
        read = source.node(node.reads)
        if node.reads_layer is None and read.in_block:
            raise IRError(f"{node.id}: reads {node.reads} inside a layer without saying which layer")
        if node.reads_layer is not None:
            info = source.stacks[read.stack] if read.stack in source.stacks else None
            if info is None or info.kinds[info.kind_of(node.reads_layer)].exit != read.id:
                raise IRError(f"{node.id}: reads {node.reads}, not the exit of layer {node.reads_layer}'s kind")
        if node.into not in target or not isinstance(target.node(node.into), Embedding):
            raise IRError(f"{node.id}: feeds {node.into}, which is no embedding of tower {node.target}")
        width, length = node.reads_width, node.reads_length - node.drop_first
        for i, step in enumerate(node.steps):
            if (step.width, step.length) != (width, length):
                raise IRError(f"{node.id}: step {i} reads {step.length}×{step.width}, but is given {length}×{width}")
            width, length = step.out_width, step.out_length
        expected = {f"steps.{i}.{name}": p for i, step in enumerate(node.steps) for name, p in step.params.items()}
        if dict(node.params) != expected:
            raise IRError(f"{node.id}: its parameters are not its steps'")

    def parameter_table(self) -> dict[str, tuple[int, ...]]:
        """Every parameter tensor by its name in the compiled ``TowersModel``'s state dict."""
        from .queries import parameter_table
        table = {f"{tower.module.at(None)}.{name}": shape for tower in self.nodes_of(Tower)
                 for name, shape in parameter_table(tower.graph).items()}
        for join in self.of((Connector, Contrastive)):
            table.update({f"{join.module.at(None)}.{name}": tuple(p.shape) for name, p in join.params.items()})
        return table

    def format(self) -> str:
        """Each tower's graph under its name, then the joins, one line each."""
        lines = [f"graph {self.name} (towers)"]
        for tower in self.nodes_of(Tower):
            feeds = f" <- {', '.join(tower.inputs)}" if tower.inputs else ""
            lines.append(f"tower {tower.id}{feeds}:")
            lines += ["  " + line for line in tower.graph.format().splitlines()]
        for join in self.of((Connector, Contrastive)):
            into = f" -> {join.target}/{join.into} at token {join.image_token}" if isinstance(join, Connector) else ""
            label = join.label.replace("\n", ", ")
            lines.append(f"{join.id} = {join.kind}({', '.join(join.inputs)}){into}  # {label}")
        return "\n".join(lines)

    @property
    def name(self) -> str:
        return self.graph["name"]


def lower_towers(spec: S.Towers, sources: dict | None = None) -> TowersGraph:
    """Each tower's validated graph and the joins between them as typed nodes; one ``SpecError`` with every
    tower's problems."""
    graphs, problems, found = {}, Collector(), dict(sources or {})
    for tower in spec.towers:
        try:
            tower.spec._lowering = ONE_STACK  # (each tower a spec the IR lowers, as tfspec.parse's)
            graphs[tower.name] = tower.spec.graph()
        except SpecError as exc:
            problems.diagnostics += exc.diagnostics
            found.update(exc.sources)
    problems.raise_if_any(found)
    g = TowersGraph(name=spec.name)
    connectors = [_connector(c, graphs[c.source], graphs[c.target]) for c in spec.connectors]
    for tower in spec.towers:
        g.add(Tower(id=tower.name, label=f"tower {tower.name} ({graphs[tower.name].kind})", graph=graphs[tower.name],
                    module=ModulePath(("towers", tower.name)), span=tower.span,
                    inputs=tuple(c.id for c in connectors if c.target == tower.name)))
    for connector in connectors:
        g.add(connector)
    if spec.contrastive is not None:
        g.add(_contrastive(spec.contrastive, graphs))
    g.lint()
    return g


def _connector(c: S.Connector, source: Graph, target: Graph) -> Connector:
    role, into = next(iter(source.stacks)), list(target.stacks)[-1]  # (what resolution checked them by)
    info = source.stacks[role]
    after = None if c.layer is None else c.layer % (info.repeat + 1)  # hidden_states[layer]: after that many layers
    if after is None:  # its output: after the final norm, or (without one) the last layer's
        reads, layer = info.output, None
        if source.node(reads).in_block:
            layer = info.repeat - 1
            reads = info.kinds[info.kind_of(layer)].exit
    elif after == 0:  # the embeddings: what enters the stack's first layer
        reads, layer = source.node(info.entry).inputs[0], None
    else:
        layer = after - 1
        reads = info.kinds[info.kind_of(layer)].exit
    width, length = info.width, _length(source, role)
    steps, w, n = [], width, length - (c.drop == "first")
    for choice in c.steps:
        step = ConnectorStep(choice, w, n)
        steps.append(step)
        w, n = step.out_width, step.out_length
    names = " → ".join(CONNECTOR_STEPS.label(s) for s in c.steps) or "no steps"
    reading = "output" if c.layer is None else f"layer {c.layer}"
    return Connector(
        id=f"connector.{c.source}", label=f"Connector ({names})\n{reading}{', less the first' * (c.drop == 'first')}",
        inputs=(c.source,), source=c.source, target=c.target, reads=reads, reads_layer=layer, layer=c.layer,
        into=target.of(Embedding, stack=into)[0].id, image_token=c.image_token, drop_first=c.drop == "first",
        steps=tuple(steps), reads_width=width, reads_length=length, module=ModulePath(("connectors", c.source)),
        params={f"steps.{i}.{name}": p for i, step in enumerate(steps) for name, p in step.params.items()},
        span=c.span)


def _length(g: Graph, role: str) -> int:
    """The vectors of one example a tower of pictures makes (its input kind fixes them)."""
    from .queries import fixed_length
    length = fixed_length(g, role)
    if length is None:
        raise IRError(f"a connector reads a stack of {g.stacks[role].length} vectors, not of a fixed length")
    return length


def _contrastive(join: S.Contrastive, graphs: dict[str, Graph]) -> Contrastive:
    bias = ", learned bias" if join.bias is not None else ""
    params = {"scale": Param((), "vector", value=join.scale)}
    if join.bias is not None:
        params["bias"] = Param((), "vector", value=join.bias)
    return Contrastive(id="contrastive", label=f"Contrastive head ({join.loss})\nexp(s) · cos{bias}",
                       inputs=join.towers, reads=tuple(graphs[t].of(Output)[0].id for t in join.towers),
                       loss=join.loss, scale=join.scale, bias=join.bias, module=ModulePath(("contrastive",)),
                       params=params, span=join.span)


def count_tower_parameters(g: TowersGraph) -> int:
    """Every tower's parameters and the joins' (a contrastive head's scale and bias, the connectors' steps)."""
    return sum(count_parameters(t) for t in g.towers.values()) + sum(
        math.prod(p.shape) for join in g.of((Connector, Contrastive)) for p in join.params.values())


@dataclass(frozen=True)
class Lowering:
    """How the IR makes a spec's graph and counts its parameters: what ``tfspec.parse`` gives each spec it makes
    (``Spec.graph``, ``Spec.parameter_count``), so that the front end calls the stage after it without importing
    it."""

    graph: Callable
    count: Callable


ONE_STACK = Lowering(lower_and_validate, count_parameters)
TOWERS = Lowering(lower_towers, count_tower_parameters)
