"""The gain's runtime module (``tfspec.variants.gain``)."""

import torch
from torch import Tensor, nn


class Gain(nn.Module):
    """``x · weight`` over the last dimension: ``width`` weights (one per channel) or one; ``trained=False`` keeps
    it out of training (``requires_grad`` off), as a value read with the weights."""

    def __init__(self, width: int, init: float = 1.0, trained: bool = True) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.full((width,), float(init)), requires_grad=trained)

    def forward(self, x: Tensor) -> Tensor:
        return x * self.weight

    def extra_repr(self) -> str:
        return f"width={self.weight.shape[0]}, trained={self.weight.requires_grad}"
