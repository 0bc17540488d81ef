"""Multi-head scaled dot-product attention through ``F.scaled_dot_product_attention``.

Self-attention projects Q, K and V with one fused linear (``qkv``, rows
[q; k; v]); cross-attention projects queries with ``q`` and the memory with a
fused ``kv``. Heads are contiguous slices of the width, as in
``torch.nn.MultiheadAttention`` and Hugging Face models, so weights map across
without permutation.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from .masking import MaskSet


class DotProductAttention(nn.Module):
    def __init__(self, width: int, heads: int, bias: bool, cross: bool, memory_width: int, dropout: float,
                 masks) -> None:
        super().__init__()
        self.heads, self.cross, self.dropout = heads, cross, dropout
        if cross:
            self.q = nn.Linear(width, width, bias=bias)
            self.kv = nn.Linear(memory_width, 2 * width, bias=bias)
        else:
            self.qkv = nn.Linear(width, 3 * width, bias=bias)
        self.out = nn.Linear(width, width, bias=bias)
        self.masks = MaskSet(masks)

    def forward(self, x: Tensor, memory: Tensor | None = None, key_padding_mask: Tensor | None = None) -> Tensor:
        batch, length, width = x.shape
        if self.cross:
            q = self.q(x)
            k, v = self.kv(memory).chunk(2, dim=-1)
        else:
            q, k, v = self.qkv(x).chunk(3, dim=-1)
        q, k, v = (t.view(batch, t.shape[1], self.heads, -1).transpose(1, 2) for t in (q, k, v))
        y = self.attend(q, k, v, key_padding_mask)
        return self.out(y.transpose(1, 2).reshape(batch, length, width))

    def attend(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None) -> Tensor:
        """(batch, heads, queries, head_dim) attention output."""
        mask, is_causal = self.masks(q.shape[2], k.shape[2], key_padding_mask, q.dtype, q.device)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal,
                                              dropout_p=self.dropout if self.training else 0.0)

    def extra_repr(self) -> str:
        return f"heads={self.heads}, cross={self.cross}, dropout={self.dropout}"
