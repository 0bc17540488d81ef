"""Registries of the variants a spec can name: attention kinds, masks, norms, positions, activations, inits.

Each variant is one small class in its own file under ``tfspec/variants/`` that
registers itself; the package imports every file there, so adding a variant is
adding a file (plus its runtime module and test). A variant declares its whole
contract, and every stage asks it rather than testing its name:

- ``Options``: a pydantic model; ``layernorm(eps=1e-6)`` binds against it, and a
  bad value is a located diagnostic;
- ``params``: the parameter shapes it owns, from a shape context (for attention,
  an ``AttentionShape``: width, heads, kv heads, head dim, memory width);
- ``check``: objections to where it is used, as ``Problem``s (the validator turns
  them into located diagnostics);
- cost: FLOPs and saved elements as functions of the lengths (``tfspec.inspect.analysis``);
- its runtime module: a ``Constructor`` (``module``; an attention kind's ``core``, a
  mask's torch-only ``rule``) that the compiler builds and ``tfspec emit`` writes into
  standalone files (torch is imported inside, so checking a spec never loads it);
- ``label``: how diagrams, ``summary`` and ``diff`` write it, options included;
- properties other stages need: whether a position scheme is relative, which
  runtime inputs a mask reads, whether a KV cache reproduces recomputation, ...
"""

from __future__ import annotations

import functools
import importlib
import inspect
import math
import pkgutil
import re
from dataclasses import dataclass, field
from typing import Callable, ClassVar, Generic, Iterator, Literal, TypeVar

from pydantic import BaseModel, ConfigDict

Shape = tuple[int, ...]
Role = Literal["matrix", "unembedding", "embedding", "position_table", "vector", "bias", "norm_weight", "norm_bias"]


@dataclass(frozen=True)
class Param:
    """A parameter a variant (or the IR, for the fixed parts) declares: its shape and what it is, which is all an
    initialisation scheme reads -- no scheme guesses from names.

    role: ``matrix`` (a linear map, drawn by its fan-in), ``unembedding`` (a head's projection to the
    vocabulary), ``embedding`` (a lookup table of tokens), ``position_table`` (a table indexed by position or
    by bucketed offset), ``vector`` (a scorer, a projection along the sequence, a relative table), ``bias``
    (0), ``norm_weight`` (a scale: 1), ``norm_bias`` (a shift: 0).
    residual: it writes a branch into the residual stream (attention's ``out``, a feed-forward's ``down``),
    which GPT-2's scheme scales down by the number of such branches.
    query_rows, head_dim: in a fused projection, how many leading rows project queries, and their head
    dimension (T5's scheme folds 1/sqrt(head_dim) into those rows).
    value: a constant it starts at under every scheme (DyT's α: 0.5); None: the scheme's draw for its role.
    std: a normal distribution N(0, std) it is drawn from under every scheme, where its paper gives one
    (differential attention's λ vectors: N(0, 0.1)); None: the scheme's draw for its role.
    """

    shape: Shape
    role: Role
    residual: bool = False
    query_rows: int = 0
    head_dim: int = 0
    value: float | None = None
    std: float | None = None


def linear_params(name: str, out: int, inp: int, bias: bool, **matrix) -> dict[str, Param]:
    """``{name}.weight`` (out × inp), and ``{name}.bias`` when ``bias``: an ``nn.Linear``'s parameters."""
    return {f"{name}.weight": Param((out, inp), "matrix", **matrix), **({f"{name}.bias": Param((out,), "bias")}
                                                                         if bias else {})}


class NoOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


@dataclass(frozen=True)
class Problem:
    """A variant's objection to where it is used; the validator reports it at the variant's span."""

    message: str
    hint: str | None = None
    code: str = "variant"  # a code of tfspec.errors.CODES
    about: object = None  # the choice it objects to (a mask, the position scheme); None: the objecting variant


@dataclass(frozen=True)
class RuntimeInput:
    """A tensor a variant reads at run time, passed to the model's forward by keyword (``prefix_lengths=...``).

    ``per``: one value per sequence, shape ``(batch,)``, or per position, ``(batch, length)``. ``example``:
    a typical value for one sequence of a given length (an int, or a list of ints per position), which
    pictures of the masks that read it use (``tfspec mask``). ``documents``: the input is the document each
    token belongs to, which the trainer fills when it packs several documents into one row.
    """

    name: str
    doc: str
    per: Literal["sequence", "position"] = "sequence"
    example: Callable[[int], int | list[int]] | None = None
    documents: bool = False


# Every model reads these; variants add their own (see Mask.inputs).
POSITION_IDS = RuntimeInput("position_ids", "the position of each token (default: 0, 1, 2, ... after any cache)",
                            "position")


@dataclass(frozen=True)
class AttentionShape:
    """The geometry of one attention sublayer: what its variants declare parameters and costs from."""

    width: int  # the residual stream the queries come from and the output returns to
    heads: int  # query heads
    kv_heads: int  # key/value heads (== heads: multi-head; 1: multi-query; else grouped-query)
    head_dim: int
    memory_width: int  # width of the sequence keys and values come from (== width for self-attention)
    cross: bool
    bias: bool  # on the q/k/v projections
    out_bias: bool  # on the output projection
    causal: bool = False  # its masks never let a query see a later key (a decoder's self-attention)

    @property
    def q_width(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv_width(self) -> int:
        return self.kv_heads * self.head_dim


class LayerIndex:
    """Stands for the index of the layer a module is built for, in its stack (0 first): a variant that depends on
    its depth (differential attention's λ_init) puts ``LAYER`` among its constructor's arguments; the compiler
    builds each layer with its own index, and ``tfspec emit`` writes the layer class's ``layer`` argument."""

    def __repr__(self) -> str:
        return "LAYER"


LAYER = LayerIndex()


@dataclass(frozen=True)
class Constructor:
    """A runtime module as a call: ``Constructor("LayerNorm", (768,), {"eps": 1e-5})`` is ``nn.LayerNorm(768, eps=1e-5)``.

    ``target``: the name of a ``torch.nn`` class, or a class (or function) of
    ``tfspec.nn`` whose source depends on torch alone. Arguments may be
    constructors themselves. ``build()`` makes the module; ``tfspec emit`` writes
    the call, and copies the class's source, into a standalone model file, so the
    two cannot disagree.
    """

    target: str | Callable
    args: tuple = ()
    kwargs: dict = field(default_factory=dict)

    def build(self, layer: int | None = None):
        """The module; ``layer``: the index that stands for ``LAYER`` in its arguments (the layer it is built for)."""
        from torch import nn

        call = getattr(nn, self.target) if isinstance(self.target, str) else self.target
        return call(*(built_value(v, layer) for v in self.args),
                    **{k: built_value(v, layer) for k, v in self.kwargs.items()})


def built_value(value, layer: int | None = None):
    """An argument as a module receives it: constructors built (within lists, tuples and dicts too: an attention's
    steps by name), ``LAYER`` the index of the layer it is built for."""
    if isinstance(value, Constructor):
        return value.build(layer)
    if value is LAYER:
        if layer is None:
            raise ValueError("an argument reads its layer's index: build the module for a layer")
        return layer
    if isinstance(value, (list, tuple)):
        return type(value)(built_value(v, layer) for v in value)
    if isinstance(value, dict):
        return {k: built_value(v, layer) for k, v in value.items()}
    return value


class Variant:
    """Base of every registered variant."""

    name: ClassVar[str]
    title: ClassVar[str] = ""  # how labels write it ("ReLU"); the name when empty
    Options: ClassVar[type[BaseModel]] = NoOptions
    positional: ClassVar[tuple[str, ...]] = ()  # option names that may be given positionally
    doc: ClassVar[str] = ""
    absent: ClassVar[bool] = False  # this entry means "nothing here" (`none`): no node, no module, no cost
    # Option values the contract test (tests/test_variants.py) builds and compares: give at
    # least two when there are options, so a change of option is seen to reach every stage.
    examples: ClassVar[tuple[dict, ...]] = ({},)

    def options(self, values: dict) -> BaseModel:
        return self.Options(**values)

    def label(self, options: BaseModel) -> str:
        """The variant with the options that differ from their defaults: ``rotary(theta=500000)``."""
        changed = {k: v for k, v in options.model_dump().items()
                   if k not in type(options).model_fields or v != type(options).model_fields[k].default}
        text = self.title or self.name
        if not changed:
            return text
        # required options are written positionally, as a spec would: window(8), not window(k=8)
        fields = type(options).model_fields
        leading = 0
        while (leading < len(self.positional) and self.positional[leading] in changed
               and fields[self.positional[leading]].is_required()):
            leading += 1
        args = [_fmt(changed[k]) for k in self.positional[:leading]]
        args += [f"{k}={_fmt(v)}" for k, v in changed.items() if k not in self.positional[:leading]]
        return f"{text}({', '.join(args)})"


@functools.cache
def option_docs(options: type[BaseModel]) -> dict[str, str]:
    """What each option means, from the comment beside its field in the ``Options`` class (the text an editor
    shows on hover): ``theta: float = Field(...)  # the base of the angles`` -> ``{"theta": "the base of ..."}``."""
    try:
        source = inspect.getsource(options)
    except (OSError, TypeError):  # a class made at run time has no source
        return {}
    found = {}
    for line in source.splitlines():
        match = re.match(r"\s*(\w+)\s*:[^#]*#\s*(.+)$", line)
        if match and match.group(1) in options.model_fields:
            found[match.group(1)] = match.group(2).strip()
    return found


def _fmt(v) -> str:
    """Exact and short: 10000.0 -> 10000, 1e-05 -> 1e-05 (never rounded, so two labels differ when values do)."""
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, float):
        return str(int(v)) if v.is_integer() and abs(v) < 1e16 else repr(v)
    return "none" if v is None else str(v)  # as a spec writes it


class Activation(Variant):
    """What a feed-forward applies between its projections: ``module()`` maps ``up_features(d_ff)`` features to
    ``d_ff`` (an element-wise function; a gated unit halves them, act(gate) * value)."""

    # Cost model (tfspec.inspect.analysis): FLOPs per element by convention, and which tensor
    # autograd keeps for the backward pass ("input": GELU, SiLU; "output": ReLU, tanh).
    flops_per_element: ClassVar[int] = 1
    saves: ClassVar[str] = "input"

    def module(self) -> Constructor:
        """The function as an ``nn.Module``, from ``up_features(d_ff)`` features to ``d_ff``."""
        raise NotImplementedError

    def module_for(self, options) -> Constructor:
        """``module()`` with the options it was written with (gpt-oss's clamped SwiGLU has some; most none)."""
        return self.module()

    def up_features(self, d_ff: int) -> int:
        """The features the up projection makes for ``d_ff`` hidden units (a gated unit's: gate and value)."""
        return d_ff

    def flops(self, d_ff: int) -> int:
        """Element-wise FLOPs per position, from ``d_ff`` hidden units."""
        return self.flops_per_element * d_ff

    def feedforward_saved(self, d_ff: int, dropout: bool) -> int:
        """Elements a feed-forward keeps per position between its projections: what the function keeps, and
        with dropout its mask and the dropped values, the down projection's input. Without dropout that input
        is the function's output: kept by a function that keeps its output (ReLU), else computed again from
        the input in backward (``tfspec.nn.recompute.linear_of_activation``)."""
        return (1 + (2 if dropout else 0)) * d_ff

    def build(self):
        return self.module().build()


class FeedForwardKind(Variant):
    """How a feed-forward sublayer maps each position: one network (``dense``), or a router choosing among experts
    (``moe``). Its whole contract, from the sublayer's settings (``body``: a ``schema.FeedForward``: ``d_ff``,
    ``activation``, ``bias``, ``dropout``) and the stream's ``width``: parameters with their roles, the runtime
    module, cost and memory per position."""

    def params(self, width: int, body, options) -> dict[str, Param]:
        raise NotImplementedError

    def module(self, width: int, body, options) -> Constructor:
        """The runtime ``nn.Module``, ``forward(x)`` of ``(..., width)``, owning exactly ``params``."""
        raise NotImplementedError

    def flops(self, width: int, body, options) -> tuple[int, int]:
        """(matmul, element-wise) FLOPs per position (multiply-adds count 2)."""
        raise NotImplementedError

    def saved(self, width: int, body, options) -> tuple[int, int]:
        """Per position, the (activation-dtype elements, 4-byte words) autograd keeps between the sublayer's input
        and its output, its input excluded (the analysis counts that once for all its readers)."""
        raise NotImplementedError

    def active_params(self, width: int, body, options) -> int:
        """The parameters one position's computation reads (a mixture's router, chosen and shared experts)."""
        return sum(math.prod(p.shape) for p in self.params(width, body, options).values())

    def describe(self, body, options) -> str:
        """The node's label: "Feed Forward (SwiGLU, 14336)"."""
        raise NotImplementedError


class Norm(Variant):
    flops_per_element: ClassVar[int] = 0  # by convention, for tfspec.inspect.analysis

    def saved(self, dim: int) -> tuple[int, int]:
        """Per position, the (activation-dtype, float32) elements autograd keeps for backward."""
        return (0, 0)

    def params(self, dim: int, options) -> dict[str, Param]:
        """Its parameters with their roles (a scale: ``norm_weight``; a shift: ``norm_bias``), so every scheme
        initialises them as a norm's wherever the norm stands (a sublayer's, a final norm, qk-norm, a head's)."""
        return {}

    def module(self, dim: int, options) -> Constructor:
        """An ``nn.Module`` normalising the last dimension, owning exactly ``params``."""
        raise NotImplementedError

    def build(self, dim: int, options):
        return self.module(dim, options).build()


class StackOwned:
    """What a variant of an attention sublayer may keep in its stack rather than in each layer: parameters
    the stack owns and the same sublayer of every layer reads (Linformer's layer-wise E and F, T5's relative
    bias table). One mechanism for every family: the graph gets one ``StackParameters`` node per sublayer, the
    stack one module (``stack_module``) under ``<stack>.<stack_attribute>.<sublayer>``, and each layer's
    attention receives it through ``share(module)``, which must not register it again."""

    stack_attribute: ClassVar[str] = "shared"  # where the stack keeps the module (part of state-dict names)

    def stack_params(self, shape: AttentionShape, options) -> dict[str, Param]:
        """The parameters the stack owns for this sublayer, by name in ``stack_module``; {}: none (then
        ``params`` holds them all, in each layer)."""
        return {}

    def stack_module(self, shape: AttentionShape, options) -> Constructor | None:
        """The torch-only module holding ``stack_params``."""
        return None

    def stack_label(self, options) -> str:
        """What diagrams call the stack's node."""
        return f"Shared Parameters ({self.label(options)})"

    def stack_edge(self, options) -> str:
        """What diagrams write on the edge from the stack's node into each layer's attention."""
        return "shared"

    def stack_saved(self, options, shape: AttentionShape, queries: int, keys: int, masked: bool,
                    element_bytes: int) -> int:
        """Bytes autograd keeps once per call for what the stack's module computes (for the default position
        ids); ``masked``: a mask of structure joins it in the attentions that read it."""
        return 0


class Position(StackOwned, Variant):
    """A position scheme. ``acts`` says where positions enter the model:

    - ``"embedding"``: an encoding added to the token embeddings (sinusoidal, learned);
      ``build(dim, options)`` maps position ids ``(..., length)`` to ``(..., length, dim)``;
    - ``"attention"``: applied inside each self-attention (rotary, ALiBi);
      ``build(shape, options)`` returns a module with ``tables``, ``rotate``, ``score_bias``
      and ``biases_scores`` (see ``tfspec.nn.attention.MultiHeadAttention``).
    """

    acts: ClassVar[Literal["embedding", "attention"]] = "embedding"
    enters: ClassVar[str] = "added"  # how diagrams label where it enters ("rotates q, k", "biases scores")
    # Outputs depend only on differences of positions: shifting every position id by a
    # constant changes nothing (offset invariance; rotary, ALiBi).
    relative: ClassVar[bool] = False
    # Works through dot products of queries and keys (rotary: rotating both by position
    # leaves q·k a function of their offset); kinds that score otherwise refuse it.
    needs_dot_product: ClassVar[bool] = False
    biases_scores: ClassVar[bool] = False  # adds a bias to the scores (ALiBi): no fused causal kernel then
    # its score bias has parameters of each layer's (KERPLE): a mask of structure it rides on keeps its bool
    # condition to route their gradient, once however many variants add such terms
    trains_score_terms: ClassVar[bool] = False
    # Enters the value sum too (Shaw): its runtime module's ``attend`` replaces the kind's ``mix``, so it
    # needs a kind whose mix is a plain softmax of dot products, and declares that mix's cost itself.
    mixes_values: ClassVar[bool] = False
    stack_attribute: ClassVar[str] = "positions"

    def params(self, where, options) -> dict[str, Param]:
        """``where``: the embedding's width (``acts == "embedding"``) or an ``AttentionShape``."""
        return {}

    def max_len(self, options) -> int | None:
        """The longest sequence it can encode (a learned table's size); None: unbounded."""
        return None

    def counts_real_tokens(self, options) -> int | None:
        """Where a padded batch's default position ids count real tokens only (each token: the real ones before
        it; RoBERTa, OPT), the lowest id a pad takes (its own offset below 0); None: positions are 0..n-1."""
        return None

    def embedding_problem(self, options, dim: int, grid: int | None, class_token: bool) -> Problem | None:
        """Its objection to numbering the positions of an embedding of width ``dim`` (``acts == "embedding"``):
        tokens (``grid`` None), or pictures' patches, ``grid`` a side, after a class token where ``class_token``."""
        return None

    def misplaced(self, where: Literal["embedding", "attention"], choice) -> Problem | None:
        """Its objection to standing ``where`` (on an embedding, or in an attention) when it acts elsewhere."""
        if self.absent or self.acts == where:
            return None
        if where == "embedding":
            return Problem(f"{self.name} positions act inside attention, not on the embedding",
                           f"write `position {choice}` in the stack body (its self-attentions use it) or "
                           f"`position={choice}` on an attention, and `position none` here")
        return Problem(f"{self.name} positions are added to the token embeddings, not applied inside attention",
                       f"set `position {choice}` in the embedding's body")

    def conflicts(self, options, kind: "AttentionKind") -> list[Problem]:
        """Its objections to the attention kind it acts in (it needs dot products, or the kind's plain mix)."""
        problems = []
        if self.needs_dot_product and not kind.scores_by_dot_product and not kind.mixes_positions:
            problems.append(Problem(f"{self.name} positions need dot-product scores, but {kind.name} attention "
                                    "scores otherwise: its outputs would depend on absolute positions",
                                    "use kind=dot, or another position scheme"))
        if self.mixes_values and not kind.plain_softmax:
            problems.append(Problem(f"{self.name} positions enter the softmax's value sum, which {kind.name} "
                                    "attention computes otherwise", "use kind=dot, or another position scheme"))
        return problems

    def shrunk(self, options, max_len: int):
        """The same scheme for at most ``max_len`` positions (``tfspec verify`` tests at small sizes)."""
        return options

    def relative_with(self, options) -> bool:
        """Is it ``relative`` with these options (dynamically scaled rotary frequencies are not)?"""
        return self.relative

    def cacheable(self, options) -> bool:
        """Does a key encoded once stay valid for every later query, so a KV cache decodes exactly?"""
        return True

    def check(self, options, shape: AttentionShape) -> list[Problem]:
        """Objections to being used in an attention of this shape (``acts == "attention"`` only)."""
        return []

    def attention_flops(self, options, shape: AttentionShape, queries: int, keys: int) -> int:
        """Element-wise FLOPs per sequence this scheme adds inside one attention."""
        return 0

    def attention_matmul_flops(self, options, shape: AttentionShape, queries: int, keys: int) -> int:
        """Matrix-product FLOPs per sequence it adds inside one attention (what ``FlopCounterMode`` counts)."""
        return 0

    def mask_adds(self, options, shape: AttentionShape, queries: int, keys: int, mask_tensor: bool) -> int:
        """Element-wise additions of a mask tensor to one sequence's scores, given whether the attention needs
        one (``mask_tensor``): one per score, unless the scheme's own score bias carries the mask (its
        ``attention_flops`` count that addition)."""
        return shape.heads * queries * keys if mask_tensor and not self.biases_scores else 0

    def mix_saved(self, options, shape: AttentionShape, kind: "AttentionKind", kind_options, batch: int,
                  queries: int, keys: int, dropout: float, fused: bool) -> tuple[int, int]:
        """What the mix keeps for backward, as ``AttentionKind.core_saved``: the kind's, unless the scheme's
        ``attend`` computes the mix itself (``mixes_values``, which overrides this)."""
        return kind.core_saved(shape, kind_options, batch, queries, keys, dropout, fused)

    def mix_keeps_projection(self, options, shape: AttentionShape, kind: "AttentionKind", kind_options, batch: int
                             ) -> bool:
        """As ``AttentionKind.keeps_projection``, for the mix this scheme attends with (see ``mix_saved``)."""
        return kind.keeps_projection(shape, kind_options, batch)

    def layer_saved(self, options, shape: AttentionShape, queries: int, keys: int) -> int:
        """Bytes autograd keeps in each attention that uses the scheme, beyond the mix, for the default position
        ids: what differentiating a learned score bias of each layer's keeps (KERPLE's; the bool condition of a
        mask it rides on is counted apart, ``trains_score_terms``)."""
        return 0

    def call_saved(self, options, shape: AttentionShape, length: int) -> int:
        """Activation-dtype elements autograd keeps once per forward call for a stack of ``length`` positions
        (tables its attentions share, such as rotary's cos and sin)."""
        return 0

    def module(self, where, options) -> Constructor | None:
        """Its runtime module (None for ``none``); ``where`` as for ``params``."""
        raise NotImplementedError

    def build(self, where, options):
        constructor = self.module(where, options)
        return constructor.build() if constructor is not None else None


class Mask(Variant):
    """Which keys a query may see. A structural mask names its ``rule``: a function
    ``rule(queries, keys, **options, **inputs)`` of the queries' and keys' indices in the sequence (and of
    the run-time inputs it declares), written in the operations torch tensors and numpy arrays share
    (indexing, arithmetic, comparisons, ``abs``, ``clip``, ``reshape``), so ``tfspec mask`` draws it without
    torch; run-time inputs arrive on the device of the indices (the model checks that they do). ``queries``
    and ``keys`` are ``(..., q)`` and ``(..., k)`` with the same leading dimensions (none for a whole
    sequence, one per block of queries in banded attention); it returns bool ``(..., q, k)``, or
    ``(batch, ..., q, k)`` when it reads a per-sequence input. The compiled model calls it through
    ``allowed``; ``tfspec emit`` copies its source into standalone model files."""

    allowed_in_cross: ClassVar[bool] = True  # meaningful when queries and keys are different sequences
    fused_causal: ClassVar[bool] = False  # alone, equivalent to SDPA's is_causal=True
    reads_padding: ClassVar[bool] = False  # reads the keys' padding mask at run time
    inputs: ClassVar[tuple[RuntimeInput, ...]] = ()  # other run-time inputs ``rule`` reads (None when not given)
    rule: ClassVar[Callable | None] = None  # set with staticmethod(function)

    def allowed(self, query_index, key_index, options, inputs: dict):
        """May query i see key j? ``query_index``/``key_index`` are indices in the sequence (the queries are
        the last ones during cached decoding); ``inputs`` holds the run-time inputs by name. None: no rule."""
        rule = self.bound_rule(options)
        return rule(query_index, key_index, inputs) if rule is not None else None

    def bound_rule(self, options) -> Callable | None:
        """``rule`` with its options bound, as ``f(query_index, key_index, inputs)``; bound once, at build time,
        so a traced forward (``torch.compile``) sees no pydantic."""
        if self.rule is None:
            return None
        rule, values, names = self.rule, options.model_dump(), [i.name for i in self.inputs]
        return lambda queries, keys, inputs: rule(queries, keys, **values, **{n: inputs.get(n) for n in names})

    @property
    def structural(self) -> bool:
        """Decides from positions (it has a ``rule``), unlike ``padding`` or ``none``."""
        return self.rule is not None

    def reach(self, options) -> tuple[int | None, int | None]:
        """How many keys behind and ahead of its own position a query may see (``None``: unbounded).

        The analysis derives mask-aware FLOPs and complexity classes from it, so
        it must agree with ``allowed`` (a test checks that it does).
        """
        return (None, None)

    def reach_at(self, options, position: int) -> tuple[int | None, int | None]:
        """``reach`` for the query at ``position``, where it varies along the sequence (``block(b)``): the
        analysis counts the pairs a mask allows from it, so it must agree with ``allowed`` exactly."""
        return self.reach(options)

    def keys_at(self, options, position: int, length: int) -> tuple[tuple[int, int], ...]:
        """The keys the query at ``position`` may see in a sequence of ``length``, as ranges ``[start, stop)``:
        one band by default (from ``reach_at``); several where the mask allows keys apart (an attention sink's
        first tokens and its recent window). The analysis counts the pairs a mask allows from these, so they
        must agree with ``allowed`` exactly (a test checks that they do)."""
        behind, ahead = self.reach_at(options, position)
        start = 0 if behind is None else max(0, position - behind)
        stop = length if ahead is None else min(length, position + ahead + 1)
        return ((start, stop),) if start < stop else ()

    @property
    def uniform_reach(self) -> bool:
        """Every query sees one band of the same reach (neither ``reach_at`` nor ``keys_at`` varies), so pairs
        have a closed form."""
        return type(self).reach_at is Mask.reach_at and type(self).keys_at is Mask.keys_at

    def pattern_length(self, options) -> int:
        """A sequence length at which its pattern shows in a picture (``tfspec mask``): twice its reach."""
        bounded = [r for r in self.reach(options) if r is not None]
        return 2 * max(bounded) if bounded else 0

    def causal_from(self, options) -> str | None:
        """Where a query stops seeing later keys: ``"start"`` (causal), a run-time input's name
        (``"prefix_lengths"``: causal after the prefix), or ``None`` (it may see ahead)."""
        return "start" if self.reach(options)[1] == 0 else None

    def check(self, options, shape: AttentionShape) -> list[Problem]:
        if shape.cross and not self.allowed_in_cross:
            return [Problem(f"'{self.name}' mask on cross-attention: queries and keys are positions of different "
                            "sequences", "cross-attention takes mask=padding (the source's padding) or no mask",
                            code="mask")]
        return []


def combined_reach(masks) -> tuple[int | None, int | None]:
    """Keys behind and ahead a query may see under all of ``masks``, ``(Mask, options)`` pairs (None: unbounded)."""
    behind = ahead = None
    for variant, options in masks:
        b, a = variant.reach(options)
        behind = b if behind is None else (behind if b is None else min(behind, b))
        ahead = a if ahead is None else (ahead if a is None else min(ahead, a))
    return behind, ahead


def attention_inputs(body) -> tuple[RuntimeInput, ...]:
    """The run-time inputs an attention sublayer (``schema.Attention``) reads: its kind's and its masks'."""
    return ATTENTION_KINDS[body.kind.name].inputs + tuple(i for m in body.mask for i in MASKS[m.name].inputs)


class AttentionKind(StackOwned, Variant):
    """How queries score keys and mix values. Projections and the output are part of the kind's parameters."""

    scores_by_dot_product: ClassVar[bool] = False  # scores depend on q and k only through q·k
    fuses_causal: ClassVar[bool] = True  # a lone causal mask needs no mask tensor (SDPA's is_causal)
    # Its ``mix`` treats each query on its own, given the keys it may see, so a mask of bounded reach can be
    # computed block by block (``attention_band``); not so for a kind that mixes positions before scoring.
    runs_in_blocks: ClassVar[bool] = True
    # Its mix is softmax(q·k · scale + mask) v and nothing else, so a position scheme that enters the values
    # (``Position.mixes_values``) may compute it in its place.
    plain_softmax: ClassVar[bool] = False
    # Mixes positions before scoring (Linformer's projection along the sequence): no mask of structure
    # (causal, window, ...) and no in-attention position scheme can hold, so both are spec errors.
    mixes_positions: ClassVar[bool] = False
    # Decides itself which keys each query sees (BigBird's blocks) and takes only the keys' padding as its mask
    # (``(batch, 1, 1, keys)``): masks of structure and position schemes that bias the scores are spec errors.
    own_pattern: ClassVar[bool] = False
    inputs: ClassVar[tuple[RuntimeInput, ...]] = ()  # run-time inputs its module reads (as ``Mask.inputs``)
    # Projects each key/value head's values from its input before a KV cache keeps them, so a step may transform
    # them there (value residual learning); not so where values are expanded from a cached latent
    projects_values: ClassVar[bool] = True
    # Its steps add score terms computed from the content (FoX's log forget gates): a mask of structure they ride
    # on keeps its bool condition to route their gradient, once however many variants add such terms
    trains_score_terms: ClassVar[bool] = False

    def conflicts(self, options, masks, position, position_choice) -> list[Problem]:
        """Its objections to the masks (``Choice``s) and the in-attention position scheme (a ``Position``, and the
        ``Choice`` it was written as) it is combined with: a kind that mixes positions first, or decides its own
        pattern, can honour neither a mask of structure nor a scheme acting on keys by position."""
        problems = []
        structural = [m for m in masks if MASKS[m.name].structural]
        if self.mixes_positions:
            if structural:
                problems.append(Problem(
                    f"{self.name} attention cannot take mask={structural[0]}: it projects keys and values along the "
                    "sequence, so every projected key mixes all positions and a query would see keys its mask "
                    "forbids (for causal masks, its future)", "use it where attention is bidirectional (an encoder, "
                    "mask=padding or none), or kind=dot with this mask", "mask", structural[0]))
            if position.acts == "attention" and not position.absent:
                problems.append(Problem(f"{position.name} positions act on keys by position, but {self.name} "
                                        "attention projects keys along the sequence first",
                                        "add positions to the embedding instead", about=position_choice))
        if self.own_pattern:
            if structural:
                problems.append(Problem(
                    f"{self.name} attention cannot take mask={structural[0]}: it decides itself which keys each "
                    "query sees (its blocks), and takes only the keys' padding",
                    "use mask=padding (or none), or kind=dot with this mask", "mask", structural[0]))
            if position.biases_scores:
                problems.append(Problem(f"{position.name} positions bias every query-key score, but {self.name} "
                                        "attention scores only the pairs of its blocks",
                                        "use rotary positions, or positions on the embedding", about=position_choice))
        return problems

    def params(self, shape: AttentionShape, options) -> dict[str, Param]:
        raise NotImplementedError

    def value_dim(self, shape: AttentionShape, options) -> int:
        """Each head's value (and output) dimension: ``head_dim`` unless the kind sizes values apart from keys."""
        return shape.head_dim

    def position_shape(self, shape: AttentionShape, options) -> AttentionShape:
        """The geometry an in-attention position scheme acts on: the attention's own, unless positions enter only
        part of each head (latent attention rotates a shared key of ``rope_dim`` dimensions)."""
        return shape

    def shrunk(self, options, head_dim: int, width: int):
        """The same kind at test size (``tfspec verify``): its own widths capped by the shrunk ``head_dim`` and
        ``width`` (a latent attention's ranks); the options themselves where it sizes nothing."""
        return options

    def qk_norm_problem(self, options) -> Problem | None:
        """Its objection to a qk-norm (``attention ... qk_norm=...``); None: per-head norms of queries and keys
        apply."""
        return None

    def projection_flops(self, shape: AttentionShape, options, queries: int, keys: int) -> tuple[int, int]:
        """(matmul, element-wise) FLOPs per sequence of projecting ``queries`` queries and ``keys`` keys and values
        and of the output projection (biases included): q, k and v from the stream (or the memory), then out."""
        q_width, kv_width = shape.q_width, shape.kv_width
        matmul = 2 * queries * shape.width * q_width + 2 * keys * shape.memory_width * 2 * kv_width \
            + 2 * queries * q_width * shape.width
        bias = (queries * q_width + keys * 2 * kv_width if shape.bias else 0) \
            + (queries * shape.width if shape.out_bias else 0)
        return matmul, bias

    def projection_saved(self, shape: AttentionShape, options, batch: int, queries: int, keys: int
                         ) -> tuple[int, int]:
        """(activation-dtype elements, 4-byte words) its projections keep for backward beyond the attention's input
        and what ``core_saved`` counts (a latent attention's norms and up projections); 0 for one linear map each."""
        return 0, 0

    def cache_elements(self, shape: AttentionShape, options) -> int:
        """Elements a KV cache keeps per token of self-attention: each kv head's key and value (and the extras
        its steps keep per key)."""
        return shape.kv_heads * (shape.head_dim + self.value_dim(shape, options))

    def max_len(self, options) -> int | None:
        """The longest sequence it accepts (Linformer's projection size); None: unbounded."""
        return None

    def check(self, options, shape: AttentionShape) -> list[Problem]:
        return []

    def sees(self, options, shape: AttentionShape, length: int, head: int = 0):
        """Bool array ``(length, length)``: the keys each query of a sequence of ``length`` positions may see
        in query head ``head`` by the kind's own pattern, before any mask, exactly as its module computes
        (``own_pattern`` kinds); None: every key the masks allow. ``tfspec mask`` draws it."""
        return None

    def pattern_note(self, options) -> str:
        """What a picture of the keys each query may see leaves out (top-k's choice among them at run time)."""
        return ""

    def pattern_length(self, options) -> int:
        """A sequence length at which its pattern shows in a picture (``tfspec mask``'s default); 0: any."""
        return 0

    @property
    def mixes_by_place(self) -> bool:
        """Do its outputs depend on where keys stand in the sequence, whatever the positions say (a projection
        along the sequence, or blocks of its own)? Then permuting the tokens changes them."""
        return self.mixes_positions or self.own_pattern

    def build(self, config: "AttentionConfig", options, layer: int | None = None):
        """The runtime ``nn.Module``: ``forward(x, ctx, cache=None)`` (see ``tfspec.nn.attention``): its ``core``
        for layer ``layer`` of its stack, unless the kind adds what runs on CUDA alone (FlexAttention)."""
        return self.core(config, options).build(layer)

    def core(self, config: "AttentionConfig", options) -> Constructor:
        """The torch-only core the runtime module extends, for standalone files (``tfspec emit``):
        ``forward(x, ctx=None, cache=None)``, the compiled model's own forward (``build`` adds only what runs on
        CUDA alone)."""
        raise NotImplementedError

    def core_flops(self, shape: AttentionShape, options, queries: int, keys: int, pairs: int) -> tuple[int, int]:
        """(matmul, element-wise) FLOPs of scoring ``pairs`` query-key pairs and mixing values, per sequence:
        ``queries`` rows, each scored against (up to) ``keys`` keys.

        Multiply-adds count 2; the projections are counted by the analysis.
        """
        raise NotImplementedError

    def keeps_projection(self, shape: AttentionShape, options, batch: int) -> bool:
        """Does the core keep the projection its keys and values come from (``qkv``, or cross-attention's
        ``kv``) alive for backward, by saving a view of it? (Then a qk-norm, which keeps its input, adds none.)
        Attention recomputed in backward counts what it keeps with ``recomputed_saved`` instead."""
        return False

    def recomputes(self, options, length: int) -> bool:
        """Does its mix over a sequence of ``length`` run in blocks of its own that backward recomputes
        (``tfspec.nn.attention.recomputed``), as attention in bands (``attention_band``) always does?"""
        return False

    def recomputed_saved(self, shape: AttentionShape, options, batch: int, length: int, remade: bool) -> int:
        """Activation-dtype elements attention recomputed in backward (in bands, or ``recomputes``) keeps over a
        sequence of ``length``: its inputs, q, k and v, and its output (the output projection's input). v is a
        view of the projection, which it keeps whole: where q and k are ``remade`` (rotated, or normed), the
        projection's q and k rows too."""
        value_dim = self.value_dim(shape, options)
        inputs = shape.heads * (shape.head_dim + value_dim) + shape.kv_heads * (shape.head_dim + value_dim)
        return batch * length * (inputs + (shape.q_width + shape.kv_width if remade else 0))

    def core_saved(self, shape: AttentionShape, options, batch: int, queries: int, keys: int, dropout: float,
                   fused: bool) -> tuple[int, int]:
        """(activation-dtype elements, 4-byte words) autograd keeps between the projections, for the batch,
        including the output (``batch · queries · heads · head_dim``, the output projection's input). The
        words are what stays float32 whatever the dtype (log-sum-exps); an int64 index counts two. Attention
        recomputed in backward counts what it keeps with ``recomputed_saved`` instead."""
        raise NotImplementedError

    def complexity(self, options, cross: bool, reach: tuple[int | None, int | None]) -> "ComplexityClass":
        """Its row of Table 1 ("Attention Is All You Need"), given the masks' combined reach.

        The default is for attention that scores every allowed query-key pair:
        quadratic unless a window bounds the keys per query.
        """
        if cross:
            return ComplexityClass("O(n·m·d)", "O(1)", "O(1)")
        behind, ahead = reach
        if behind is not None and ahead is not None:
            r = behind + ahead + 1
            return ComplexityClass("O(r·n·d)", "O(1)", "O(n/r)",
                                   f"r = {r} keys per query; {max(behind, ahead)} positions further per layer")
        return ComplexityClass("O(n²·d)", "O(1)", "O(1)", "each position sees only earlier ones" if ahead == 0 else "")


@dataclass(frozen=True)
class ComplexityClass:
    """Per-layer cost, sequential operations and maximum path length, in big-O (n: length, d: width)."""

    per_layer: str
    sequential: str
    path: str
    note: str = ""


@dataclass(frozen=True)
class AttentionConfig:
    """Everything an attention's runtime module is built from, resolved from the IR (torch-free)."""

    shape: AttentionShape
    positioned: AttentionShape  # what its position scheme acts on (``AttentionKind.position_shape``)
    dropout: float  # on the attention probabilities
    masks: tuple  # (Mask, options) pairs
    position: tuple | None  # (Position, options) acting inside attention, or None
    qk_norm: tuple | None  # (Norm, options) applied per head to queries and keys, or None
    scale: float | None  # softmax scale; None: 1 / sqrt(head_dim)
    fused_causal: bool = False  # unpadded, it runs SDPA's fused causal kernel (``fused_causal_kernel``)
    band: tuple[int, int] | None = None  # keys behind and ahead when it runs in bands (``attention_band``)
    flex: bool = False  # on CUDA, its masks' pattern runs through FlexAttention (``flex_attention_applies``)
    qk_norm_full: bool = False  # the norms span all heads' queries (all kv heads' keys) at once (OLMo 2)
    # the spec's steps: (AttentionStepKind, options, the key of what it reads in ``Context.carried`` or None)
    steps: tuple = ()
    exports: str | None = None  # the key under which it hands its values on to later layers' readers


class AttentionStepKind(Variant):
    """A step a spec adds to an attention's pipeline (``attention self ... steps=value_residual(0.5)``), beside what
    its kind, masks and position scheme do: its whole contract, from the attention's ``AttentionShape``: parameters
    with their roles, checks, cost, label, and the runtime step (a ``tfspec.nn.steps.AttentionStep``).

    ``reads``: a tensor another layer produced that the step reads, as a declared input: ``"values"``, the values
    the same sublayer of its stack's first layer projects (value residual learning). The stack's first layer then
    hands them on (``schema.Attention.exports``), which makes it a kind of layer of its own, and the graph has an
    edge from its attention into every reader's (port ``values``), which validation, the diagram and the cost
    follow."""

    reads: ClassVar[str | None] = None
    # It makes the fresh values anew (``fresh_values``): the mix keeps its tensor, not a view of the projection, so
    # the analysis does not count the projection as kept through the values
    makes_values: ClassVar[bool] = False

    def params(self, shape: AttentionShape, options) -> dict[str, Param]:
        """Its parameters (under ``NAME.`` in the attention's), with their roles."""
        return {}

    def check(self, options, shape: AttentionShape, kind: "AttentionKind") -> list[Problem]:
        """Objections to its attention's shape and kind."""
        return []

    def module(self, shape: AttentionShape, options, source: str | None) -> Constructor:
        """The runtime step; ``source``: the key of the tensor it reads in its call's ``Context.carried`` (what
        ``reads`` names, handed on by the first layer), None where it reads none."""
        raise NotImplementedError

    def flops(self, shape: AttentionShape, options, queries: int, keys: int) -> tuple[int, int]:
        """(matmul, element-wise) FLOPs it adds per sequence of ``queries`` queries and ``keys`` keys."""
        return 0, 0

    def saved(self, shape: AttentionShape, options, batch: int, queries: int, keys: int) -> tuple[int, int]:
        """(activation-dtype elements, 4-byte words) autograd keeps for it beyond what the attention keeps."""
        return 0, 0


class TokenMixer(Variant):
    """A sublayer that mixes positions other than by attention, carrying a recurrent state while decoding (a short
    convolution's window of past inputs; a state-space model's or a linear attention's state matrix). Its whole
    contract, from the stream's ``width`` and its options: parameters with their roles (and initial values where
    a paper gives them), checks, cost, label and the runtime module, which computes a whole sequence at once (the
    parallel form, for training and prompts) and continues from its ``RecurrentState`` one call at a time
    (``tfspec.nn.state``): ``forward(x, ctx=None, state=None)``.

    ``module_name``: the layer's attribute for it (LFM2's ``conv``), which names its weights and its sublayer in
    ``layers`` sections. ``causal``: an output depends on its own and earlier positions only, so a decoder's
    cache of states continues exactly what recomputation gives. ``reads_padding``: padded positions enter its
    state as nothing (each is left out), so the model takes a padding mask for it."""

    module_name: ClassVar[str] = "mixer"
    causal: ClassVar[bool] = True
    reads_padding: ClassVar[bool] = True

    def params(self, width: int, options) -> dict[str, Param]:
        raise NotImplementedError

    def module(self, width: int, options) -> Constructor:
        """The torch-only runtime module, owning exactly ``params``: ``forward(x, ctx=None, state=None)`` of
        ``(batch, length, width)``."""
        raise NotImplementedError

    def check(self, options, width: int) -> list[Problem]:
        return []

    def flops(self, width: int, options, length: int) -> tuple[int, int]:
        """(matmul, element-wise) FLOPs over one sequence of ``length`` positions, as its parallel form runs
        (multiply-adds count 2; a convolution's as ``FlopCounterMode`` counts them)."""
        raise NotImplementedError

    def saved(self, width: int, options, batch: int, length: int) -> int:
        """Activation-dtype elements autograd keeps between the sublayer's input and its output for the batch, its
        input excluded (the analysis counts that once for all its readers)."""
        raise NotImplementedError

    def reach(self, options) -> int | None:
        """How many positions before its own an output depends on (a short convolution's kernel − 1); None:
        every earlier one (a recurrence carries its state from the first)."""
        return None

    def state_elements(self, width: int, options) -> int:
        """Elements its decoding state holds per sequence, whatever the length (what a KV cache holds per token,
        a recurrent state holds once)."""
        raise NotImplementedError

    def describe(self, options) -> str:
        """The node's label: "Short Convolution (kernel 3)"."""
        return self.label(options)

    def complexity(self, options) -> "ComplexityClass":
        """Its row of Table 1: a recurrence over the positions, linear in the length."""
        return ComplexityClass("O(n·d²)", "O(n)", "O(n)", "a state carried from position to position")


class Init(Variant):
    """An initialisation convention; ``initialise`` fills every parameter of a compiled model in place."""

    def initialise(self, parameters, options, generator=None) -> None:
        """``parameters``: ``(name, tensor, role)`` triples in a fixed order (see
        ``tfspec.backend.compiler.ParamRole``); every draw takes ``generator`` (a ``torch.Generator``; None: torch's
        global one)."""
        raise NotImplementedError


V = TypeVar("V", bound=Variant)


class Registry(Generic[V]):
    """Named variants of one family; ``@NORMS.register`` adds a class."""

    def __init__(self, family: str, base: type[V]):
        self.family = family
        self.base = base
        self._entries: dict[str, V] = {}

    def register(self, cls: type[V]) -> type[V]:
        if not issubclass(cls, self.base):
            raise TypeError(f"{cls.__name__} must subclass {self.base.__name__} to be a {self.family}")
        if cls.name in self._entries:
            raise ValueError(f"{self.family} '{cls.name}' is registered twice")
        self._entries[cls.name] = cls()
        return cls

    def __getitem__(self, name: str) -> V:
        _load_variants()
        return self._entries[name]

    def __contains__(self, name: str) -> bool:
        _load_variants()
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        _load_variants()
        return iter(sorted(self._entries))

    def names(self) -> list[str]:
        return list(self)

    def of(self, choice) -> tuple[V, BaseModel]:
        """The variant a ``schema.Choice`` names, with its options bound."""
        variant = self[choice.name]
        return variant, variant.options(choice.options)

    def label(self, choice) -> str:
        variant, options = self.of(choice)
        return variant.label(options)


ACTIVATIONS: Registry[Activation] = Registry("activation", Activation)
NORMS: Registry[Norm] = Registry("norm", Norm)
POSITIONS: Registry[Position] = Registry("position", Position)
MASKS: Registry[Mask] = Registry("mask", Mask)
ATTENTION_KINDS: Registry[AttentionKind] = Registry("attention kind", AttentionKind)
FEEDFORWARD_KINDS: Registry[FeedForwardKind] = Registry("feed-forward kind", FeedForwardKind)
MIXERS: Registry[TokenMixer] = Registry("mixer", TokenMixer)
ATTENTION_STEPS: Registry[AttentionStepKind] = Registry("attention step", AttentionStepKind)
INITS: Registry[Init] = Registry("init", Init)

_loaded = False


def _load_variants() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    from . import variants

    for module in pkgutil.iter_modules(variants.__path__):
        importlib.import_module(f"{variants.__name__}.{module.name}")
