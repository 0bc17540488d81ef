"""The output gate's step at run time (``tfspec.variants.output_gate``)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .steps import AttentionStep


class OutputGate(AttentionStep):
    """The heads' joined outputs times σ(x W_g + b), a gate per output feature computed from the attention's input
    (Qwen3-Next's and Qwen3.5's gated attention). Torch only, so ``tfspec emit`` copies it."""

    def __init__(self, width: int, features: int, bias: bool) -> None:
        super().__init__()
        self.proj = nn.Linear(width, features, bias=bias)

    def joined_output(self, y: Tensor, x: Tensor) -> Tensor:
        return y * torch.sigmoid(self.proj(x))
