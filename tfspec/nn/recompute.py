"""Activation checkpointing: a layer keeps only its input for the backward pass and runs again there
(``torch.utils.checkpoint``, non-reentrant; dropout draws the same masks again, as torch restores the random
state). A module whose forward changes something besides its output (a mixture of experts' correction bias)
declares a ``recomputing`` attribute: it is True during the second run, so that the change happens once and
the second run computes what the first did."""

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


def checkpointed(layer, *args):
    """``layer(*args)``, its activations recomputed in the backward pass instead of kept."""
    return torch.utils.checkpoint.checkpoint(layer, *args, use_reentrant=False,
                                             context_fn=lambda: (nullcontext(), _recomputation(layer)))
