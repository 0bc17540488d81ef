"""Registries of the variants a spec can name: attention kinds, masks, norms, positions, activations, inits, inputs,
pools.

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

The contracts live beside this file, one per family of variants, each with its registry: ``contract`` (what all
declare, and the ``Registry``), ``attention``, ``position``, ``mask``, ``layer`` (activations, feed-forward kinds,
norms, mixers, inits), ``inputs`` (what an embedding reads other than token ids), ``pool`` (how a head makes one
vector of a sequence), ``connector`` (the steps that map one tower's vectors into another's).
"""

from __future__ import annotations

from .attention import (ATTENTION_KINDS, ATTENTION_STEPS, AttentionConfig, AttentionKind, AttentionRun,
                        AttentionStepKind, qk_norm_saved)
from .contract import (LAYER, POSITION_IDS, AttentionShape, ComplexityClass, Constructor, LayerIndex, NoOptions, Param,
                       Problem, Registry, Role, RuntimeInput, Shape, StackOwned, Variant, built_value, format_value,
                       linear_params, option_docs)
from .inputs import INPUTS, InputKind
from .layer import (ACTIVATIONS, FEEDFORWARD_KINDS, INITS, MIXERS, NORMS, ROUTER_PARTS, Activation, FeedForwardKind,
                    Init, Norm, RouterPart, TokenMixer)
from .mask import MASKS, Mask, combined_reach
from .pool import POOLS, Pool
from .connector import CONNECTOR_STEPS, ConnectorStep
from .position import POSITIONS, Position


def attention_inputs(body) -> tuple[RuntimeInput, ...]:
    """The run-time inputs an attention sublayer (``schema.Attention``) reads: its kind's, its masks' and its
    position scheme's."""
    return ATTENTION_KINDS[body.kind.name].inputs + tuple(i for m in body.mask for i in MASKS[m.name].inputs) + \
        POSITIONS[body.position.name].inputs


__all__ = ["ACTIVATIONS", "ATTENTION_KINDS", "ATTENTION_STEPS", "CONNECTOR_STEPS", "ConnectorStep", "FEEDFORWARD_KINDS",
           "INITS", "INPUTS", "LAYER", "MASKS", "MIXERS", "NORMS", "POOLS", "POSITIONS", "POSITION_IDS", "ROUTER_PARTS",
           "Activation", "RouterPart",
           "AttentionConfig", "AttentionKind", "AttentionRun", "AttentionShape", "AttentionStepKind", "ComplexityClass",
           "Constructor", "FeedForwardKind", "Init", "InputKind", "LayerIndex", "Mask", "NoOptions", "Norm",
           "Param", "Pool", "Position", "Problem", "Registry", "Role", "RuntimeInput", "Shape", "StackOwned",
           "TokenMixer", "Variant", "attention_inputs", "built_value", "combined_reach", "format_value",
           "linear_params", "option_docs", "qk_norm_saved"]
