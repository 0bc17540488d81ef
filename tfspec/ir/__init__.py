"""The graph IR: typed nodes (``nodes``), their container (``graph``), lowering from a ``Spec`` (``lower``),
validation passes (``validate``) and the queries several stages share (``queries``); a model of several towers'
(``towers``); ``api``: text or a file through the front end and then the IR (``tfspec.parse``, ``tfspec.load``).
See docs/ir.md."""

from .graph import Graph, IRError
from .nodes import (NODE_TYPES, OPS, Add, Attention, BlockInput, BlockOutput, Dropout, Embedding, FeedForward, Head,
                    Input, LayerKind, Mixer, ModulePath, Node, Norm, Output, Features, PerLayerInputs, Pooler,
                    PositionEncoding, Projection, Scale, StackInfo, StackParameters, Sublayer)

__all__ = ["Graph", "IRError", "NODE_TYPES", "OPS", "Add", "Attention", "BlockInput", "BlockOutput", "Dropout",
           "Embedding", "FeedForward", "Head", "Input", "Mixer", "ModulePath", "Node", "Norm", "Output", "Features",
           "PerLayerInputs", "Pooler",
           "PositionEncoding", "Projection", "Scale", "StackInfo", "LayerKind", "StackParameters", "Sublayer",
           "TowersGraph", "Tower", "Connector", "ConnectorStep", "Contrastive", "load", "lower", "parse"]

from .api import load, lower, parse  # noqa: E402 (text -> front -> IR: tfspec.parse)
from .queries import count_parameters  # noqa: E402
from .towers import (Connector, ConnectorStep, Contrastive, Tower, TowersGraph, count_tower_parameters,  # noqa: E402
                     lower_towers)
from .validate import lower_and_validate  # noqa: E402
