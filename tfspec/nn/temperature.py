"""Attention temperature tuning's step at run time (``tfspec.variants.temperature``)."""

from __future__ import annotations

import torch
from torch import Tensor

from .steps import AttentionStep


class TemperatureTuning(AttentionStep):
    """Each query multiplied by ``1 + scale · log(1 + ⌊(i + 1) / floor⌋)``, ``i`` its index in the sequence (after
    ``ctx.offset`` cached positions), computed in float32 as Llama 4's reference computes it. Torch only, so
    ``tfspec emit`` copies it."""

    def __init__(self, floor: int, scale: float) -> None:
        super().__init__()
        self.floor, self.scale = floor, scale

    def fresh_queries(self, q: Tensor, ctx) -> Tensor:
        length = q.shape[2]
        index = ctx.offset + torch.arange(length, device=q.device)
        scales = torch.log1p(torch.floor((index.float() + 1.0) / self.floor)) * self.scale + 1.0
        return (q * scales.view(1, 1, length, 1)).to(q.dtype)

    def extra_repr(self) -> str:
        return f"floor={self.floor}, scale={self.scale:g}"
