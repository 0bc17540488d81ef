"""Generated forwards that pickle: ``torch.save(model)``, ``pickle``, a process pool.

A compiled layer's and a model's ``forward`` are ``torch.fx.GraphModule``s built from graphs, not traced. fx
pickles a GraphModule as its generated code and, on loading, traces that code again, which fails on the steps
it calls (``cache_slot`` asks whether a name is in a dict: a Proxy cannot answer). ``Generated`` pickles the
graph itself, node by node (operation, name, target, arguments), and builds the module from it on loading.

    >>> import pickle, torch
    >>> from torch import fx
    >>> graph = fx.Graph()
    >>> x = graph.placeholder("x")
    >>> _ = graph.output(graph.call_function(torch.relu, (x,)))
    >>> copy = pickle.loads(pickle.dumps(Generated(torch.nn.Module(), graph, class_name="Relu")))
    >>> copy(torch.tensor([-1.0, 2.0])).tolist(), type(copy).__name__
    ([0.0, 2.0], 'Relu')
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import fx


@dataclass(frozen=True)
class _Value:
    """A reference to an earlier node's value, by its name, in a pickled graph."""

    name: str


class Generated(fx.GraphModule):
    """A ``torch.fx.GraphModule`` that pickles its graph, not its code (see the module's docstring)."""

    def __reduce__(self):
        state = self.__dict__.copy()
        for derived in ("_graph", "_code", "_lineno_map", "_prologue_start"):
            state.pop(derived, None)  # rebuilt from the graph
        nodes = [(n.op, n.name, n.target, fx.node.map_arg(n.args, lambda v: _Value(v.name)),
                  fx.node.map_arg(n.kwargs, lambda v: _Value(v.name)), n.type) for n in self.graph.nodes]
        return _rebuild, (state, nodes, type(self).__name__)


def _rebuild(state: dict, nodes: list, class_name: str) -> Generated:
    graph, values = fx.Graph(), {}

    def value(v):
        return values[v.name] if isinstance(v, _Value) else v

    for op, name, target, args, kwargs, annotation in nodes:
        node = graph.create_node(op, target, fx.node.map_aggregate(args, value), fx.node.map_aggregate(kwargs, value),
                                 name=name, type_expr=annotation)
        values[name] = node
    root = torch.nn.Module()
    root.__dict__.update(state)  # the modules, parameters and attributes the graph reads
    module = Generated(root, graph, class_name=class_name)
    module.__dict__.update(state)  # as it was: its modules (shared with the model's), train or eval, hooks
    return module
