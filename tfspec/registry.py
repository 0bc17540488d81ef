"""Registries of the variants a spec can name: attention kinds, masks, norms, positions, activations.

Each variant is one small class in its own file under ``tfspec/variants/`` that
registers itself; the package imports every file there, so adding a variant is
adding a file (plus its test). A variant declares its options as a pydantic
model -- ``layernorm(eps=1e-6)`` binds ``eps`` against ``LayerNorm.Options`` --
and how many parameters it owns, so the front end can check and count a spec
without building anything.

Each variant also knows how to build its runtime part (``build``, ``allowed``,
``initialise``); those methods import torch lazily, so checking a spec never
loads it.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import ClassVar, Generic, Iterator, TypeVar

from pydantic import BaseModel, ConfigDict

Shape = tuple[int, ...]


class NoOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Variant:
    """Base of every registered variant."""

    name: ClassVar[str]
    Options: ClassVar[type[BaseModel]] = NoOptions
    positional: ClassVar[tuple[str, ...]] = ()  # option names that may be given positionally
    doc: ClassVar[str] = ""

    def options(self, values: dict) -> BaseModel:
        return self.Options(**values)


class Activation(Variant):
    title: ClassVar[str] = ""  # how labels and diagrams write it ("ReLU"); the name when empty
    gated: ClassVar[bool] = False  # a gated unit (GLU family) has a third weight matrix
    # Cost model (tfspec.analysis): FLOPs per element by convention, and which tensor
    # autograd keeps for the backward pass ("input": GELU, SiLU; "output": ReLU, tanh).
    flops_per_element: ClassVar[int] = 1
    saves: ClassVar[str] = "input"

    def build(self):
        """The element-wise function as an ``nn.Module`` (for a gated unit: the gate's)."""
        raise NotImplementedError


class Norm(Variant):
    flops_per_element: ClassVar[int] = 0  # by convention, for tfspec.analysis

    def saved(self, dim: int) -> tuple[int, int]:
        """Per position, the (activation-dtype, float32) elements autograd keeps for backward."""
        return (0, 0)

    def params(self, dim: int, options) -> dict[str, Shape]:
        return {}

    def build(self, dim: int, options):
        """An ``nn.Module`` normalising the last dimension, owning exactly ``params``."""
        raise NotImplementedError


class Position(Variant):
    def params(self, dim: int, options) -> dict[str, Shape]:
        return {}

    def max_len(self, options) -> int | None:
        return None

    def build(self, dim: int, options):
        """An ``nn.Module`` mapping position indices ``(length,)`` to encodings ``(length, dim)``."""
        raise NotImplementedError


class Mask(Variant):
    allowed_in_cross: ClassVar[bool] = True  # meaningful when queries and keys are different sequences
    exclusive: ClassVar[bool] = False  # cannot be combined with other masks ("none")
    uses_padding: ClassVar[bool] = False  # reads the keys' padding mask at run time
    fused_causal: ClassVar[bool] = False  # alone, equivalent to SDPA's is_causal=True

    def allowed(self, query_positions, key_positions, options):
        """Bool tensor ``(queries, keys)``: may query i attend to key j? ``None``: no structural constraint."""
        return None

    @property
    def structural(self) -> bool:
        """Decides from positions alone (it overrides ``allowed``), unlike ``padding`` or ``none``."""
        return type(self).allowed is not Mask.allowed

    def reach(self, options) -> tuple[int | None, int | None]:
        """How many keys behind and ahead of its own position a query may see (``None``: unbounded).

        The analysis derives mask-aware FLOPs and complexity classes from it, so
        it must agree with ``allowed`` (a test checks that it does).
        """
        return (None, None)


class AttentionKind(Variant):
    def params(self, width: int, heads: int, bias: bool, cross: bool, memory_width: int) -> dict[str, Shape]:
        raise NotImplementedError

    def build(self, width: int, heads: int, bias: bool, cross: bool, memory_width: int, dropout: float, masks):
        """The runtime ``nn.Module``: ``forward(x, memory=None, key_padding_mask=None, cache=None)``.

        ``cache`` is a ``tfspec.nn.attention.KVCache`` during incremental decoding
        (subclassing ``DotProductAttention`` gets this for free).
        """
        raise NotImplementedError

    def core_flops(self, heads: int, head_dim: int, pairs: int) -> tuple[int, int]:
        """(matmul, element-wise) FLOPs of scoring ``pairs`` query-key pairs and mixing values, per sequence.

        Multiply-adds count 2; the projections are counted by the analysis.
        """
        raise NotImplementedError

    def core_saved(self, batch: int, heads: int, head_dim: int, queries: int, keys: int, dropout: float,
                   fused: bool, cross: bool) -> tuple[int, int]:
        """(activation-dtype, float32) elements autograd keeps between the projections, for the batch."""
        raise NotImplementedError


class Init(Variant):
    """An initialisation convention; ``initialise`` fills every parameter of a compiled model in place."""

    def initialise(self, parameters, options) -> None:
        """``parameters``: ``(name, tensor, role)`` triples in a fixed order (see ``tfspec.compiler.ParamRole``)."""
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


ACTIVATIONS: Registry[Activation] = Registry("activation", Activation)
NORMS: Registry[Norm] = Registry("norm", Norm)
POSITIONS: Registry[Position] = Registry("position", Position)
MASKS: Registry[Mask] = Registry("mask", Mask)
ATTENTION_KINDS: Registry[AttentionKind] = Registry("attention kind", AttentionKind)
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
