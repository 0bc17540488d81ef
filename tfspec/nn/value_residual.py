"""Value residual learning's step at run time (``tfspec.variants.value_residual``)."""

from __future__ import annotations

from torch import Tensor

from .steps import AttentionStep


class ValueResidual(AttentionStep):
    """Each new position's values ``λ·v + (1 − λ)·v₁``, with v₁ the first layer's values at that position, handed
    on through the call's ``Context.carried`` under ``source``. Torch only, so ``tfspec emit`` copies it."""

    def __init__(self, source: str, lam: float) -> None:
        super().__init__()
        self.source, self.lam = source, lam

    def fresh_values(self, v: Tensor, ctx) -> Tensor:
        return self.lam * v + (1 - self.lam) * ctx.carried[self.source]

    def extra_repr(self) -> str:
        return f"lam={self.lam:g}, source={self.source}"
