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

The contracts live beside this file, one per family of variants: ``contract`` (what all declare), ``attention``,
``position``, ``mask``, ``layer`` (activations, feed-forward kinds, norms, mixers, inits).
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Generic, Iterator, TypeVar

from pydantic import BaseModel

from .attention import AttentionConfig, AttentionKind, AttentionStepKind
from .contract import (LAYER, POSITION_IDS, AttentionShape, ComplexityClass, Constructor, LayerIndex, NoOptions, Param,
                       Problem, Role, RuntimeInput, Shape, Variant, built_value, format_value, linear_params,
                       option_docs)
from .layer import Activation, FeedForwardKind, Init, Norm, TokenMixer
from .mask import Mask, combined_reach
from .position import Position, StackOwned

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
    from .. import variants

    for module in pkgutil.iter_modules(variants.__path__):
        importlib.import_module(f"{variants.__name__}.{module.name}")


def attention_inputs(body) -> tuple[RuntimeInput, ...]:
    """The run-time inputs an attention sublayer (``schema.Attention``) reads: its kind's and its masks'."""
    return ATTENTION_KINDS[body.kind.name].inputs + tuple(i for m in body.mask for i in MASKS[m.name].inputs)


__all__ = ["ACTIVATIONS", "ATTENTION_KINDS", "ATTENTION_STEPS", "FEEDFORWARD_KINDS", "INITS", "LAYER", "MASKS", "MIXERS",
           "NORMS", "POSITIONS", "POSITION_IDS", "Activation", "AttentionConfig", "AttentionKind", "AttentionShape",
           "AttentionStepKind", "ComplexityClass", "Constructor", "FeedForwardKind", "Init", "LayerIndex", "Mask",
           "NoOptions", "Norm", "Param", "Position", "Problem", "Registry", "Role", "RuntimeInput", "Shape",
           "StackOwned", "TokenMixer", "Variant", "attention_inputs", "built_value", "combined_reach", "format_value",
           "linear_params", "option_docs"]
