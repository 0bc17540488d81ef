"""What every variant declares, and the shapes and values it is declared against: parameters with their
roles, problems, runtime inputs, an attention layer's shape, the constructors that build runtime modules."""

from __future__ import annotations

import functools
import importlib
import inspect
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
    uniform: (low, high), a uniform distribution it is drawn from under every scheme; ``log_spaced``: uniform in
    the logarithm between them instead, and ``floor`` the least a draw may be (Mamba's time steps: log-uniform in
    [0.001, 0.1], at least 1e-4).
    ramp: it starts at 1, 2, ..., n along its last axis under every scheme (S4D-real's A, Mamba's).
    stored: what the tensor holds of the draw (or the ramp): the ``value``, its ``log`` (a state-space model's A_log: log U(1,
    16)), or the ``inverse_softplus`` of it (Mamba's dt_bias, which softplus turns back into the time step).
    """

    shape: Shape
    role: Role
    residual: bool = False
    query_rows: int = 0
    head_dim: int = 0
    value: float | None = None
    std: float | None = None
    uniform: tuple[float, float] | None = None
    log_spaced: bool = False
    floor: float | None = None
    ramp: bool = False
    stored: Literal["value", "log", "inverse_softplus"] = "value"


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
    token belongs to, which the trainer fills when it packs several documents into one row. ``pictures``: what
    the input says of the pictures a model of towers puts among the tokens, which it fills where its connector
    splices them (``CompiledModel.run_stack(spliced=...)``): ``"ids"``, the picture each token stands for (0:
    none; 1, 2, ... in order along the row); ``"rows"`` and ``"columns"``, each image token's row and column in its
    picture's grid of vectors (0 for a token). ``grid``: the input is the width of each picture's grid of patches
    (per sequence), which a tower of pictures fills from the size of the pictures it reads (``CompiledModel
    .context``): its patches, row by row, are numbered 0, 1, 2, ... on that grid.
    """

    name: str
    doc: str
    per: Literal["sequence", "position"] = "sequence"
    example: Callable[[int], int | list[int]] | None = None
    documents: bool = False
    pictures: Literal["ids", "rows", "columns"] | None = None
    grid: bool = False


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
    key_bias: bool = True  # with bias, on the keys' rows too (Whisper's have none)
    reads_keys: bool = False  # it attends with another layer's keys and values (``kv_from``): it projects queries

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
        args = [format_value(changed[k]) for k in self.positional[:leading]]
        args += [f"{k}={format_value(v)}" for k, v in changed.items() if k not in self.positional[:leading]]
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


def format_value(v) -> str:
    """Exact and short: 10000.0 -> 10000, 1e-05 -> 1e-05 (never rounded, so two labels differ when values do)."""
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, float):
        return str(int(v)) if v.is_integer() and abs(v) < 1e16 else repr(v)
    return "none" if v is None else str(v)  # as a spec writes it


@dataclass(frozen=True)
class ComplexityClass:
    """Per-layer cost, sequential operations and maximum path length, in big-O (n: length, d: width)."""

    per_layer: str
    sequential: str
    path: str
    note: str = ""


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


_loaded = False


def _load_variants() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    from .. import variants

    for module in pkgutil.iter_modules(variants.__path__):
        importlib.import_module(f"{variants.__name__}.{module.name}")
