"""xIELU (Huang 2024, "Deriving Activation Functions Using Integration"), as Apertus runs it: a trained quadratic for
positive inputs and a trained exponential-minus-linear for negative ones, both plus ``beta * x``."""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch.nn import functional as F


class XIELU(nn.Module):
    """xIELU(x) = α_p·x² + β·x where x > 0, else (expm1(min(x, ε)) − x)·α_n + β·x, with α_p = softplus(a_p) and
    α_n = β + softplus(a_n) from the trained ``alpha_p`` and ``alpha_n`` (one each); β and ε are constants."""

    def __init__(self, beta: float = 0.5, eps: float = -1e-6) -> None:
        super().__init__()
        self.alpha_p = nn.Parameter(torch.empty(1))
        self.alpha_n = nn.Parameter(torch.empty(1))
        self.beta, self.eps = beta, eps

    def forward(self, x: Tensor) -> Tensor:
        alpha_p = F.softplus(self.alpha_p)
        alpha_n = self.beta + F.softplus(self.alpha_n)
        return torch.where(x > 0, alpha_p * x * x + self.beta * x,
                           (torch.expm1(torch.clamp(x, max=self.eps)) - x) * alpha_n + self.beta * x)

    def extra_repr(self) -> str:
        return f"beta={self.beta:g}, eps={self.eps:g}"
