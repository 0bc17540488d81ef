"""Recomputation in the backward pass instead of keeping what the forward made.

Activation checkpointing (``checkpointed``, opt-in): a layer keeps only its input for the backward pass and
runs again there (``torch.utils.checkpoint``, non-reentrant; dropout draws the same masks again, as torch
restores the random state). A module whose forward changes something besides its output (a mixture of
experts' correction bias) declares a ``recomputing`` attribute: it is True during the second run, so that
the change happens once and the second run computes what the first did.

A feed-forward's activation (``linear_of_activation``, always): the down projection's input is computed
again from the activation's input, which autograd keeps anyway.
"""

from __future__ import annotations

from contextlib import contextmanager, nullcontext

import torch


@contextmanager
def _recomputation(layer):
    marked = [m for m in layer.modules() if hasattr(m, "recomputing")]
    for module in marked:
        module.recomputing = True
    try:
        yield
    finally:
        for module in marked:
            module.recomputing = False


def checkpointed(layer, *args, run=None):
    """``layer(*args)`` (or ``run(*args)``, which calls it), its activations recomputed in the backward pass instead
    of kept."""
    return torch.utils.checkpoint.checkpoint(run or layer, *args, use_reentrant=False,
                                             context_fn=lambda: (nullcontext(), _recomputation(layer)))


def _base(t: torch.Tensor) -> torch.Tensor:
    return t if t._base is None else t._base


def linear_of_activation(linear, activation, h: torch.Tensor) -> torch.Tensor:
    """``linear(activation(h))``, keeping ``h`` alone for the backward pass where the activation (GELU, SiLU)
    keeps nothing but its input: autograd would keep ``activation(h)`` too, as the input of ``linear``'s
    weight gradient; it is computed again from ``h`` where backward needs it (an elementwise function, a
    fraction of the time of the product it feeds), under the autocast of the forward pass and in backward's
    grad mode (so a second derivative flows through it). In a GPT-2 layer that is a quarter of what training
    keeps. Where the activation keeps more than its input (ReLU keeps its output, a gated unit its gate):
    what autograd keeps. Saved-tensor hooks already in place (activation checkpointing, ``save_on_cpu``,
    ``tfspec.inspect.measure``) still receive every tensor kept, ``h`` among them. Eager only: a compiled
    graph makes its own choice of what to recompute."""
    if torch.compiler.is_compiling() or not (torch.is_grad_enabled() and h.requires_grad):
        return linear(activation(h))
    hooks = getattr(torch._C._autograd, "_top_saved_tensors_default_hooks", None)  # (as torch's AOT autograd)
    enabled = getattr(torch._C._autograd, "_saved_tensors_hooks_is_enabled", None)
    if hooks is None or enabled is None or not enabled():
        return linear(activation(h))
    outer_pack, outer_unpack = hooks(False) or (lambda t: t, lambda t: t)
    inputs_only, source = True, id(_base(h))  # ids, not tensors: a hook lives as long as what it saved

    def record(saved: torch.Tensor):
        nonlocal inputs_only
        inputs_only = inputs_only and id(_base(saved)) == source
        return outer_pack(saved)

    with torch.autograd.graph.saved_tensors_hooks(record, outer_unpack):
        a = activation(h)
    if not inputs_only or _base(a) is _base(h):
        return linear(a)
    made, kept = id(_base(a)), outer_pack(h)  # ``h`` comes back in backward as every kept tensor does
    device = h.device.type
    autocast = torch.autocast(device, dtype=torch.get_autocast_dtype(device), enabled=torch.is_autocast_enabled(
        device)) if torch.amp.is_autocast_available(device) else None  # (none on the meta device)

    def pack(saved: torch.Tensor):  # a view of ``a`` (linear flattens it): where it lies in ``a``
        if id(_base(saved)) == made:
            return True, (saved.size(), saved.stride(), saved.storage_offset())
        return False, outer_pack(saved)

    def unpack(packed):
        recomputed, value = packed
        if not recomputed:
            return outer_unpack(value)
        if autocast is None:
            return activation(outer_unpack(kept)).as_strided(*value)
        with autocast:
            return activation(outer_unpack(kept)).as_strided(*value)

    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        return linear(a)
