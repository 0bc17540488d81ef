"""ALiBi at run time: a (batch or 1, heads, queries, keys) score bias -m_h·|p_i - p_j| from the position ids."""

from __future__ import annotations

import torch
from torch import Tensor

from .position import InAttentionPositions


class LinearBiases(InAttentionPositions):
    """An in-attention position scheme (see ``MultiHeadAttention``); torch only, so ``tfspec emit`` copies it."""


    def __init__(self, slopes: list[float]) -> None:
        super().__init__()
        self.slopes = list(slopes)  # not a buffer: it stays float32 whatever the model's dtype
        self.key = f"alibi:{self.slopes}"

    def score_bias(self, query_positions: Tensor, key_positions: Tensor) -> Tensor:
        slopes = torch.tensor(self.slopes, dtype=torch.float32, device=query_positions.device)
        distance = (query_positions[:, :, None] - key_positions[:, None, :]).abs().float()  # (batch or 1, q, k)
        return -slopes[None, :, None, None] * distance[:, None]

    def extra_repr(self) -> str:
        return f"heads={len(self.slopes)}, slopes={self.slopes[0]:.4g}..{self.slopes[-1]:.4g}"
