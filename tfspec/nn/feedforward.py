"""Position-wise feed-forward network: down(dropout(act(up(x)))), or a gated unit.

A gated unit's ``up`` makes 2·d_ff features: act(first half) * second half.
"""

from __future__ import annotations

from torch import Tensor, nn


class FeedForward(nn.Module):
    def __init__(self, width: int, d_ff: int, activation: nn.Module, gated: bool, bias: bool, dropout: float):
        super().__init__()
        self.gated = gated
        self.up = nn.Linear(width, 2 * d_ff if gated else d_ff, bias=bias)
        self.activation = activation
        self.dropout = nn.Dropout(dropout)
        self.down = nn.Linear(d_ff, width, bias=bias)

    def forward(self, x: Tensor) -> Tensor:
        h = self.up(x)
        if self.gated:
            gate, value = h.chunk(2, dim=-1)
            h = self.activation(gate) * value
        else:
            h = self.activation(h)
        return self.down(self.dropout(h))
