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

from .files import write_atomically
from .registry import POSITIONS

FORMATS = ("svg", "png", "pdf", "dot")
INSTALL_HINT = ("Graphviz's 'dot' program was not found; install it (Debian/Ubuntu: sudo apt-get install graphviz, "
                "macOS: brew install graphviz) or write a .dot file, which needs no Graphviz")

FONT = "Helvetica"
STYLES = {  # one colour per kind of node: (fill, border)
    "attention": ("#FCE3C3", "#D98E1F"),
    "feedforward": ("#CFE8F7", "#3C8DBC"),
    "norm": ("#F4F2C1", "#A9A337"),
    "embedding": ("#F8D7D6", "#C9534F"),
    "position": ("#FFFFFF", "#C9534F"),
    "head": ("#E3DAF3", "#7B5EA7"),
    "pooler": ("#E3DAF3", "#7B5EA7"),
    "dropout": ("#EEEEEE", "#999999"),
    "scale": ("#FFFFFF", "#555555"),
    "add": ("#FFFFFF", "#555555"),
    "parameters": ("#FFFFFF", "#D98E1F"),  # a stack's, read by an attention of every layer
}
RESIDUAL_COLOUR = "#8A8A8A"
MEMORY_COLOUR = "#C0392B"
TIE_COLOUR = "#7B5EA7"
INPUT_NAMES = {"src": "Inputs", "tgt": "Outputs (shifted right)", "tokens": "Tokens", "token_types": "Token types"}


class RenderError(Exception):
    """The diagram could not be written: an unknown format, no Graphviz, an unwritable path."""


def render(spec, path: str | Path, *, expand: bool = False, detail: bool = False, fmt: str | None = None) -> Path:
    """Draw ``spec`` (a ``Spec``) to ``path``; the format comes from the suffix (svg, png, pdf, dot).

    The file is written whole or not at all (a temporary file renamed into place).
    """
    path = Path(path)
    fmt = fmt or path.suffix.lstrip(".").lower()
    if fmt not in FORMATS:
        raise RenderError(f"{path}: cannot tell the format; use a name ending in {', '.join('.' + f for f in FORMATS)}")
    if not path.parent.resolve().is_dir():
        raise RenderError(f"{path}: directory {path.parent} does not exist")
    dot = to_graphviz(spec, expand=expand, detail=detail)
    if fmt == "dot":
        data = dot.source.encode("utf-8")
    else:
        try:
            data = dot.pipe(format=fmt)
        except graphviz.ExecutableNotFound:
            raise RenderError(INSTALL_HINT) from None
        except graphviz.CalledProcessError as exc:
            raise RenderError(f"Graphviz failed to draw {path}: {exc.stderr.decode(errors='replace').strip()}") from None
    write_atomically(path, data)
    return path


def to_graphviz(spec, *, expand: bool = False, detail: bool = False) -> graphviz.Digraph:
    """The diagram as a ``graphviz.Digraph`` (``.source`` is the DOT text)."""
    return _Diagram(spec.graph(), expand, detail).draw()


class _Diagram:
    def __init__(self, g: nx.DiGraph, expand: bool, detail: bool):
        self.g, self.expand, self.detail = g, expand, detail
        self.merged = self._add_and_norm_pairs()  # norm node -> the residual add drawn with it
        self.norm_after = {add: norm for norm, add in self.merged.items()}
        self.dot = graphviz.Digraph(
            g.graph["name"],
            graph_attr={"rankdir": "BT", "fontname": FONT, "fontsize": "12", "nodesep": "0.35", "ranksep": "0.3",
                        "newrank": "true", "label": f"{g.graph['name']} ({g.graph['kind']})", "labelloc": "t",
                        "splines": "spline", "bgcolor": "white", "pad": "0.2"},
            node_attr={"fontname": FONT, "fontsize": "11", "shape": "box", "style": "rounded,filled",
                       "penwidth": "1.3", "margin": "0.15,0.06"},
            edge_attr={"fontname": FONT, "fontsize": "9", "arrowsize": "0.7", "color": "#333333"})

    # ---------------------------------------------------------------- structure
    def _add_and_norm_pairs(self) -> dict[str, str]:
        pairs = {}
        for n, a in self.g.nodes(data=True):
            if a["op"] != "norm" or not a["in_block"]:
                continue
            (src,) = a["inputs"]
            s = self.g.nodes[src]
            if s["op"] == "add" and s["in_block"] and "residual" in {d["port"] for _, _, d in
                                                                     self.g.in_edges(src, data=True)} \
                    and self.g.out_degree(src) == 1:
                pairs[n] = src
        return pairs

    def hidden(self, n: str) -> bool:
        op = self.g.nodes[n]["op"]
        return op == "block_output" or (op == "dropout" and not self.detail) or n in self.merged

    def layers(self, role: str) -> list[int | None]:
        return list(range(self.g.graph["stacks"][role]["repeat"])) if self.expand else [None]

    def dot_id(self, n: str, layer: int | None) -> str:
        return n if layer is None else f"{n}@{layer}"

    def source(self, n: str, layer: int | None) -> str:
        """The drawn node that carries IR node ``n``'s output, seen from copy ``layer`` of its stack."""
        a = self.g.nodes[n]
        if not a["in_block"]:
            layer = None
        if a["op"] == "block_output":
            return self.source(a["inputs"][0], layer if layer is not None else self.layers(a["stack"])[-1])
        if n in self.merged:
            return self.dot_id(self.merged[n], layer)
        if self.hidden(n):
            return self.source(a["inputs"][0], layer)
        return self.dot_id(n, layer)

    # ---------------------------------------------------------------- drawing
    def draw(self) -> graphviz.Digraph:
        for role, info in self.g.graph["stacks"].items():
            for layer in self.layers(role):
                label = f"{info['repeat']}×" if layer is None else f"layer {layer}"
                with self.dot.subgraph(name=f"cluster_{role}" + ("" if layer is None else f"_{layer}")) as box:
                    box.attr(label=label, labeljust="r", labelloc="b", style="rounded,filled", fillcolor="#F4F4F4",
                             color="#9A9A9A", fontsize="14" if layer is None else "11", margin="12")
                    for n, a in self.g.nodes(data=True):
                        if a["in_block"] and a["stack"] == role and not self.hidden(n):
                            self.node(box, n, a, layer)
        # positional encodings first, so they sit left of their embedding and the tied-weight edge
        # can run up the right-hand side
        outside = sorted((n for n, a in self.g.nodes(data=True) if not a["in_block"] and not self.hidden(n)),
                         key=lambda n: self.g.nodes[n]["op"] != "position")
        for n in outside:
            self.node(self.dot, n, self.g.nodes[n], None)
        for n, a in sorted(self.g.nodes(data=True), key=lambda item: item[1]["op"] != "position"):
            if self.hidden(n):
                continue
            for layer in (self.layers(a["stack"]) if a["in_block"] else [None]):
                self.edges(n, a, layer)
        self.tie_edges()
        inputs = [n for n, a in self.g.nodes(data=True) if a["op"] == "input"]
        with self.dot.subgraph() as bottom:  # every stack starts from the same baseline, as in the paper
            bottom.attr(rank="same")
            for n in inputs:
                bottom.node(n)
            for left, right in zip(inputs, inputs[1:]):  # encoder on the left, decoder on the right
                bottom.edge(left, right, style="invis")
        return self.dot

    def node(self, graph, n: str, a: dict, layer: int | None) -> None:
        op = a["op"]
        node_id = self.dot_id(n, layer)
        tooltip = n
        if op == "input":
            graph.node(node_id, INPUT_NAMES.get(a["label"], a["label"]), shape="plaintext", style="", tooltip=tooltip)
        elif op == "output":
            graph.node(node_id, {"logits": "Output logits", "hidden states": "Hidden states",
                                 "pooled": "Pooled output"}.get(a["label"], a["label"]),
                       shape="plaintext", style="", tooltip=tooltip)
        elif op == "block_input":
            graph.node(node_id, "", shape="point", width="0.06", style="filled", color="#555555", tooltip=tooltip)
        elif op == "add":
            norm = self.norm_after.get(n)
            if norm is not None:
                fill, border = STYLES["norm"]
                graph.node(node_id, f"Add & Norm ({self.g.nodes[norm]['spec'].name})", fillcolor=fill, color=border,
                           tooltip=tooltip)
            else:
                graph.node(node_id, "+", shape="circle", width="0.3", fixedsize="true", fontsize="14",
                           style="filled", fillcolor=STYLES["add"][0], color=STYLES["add"][1], tooltip=tooltip)
        else:
            fill, border = STYLES[op]
            shape = {"position": "ellipse", "parameters": "note"}.get(op, "box")
            graph.node(node_id, self.label(n, a), fillcolor=fill, color=border, shape=shape, tooltip=tooltip)
            if op == "attention":
                self.position_in_attention(graph, n, a, node_id)

    def position_in_attention(self, graph, n: str, a: dict, node_id: str) -> None:
        """A scheme acting inside attention (rotary, ALiBi) is drawn beside it, entering where it acts."""
        scheme, options = POSITIONS.of(a["spec"].position)
        if scheme.absent or scheme.per_stack:  # one the stack owns is a node of its own, outside the layers
            return
        fill, border = STYLES["position"]
        graph.node(f"{node_id}.position", f"Positions\n({scheme.label(options)})", shape="ellipse",
                   fillcolor=fill, color=border, tooltip=f"{n}: {scheme.doc}")
        self.dot.edge(f"{node_id}.position", node_id, label=scheme.enters, style="dashed", color=border,
                      fontcolor=border)

    def label(self, n: str, a: dict) -> str:
        if a["op"] == "norm":
            title = a["label"].split(" (")[0]
            return a["label"] if self.detail else f"{title} ({a['spec'].name})"
        if a["op"] == "position" and "geometry" in a:  # a score bias the stack owns (T5's)
            return f"Position Bias\n({POSITIONS.label(a['spec'])})\none table, shared by every layer"
        if a["op"] == "position":
            return f"Positional Encoding\n({POSITIONS.label(a['spec'])})" if not self.detail else a["label"]
        if a["op"] == "embedding" and any(b["module"] == a["module"] and m != n for m, b in self.g.nodes(data=True)):
            return f"{a['label']}\nshared by both stacks"
        if a["op"] == "head" and a["ties"]:
            return f"Linear ({a['spec'].out:,})\nshares the embedding's weights"
        return a["label"]

    def edges(self, n: str, a: dict, layer: int | None) -> None:
        node_id = self.dot_id(n, layer)
        for inp in dict.fromkeys(a["inputs"]):  # x + x is one flow
            data = self.g.edges[inp, n]
            if a["op"] == "block_input" and layer:  # layer i reads layer i-1's output
                src = self.source(self.g.graph["stacks"][a["stack"]]["exit"], layer - 1)
            else:  # a flow from another stack (the encoder's memory) leaves that stack's last layer
                b = self.g.nodes[inp]
                src = self.source(inp, layer if b["in_block"] and b["stack"] == a["stack"] else None)
            attrs = {}
            port = data.get("port", "input")
            if port == "residual":
                attrs.update(color=RESIDUAL_COLOUR, penwidth="1.4")
            elif port == "memory":
                attrs.update(color=MEMORY_COLOUR, penwidth="2", label="memory", fontcolor=MEMORY_COLOUR)
            elif port == "shared":  # parameters the stack owns, read by every layer
                border = STYLES["parameters"][1]
                attrs.update(style="dashed", color=border, fontcolor=border, label="shared")
            elif port == "positions" and a["op"] == "attention":  # a stack's score bias, entering every layer
                border = STYLES["position"][1]
                attrs.update(style="dashed", color=border, fontcolor=border,
                             label=POSITIONS[self.g.nodes[inp]["spec"].name].enters)
            if self.detail and data.get("shape"):
                shape = "×".join(map(str, data["shape"]))
                attrs["label"] = f"{attrs['label']}\n{shape}" if "label" in attrs else shape
            self.dot.edge(src, node_id, **attrs)

    def tie_edges(self) -> None:
        """A dashed edge from each borrowed weight's embedding to its borrower."""
        for n, a in self.g.nodes(data=True):
            for full_name in a["ties"].values():
                module = full_name.rsplit(".", 1)[0]
                owners = [m for m, b in self.g.nodes(data=True) if b["module"] == module]
                # an embedding shared by both stacks is drawn in each: join the one feeding the head
                feeding = [m for m in owners if nx.has_path(self.g, m, n)]
                owner = (feeding or owners or [None])[-1]
                if owner is not None:
                    self.dot.edge(owner, n, style="dashed", color=TIE_COLOUR, fontcolor=TIE_COLOUR,
                                  label="shared weights", dir="both", arrowsize="0.5", weight="0",
                                  tailport="e", headport="e")  # a ranked edge: dot routes it round nodes
