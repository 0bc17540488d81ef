"""The IR's node classes: one frozen class per operation, a closed set (``NODE_TYPES``).

A node says what it computes and where its parameters live; the graph
(``tfspec.ir.graph.Graph``) holds them and the flows between them. Stages test a
node by its class (``isinstance(node, Attention)``) and read its fields; no stage
reads a node by string keys.

>>> Norm(id="decoder.ffn_norm", label="Norm (layernorm)", choice=None, title="Norm").kind
'norm'
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Literal, Mapping

from ..errors import Span
from ..front import schema as S
from ..registry import MIXERS, AttentionShape, Param, Registry

LAYER = "{i}"  # a module path's placeholder for the layer index inside a stack's template
# values: what one layer's attention hands on to another's (the first layer's values, for value residual learning)
Port = Literal["input", "residual", "memory", "positions", "segments", "shared", "values"]


@dataclass(frozen=True)
class ModulePath:
    """Where a node's parameters live in the compiled module, as parts: ``decoder.layers.{i}.self_attn``.

    >>> path = ModulePath.in_layer("decoder", "self_attn")
    >>> path.at(3), path.name, str(path)
    ('decoder.layers.3.self_attn', 'self_attn', 'decoder.layers.{i}.self_attn')
    """

    parts: tuple[str, ...]

    @classmethod
    def of(cls, dotted: str) -> "ModulePath":
        return cls(tuple(dotted.split(".")))

    @classmethod
    def in_layer(cls, role: str, name: str) -> "ModulePath":
        return cls((role, "layers", LAYER, name))

    @property
    def name(self) -> str:
        """The last part: a layer's attribute for a sublayer ("self_attn")."""
        return self.parts[-1]

    @property
    def per_layer(self) -> bool:
        return LAYER in self.parts

    def at(self, layer: int | None) -> str:
        """The dotted state-dict prefix of one layer's copy (``layer`` None: a path outside the layers)."""
        if self.per_layer and layer is None:
            raise ValueError(f"{self} is a layer's: say which layer")
        return ".".join(str(layer) if p == LAYER else p for p in self.parts)

    def __str__(self) -> str:
        return ".".join(self.parts)


@dataclass(frozen=True, kw_only=True, eq=False)
class Node:
    """What every node has. ``inputs`` are ordered (query before memory, the terms of a sum) and ``ports``
    name each one's role; ``module`` is None for a parameter-free node; two nodes with one ``module``
    share its weights (an embedding both stacks read)."""

    kind: ClassVar[str]
    id: str
    label: str  # what a diagram prints
    inputs: tuple[str, ...] = ()
    ports: tuple[Port, ...] = ()  # one per input
    stack: str | None = None  # "encoder" / "decoder"; None outside the stacks (head, pooler, outputs)
    in_block: bool = False  # part of its stack's repeated layer
    layer_kind: int = 0  # in a layer: which of its stack's layer kinds (StackInfo.kinds)
    module: ModulePath | None = None
    params: Mapping[str, Param] = field(default_factory=dict)  # owned, with their shapes and roles
    ties: Mapping[str, str] = field(default_factory=dict)  # borrowed: {name: full name of the owner's weight}
    width: int = 0  # the residual-stream width it works at
    span: Span | None = None  # where in the source it came from
    shape: tuple | None = None  # symbolic output shape, set by validation's ``infer_shapes``

    @property
    def local(self) -> str:
        """Its name within its stack's layer (``ffn_dropout`` of ``decoder.kind1.ffn_dropout``)."""
        return self.id.rsplit(".", 1)[-1]

    def port(self, source: str) -> Port:
        """The port ``source`` enters this node on (its first)."""
        return self.ports[self.inputs.index(source)]


@dataclass(frozen=True, kw_only=True, eq=False)
class Input(Node):
    """What enters the model: integer ids (tokens or token types), or an input kind's tensor (``pixel_values``)."""

    kind: ClassVar[str] = "input"
    name: str  # the forward's argument: "tokens", "src", "tgt", "token_types"


@dataclass(frozen=True, kw_only=True, eq=False)
class Embedding(Node):
    """Lookup table from ids to vectors, optionally scaled."""

    kind: ClassVar[str] = "embedding"
    table: str  # the spec's embedding name
    scale: float = 1.0
    segments: bool = False  # the token-type table (BERT's segments A/B), not the tokens'


@dataclass(frozen=True, kw_only=True, eq=False)
class Features(Node):
    """What an input kind (``registry.INPUTS``) makes of a tensor other than token ids: pictures' patches (ViT)."""

    kind: ClassVar[str] = "features"
    table: str  # the spec's embedding name
    choice: S.Choice  # of the input kind, with its options
    length: int  # the sequence of vectors it makes
    leading: int = 0  # learned vectors before the rest (a class token)

@dataclass(frozen=True, kw_only=True, eq=False)
class Projection(Node):
    """A linear map of the embeddings into the stack's width (ALBERT's and ELECTRA-small's factorised embedding)."""

    kind: ClassVar[str] = "projection"
    features: int  # the embedding's dim, which it reads


@dataclass(frozen=True, kw_only=True, eq=False)
class PerLayerInputs(Node):
    """Features for each layer of a stack (Gemma 4's per-layer embeddings): a token table of ``layers · width``
    per id, scaled by sqrt(width), plus the embeddings projected to as many and normed, times 2^-1/2; shape
    ``(batch, length, layers, width)``. Its inputs: the token ids (port ``ids``) and the embeddings."""

    kind: ClassVar[str] = "per_layer"
    norm: S.Choice  # of the projection, over each layer's ``width`` features
    layers: int


@dataclass(frozen=True, kw_only=True, eq=False)
class PositionEncoding(Node):
    """A positional encoding for each position of its input, added to the token embeddings."""

    kind: ClassVar[str] = "position"
    choice: S.Choice  # of a position scheme acting on the embedding


@dataclass(frozen=True, kw_only=True, eq=False)
class StackParameters(Node):
    """Parameters a stack owns and the same sublayer of each of its layers reads: an attention kind's
    (Linformer's E, F) or a position scheme's (T5's relative bias table); see ``registry.StackOwned``."""

    kind: ClassVar[str] = "parameters"
    family: Registry  # of the variant owning them (``registry.ATTENTION_KINDS``, ``POSITIONS``)
    choice: S.Choice  # of that variant
    geometry: AttentionShape  # of the attention reading them

    def variant(self):
        """(variant, options) of the owner."""
        return self.family.of(self.choice)


@dataclass(frozen=True, kw_only=True, eq=False)
class Add(Node):
    """Element-wise sum: a residual connection, or embeddings + positions."""

    kind: ClassVar[str] = "add"
    residual: Literal["post", "pre"] | None = None  # the sequential form's placement


@dataclass(frozen=True, kw_only=True, eq=False)
class Norm(Node):
    """Layer/RMS normalisation over the last dimension."""

    kind: ClassVar[str] = "norm"
    choice: S.Choice | None  # of a norm variant
    title: str = "Norm"  # "Norm", "Final Norm", "Embedding Norm"


@dataclass(frozen=True, kw_only=True, eq=False)
class Dropout(Node):
    """Dropout (identity in eval mode)."""

    kind: ClassVar[str] = "dropout"
    p: float


@dataclass(frozen=True, kw_only=True, eq=False)
class Scale(Node):
    """Multiplication by a constant (a residual scale: DeepNet's alpha * x)."""

    kind: ClassVar[str] = "scale"
    factor: float


@dataclass(frozen=True, kw_only=True, eq=False)
class SublayerNode(Node):
    """What a layer's residual branches compute (attention, a feed-forward, a mixer): named by its module."""

    @property
    def name(self) -> str:
        """The layer's attribute for it: ``self_attn``, ``ffn``, ``conv``."""
        return self.module.name


@dataclass(frozen=True, kw_only=True, eq=False)
class Attention(SublayerNode):
    """Multi-head attention: self (one input) or cross (query + memory)."""

    kind: ClassVar[str] = "attention"
    spec: S.Attention
    geometry: AttentionShape
    positioned: AttentionShape  # what its in-attention position scheme acts on (its kind's position_shape)
    memory: str | None = None  # the node whose output a cross-attention reads

    @property
    def values_from(self) -> str | None:
        """The attention (of an earlier layer) whose values its steps read (port ``values``), or None."""
        return self.inputs[self.ports.index("values")] if "values" in self.ports else None

    @property
    def keys_from(self) -> str | None:
        """The attention (of an earlier layer: ``spec.kv_from``) whose keys and values it attends with (port
        ``kv``), or None: its own."""
        return self.inputs[self.ports.index("kv")] if "kv" in self.ports else None


@dataclass(frozen=True, kw_only=True, eq=False)
class FeedForward(SublayerNode):
    """Position-wise two-layer network (or gated unit)."""

    kind: ClassVar[str] = "feedforward"
    spec: S.FeedForward


@dataclass(frozen=True, kw_only=True, eq=False)
class Mixer(SublayerNode):
    """A token mixer other than attention, with a recurrent state while decoding (``registry.TokenMixer``)."""

    kind: ClassVar[str] = "mixer"
    spec: S.Mixer

    def variant(self):
        """(mixer, options) it runs."""
        return MIXERS.of(self.spec.kind)


@dataclass(frozen=True, kw_only=True, eq=False)
class BlockInput(Node):
    """Entry of a stack's repeated layer: the residual stream x."""

    kind: ClassVar[str] = "block_input"


@dataclass(frozen=True, kw_only=True, eq=False)
class BlockOutput(Node):
    """Exit of a stack's repeated layer."""

    kind: ClassVar[str] = "block_output"


@dataclass(frozen=True, kw_only=True, eq=False)
class Head(Node):
    """Output projection to logits, optionally tied to an embedding."""

    kind: ClassVar[str] = "head"
    spec: S.Head


@dataclass(frozen=True, kw_only=True, eq=False)
class Pooler(Node):
    """Dense + activation on the first position."""

    kind: ClassVar[str] = "pooler"
    spec: S.Pooler


@dataclass(frozen=True, kw_only=True, eq=False)
class Output(Node):
    """A model output: logits, hidden states or the pooled vector."""

    kind: ClassVar[str] = "output"
    name: Literal["logits", "hidden", "pooled"]


@dataclass(frozen=True, kw_only=True, eq=False)
class MultiTokenPrediction(Node):
    """Training's chain of modules predicting further tokens (DeepSeek-V3's MTP), each with a layer of its own.

    It reads the decoder's output; its parameters are every module's (``0.enorm.weight``, ``0.proj.weight``,
    ``0.layer.self_attn.q.weight``, ...), each layer's as the template of decoder layer kind ``copies`` declares
    them. It computes nothing the model returns: training adds its loss."""

    kind: ClassVar[str] = "mtp"
    spec: S.MultiTokenPrediction
    copies: int  # the decoder layer kind each module's layer is
    embedding: str  # the embedding node whose table each module reads the tokens ahead through
    layers_from: int  # the layer number the first module's layer runs as (the decoder's layer count)


NODE_TYPES: tuple[type[Node], ...] = (Input, Embedding, Features, Projection, PositionEncoding, PerLayerInputs,
                                      StackParameters, Add, Norm,
                                      Dropout, Scale, Attention, FeedForward, Mixer, BlockInput, BlockOutput, Head,
                                      Pooler, Output, MultiTokenPrediction)
OPS: dict[str, str] = {cls.kind: (cls.__doc__ or "").split("\n")[0] for cls in NODE_TYPES}
Sublayer = (Attention, FeedForward, Mixer)  # the node types a layer's residual branches compute


@dataclass(frozen=True)
class LayerKind:
    """One kind of layer of a stack: its template's entry and exit, and the layers that are of this kind."""

    entry: str  # its BlockInput
    exit: str  # its BlockOutput
    layers: tuple[int, ...]


def describe_layers(layers: tuple[int, ...], repeat: int) -> str:
    """A set of a stack's layers as a reader would say it.

    >>> describe_layers((0, 1, 2), 4), describe_layers((3,), 4), describe_layers((1, 3, 5, 7), 8)
    ('layers 0–2', 'layer 3', 'every 2nd layer from 1')
    >>> describe_layers(tuple(range(4)), 4), describe_layers((0, 1, 3), 8), describe_layers((0, 4), 12)
    ('every layer', 'layers 0, 1, 3', 'layers 0, 4')
    >>> describe_layers((0, 1, 2, 4, 5, 6), 8), describe_layers((1, 2, 3, 5, 6, 7, 8), 9)
    ('every layer but layers 3, 7', 'every layer but layers 0, 4')
    >>> describe_layers(tuple(i for i in range(48) if i % 4 != 3), 48)
    'every layer but every 4th layer from 3'
    """
    if len(layers) == repeat:
        return "every layer"
    if len(layers) == 1:
        return f"layer {layers[0]}"
    steps = {b - a for a, b in zip(layers, layers[1:])}
    if steps == {1}:
        return f"layers {layers[0]}–{layers[-1]}"
    if len(steps) == 1 and len(layers) > 2 and layers[-1] + min(steps) >= repeat:
        step = min(steps)
        return f"every {step}{'nd' if step == 2 else 'rd' if step == 3 else 'th'} layer from {layers[0]}"
    others = tuple(i for i in range(repeat) if i not in layers)  # a hybrid's: all but its other kind's
    if 0 < len(others) < len(layers):
        return "every layer but " + describe_layers(others, repeat)
    return "layers " + ", ".join(map(str, layers))


@dataclass(frozen=True)
class StackInfo:
    """A stack: its layer kinds (one template each; one kind for a uniform stack), the node after its final
    norm, its width and input length. The kinds' templates are chained in the order they first appear:
    ``entry`` is the first's BlockInput, ``exit`` the last's BlockOutput."""

    role: str
    repeat: int
    entry: str
    exit: str
    output: str  # after the final norm and dropout
    width: int
    embedding: str
    length: str  # the symbolic length: "seq_len", or "src_len" / "tgt_len"
    kinds: tuple[LayerKind, ...] = ()
    weights: tuple[int, ...] = ()  # the set of weights each layer runs (``weight_sets``); empty: each its own

    def kind_of(self, layer: int) -> int:
        return next(k for k, kind in enumerate(self.kinds) if layer in kind.layers)

    def weights_of(self, layer: int) -> int:
        """The index of the weights (``{role}.layers.{index}``) layer ``layer`` runs."""
        return self.weights[layer] if self.weights else layer

    @property
    def weight_sets(self) -> int:
        return max(self.weights) + 1 if self.weights else self.repeat
