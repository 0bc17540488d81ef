"""Soft-capped attention's step (``tfspec.variants.softcap``)."""

from __future__ import annotations

import torch
from torch import Tensor

from .steps import AttentionStep


class SoftCap(AttentionStep):
    """Scores capped to ``cap · tanh(score / cap)`` before the mask is added and the softmax taken (Gemma 2); the
    1 / cap folded into the scale of q and k. Torch only, so ``tfspec emit`` copies it."""

    weighs = True

    def __init__(self, cap: float) -> None:
        super().__init__()
        self.cap = cap

    def score_scale(self, scale: float) -> float:
        return scale / self.cap

    def weigh(self, scores: Tensor, mask: Tensor | None) -> Tensor:
        scores = torch.tanh(scores) * self.cap
        if mask is not None:  # after the cap: a masked score stays the dtype's minimum
            scores = scores + mask
        return torch.softmax(scores, dim=-1)

    def extra_repr(self) -> str:
        return f"cap={self.cap:g}"
