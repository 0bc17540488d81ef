"""KERPLE's log kernel at run time (``tfspec.variants.kerple``): a learned score bias per head."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .position import InAttentionPositions


class LogKernelBiases(InAttentionPositions):
    """-r1_h · log(1 + r2_h · |p_i - p_j|) added to head h's scores, ``r1`` and ``r2`` learned and kept positive;
    an in-attention position scheme (see ``MultiHeadAttention``), torch only so ``tfspec emit`` copies it."""


    def __init__(self, heads: int, r1: float = 1.0, r2: float = 1.0, eps: float = 1e-2) -> None:
        super().__init__()
        self.r1 = nn.Parameter(torch.full((heads,), float(r1)))
        self.r2 = nn.Parameter(torch.full((heads,), float(r2)))
        self.eps = eps
        self.key = f"kerple:{id(self)}"  # learned per layer: no other attention shares this bias

    def score_bias(self, query_positions: Tensor, key_positions: Tensor) -> Tensor:
        distance = (query_positions[:, :, None] - key_positions[:, None, :]).abs().float()  # (batch or 1, q, k)
        r1, r2 = self.r1.clamp(min=self.eps), self.r2.clamp(min=self.eps)  # as the paper keeps them positive
        return -r1[None, :, None, None] * torch.log1p(r2[None, :, None, None] * distance[:, None])

    def extra_repr(self) -> str:
        return f"heads={self.r1.numel()}, eps={self.eps}"
