"""Gemma's RMSNorm at run time (``tfspec.variants.gemma_rmsnorm``)."""

import torch
from torch import Tensor, nn


class UnitOffsetRMSNorm(nn.Module):
    """``x / sqrt(mean(x²) + eps) · (1 + weight)`` over the last dimension, in float32, cast back to ``x``'s
    dtype; ``weight`` is the scale's offset from one."""

    def __init__(self, dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(dim))

    def forward(self, x: Tensor) -> Tensor:
        h = x.float()
        normed = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        # normed + normed · w keeps only normed (and the parameter) for backward: no (1 + w) copy per call
        return torch.addcmul(normed, normed, self.weight.float()).type_as(x)

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, eps={self.eps}"
