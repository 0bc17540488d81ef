"""Position-wise feed-forward network: down(dropout(act(up(x)))).

A gated unit's ``up`` makes 2·d_ff features, and its activation (``Gated``) turns them into act(first half) *
second half.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .recompute import linear_of_activation


class FeedForward(nn.Module):
    def __init__(self, width: int, d_ff: int, activation: nn.Module, up_features: int, bias: bool, dropout: float):
        super().__init__()
        self.up = nn.Linear(width, up_features, bias=bias)
        self.activation = activation
        self.dropout = nn.Dropout(dropout)
        self.down = nn.Linear(d_ff, width, bias=bias)

    def forward(self, x: Tensor, ctx=None) -> Tensor:
        """``x`` (..., width); ``ctx``, the call's ``Context``, as every feed-forward of a layer receives it (one
        network maps each position alike and reads none of it)."""
        h = self.up(x)
        if self.training and self.dropout.p:  # ``down`` keeps the dropped values, not the activation's
            return self.down(self.dropout(self.activation(h)))
        return linear_of_activation(self.down, self.activation, h)


class Gated(nn.Module):
    """A gated linear unit's activation: ``gate(first half) * second half`` of its input's last dimension."""

    def __init__(self, gate: nn.Module) -> None:
        super().__init__()
        self.gate = gate

    def forward(self, h: Tensor) -> Tensor:
        gate, value = h.chunk(2, dim=-1)
        return self.gate(gate) * value


class ScaledSiLU(nn.Module):
    """silu(scale · x): a gate multiplied by a constant first (Falcon-H1's gate multiplier)."""

    def __init__(self, scale: float) -> None:
        super().__init__()
        self.scale = scale

    def forward(self, x: Tensor) -> Tensor:
        return F.silu(x * self.scale)

    def extra_repr(self) -> str:
        return f"scale={self.scale}"


class ClampedSwiGLU(nn.Module):
    """gpt-oss's gated unit: the gate clamped above at ``limit``, the value to [-limit, limit], and
    ``(value + 1) · gate · sigmoid(alpha · gate)``, over the first (gate) and second (value) halves."""

    def __init__(self, alpha: float, limit: float) -> None:
        super().__init__()
        self.alpha, self.limit = alpha, limit

    def forward(self, h: Tensor) -> Tensor:
        gate, value = h.chunk(2, dim=-1)
        gate = gate.clamp(max=self.limit)
        value = value.clamp(min=-self.limit, max=self.limit)
        return (value + 1) * (gate * torch.sigmoid(gate * self.alpha))

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}, limit={self.limit}"
