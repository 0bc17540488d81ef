"""Stage 6, render: the graph IR as a diagram in the spirit of Figure 1 of "Attention Is All You Need".

Inputs at the bottom, each stack's layer drawn once inside a box labelled
"N×" (``expand=True`` draws every layer), sublayers as coloured nodes, residual
connections as grey edges that go around their sublayer, the encoder's output
entering each cross-attention as a red "memory" edge, a tied head joined to its
embedding by a dashed "shared weights" edge. A residual sum followed directly by
a norm is drawn as one "Add & Norm" node (post-norm); pre-norm draws the norm
before the sublayer and the sum as a ⊕, so the two wirings look different.

>>> from tfspec import load
>>> dot = to_graphviz(load("examples/gpt2_small.tfs"))
>>> "12×" in dot.source and "Multi-Head Attention (causal, 12 heads)" in dot.source
True
"""

from __future__ import annotations

from pathlib import Path

import graphviz
import networkx as nx

from ..files import write_atomically
from ..ir import nodes as ir
from ..ir.graph import Graph
from ..ir.queries import describe_layers, layer_template, layers_of, owner_of, post_norm
from ..ir.towers import Connector, Contrastive, TowersGraph
from ..registry import NORMS, POSITIONS
from ..errors import shown

FORMATS = ("svg", "png", "pdf", "dot")
INSTALL_HINT = ("Graphviz's 'dot' program was not found; install it (Debian/Ubuntu: sudo apt-get install graphviz, "
                "macOS: brew install graphviz) or write a .dot file, which needs no Graphviz")

FONT = "Helvetica"
STYLES = {  # one colour per kind of node: (fill, border)
    ir.Attention: ("#FCE3C3", "#D98E1F"),
    ir.FeedForward: ("#CFE8F7", "#3C8DBC"),
    ir.Mixer: ("#D5EFD9", "#3E9A54"),  # a mixer other than attention: a recurrence, a convolution
    ir.Norm: ("#F4F2C1", "#A9A337"),
    ir.Embedding: ("#F8D7D6", "#C9534F"),
    ir.Features: ("#F8D7D6", "#C9534F"),  # an input kind's embedding (pictures')
    ir.Projection: ("#FFFFFF", "#C9534F"),  # part of the embedding: its table projected into the stack's width
    ir.PositionEncoding: ("#FFFFFF", "#C9534F"),
    ir.PerLayerInputs: ("#F8D7D6", "#C9534F"),  # part of the embedding: features for each layer
    ir.Head: ("#E3DAF3", "#7B5EA7"),
    ir.Pooler: ("#E3DAF3", "#7B5EA7"),
    ir.Dropout: ("#EEEEEE", "#999999"),
    ir.Scale: ("#FFFFFF", "#555555"),
    ir.Add: ("#FFFFFF", "#555555"),
    ir.StackParameters: ("#FFFFFF", "#D98E1F"),  # a stack's, read by an attention of every layer
    ir.MultiTokenPrediction: ("#FFFFFF", "#7B5EA7"),  # training's modules beside the head, which they share
}
SHAPES = {ir.PositionEncoding: "ellipse", ir.StackParameters: "note"}
POSITION_NODES = (ir.PositionEncoding,)  # drawn first, left of their embedding
RESIDUAL_COLOUR = "#8A8A8A"
MEMORY_COLOUR = "#C0392B"
VALUES_COLOUR = "#D98E1F"  # values one layer's attention hands on to later layers' (attention's own colour)
TIE_COLOUR = "#7B5EA7"
INPUT_NAMES = {"src": "Inputs", "tgt": "Outputs (shifted right)", "tokens": "Tokens", "token_types": "Token types",
               "pixel_values": "Pictures"}
OUTPUT_NAMES = {"logits": "Output logits", "hidden": "Hidden states", "pooled": "Pooled output"}


MAX_EXPANDED_LAYERS = 256  # layers drawn one by one (--expand): the largest shipped example has 61


class RenderError(Exception):
    """The diagram could not be written: an unknown format, no Graphviz, an unwritable path."""


def render(spec, path: str | Path, *, expand: bool = False, detail: bool = False, fmt: str | None = None) -> Path:
    """Draw ``spec`` (a ``Spec``) to ``path``; the format comes from the suffix (svg, png, pdf, dot).

    The file is written whole or not at all (a temporary file renamed into place).
    """
    path = Path(path)
    fmt = fmt or path.suffix.lstrip(".").lower()
    if fmt not in FORMATS:
        raise RenderError(f"{shown(path)}: cannot tell the format; use a name ending in "
                          f"{', '.join('.' + f for f in FORMATS)}")
    if not path.parent.resolve().is_dir():
        raise RenderError(f"{shown(path)}: directory {shown(path.parent)} does not exist")
    dot = to_graphviz(spec, expand=expand, detail=detail)
    if fmt == "dot":
        data = dot.source.encode("utf-8")
    else:
        try:
            data = dot.pipe(format=fmt)
        except graphviz.ExecutableNotFound:
            raise RenderError(INSTALL_HINT) from None
        except graphviz.CalledProcessError as exc:
            raise RenderError(f"Graphviz failed to draw {shown(path)}: "
                              f"{exc.stderr.decode(errors='replace').strip()}") from None
    write_atomically(path, data)
    return path


def to_graphviz(spec, *, expand: bool = False, detail: bool = False) -> graphviz.Digraph:
    """The diagram as a ``graphviz.Digraph`` (``.source`` is the DOT text); a model of towers draws them side by
    side, each in a box of its own, their outputs meeting in the head that joins them."""
    g = spec.graph()
    if expand:
        layers = sum(info.repeat for graph in g.parts().values() for info in graph.stacks.values())
        if layers > MAX_EXPANDED_LAYERS:  # (4,096 layers ran Graphviz out of memory after a while)
            raise RenderError(f"--expand draws every layer: {layers:,} layers, more than the {MAX_EXPANDED_LAYERS} "
                              "tfspec draws one by one; draw it without --expand (a box a layer kind, with its count)")
    if isinstance(g, TowersGraph):
        return _towers(g, expand, detail)
    return _Diagram(g, expand, detail).draw()


def _towers(g: TowersGraph, expand: bool, detail: bool) -> graphviz.Digraph:
    dot = graphviz.Digraph(g.name, graph_attr={**GRAPH_ATTRIBUTES, "label": f"{g.name} (towers)"},
                           node_attr=NODE_ATTRIBUTES, edge_attr=EDGE_ATTRIBUTES)
    drawn = {name: _Diagram(tower, expand, detail, tower=name) for name, tower in g.towers.items()}
    inputs = []
    for diagram in drawn.values():
        dot.subgraph(diagram.draw())
        inputs += [diagram.dot_id(n.id, None) for n in diagram.g.of(ir.Input)]
    with dot.subgraph() as bottom:  # every tower starts from the same baseline, in the order they are declared
        bottom.attr(rank="same")
        for n in inputs:
            bottom.node(n)
        for left, right in zip(inputs, inputs[1:]):
            bottom.edge(left, right, style="invis")
    for c in g.of(Connector):  # a source's vectors into its target's embeddings, where its image tokens stand
        dot.node(c.id, c.label, fillcolor=STYLES[ir.Projection][0], color=STYLES[ir.Projection][1])
        # (drawn once per kind, a layer's copy is its kind's box; expanded, the very layer's)
        dot.edge(drawn[c.source].source(c.reads, c.reads_layer if expand else None), c.id)
        dot.edge(c.id, drawn[c.target].dot_id(c.into, None), label=f"at token {c.image_token}", constraint="false")
    for join in g.of(Contrastive):
        dot.node(join.id, join.label, fillcolor=STYLES[ir.Head][0], color=STYLES[ir.Head][1],
                 shape=SHAPES.get(ir.Head, "box"))
        for name, output in zip(join.inputs, join.reads):
            dot.edge(drawn[name].dot_id(output, None), join.id)
    return dot


GRAPH_ATTRIBUTES = {"rankdir": "BT", "fontname": FONT, "fontsize": "12", "nodesep": "0.35", "ranksep": "0.3",
                    "newrank": "true", "labelloc": "t", "splines": "spline", "bgcolor": "white", "pad": "0.2"}
NODE_ATTRIBUTES = {"fontname": FONT, "fontsize": "11", "shape": "box", "style": "rounded,filled", "penwidth": "1.3",
                   "margin": "0.15,0.06"}
EDGE_ATTRIBUTES = {"fontname": FONT, "fontsize": "9", "arrowsize": "0.7", "color": "#333333"}


class _Diagram:
    def __init__(self, g: Graph, expand: bool, detail: bool, tower: str | None = None):
        """``tower``: the tower of a model of several it draws, in a box of its own, its ids prefixed by its name."""
        self.g, self.expand, self.detail = g, expand, detail
        self.prefix = f"{tower}/" if tower else ""
        # post-norm: a residual sum whose only reader is a norm is drawn with it, as one "Add & Norm" node
        self.norm_after = {add.id: norm for add in g.of(ir.Add) if (norm := post_norm(g, add)) is not None}
        self.merged = {norm.id: add for add, norm in self.norm_after.items()}  # norm -> the add drawn with it
        self.dot = graphviz.Digraph(
            f"cluster_tower_{tower}" if tower else g.name,
            graph_attr={"rankdir": "BT", "fontname": FONT, "fontsize": "12", "nodesep": "0.35", "ranksep": "0.3",
                        "newrank": "true", "label": f"{g.name} ({g.kind})", "labelloc": "t",
                        "splines": "spline", "bgcolor": "white", "pad": "0.2",
                        **({"label": f"tower {tower} ({g.kind})", "style": "rounded", "color": "#9A9A9A"}
                           if tower else {})},
            node_attr={"fontname": FONT, "fontsize": "11", "shape": "box", "style": "rounded,filled",
                       "penwidth": "1.3", "margin": "0.15,0.06"},
            edge_attr={"fontname": FONT, "fontsize": "9", "arrowsize": "0.7", "color": "#333333"})

    # ---------------------------------------------------------------- structure
    def hidden(self, node: ir.Node) -> bool:
        return (isinstance(node, ir.BlockOutput) or (isinstance(node, ir.Dropout) and not self.detail)
                or node.id in self.merged)

    def copies(self, node: ir.Node) -> list[int | None]:
        """The drawn copies of a node: one per layer of its kind when expanded, else the template alone."""
        return list(layers_of(self.g, node)) if self.expand and node.in_block else [None]

    def last_layer(self, role: str) -> tuple[str, int]:
        """The exit node of the stack's last layer, and that layer."""
        info = self.g.stacks[role]
        return info.kinds[info.kind_of(info.repeat - 1)].exit, info.repeat - 1

    def dot_id(self, n: str, layer: int | None) -> str:
        return f"{self.prefix}{n}" if layer is None else f"{self.prefix}{n}@{layer}"

    def source(self, n: str, layer: int | None) -> str:
        """The drawn node that carries IR node ``n``'s output, seen from copy ``layer`` of its stack."""
        node = self.g.node(n)
        if not node.in_block:
            layer = None
        if isinstance(node, ir.BlockOutput):
            if layer is None and self.expand:  # read from outside the stack: its last layer
                exit_, layer = self.last_layer(node.stack)
                node = self.g.node(exit_)
            return self.source(node.inputs[0], layer)
        if n in self.merged:
            return self.dot_id(self.merged[n], layer)
        if self.hidden(node):
            return self.source(node.inputs[0], layer)
        return self.dot_id(n, layer)

    # ---------------------------------------------------------------- drawing
    def draw(self) -> graphviz.Digraph:
        for role, info in self.g.stacks.items():
            # a box per layer when expanded; else one per layer kind, labelled with its count (and, in a
            # schedule, which layers are of that kind)
            shares = info.weight_sets < info.repeat  # (``weight_sets``: which weights a layer runs, or how many)
            boxes = ([(i, info.kind_of(i), f"layer {i}" + (f" (weights {info.weights_of(i)})" if shares else ""))
                      for i in range(info.repeat)] if self.expand else
                     [(None, k, (f"{info.repeat}×" if len(info.kinds) == 1 else
                                 f"{len(kind.layers)}× ({describe_layers(kind.layers, info.repeat)})")
                       + (f", {info.weight_sets} set{'s' if info.weight_sets > 1 else ''} of weights" if shares
                          else ""))
                      for k, kind in enumerate(info.kinds)])
            for layer, k, label in boxes:
                name = f"cluster_{self.prefix.replace('/', '_')}{role}" + (
                    f"_{layer}" if layer is not None else f"_kind{k}" if k else "")
                with self.dot.subgraph(name=name) as box:
                    box.attr(label=label, labeljust="r", labelloc="t", style="rounded,filled", fillcolor="#F4F4F4",
                             color="#9A9A9A", fontsize="14" if layer is None else "11", margin="12")
                    for node in layer_template(self.g, role, k):
                        if not self.hidden(node):
                            self.node(box, node, layer)
        # positional encodings first, so they sit left of their embedding and the tied-weight edge
        # can run up the right-hand side
        outside = sorted((n for n in self.g.of(ir.Node, in_block=False) if not self.hidden(n)),
                         key=lambda n: not isinstance(n, POSITION_NODES))
        for node in outside:
            self.node(self.dot, node, None)
        for node in sorted(self.g.ordered(), key=lambda n: not isinstance(n, POSITION_NODES)):
            if self.hidden(node):
                continue
            for layer in self.copies(node):
                self.edges(node, layer)
        self.tie_edges()
        starts = [self.dot_id(n.id, 0 if self.expand else None) for n in self.g.of(ir.BlockInput)
                  if n.layer_kind == 0 and not self.hidden(n)]
        if len(starts) > 1:
            with self.dot.subgraph() as level:
                level.attr(rank="same")
                for n in starts:
                    level.node(n)
        inputs = [self.dot_id(n.id, None) for n in self.g.of(ir.Input)]
        with self.dot.subgraph() as bottom:  # every stack starts from the same baseline, as in the paper
            bottom.attr(rank="same")
            for n in inputs:
                bottom.node(n)
            for left, right in zip(inputs, inputs[1:]):  # encoder on the left, decoder on the right
                bottom.edge(left, right, style="invis")
        return self.dot

    def node(self, graph, node: ir.Node, layer: int | None) -> None:
        node_id = self.dot_id(node.id, layer)
        tooltip = node.id
        # a layer's nodes share a group: dot draws the edges between them straight, one sublayer above the other
        extra = {"group": f"{node.stack}{'' if layer is None else layer}"} if node.in_block else {}
        if isinstance(node, ir.Input):
            graph.node(node_id, INPUT_NAMES.get(node.name, node.name), shape="plaintext", style="", tooltip=tooltip, **extra)
        elif isinstance(node, ir.Output):
            graph.node(node_id, OUTPUT_NAMES[node.name], shape="plaintext", style="", tooltip=tooltip, **extra)
        elif isinstance(node, ir.BlockInput):
            graph.node(node_id, "", shape="point", width="0.06", style="filled", color="#555555", tooltip=tooltip, **extra)
        elif isinstance(node, ir.Add):
            norm = self.norm_after.get(node.id)
            if norm is not None:
                fill, border = STYLES[ir.Norm]
                options = NORMS.label(norm.choice) if self.detail else norm.choice.name  # --detail: its options
                graph.node(node_id, f"Add & Norm ({options})", fillcolor=fill, color=border,
                           tooltip=tooltip, **extra)
            else:
                graph.node(node_id, "+", shape="circle", width="0.3", fixedsize="true", fontsize="14",
                           style="filled", fillcolor=STYLES[ir.Add][0], color=STYLES[ir.Add][1], tooltip=tooltip, **extra)
        else:
            fill, border = STYLES[type(node)]
            if isinstance(node, ir.MultiTokenPrediction):
                extra = {**extra, "style": "dashed,rounded,filled"}
            graph.node(node_id, self.label(node), fillcolor=fill, color=border, shape=SHAPES.get(type(node), "box"),
                       tooltip=tooltip, **extra)
            if isinstance(node, ir.Attention):
                self.position_in_attention(graph, node, node_id)

    def position_in_attention(self, graph, node: ir.Attention, node_id: str) -> None:
        """A scheme acting inside attention (rotary, ALiBi) is drawn beside it, entering where it acts."""
        scheme, options = POSITIONS.of(node.spec.position)
        if scheme.absent or scheme.stack_params(node.positioned, options):  # a stack's is its own node, outside
            return
        fill, border = STYLES[ir.PositionEncoding]
        graph.node(f"{node_id}.position", f"Positions\n({scheme.label(options)})", shape="ellipse",
                   fillcolor=fill, color=border, tooltip=f"{node.id}: {scheme.doc}")
        self.dot.edge(f"{node_id}.position", node_id, label=scheme.enters, style="dashed", color=border,
                      fontcolor=border)

    def label(self, node: ir.Node) -> str:
        if isinstance(node, ir.Norm):
            return node.label if self.detail else f"{node.title} ({node.choice.name})"
        if isinstance(node, ir.PositionEncoding):
            return f"Positional Encoding\n({POSITIONS.label(node.choice)})" if not self.detail else node.label
        if isinstance(node, ir.Embedding) and len(owner_of(self.g, f"{node.module}.weight")) > 1:
            return f"{node.label}\nshared by both stacks"
        if isinstance(node, ir.Head) and node.ties:
            return f"Linear ({node.spec.out:,})\nshares the embedding's weights"
        if isinstance(node, ir.MultiTokenPrediction):  # dashed: training runs it, inference does not
            layers = describe_layers(self.g.stacks["decoder"].kinds[node.copies].layers,
                                     self.g.stacks["decoder"].repeat)
            norm = node.spec.norm.name
            return (f"{node.label}\n{node.spec.depth}× [{norm}(embedding ahead) ‖ {norm}(h)] → Linear → a layer "
                    f"as {layers} → {norm} → the head")
        return node.label

    def edges(self, node: ir.Node, layer: int | None) -> None:
        node_id = self.dot_id(node.id, layer)
        for inp in dict.fromkeys(node.inputs):  # x + x is one flow
            if isinstance(node, ir.BlockInput) and layer:  # layer i reads layer i-1's output
                info = self.g.stacks[node.stack]
                src = self.source(info.kinds[info.kind_of(layer - 1)].exit, layer - 1)
            elif node.port(inp) == "values":  # what an earlier layer (the first) hands on
                b = self.g.node(inp)
                src = self.source(inp, self.g.stacks[b.stack].kinds[b.layer_kind].layers[0] if layer is not None
                                  else None)
            elif node.port(inp) == "kv":  # the keys and values the layer it names (``kv_from``) made
                src = self.source(inp, node.spec.kv_from if layer is not None else None)
            else:  # a flow from another stack (the encoder's memory) leaves that stack's last layer
                b = self.g.node(inp)
                src = self.source(inp, layer if b.in_block and b.stack == node.stack else None)
            attrs = {}
            port = node.port(inp)
            if port == "residual":
                attrs.update(color=RESIDUAL_COLOUR, penwidth="1.4", weight="0")  # around the column, not in it
            elif port == "memory":
                attrs.update(color=MEMORY_COLOUR, penwidth="2", label="memory", fontcolor=MEMORY_COLOUR)
            elif port == "values":  # the first layer's values, into every later layer's attention
                attrs.update(color=VALUES_COLOUR, penwidth="1.6", style="dashed", label="values",
                             fontcolor=VALUES_COLOUR, constraint="false")
            elif port == "per_layer":  # its layer's features of the per-layer inputs
                attrs.update(color=STYLES[ir.PerLayerInputs][1], style="dashed", label="its layer's",
                             fontcolor=STYLES[ir.PerLayerInputs][1])
            elif port == "kv":  # an earlier layer's keys and values, which this one attends with
                attrs.update(color=VALUES_COLOUR, penwidth="1.6", style="dashed", label="keys, values",
                             fontcolor=VALUES_COLOUR, constraint="false")
            elif port == "shared":  # parameters the stack owns, read by every layer
                border = STYLES[ir.StackParameters][1]
                variant, options = self.g.node(inp).variant()
                attrs.update(style="dashed", color=border, fontcolor=border, label=variant.stack_edge(options))
            shape = self.g.node(inp).shape
            if self.detail and shape and self.shape_changes(inp):
                shape = "×".join(map(str, shape))
                attrs["label"] = f"{attrs['label']}\n{shape}" if "label" in attrs else shape
            self.dot.edge(src, node_id, **attrs)

    def shape_changes(self, n: str) -> bool:
        """Whether node ``n``'s output has another shape than what it reads: where ``--detail`` writes a shape
        (an input's, an embedding's, a head's), not on every edge of a layer that keeps it."""
        node = self.g.node(n)
        if not node.inputs:
            return True
        return any(self.g.node(i).shape != node.shape for i in node.inputs)

    def tie_edges(self) -> None:
        """A dashed edge from each drawn holder of a borrowed weight to its borrower: an embedding shared by both
        stacks is drawn in each, and each copy is joined to the tied head (the decoder's up the right-hand side,
        the encoder's up the left, round the stacks). Copies of an embedding no head borrows are joined below."""
        style = dict(style="dashed", color=TIE_COLOUR, fontcolor=TIE_COLOUR, dir="both", arrowsize="0.5",
                     weight="0")
        borrowed = set()
        for node in self.g.ordered():
            for full_name in node.ties.values():
                borrowed.add(full_name)
                owners = [m.id for m in owner_of(self.g, full_name)]
                feeding = [m for m in owners if nx.has_path(self.g, m, node.id)]
                for owner in owners:
                    side = "e" if owner == (feeding or owners)[-1] else "w"
                    self.dot.edge(self.dot_id(owner, None), self.dot_id(node.id, None), label="shared weights",
                                  tailport=side, headport=side, **style)  # a ranked edge: dot routes it round nodes
        for weight in sorted({f"{n.module}.{name}" for n in self.g.of(ir.Embedding) for name in n.params} - borrowed):
            copies = [self.dot_id(m.id, None) for m in owner_of(self.g, weight) if not self.hidden(m)]
            for left, right in zip(copies, copies[1:]):  # below them, clear of the nodes between
                self.dot.edge(left, right, xlabel="shared weights", constraint="false", tailport="s",
                              headport="s", **style)
