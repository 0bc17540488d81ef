"""Squared ReLU at run time (``tfspec.variants.squared_relu``)."""

from __future__ import annotations

import torch
from torch import Tensor, nn


class SquaredReLU(nn.Module):
    """max(0, x)²: Primer's feed-forward activation (So et al. 2021). Torch only, so ``tfspec emit`` copies it."""

    def forward(self, x: Tensor) -> Tensor:
        return torch.relu(x).square()
