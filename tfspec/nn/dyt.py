"""DyT's runtime module (``tfspec.variants.dyt``)."""

import torch
from torch import Tensor, nn


class DynamicTanh(nn.Module):
    """``weight · tanh(alpha · x) + bias`` over the last dimension (Zhu et al. 2025): where a norm stands, with
    no mean or variance; ``alpha`` is one learned scalar."""

    def __init__(self, dim: int, alpha: float = 0.5) -> None:
        super().__init__()
        self.alpha = nn.Parameter(torch.full((1,), alpha))
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))

    def forward(self, x: Tensor) -> Tensor:
        return self.weight * torch.tanh(self.alpha * x) + self.bias
