"""Additive attention (Bahdanau et al. 2015) per head: softmax_j(w_h . tanh(q_i + k_j)) v_j.

Same projections as dot-product attention plus one scoring vector per head.
The scores are a (batch, heads, queries, keys, head_dim) tensor, so this costs
head_dim times the memory of dot-product attention: use it at modest lengths.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .attention import DotProductAttention
from .context import Context


class AdditiveAttention(DotProductAttention):
    def __init__(self, config) -> None:
        super().__init__(config)
        self.score = nn.Parameter(torch.empty(self.heads, self.head_dim))

    def attend(self, q: Tensor, k: Tensor, v: Tensor, ctx: Context, key_positions: Tensor | None,
               padding: Tensor | None) -> Tensor:
        mask = self.bias(ctx, key_positions, q.dtype, q.device, padding, q.shape[2], k.shape[2])
        hidden = torch.tanh(q.unsqueeze(3) + k.unsqueeze(2))  # (batch, heads, queries, keys, head_dim)
        scores = torch.einsum("bhqkd,hd->bhqk", hidden, self.score)
        if mask is not None:
            scores = scores + mask
        weights = torch.softmax(scores, dim=-1)
        weights = nn.functional.dropout(weights, self.dropout, self.training)
        return weights @ v
