"""Additive attention (Bahdanau et al. 2015) per head: softmax_j(w_h . tanh(q_i + k_j)) v_j.

Same projections as dot-product attention plus one scoring vector per head.
The scores are a (batch, heads, queries, keys, head_dim) tensor, so this costs
head_dim times the memory of dot-product attention: use it at modest lengths.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .attention import DotProductAttention


class AdditiveAttention(DotProductAttention):
    def __init__(self, width: int, heads: int, bias: bool, cross: bool, memory_width: int, dropout: float,
                 masks) -> None:
        super().__init__(width, heads, bias, cross, memory_width, dropout, masks)
        self.score = nn.Parameter(torch.empty(heads, width // heads))

    def attend(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None) -> Tensor:
        mask, _ = self.masks(q.shape[2], k.shape[2], key_padding_mask, q.dtype, q.device, allow_fused=False)
        hidden = torch.tanh(q.unsqueeze(3) + k.unsqueeze(2))  # (batch, heads, queries, keys, head_dim)
        scores = torch.einsum("bhqkd,hd->bhqk", hidden, self.score)
        if mask is not None:
            scores = scores + mask
        weights = torch.softmax(scores, dim=-1)
        weights = nn.functional.dropout(weights, self.dropout, self.training)
        return weights @ v
