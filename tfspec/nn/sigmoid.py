"""Sigmoid attention's step (``tfspec.variants.sigmoid``)."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from .steps import AttentionStep


class SigmoidWeights(AttentionStep):
    """Each value weighted by ``sigmoid(q·k · scale - log(n))`` on its own, with no softmax across keys (Ramapuram et
    al. 2024). ``n`` is a fixed sequence length (the paper's), not the keys of the call, so a KV cache computes what
    recomputation does. Torch only, so ``tfspec emit`` copies it."""

    weighs = True

    def __init__(self, n: int) -> None:
        super().__init__()
        self.n = n

    def weigh(self, scores: Tensor, mask: Tensor | None) -> Tensor:
        scores = scores - math.log(self.n)
        if mask is not None:  # a masked score is the dtype's minimum, whose sigmoid is 0
            scores = scores + mask
        return torch.sigmoid(scores)

    def extra_repr(self) -> str:
        return f"n={self.n}"
