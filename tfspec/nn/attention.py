"""Multi-head scaled dot-product attention through ``F.scaled_dot_product_attention``.

Self-attention projects Q, K and V with one fused linear (``qkv``, rows
[q; k; v]); cross-attention projects queries with ``q`` and the memory with a
fused ``kv``. Heads are contiguous slices of the width, as in
``torch.nn.MultiheadAttention`` and Hugging Face models, so weights map across
without permutation.

During incremental decoding a ``KVCache`` keeps each sublayer's keys and
values: self-attention appends the new positions' and attends over all of
them, cross-attention projects the memory once and reuses it, so a new token
costs O(n) rather than recomputing the whole prefix.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .masking import MaskSet


class KVCache:
    """Keys and values ``(batch, heads, positions, head_dim)`` of one attention sublayer."""

    def __init__(self) -> None:
        self.k: Tensor | None = None
        self.v: Tensor | None = None

    def __len__(self) -> int:
        return 0 if self.k is None else self.k.shape[2]

    def reorder(self, rows: Tensor) -> None:
        """Keep batch rows ``rows`` (beam search follows its surviving hypotheses)."""
        if self.k is not None:
            self.k, self.v = self.k.index_select(0, rows), self.v.index_select(0, rows)


def cache_slot(cache: dict[str, KVCache] | None, name: str) -> KVCache | None:
    """The cache of sublayer ``name`` in a layer's cache dict (created on first use); None without one."""
    if cache is None:
        return None
    if name not in cache:
        cache[name] = KVCache()
    return cache[name]


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

    def forward(self, x: Tensor, memory: Tensor | None = None, key_padding_mask: Tensor | None = None,
                cache: KVCache | None = None) -> Tensor:
        batch, length, width = x.shape
        if self.cross:
            q = self.split(self.q(x))
            if cache is not None and cache.k is not None:
                k, v = cache.k, cache.v
            else:
                k, v = map(self.split, self.kv(memory).chunk(2, dim=-1))
                if cache is not None:
                    cache.k, cache.v = k, v
        else:
            q, k, v = map(self.split, self.qkv(x).chunk(3, dim=-1))
            if cache is not None:
                if cache.k is not None:
                    k, v = torch.cat((cache.k, k), dim=2), torch.cat((cache.v, v), dim=2)
                cache.k, cache.v = k, v
        y = self.attend(q, k, v, key_padding_mask)
        return self.out(y.transpose(1, 2).reshape(batch, length, width))

    def split(self, t: Tensor) -> Tensor:
        """(batch, length, width) -> (batch, heads, length, head_dim)."""
        return t.view(t.shape[0], t.shape[1], self.heads, -1).transpose(1, 2)

    def attend(self, q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None) -> Tensor:
        """(batch, heads, queries, head_dim) attention output."""
        mask, is_causal = self.masks(q.shape[2], k.shape[2], key_padding_mask, q.dtype, q.device)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal,
                                              dropout_p=self.dropout if self.training else 0.0)

    def extra_repr(self) -> str:
        return f"heads={self.heads}, cross={self.cross}, dropout={self.dropout}"
