"""Registries of the variants a spec can name: attention kinds, masks, norms, positions, activations.

Each variant is one small class in its own file under ``tfspec/variants/`` that
registers itself; the package imports every file there, so adding a variant is
adding a file (plus its test). A variant declares its options as a pydantic
model -- ``layernorm(eps=1e-6)`` binds ``eps`` against ``LayerNorm.Options`` --
and how many parameters it owns, so the front end can check and count a spec
without building anything.
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
    gated: ClassVar[bool] = False  # a gated unit (GLU family) has a third weight matrix


class Norm(Variant):
    def params(self, dim: int, options) -> dict[str, Shape]:
        return {}


class Position(Variant):
    def params(self, dim: int, options) -> dict[str, Shape]:
        return {}

    def max_len(self, options) -> int | None:
        return None


class Mask(Variant):
    allowed_in_cross: ClassVar[bool] = True  # meaningful when queries and keys are different sequences
    exclusive: ClassVar[bool] = False  # cannot be combined with other masks ("none")


class AttentionKind(Variant):
    def params(self, width: int, heads: int, bias: bool, cross: bool, memory_width: int) -> dict[str, Shape]:
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

_loaded = False


def _load_variants() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    from . import variants

    for module in pkgutil.iter_modules(variants.__path__):
        importlib.import_module(f"{variants.__name__}.{module.name}")
