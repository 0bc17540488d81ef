"""Stage 2's output: the ``Spec``, a typed, validated description of one model (pydantic).

A ``Spec`` holds resolved values -- numbers, registry choices, references --
with the source span of each part kept for messages. Spans are excluded from
equality and dumps: two specs are equal when they describe the same model.
"""

from __future__ import annotations

import sys
from typing import Annotated, Callable, ClassVar, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_validator

from ..errors import Span

MAX_DIM = 1 << 20  # a width, vocabulary or d_ff above a million is a typo, not a model
MAX_LAYERS = 4096

Dim = Annotated[int, Field(gt=0, le=MAX_DIM)]
Rate = Annotated[float, Field(ge=0, lt=1)]
Residual = Literal["post", "pre", "none"]


class Node(BaseModel):
    # (defer_build: a class's validator is built when it first validates, not on import; most commands use few)
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)
    span: Span | None = Field(default=None, exclude=True, repr=False)
    arg_spans: dict[str, Span] = Field(default_factory=dict, exclude=True, repr=False)  # per argument, for carets

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self.model_dump() == other.model_dump()  # type: ignore[union-attr]

    def __hash__(self) -> int:
        return hash((type(self).__name__, self.model_dump_json()))


class Choice(Node):
    """A registry variant with its options: ``layernorm(eps=1e-6)`` -> name + options."""

    name: str
    options: dict[str, Union[bool, int, float, str, None]] = Field(default_factory=dict)  # str: an enumeration

    def __str__(self) -> str:
        if not self.options:
            return self.name
        return f"{self.name}({', '.join(f'{k}={_fmt(v)}' for k, v in self.options.items())})"


def _fmt(v) -> str:
    if v is None:
        return "none"
    return str(v).lower() if isinstance(v, bool) else repr(v) if isinstance(v, float) else str(v)


class Attention(Node):
    op: Literal["attention"] = "attention"
    reads: Literal["self", "cross"]
    heads: Dim
    kind: Choice
    bias: bool  # on the q/k/v projections
    out_bias: bool  # on the output projection
    # with bias: the keys' too. Whisper's keys have none: a key's bias adds one value to all of a query's scores,
    # which softmax ignores
    key_bias: bool = True
    mask: tuple[Choice, ...] = ()  # empty: no mask
    dropout: Rate = 0.0  # on the attention probabilities
    kv_heads: Dim | None = None  # None: one key/value head per query head
    head_dim: Dim | None = None  # None: width / heads
    position: Choice = Choice(name="none")  # a position scheme acting inside attention (rotary, ALiBi)
    qk_norm: Choice = Choice(name="none")  # a norm over each head's queries and keys, once projected
    scale: Annotated[float, Field(gt=0, le=1e6)] | None = None  # softmax scale; None: 1 / sqrt(head_dim)
    steps: tuple[Choice, ...] = ()  # steps added to its pipeline (``steps=value_residual(0.5)``)
    # the earlier layer of its stack whose same sublayer's keys and values it attends to, projecting queries only
    # (``kv_from=13``: Gemma 4's layers sharing keys and values); None: its own
    kv_from: Annotated[int, Field(ge=0, le=MAX_LAYERS)] | None = None
    # tensors it hands on to the same sublayer of later layers (the first layer's values, which value residual
    # learning reads; its keys and values, which later layers' ``kv_from`` read): set by the resolver on the
    # layer that makes them, never written in a spec
    exports: tuple[Literal["values", "kv"], ...] = ()

    @property
    def mask_names(self) -> list[str]:
        return [m.name for m in self.mask]


class FeedForward(Node):
    op: Literal["feedforward"] = "feedforward"
    d_ff: Dim
    activation: Choice
    bias: bool
    dropout: Rate = 0.0  # after the activation
    kind: Choice = Choice(name="dense")  # one network, or a mixture of experts (``moe(...)``)
    router: tuple[Choice, ...] = ()  # a mixture's router parts (``router=sigmoid + renormalize``); none: a softmax


class Mixer(Node):
    """A token mixer other than attention (``mixer shortconv(3)``): its kind says what it computes and keeps."""

    op: Literal["mixer"] = "mixer"
    kind: Choice

    @property
    def dropout(self) -> float:
        """A mixer has no dropout of its own (its sublayer's output may have one)."""
        return 0.0


class NormOp(Node):
    op: Literal["norm"] = "norm"
    norm: Choice


class DropoutOp(Node):
    op: Literal["dropout"] = "dropout"
    p: Rate


Operation = Annotated[Union[Attention, FeedForward, Mixer, NormOp, DropoutOp], Field(discriminator="op")]
SublayerOp = Annotated[Union[Attention, FeedForward, Mixer], Field(discriminator="op")]


class Sublayer(Node):
    """One sublayer in the sequential form, wrapped by its residual wiring."""

    name: str  # module name, e.g. "self_attn"
    body: SublayerOp
    residual: Residual
    norm: Choice
    dropout: Rate  # on the sublayer's output, before the residual add


# Wiring form: a block written as assignments over tensor variables (SSA after resolution).
class Var(Node):
    kind: Literal["var"] = "var"
    name: str


class Apply(Node):
    kind: Literal["apply"] = "apply"
    name: str  # module name
    body: Operation
    input: "Tensor"


class Sum(Node):
    kind: Literal["sum"] = "sum"
    terms: tuple["Tensor", ...]


class Scale(Node):
    """``factor * input``: a constant scale, e.g. DeepNet's residual ``x = layernorm(alpha * x + f(x))``."""

    kind: Literal["scale"] = "scale"
    factor: float
    input: "Tensor"


Tensor = Annotated[Union[Var, Apply, Sum, Scale], Field(discriminator="kind")]


class Assign(Node):
    target: str
    value: Tensor


class Block(Node):
    """A layer: either ``sublayers`` (sequential form) or ``wiring`` (assignment form)."""

    sublayers: tuple[Sublayer, ...] = ()
    wiring: tuple[Assign, ...] = ()


class Stack(Node):
    """``repeat`` layers. A uniform stack's are all ``block``; a scheduled one (``layers every(2) { ... }``)
    has further layer kinds, ``kinds``, and ``schedule`` says each layer's: 0 for ``block``, k for
    ``kinds[k - 1]``."""

    role: Literal["encoder", "decoder"]
    repeat: Annotated[int, Field(gt=0, le=MAX_LAYERS)]
    embedding: str
    block: Block
    final_norm: Choice
    final_dropout: Rate = 0.0  # after the final norm (T5)
    kinds: tuple[Block, ...] = ()
    schedule: tuple[int, ...] = ()  # empty: every layer is ``block``
    # the sets of weights its layers run, each by a run of consecutive layers (ALBERT: 1); None: one per layer
    weight_sets: Annotated[int, Field(gt=0, le=MAX_LAYERS)] | None = None

    @property
    def blocks(self) -> tuple[Block, ...]:
        """Every layer kind, ``block`` first."""
        return (self.block, *self.kinds)

    def kind_of(self, layer: int) -> int:
        return self.schedule[layer] if self.schedule else 0

    def layers_of(self, kind: int) -> tuple[int, ...]:
        """The layers of kind ``kind``, in order."""
        return tuple(i for i in range(self.repeat) if self.kind_of(i) == kind)

    def weights_of(self, layer: int) -> int:
        """The set of weights layer ``layer`` runs: ``weight_sets`` split the layers into runs of consecutive
        layers as evenly as they go (ALBERT's ``int(i / (layers / groups))``); each layer its own without."""
        return layer if self.weight_sets is None else layer * self.weight_sets // self.repeat

    @model_validator(mode="after")
    def _schedule_fits(self) -> "Stack":
        if self.schedule and (len(self.schedule) != self.repeat
                              or set(self.schedule) != set(range(len(self.kinds) + 1))):
            raise ValueError(f"a schedule of {len(self.schedule)} layers of {len(self.kinds) + 1} kinds does not fit "
                             f"{self.repeat} layers")
        if self.weight_sets is not None and self.weight_sets > self.repeat:
            raise ValueError(f"{self.weight_sets} sets of weights for {self.repeat} layers: a set serves one layer "
                             "at least")
        for i in range(1, self.repeat):
            if self.weights_of(i) == self.weights_of(i - 1) and self.kind_of(i) != self.kind_of(i - 1):
                raise ValueError(f"layers {i - 1} and {i} run one set of weights but are different kinds of layer "
                                 "(`layers` sections)")
        return self

    def kept_layers(self, layers: int, also: set[int] | frozenset = frozenset()) -> list[int]:
        """The layers a stack of at most ``layers`` keeps (more where it has more kinds): the first layer of each
        kind and those of ``also``, then the earliest others, in their order."""
        keep = ({self.schedule.index(k) for k in range(len(self.kinds) + 1)} if self.schedule else {0}) | set(also)
        for i in range(self.repeat):
            if len(keep) >= layers:
                break
            keep.add(i)
        return sorted(keep)

    def shrunk(self, layers: int, also: set[int] | frozenset = frozenset()) -> "Stack":
        """The same stack with at most ``layers`` layers (``kept_layers``)."""
        keep = self.kept_layers(layers, also)
        schedule = tuple(self.schedule[i] for i in keep) if self.schedule else ()
        # the kept layers each with weights of their own: sharing them changes no property a small version checks
        return self.model_copy(update={"repeat": len(keep), "schedule": schedule, "weight_sets": None})


class Embedding(Node):
    """What a stack reads: token ids through a table of ``vocab`` rows, or (``input``) what an input kind reads."""

    name: str
    vocab: Dim | None = None  # None: an embedding of an input kind (``input``), no token table
    dim: Dim
    scale: float = 1.0
    position: Choice
    segments: Annotated[int, Field(ge=0, le=MAX_DIM)] = 0  # token types (BERT's segment A/B)
    norm: Choice
    dropout: Rate = 0.0
    shares: str | None = None  # the embedding whose token table this one reads (``tokens NAME``), or None
    project: Dim | None = None  # the width a linear map projects the embeddings into (ALBERT, ELECTRA-small)
    # per-layer inputs (Gemma 4's per-layer embeddings): ``per_layer`` features for each layer of its stack, from
    # a table of ``per_layer_vocab`` rows (default: ``vocab``) and a projection of the embeddings normed by
    # ``per_layer_norm``, which a ``kind=per_layer`` feed-forward of each layer reads
    per_layer: Dim | None = None
    per_layer_vocab: Dim | None = None
    per_layer_norm: Choice = Choice(name="rmsnorm", options={"eps": 1e-6, "weight": True})
    # what it reads instead of token ids (``input patches(image=224, patch=16)``: pictures, ViT's): an input kind
    # of ``registry.INPUTS``; None: token ids through its table
    input: Choice | None = None

    @property
    def width(self) -> int:
        """The width of the vectors it hands its stack: ``project``'s, else ``dim``."""
        return self.project or self.dim


class Head(Node):
    """Output projection to ``out`` logits; ``tied_to`` shares the embedding's weight matrix."""

    tied_to: str | None
    out: Dim
    bias: bool
    transform: Choice | None = None  # BERT-style dense + activation + norm before projecting
    transform_norm: Choice | None = None
    transform_bias: bool = True  # whether the transform's dense layer has a bias (ModernBERT's has none)
    scale: float = 1.0  # multiplies its input first (T5's tied head: d_model^-0.5)
    softcap: float | None = Field(None, gt=0.0)  # logits capped to softcap·tanh(logits/softcap) (Gemma 2: 30)
    features: Dim | None = None  # the transform's width where it maps into a narrower tied table (ALBERT's)
    pool: Choice | None = None  # one vector per sequence (``registry.POOLS``): ``first`` reads ViT's class token
    # False: the pooled vectors as they are, ``out`` their width (``head pool=...`` alone: SigLIP's vision tower)
    projects: bool = True


class Pooler(Node):
    """BERT's pooler: dense + activation on the first position's hidden state."""

    activation: Choice


class MultiTokenPrediction(Node):
    """DeepSeek-V3's multi-token prediction (``mtp D``): D modules in a chain, module k predicting the token k + 1
    places after the next from the one before's hidden states and the embedding of the token k places ahead,
    through a layer of its own of the kind of decoder layer ``layer``, the embedding and head shared with the
    model. Training adds ``weight / D`` times the sum of their cross-entropies; inference does not run them."""

    depth: Annotated[int, Field(ge=1, le=16)]
    weight: Annotated[float, Field(ge=0, le=1e3)] = 0.3
    layer: Annotated[int, Field(ge=0, lt=MAX_LAYERS)]  # the decoder layer whose kind each module's layer is
    norm: Choice  # of the embedding (enorm), of the hidden states (hnorm) and before the shared head


class Model(Node):
    """What ``tfspec.parse`` / ``tfspec.load`` give: a model of one or two stacks (``Spec``) or of several towers
    (``Towers``). A stage that needs only what both have reads this: the name, the parameters, the IR, and the
    ``parts``, each a model of one or two stacks."""

    name: str
    params: dict[str, Union[int, float]] = Field(default_factory=dict)

    _graph: object = PrivateAttr(default=None)
    _lowering: object = PrivateAttr(default=None)  # how the IR lowers and counts it (``tfspec.ir.api.lower``)
    _sources: dict = PrivateAttr(default_factory=dict)
    _warnings: list = PrivateAttr(default_factory=list)  # Diagnostics of severity "warning" (tfspec.parse issues)

    def parts(self) -> dict[str, "Spec"]:
        """Each model of one or two stacks it is made of, by name: a spec is its own one part, a model of towers
        has a part for each tower."""
        raise NotImplementedError

    def graph(self):
        """The validated graph IR; see docs/ir.md."""
        return _graph_of(self)

    def parameter_count(self) -> int:
        """Number of parameters, computed from the IR (shared weights counted once; of towers, the joins' too)."""
        return _count_of(self)


class Spec(Model):
    """A whole model of one stack or two. Build one with ``tfspec.parse`` / ``tfspec.load``."""

    embeddings: tuple[Embedding, ...]
    encoder: Stack | None = None
    decoder: Stack | None = None
    head: Head | None = None
    pooler: Pooler | None = None
    mtp: MultiTokenPrediction | None = None  # training's extra modules predicting further tokens
    init: Choice | None = None  # initialisation scheme (``defaults { init gpt2 }``); None: normal(std=0.02)

    @property
    def kind(self) -> str:
        if self.encoder and self.decoder:
            return "encoder-decoder"
        return "encoder-only" if self.encoder else "decoder-only"

    @property
    def stacks(self) -> list[Stack]:
        return [s for s in (self.encoder, self.decoder) if s is not None]

    def embedding(self, name: str) -> Embedding:
        return next(e for e in self.embeddings if e.name == name)

    def parts(self) -> dict[str, "Spec"]:
        return {self.name: self}

    presenting: ClassVar[Callable | None] = None  # spec -> HTML for notebooks (default: the tfspec package's)

    def __repr__(self) -> str:
        return f"<Spec {self.name}: {self.kind}, {self.parameter_count():,} parameters>"

    __str__ = __repr__

    def _repr_html_(self) -> str | None:
        """What Jupyter shows: the check line, the diagram and the parameters by block."""
        # the package's root, loaded before any of its modules, presents it with the report page's parts (looked up,
        # not imported: the front end imports no later stage)
        present = Spec.presenting or getattr(sys.modules.get("tfspec"), "present_spec", None)
        return present(self) if present is not None else None


def _graph_of(spec):
    """``spec``'s graph, lowered by the IR's lowering it was given when it was parsed (a copy keeps it): the front
    end hands its output to the next stage and imports nothing of it."""
    if spec._graph is None:
        if spec._lowering is None:
            raise TypeError(f"'{spec.name}' was not made by tfspec.parse or tfspec.load, which give a spec the IR "
                            "that lowers it: parse its text")
        spec._graph = spec._lowering.graph(spec, spec._sources)
    return spec._graph


def _count_of(spec) -> int:
    """``spec``'s parameters, counted by the IR from its graph."""
    return spec._lowering.count(_graph_of(spec))


class Tower(Node):
    """One tower of a model of several (``tower text { ... }``): a whole model of one stack or two, named."""

    name: str
    spec: Spec


class Contrastive(Node):
    """Two towers' pooled vectors meeting in a contrastive head (CLIP, SigLIP): each normalised to length 1, the
    logits of a pair ``exp(scale) · cos + bias``, the pairs of one batch's row and column the true ones.

    ``loss``: ``softmax``, the cross-entropies of each row and each column averaged (CLIP); ``sigmoid``, each
    pair's own binary one (SigLIP). ``scale``: the learned log scale's initial value (CLIP: ln(1/0.07));
    ``bias``: a learned bias's initial value (SigLIP: -10), or None for none."""

    towers: tuple[str, str]
    loss: Literal["softmax", "sigmoid"] = "softmax"
    scale: Annotated[float, Field(ge=-100, le=100)] = 2.6592
    bias: Annotated[float, Field(ge=-1e4, le=1e4)] | None = None


class Connector(Node):
    """``connect SOURCE -> TARGET image_token=ID layer=L drop=first { steps }``: each example of the source tower
    (a picture) as the vectors of its stack at ``layer``, less its first vector where ``drop`` is ``first`` (a class
    token), through ``steps`` (``registry.CONNECTOR_STEPS``) into the target tower's width; the target's embeddings
    are replaced by them, in order, at the positions of token ``image_token`` (LLaVA's projector)."""

    source: str
    target: str
    image_token: Annotated[int, Field(ge=0, le=MAX_DIM)]
    # the source's vectors after ``layer`` of its layers, Hugging Face's ``hidden_states[layer]``: 0 the embeddings,
    # -1 the last layer's output (before its final norm), -2 the one before; None: the stack's output, normed
    layer: Annotated[int, Field(ge=-MAX_LAYERS - 1, le=MAX_LAYERS)] | None = None
    drop: Literal["none", "first"] = "none"
    steps: tuple[Choice, ...] = ()

    def widths(self, width: int) -> list[int]:
        """The width of the vectors before each step and after the last, from the source's ``width``."""
        from ..registry import CONNECTOR_STEPS
        out = [width]
        for step in self.steps:
            variant, options = CONNECTOR_STEPS.of(step)
            out.append(variant.width(out[-1], options))
        return out

    def vectors(self, length: int) -> int:
        """The vectors it gives the target for each example of ``length`` vectors of its source (the image tokens
        a picture takes): less the class token it drops, then as each step gives (a pixel shuffle's fewer)."""
        from ..registry import CONNECTOR_STEPS
        length -= self.drop == "first"
        for step in self.steps:
            variant, options = CONNECTOR_STEPS.of(step)
            length = variant.length(length, options)
        return length


class Towers(Model):
    """A model of several towers and the joins between them. Build one with ``tfspec.parse`` / ``tfspec.load``
    (a spec whose items are ``tower``s)."""

    towers: tuple[Tower, ...]
    contrastive: Contrastive | None = None
    connectors: tuple[Connector, ...] = ()

    @property
    def kind(self) -> str:
        return "towers"

    def tower(self, name: str) -> Spec:
        return next(t.spec for t in self.towers if t.name == name)

    def parts(self) -> dict[str, Spec]:
        return {t.name: t.spec for t in self.towers}

    def graph(self):
        """The validated IR (``tfspec.ir.TowersGraph``): each tower's graph and the joins as typed nodes; one
        ``SpecError`` with every tower's problems."""
        return _graph_of(self)

    def graphs(self) -> dict:
        """Each tower's validated graph IR by name."""
        return self.graph().towers

    def model_copy(self, *, update=None, deep: bool = False) -> "Towers":
        """A copy (``update``: fields changed) lowered anew: the IR is its fields', never its original's."""
        copy = super().model_copy(update=update, deep=deep)
        copy._graph = None
        return copy

    def width(self, name: str) -> int:
        """The width of tower ``name``'s stack (of its last, where it has two)."""
        spec = self.tower(name)
        return spec.embedding(spec.stacks[-1].embedding).width

    def __repr__(self) -> str:
        names = ", ".join(t.name for t in self.towers)
        return f"<Towers {self.name}: {names}, {self.parameter_count():,} parameters>"

    __str__ = __repr__


Apply.model_rebuild()
Sum.model_rebuild()
Assign.model_rebuild()
