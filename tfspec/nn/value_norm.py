"""The value norm's step at run time (``tfspec.variants.value_norm``)."""

from __future__ import annotations

import torch
from torch import Tensor

from .steps import AttentionStep


class ValueNorm(AttentionStep):
    """Each head's new values divided by their root mean square, in float32 (Gemma 4's ``v_norm``, which has no
    weight), before a KV cache keeps them. Torch only, so ``tfspec emit`` copies it."""

    def __init__(self, eps: float) -> None:
        super().__init__()
        self.eps = eps

    def fresh_values(self, v: Tensor, ctx) -> Tensor:
        # a copy: what backward keeps is the values, not the projection they are a view of
        x = v.to(torch.float32, copy=True)
        return (x * torch.pow(x.pow(2).mean(-1, keepdim=True) + self.eps, -0.5)).type_as(v)

    def extra_repr(self) -> str:
        return f"eps={self.eps:g}"
