"""Quick GELU at run time (``tfspec.variants.quick_gelu``)."""

from __future__ import annotations

import torch
from torch import Tensor, nn


class QuickGELU(nn.Module):
    """x · sigmoid(1.702 x): CLIP's activation. Torch only, so ``tfspec emit`` copies it."""

    def forward(self, x: Tensor) -> Tensor:
        return x * torch.sigmoid(1.702 * x)
