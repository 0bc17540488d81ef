"""Differential attention's step (Ye et al. 2024, "Differential Transformer"): each pair of heads (h and h + H/2)
subtracts λ times the second softmax's mix from the first's, over values of two heads' width, then norms the
difference per head. As Hugging Face's ``DiffLlamaAttention``: λ = exp(λ_q1·λ_k1) − exp(λ_q2·λ_k2) + λ_init, with
λ_init = 0.8 − 0.6·exp(−0.3·layer) by the layer's depth, and the output (1 − λ_init)·RMSNorm(difference).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .steps import AttentionStep


class DifferentialHeads(AttentionStep):
    """Pairs the values of the first and second half of the key/value heads (``mixed_values``), and subtracts
    and norms the pairs of heads' outputs (``head_output``). Torch only, so ``tfspec emit`` copies it."""

    def __init__(self, head_dim: int, layer: int, eps: float) -> None:
        super().__init__()
        self.lambda_q1, self.lambda_k1, self.lambda_q2, self.lambda_k2 = (
            nn.Parameter(torch.empty(head_dim)) for _ in range(4))
        self.eps = eps
        self.lambda_init = 0.8 - 0.6 * math.exp(-0.3 * layer)  # deeper layers subtract more

    def attend(self, mix, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, query_positions: Tensor,
               key_positions: Tensor, scale: float | None, drop) -> Tensor:
        """Each half of the paired values mixed on its own, as Hugging Face's two calls: a fused kernel takes
        values of the keys' width only (with attention dropout, each call drops its own weights)."""
        first, second = v.chunk(2, dim=-1)
        return torch.cat((mix(q, k, first, mask), mix(q, k, second, mask)), dim=-1)

    def mixed_values(self, v: Tensor) -> Tensor:
        """(batch, kv_heads, keys, 2 · head_dim): kv head j mixes the values of heads j and j + kv_heads / 2 of the
        first half (the second half's heads repeat the first's), as Hugging Face's two calls do."""
        first, second = v.chunk(2, dim=1)
        return torch.cat((first.repeat(1, 2, 1, 1), second.repeat(1, 2, 1, 1)), dim=-1)

    def head_output(self, y: Tensor) -> Tensor:
        """(batch, heads / 2, queries, 2 · head_dim): the first half's heads less λ times the second half's."""
        first, second = y.contiguous().chunk(2, dim=1)  # (attention in bands: its rows, not its blocks' padded ones)
        lambda_1 = torch.exp(torch.sum(self.lambda_q1 * self.lambda_k1, dim=-1, dtype=torch.float32)).to(y.dtype)
        lambda_2 = torch.exp(torch.sum(self.lambda_q2 * self.lambda_k2, dim=-1, dtype=torch.float32)).to(y.dtype)
        difference = first - (lambda_1 - lambda_2 + self.lambda_init) * second
        return (1 - self.lambda_init) * F.rms_norm(difference, (difference.shape[-1],), eps=self.eps)

    def extra_repr(self) -> str:
        return f"head_dim={self.lambda_q1.numel()}, lambda_init={self.lambda_init:.4g}, eps={self.eps}"
