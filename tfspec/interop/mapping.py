"""Declarative weight mappings between a compiled model and a reference's state dict."""

from __future__ import annotations

import warnings

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from torch import Tensor


from ..ir import nodes as ir
from ..ir.queries import residual_placement, sublayers

class InteropError(ValueError):
    """A reference and a compiled model do not correspond; the message lists every difference."""


@dataclass(frozen=True)
class Rule:
    """``cat(ours) == cat(theirs_i (transposed if asked))[rows]`` along dim 0.

    One-to-one renames, Q/K/V concatenation (BERT's query/key/value -> ``qkv``)
    and splits (``nn.MultiheadAttention``'s in_proj -> cross-attention ``q`` +
    ``kv``) are all this one rule; ``transpose`` handles GPT-2's Conv1D layout,
    ``rows`` a reordering of rows (GPT-NeoX interleaves q, k, v per head; along ``axis``: gpt-oss interleaves
    each expert's gate and up rows), ``shape`` the reference's shape of one tensor held in another shape (BART's
    ``final_logits_bias``, (1, vocab), is our head's bias). ``transpose`` swaps the last two dimensions (each
    expert's matrix, in stacked experts).
    """

    ours: tuple[str, ...]
    theirs: tuple[str, ...]
    transpose: bool = False
    rows: tuple[int, ...] | None = None
    split: tuple[int, ...] | None = None  # sizes of the reference's pieces, when unequal (GQA's q, k, v)
    shape: tuple[int, ...] | None = None
    axis: int = 0  # the dimension ``rows`` reorders


def rule(ours: str | tuple[str, ...], theirs: str | tuple[str, ...], transpose: bool = False,
         rows: tuple[int, ...] | None = None, split: tuple[int, ...] | None = None,
         shape: tuple[int, ...] | None = None, axis: int = 0) -> Rule:
    return Rule((ours,) if isinstance(ours, str) else ours, (theirs,) if isinstance(theirs, str) else theirs,
                transpose, rows, split, shape, axis)


def linear_rules(ours: str, theirs: tuple[str, ...] | str, state: dict, ours_state: dict,
                 rows: tuple[int, ...] | None = None, split: tuple[int, ...] | None = None) -> list[Rule]:
    """A linear map's weight, and its bias when either side has one (a one-sided bias is then reported)."""
    theirs = (theirs,) if isinstance(theirs, str) else theirs
    rules = [rule(f"{ours}.weight", tuple(f"{t}.weight" for t in theirs), rows=rows, split=split)]
    if f"{ours}.bias" in ours_state or any(f"{t}.bias" in state for t in theirs):
        rules.append(rule(f"{ours}.bias", tuple(f"{t}.bias" for t in theirs), rows=rows, split=split))
    return rules


def architecture_problems(spec, expected_text: str, reference: str) -> list[str]:
    """How ``spec`` (a compiled model's) differs from the spec a reference's configuration describes.

    Both are compared by ``tfspec.inspect.diff``'s architectural facts (norms and their eps,
    heads, kv heads, head dim, positions and their options, masks, biases, activation,
    residual wiring, tying), so every configuration field that changes the computation is
    compared, and named, in one place. The initialisation is not compared; dropout, which
    changes training but not the computation in eval, is a warning.
    """
    from ..ir.api import parse
    from ..inspect.diff import architecture_changes

    expected = parse(expected_text)
    changes = [c for c in architecture_changes(spec, expected) if c.what != "init"]
    # the same computation in eval (dropout; multi-token prediction's share of the loss): told, not refused
    training = [c for c in changes if "dropout" in c.what or c.what == "loss weight"]
    if training:
        warnings.warn(f"spec '{spec.name}' trains with other dropout or loss weights than {reference}'s "
                      "configuration (the weights compute the same in eval): " + "; ".join(str(c) for c in training), stacklevel=3)
    return [f"{c} (ours → {reference})" for c in changes if c not in training]


def same_head(model, reference, lm: bool) -> None:
    """Refuse a reference with an LM head (``lm``) for a spec without one, and the other way round."""
    if lm != (model.head is not None):
        raise InteropError(f"{type(reference).__name__} {'has' if lm else 'has no'} LM head, but spec "
                           f"'{model.spec.name}' {'has none' if lm else 'has one'}")


def refuse_other_architecture(model, reference, fields, exported: Callable, expected: Callable[[], str]) -> None:
    """Stop before any tensor is named when the reference's configuration holds a value the family's
    ``fields`` cannot express, or describes a spec (``expected()``) that differs from ``model``'s in an
    architectural fact: the tensor mapping assumes that architecture. The ``InteropError`` names each
    configuration field that differs from the one the spec is ``exported`` as (the family's ``hf_config``),
    then every differing fact."""
    name, config = type(reference).__name__, reference.config
    problems = fields.unsupported(config)
    if not problems:
        problems = architecture_problems(model.spec, expected(), name)
        problems = (_field_differences(model, config, fields, exported) + problems) if problems else []
    if problems:
        raise InteropError(f"cannot load {name} weights into spec '{model.spec.name}':\n"
                           + "\n".join(f"  {p}" for p in problems))


def _field_differences(model, config, fields, exported: Callable) -> list[str]:
    """The configuration fields in which ``config`` differs from the configuration the spec would be exported
    as (none when the spec is too far from the family to be read as one: the facts then say how)."""
    try:
        values = exported(model.spec)
        ours = type(config)(**{k: v for k, v in values.items() if k != "model_type"})
    except (InteropError, TypeError, ValueError):
        return []
    return fields.differences(config, ours)


def layer_modules(model, role: str = "decoder") -> dict[str, str]:
    """Module names, inside one layer, of a block's parts: ``attention``, ``attention_norm``, ``feedforward``,
    ``feedforward_norm`` (and an encoder-decoder's ``cross``, ``cross_norm``) -- the norm before each sublayer, or
    after its residual sum in a post-norm block (read from the graph, so wiring-form names work too)."""
    return spec_layer_modules(model.spec, role)


def spec_layer_modules(spec, role: str = "decoder") -> dict[str, str]:
    """``layer_modules`` of a spec."""
    g = spec.graph()
    found: dict[str, str] = {}
    for node in sublayers(g, role, kind=0):  # every kind of layer names its sublayers alike
        part = "feedforward" if not isinstance(node, ir.Attention) else "cross" if node.spec.reads == "cross" else \
            "attention"
        if part in found:
            raise InteropError(f"spec '{spec.name}' has more than one {part} per {role} layer; "
                               "the reference has one")
        found[part] = node.name
        placement = residual_placement(g, node)  # a post-norm sublayer reads the norm of the one before
        norm = placement.merged_norm if placement.placement == "post-norm" else g.node(node.inputs[0])
        if isinstance(norm, ir.Norm) and norm.module is not None:
            found[f"{part}_norm"] = norm.module.name
    return found


def _listing(title: str, names: list[str], limit: int = 12) -> str:
    shown = "\n".join(f"    {n}" for n in names[:limit])
    more = f"\n    ... and {len(names) - limit} more" if len(names) > limit else ""
    return f"  {title} ({len(names)}):\n{shown}{more}"


def load_state(model, state: dict[str, Tensor], rules: list[Rule], *, reference: str,
               aliases: dict[str, str] | None = None, outside: tuple[str, ...] = (),
               config_problems: list[str] = (), derived: dict[str, Tensor] | None = None) -> list[str]:
    """Copy ``state`` (the reference's names) into ``model`` by ``rules``.

    ``aliases``: reference names that are the same tensor as one of ours (tied
    weights), checked for equality and not copied. ``outside``: prefixes of our
    parameters the reference has no counterpart for (``nn.Transformer`` has no
    embeddings); they are left as they are and returned. ``derived``: reference
    tensors that our model computes rather than holds (Marian's sinusoid tables),
    each checked against the value given.
    """
    import torch  # here: reading a configuration (tfspec import) never loads it

    ours = model.state_dict()
    aliases = {**(aliases or {}), **{name: None for name in derived or {}}}
    problems = [f"  {p}" for p in config_problems]
    missing_theirs, mismatched, updates = [], [], {}
    for r in rules:
        if any(t not in state for t in r.theirs):
            missing_theirs += [t for t in r.theirs if t not in state]
            continue
        if any(o not in ours for o in r.ours):
            continue  # reported below as unmapped reference tensors
        pieces = [state[t].transpose(-1, -2) if r.transpose else state[t] for t in r.theirs]
        if len({p.shape[1:] for p in pieces}) > 1:
            mismatched.append(f"{' + '.join(r.theirs)}: pieces of shapes {[tuple(p.shape) for p in pieces]}")
            continue
        joined = torch.cat(pieces) if len(pieces) > 1 else pieces[0]
        if r.shape is not None and tuple(joined.shape) == r.shape and len(r.ours) == 1:
            joined = joined.reshape(ours[r.ours[0]].shape)
        if r.rows is not None:
            if joined.dim() <= r.axis or len(r.rows) != joined.shape[r.axis]:
                have = joined.shape[r.axis] if joined.dim() > r.axis else 0
                mismatched.append(f"{' + '.join(r.theirs)}: {have} rows, the layout expects {len(r.rows)}")
                continue
            joined = joined.index_select(r.axis, torch.tensor(r.rows))
        if len(r.ours) == 1 and ours[r.ours[0]].dim() == 0:  # a scalar (CLIP's logit scale; SigLIP's, of shape (1,))
            if joined.dim() == 0 or (r.shape is not None and tuple(joined.shape) == r.shape and joined.numel() == 1):
                updates[r.ours[0]] = joined.reshape(())
            else:
                mismatched.append(f"{r.theirs[0]} {tuple(joined.shape)} -> {r.ours[0]} (a scalar)")
            continue
        sizes = [ours[o].shape[0] for o in r.ours]
        expected = (sum(sizes), *ours[r.ours[0]].shape[1:])
        if tuple(joined.shape) != expected or any(ours[o].shape[1:] != ours[r.ours[0]].shape[1:] for o in r.ours):
            mismatched.append(f"{' + '.join(r.theirs)} {tuple(joined.shape)} -> {' + '.join(r.ours)} "
                              f"{[tuple(ours[o].shape) for o in r.ours]}")
            continue
        for name, piece in zip(r.ours, joined.split(sizes)):
            updates[name] = piece
    covered_theirs = {t for r in rules for t in r.theirs if all(o in ours for o in r.ours)}
    unmapped_theirs = [k for k in state if k not in covered_theirs and k not in aliases]
    left_alone = [k for k in ours if k.startswith(outside)] if outside else []
    unset_ours = [k for k in ours if k not in {o for r in rules for o in r.ours} and k not in left_alone]
    for name, value in (derived or {}).items():
        if name in state and (state[name].shape != value.shape
                              or not torch.allclose(state[name].float(), value.float(), rtol=0, atol=1e-6)):
            mismatched.append(f"{name} differs from the table the spec computes (shape {tuple(state[name].shape)}, "
                              f"expected {tuple(value.shape)})")
    for alias, target in aliases.items():
        if target is None:
            continue
        if alias in state and target in updates and not torch.equal(state[alias], updates[target].to(state[alias].dtype)):
            mismatched.append(f"{alias} should be tied to {target}, but the reference holds different values "
                              "(the spec ties them; the reference does not)")
    if missing_theirs:
        problems.append(_listing(f"tensors the mapping needs but the {reference} lacks", missing_theirs))
    if unmapped_theirs:
        problems.append(_listing(f"{reference} tensors with no place in the compiled model", unmapped_theirs))
    if unset_ours:
        problems.append(_listing(f"compiled-model tensors the {reference} does not provide", unset_ours))
    if mismatched:
        problems.append(_listing("shape or value mismatches", mismatched))
    if problems:
        raise InteropError(f"cannot load {reference} weights into spec '{model.spec.name}':\n" + "\n".join(problems))
    with torch.no_grad():
        for name, value in updates.items():
            ours[name].copy_(value)
    return left_alone


def export_state(model, rules: list[Rule], *, reference: str, aliases: dict[str, str] | None = None,
                 outside: tuple[str, ...] = (), derived: dict[str, Tensor] | None = None) -> dict[str, Tensor]:
    """The reference-named state dict of ``model`` (the inverse of ``load_state``); ``derived``: tensors the
    reference holds and our model computes, written as given."""
    import torch  # here: reading a configuration (tfspec import) never loads it

    ours = model.state_dict()
    out: dict[str, Tensor] = {}
    for r in rules:
        joined = torch.cat([ours[o] for o in r.ours]) if len(r.ours) > 1 else ours[r.ours[0]]
        if r.rows is not None:
            joined = joined.index_select(r.axis, torch.argsort(torch.tensor(r.rows)))
        if joined.dim() == 0:  # a scalar (CLIP's logit scale; SigLIP's, of shape (1,))
            out[r.theirs[0]] = joined.reshape(r.shape or ()).clone()
            continue
        pieces = joined.split(list(r.split)) if r.split is not None else joined.chunk(len(r.theirs))
        for name, piece in zip(r.theirs, pieces):
            piece = piece.reshape(r.shape) if r.shape is not None else piece
            out[name] = (piece.transpose(-1, -2) if r.transpose else piece).contiguous().clone()
    for alias, target in (aliases or {}).items():
        out[alias] = ours[target].clone()
    out.update({name: value.clone() for name, value in (derived or {}).items()})
    used = {o for r in rules for o in r.ours}
    extra = [k for k in ours if k not in used and not (outside and k.startswith(outside))]
    if extra:
        raise InteropError(f"cannot export spec '{model.spec.name}' as a {reference}:\n"
                           + _listing(f"compiled-model tensors the {reference} has no place for", extra))
    return out


def sequential_sublayers(model, role: str) -> list:
    """The sublayers of a stack written in the sequential form (wiring-form stacks have none)."""
    stack = getattr(model.spec, role)
    return list(stack.block.sublayers) if stack is not None else []


def sublayer_problems(model, role: str, *, reference: str, residual: str, norm, heads: int,
                      activation: str | None, self_masks: list[str] | None = None) -> list[str]:
    """How a stack's sublayers differ from a reference's: residual placement, norm (the reference's, as a spec
    ``Choice``; its eps compared to 1e-15), heads, activation.

    ``activation`` is our name for the reference's (None: not checked); ``self_masks``: the
    masks its self-attention must have exactly (None: not checked).
    """
    from ..registry import NORMS
    theirs, their_options = NORMS.of(norm)
    problems = []
    for sub in sequential_sublayers(model, role):
        if sub.residual != residual:
            problems.append(f"{role} {sub.name}: residual {sub.residual}, but {reference} is {residual}-norm")
        ours, options = NORMS.of(sub.norm)
        if ours is not theirs or options.model_dump(exclude={"eps"}) != their_options.model_dump(exclude={"eps"}) \
                or abs(getattr(options, "eps", 0) - getattr(their_options, "eps", 0)) > 1e-15:
            problems.append(f"{role} {sub.name}: norm {sub.norm}, reference {norm}")
        body = sub.body
        if body.op == "attention" and body.heads != heads:
            problems.append(f"{role} {sub.name}: {body.heads} heads, reference {heads}")
        if body.op == "attention" and body.reads == "self" and self_masks is not None and body.mask_names != self_masks:
            problems.append(f"{role} {sub.name}: masks {body.mask_names}, reference {self_masks}")
        if body.op == "feedforward" and activation is not None and body.activation.name != activation:
            problems.append(f"{role} {sub.name}: activation {body.activation}, reference {activation}")
    return problems


def refuse_undescribed(model, hf_model, fields, spec_text) -> None:
    """Stop before any tensor is read where ``hf_model``'s configuration holds a value ``fields`` cannot express, or
    describes (``spec_text``) another architecture than ``model``'s spec: an ``InteropError`` naming each."""
    name = type(hf_model).__name__
    problems = fields.unsupported(hf_model.config) or architecture_problems(model.spec, spec_text(hf_model.config), name)
    if problems:
        raise InteropError(f"cannot load {name} weights into spec '{model.spec.name}':\n"
                           + "\n".join(f"  {p}" for p in problems))
