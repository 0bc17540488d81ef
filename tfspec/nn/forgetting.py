"""The Forgetting Transformer's forget gate (Lin et al. 2025): an attention step adding Σ_{l=j+1..i} log f_l to the
score of query i and key j ≤ i, with f_t = sigmoid(w_h·x_t + b_h) per head.

The sum is c_i − c_j with c the running sum of the log gates, so the step makes c from the input (an extra per
position, kept beside each key in a KV cache) and continues it from the cache's carry while decoding. A padded
position's gate is 1 (log 0): a left-padded row sums what it does unpadded. The terms stay float32.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .steps import AttentionStep, Side


class ForgetGate(AttentionStep):
    """One log forget gate per head and position, summed along the sequence (torch only; ``tfspec emit`` copies
    it). Parameters: ``weight`` (heads, width) and ``bias`` (heads)."""

    float32_scores = True

    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(heads, width))
        self.bias = nn.Parameter(torch.empty(heads))
        self.key = f"forget:{id(self)}"  # each layer's gates are its own

    def extras(self, x: Tensor, ctx, carry) -> dict[str, Tensor]:
        log_gates = F.logsigmoid(F.linear(x, self.weight, self.bias).float())  # (batch, length, heads)
        if ctx is not None and ctx.padding is not None:
            log_gates = log_gates.masked_fill(ctx.padding[..., None], 0.0)
        total = log_gates.cumsum(dim=1)
        before = carry.get("forget") if carry is not None else None
        if before is not None:
            total = total + before[:, None]
        if carry is not None:
            carry.keep("forget", total[:, -1])
        return {"forget": total.transpose(1, 2)}  # (batch, heads, length)

    def score_terms(self, queries: Side, keys: Side) -> Tensor:
        return queries.extras["forget"][..., :, None] - keys.extras["forget"][..., None, :]

    def extra_repr(self) -> str:
        return f"heads={self.weight.shape[0]}, width={self.weight.shape[1]}"
