"""Additive attention (Bahdanau et al. 2015) per head: softmax_j(w_h . tanh(q_i + k_j)) v_j.

Same projections as dot-product attention plus one scoring vector per head.
The scores are a (batch, heads, queries, keys, head_dim) tensor, so this costs
head_dim times the memory of dot-product attention: use it at modest lengths.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .attention import MultiHeadAttention


class AdditiveAttention(MultiHeadAttention):
    """The core (torch only; ``tfspec emit`` copies it): ``MultiHeadAttention`` scoring by w . tanh(q + k)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.score = nn.Parameter(torch.empty(self.heads, self.head_dim))

    def mix(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, is_causal: bool) -> Tensor:
        assert not is_causal, "additive attention has no fused causal kernel: pass the mask"
        hidden = torch.tanh(q.unsqueeze(3) + k.unsqueeze(2))  # (batch, heads, queries, keys, head_dim)
        # a product and a sum, not a matrix product: a matmul would copy `hidden` whenever its layout does not
        # fold into batched rows, and its layout follows how q and k were made (a qk-norm makes them contiguous)
        scores = (hidden * self.score[:, None, None, :]).sum(-1)
        if mask is not None:
            scores = scores + mask
        weights = torch.softmax(scores, dim=-1)
        weights = self.drop(weights)
        return weights @ v
