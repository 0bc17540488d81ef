"""Multi-head attention through ``F.scaled_dot_product_attention``, with grouped-query heads and a KV cache.

Self-attention projects Q, K and V with one fused linear (``qkv``, rows
[q; k; v]); cross-attention projects queries with ``q`` and the memory with a
fused ``kv``. Heads are contiguous slices, as in ``torch.nn.MultiheadAttention``
and Hugging Face models, so weights map across without permutation. With fewer
key/value heads than query heads (grouped-query attention) SDPA's
``enable_gqa`` lets each kv head serve its group without copies.

Per head, optionally: a norm over queries and keys (qk-norm), then the position
scheme acting in attention (rotary rotates q and k; ALiBi biases the scores).

During incremental decoding a ``KVCache`` keeps each sublayer's keys and values
in a preallocated buffer (grown by doubling, so a token costs no copy of the
cache): self-attention appends the new positions and attends over all of them,
cross-attention projects the memory once. A layer whose masks bound how far back
a query looks (``window(k)`` with ``causal``) keeps only that many keys.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..registry import combined_reach
from .context import Context
from .masking import MaskSet


class KVCache:
    """Keys and values ``(batch, kv_heads, positions, head_dim)`` of one attention sublayer, with their
    position ids and padding; ``keep``: how many past keys the next query can still see (None: all)."""

    def __init__(self, keep: int | None = None) -> None:
        self.keep = keep
        self.k: Tensor | None = None  # a buffer; the first `length` positions are filled
        self.v: Tensor | None = None
        self.positions: Tensor | None = None  # (batch or 1, length)
        self.padding: Tensor | None = None  # (batch, length) or None: no padded keys
        self.length = 0

    def __len__(self) -> int:
        return self.length

    def append(self, k: Tensor, v: Tensor, positions: Tensor, padding: Tensor | None
               ) -> tuple[Tensor, Tensor, Tensor, Tensor | None]:
        """Add new keys/values; return everything the new queries attend to (views into the buffers)."""
        new = k.shape[2]
        if self.k is None or self.length + new > self.k.shape[2]:
            self._grow(max(2 * (self.length + new), 16), k, v)
        self.k[:, :, self.length:self.length + new] = k
        self.v[:, :, self.length:self.length + new] = v
        self.positions = positions if self.positions is None else torch.cat((self.positions, positions), dim=1)
        if padding is not None or self.padding is not None:
            old = self.padding if self.padding is not None else torch.zeros(
                k.shape[0], self.length, dtype=torch.bool, device=k.device)
            fresh = padding if padding is not None else torch.zeros(k.shape[0], new, dtype=torch.bool,
                                                                    device=k.device)
            self.padding = torch.cat((old, fresh), dim=1)
        self.length += new
        return self.k[:, :, :self.length], self.v[:, :, :self.length], self.positions, self.padding

    def trim(self) -> None:
        """Forget keys no later query can see (a bounded look-back)."""
        if self.keep is None or self.length <= self.keep:
            return
        drop = self.length - self.keep
        self.k[:, :, :self.keep] = self.k[:, :, drop:self.length].clone()
        self.v[:, :, :self.keep] = self.v[:, :, drop:self.length].clone()
        self.positions = self.positions[:, drop:]
        self.padding = self.padding[:, drop:] if self.padding is not None else None
        self.length = self.keep

    def _grow(self, capacity: int, k: Tensor, v: Tensor) -> None:
        shape = (k.shape[0], k.shape[1], capacity, k.shape[3])
        buffers = (k.new_empty(shape), v.new_empty(shape[:3] + (v.shape[3],)))
        if self.k is not None:
            buffers[0][:, :, :self.length] = self.k[:, :, :self.length]
            buffers[1][:, :, :self.length] = self.v[:, :, :self.length]
        self.k, self.v = buffers

    def set(self, k: Tensor, v: Tensor) -> None:
        """Cross-attention: the memory's keys and values, projected once."""
        self.k, self.v, self.length = k, v, k.shape[2]

    def reorder(self, rows: Tensor) -> None:
        """Keep batch rows ``rows`` (beam search follows its surviving hypotheses)."""
        if self.k is not None:
            self.k, self.v = self.k.index_select(0, rows), self.v.index_select(0, rows)
        if self.positions is not None and self.positions.shape[0] > 1:
            self.positions = self.positions.index_select(0, rows)
        if self.padding is not None:
            self.padding = self.padding.index_select(0, rows)


def cache_slot(cache: dict[str, KVCache] | None, name: str, keep: int | None = None) -> KVCache | None:
    """The cache of sublayer ``name`` in a layer's cache dict (created on first use); None without one."""
    if cache is None:
        return None
    if name not in cache:
        cache[name] = KVCache(keep)
    return cache[name]


class DotProductAttention(nn.Module):
    """softmax(q k^T · scale + bias) v per head; ``config`` is a ``tfspec.registry.AttentionConfig``."""

    def __init__(self, config) -> None:
        super().__init__()
        shape = config.shape
        self.heads, self.kv_heads, self.head_dim = shape.heads, shape.kv_heads, shape.head_dim
        self.cross, self.dropout, self.scale = shape.cross, config.dropout, config.scale
        if shape.cross:
            self.q = nn.Linear(shape.width, shape.q_width, bias=shape.bias)
            self.kv = nn.Linear(shape.memory_width, 2 * shape.kv_width, bias=shape.bias)
        else:
            self.qkv = nn.Linear(shape.width, shape.q_width + 2 * shape.kv_width, bias=shape.bias)
        self.out = nn.Linear(shape.q_width, shape.width, bias=shape.out_bias)
        self.q_norm = self.k_norm = None
        if config.qk_norm is not None:
            norm, options = config.qk_norm
            self.q_norm, self.k_norm = norm.build(shape.head_dim, options), norm.build(shape.head_dim, options)
        self.position = None
        if config.position is not None:
            scheme, options = config.position
            self.position = scheme.build(shape, options)
        self.masks = MaskSet(config.masks, shape.cross)
        behind, ahead = combined_reach(config.masks)
        self.keep = behind if behind is not None and ahead == 0 else None  # a KV cache needs no older keys

    def forward(self, x: Tensor, ctx: Context | None = None, cache: KVCache | None = None) -> Tensor:
        """``x`` (batch, length, width); ``ctx`` defaults to positions 0..length-1 and no padding or memory."""
        batch, length, _ = x.shape
        ctx = ctx if ctx is not None else Context(torch.arange(length, device=x.device)[None])
        q, k, v, key_positions, key_padding = self.project(x, ctx, cache)
        y = self.attend(q, k, v, ctx, key_positions, key_padding)  # (batch, heads, length, head_dim)
        if cache is not None and not self.cross:
            cache.trim()
        return self.out(y.transpose(1, 2).reshape(batch, length, self.heads * self.head_dim))

    def split(self, t: Tensor, heads: int) -> Tensor:
        """(batch, length, heads * head_dim) -> (batch, heads, length, head_dim)."""
        return t.view(t.shape[0], t.shape[1], heads, self.head_dim).transpose(1, 2)

    def project(self, x: Tensor, ctx: Context, cache: KVCache | None):
        """Queries, keys, values (per head, normed and position-encoded), the keys' positions and padding."""
        if self.cross:
            q = self.norm_heads(self.split(self.q(x), self.heads), self.q_norm)
            padding = ctx.memory_padding if self.masks.reads_padding else None
            if cache is not None and cache.k is not None:
                return q, cache.k, cache.v, None, padding
            k, v = (self.split(t, self.kv_heads) for t in self.kv(ctx.memory).chunk(2, dim=-1))
            k = self.norm_heads(k, self.k_norm)
            if cache is not None:
                cache.set(k, v)
            return q, k, v, None, padding
        q_width, kv_width = self.heads * self.head_dim, self.kv_heads * self.head_dim
        q, k, v = self.qkv(x).split((q_width, kv_width, kv_width), dim=-1)
        q, k, v = self.split(q, self.heads), self.split(k, self.kv_heads), self.split(v, self.kv_heads)
        q, k = self.norm_heads(q, self.q_norm), self.norm_heads(k, self.k_norm)
        if self.position is not None:
            q, k = self.position.rotate(q, k, ctx)
        positions, padding = ctx.positions, ctx.padding if self.masks.reads_padding else None
        if cache is not None:
            k, v, positions, padding = cache.append(k, v, positions, padding)
        return q, k, v, positions, padding

    @staticmethod
    def norm_heads(t: Tensor, norm: nn.Module | None) -> Tensor:
        return t if norm is None else norm(t)

    def bias(self, ctx: Context, key_positions: Tensor | None, dtype, device, padding: Tensor | None,
             query_len: int, key_len: int) -> Tensor | None:
        """The additive mask, with the position scheme's score bias (ALiBi) folded in; shared per call."""
        if self.position is None or not self.position.biases_scores:
            return self.masks.additive(ctx, query_len, key_len, dtype, device, padding)
        return self.masks.additive(ctx, query_len, key_len, dtype, device, padding,
                                   lambda: self.position.score_bias(ctx.positions, key_positions),
                                   self.position.key)

    def attend(self, q: Tensor, k: Tensor, v: Tensor, ctx: Context, key_positions: Tensor | None,
               padding: Tensor | None) -> Tensor:
        """(batch, heads, queries, head_dim) attention output; ``padding``: the keys', when a mask reads it."""
        query_len, key_len = q.shape[2], k.shape[2]
        biased = self.position is not None and self.position.biases_scores
        fused = self.masks.fused(query_len, key_len, padding) and not biased
        mask = None if fused else self.bias(ctx, key_positions, q.dtype, q.device, padding, query_len, key_len)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=fused, scale=self.scale,
                                              dropout_p=self.dropout if self.training else 0.0,
                                              enable_gqa=self.kv_heads != self.heads)

    def extra_repr(self) -> str:
        kv = f", kv_heads={self.kv_heads}" if self.kv_heads != self.heads else ""
        return f"heads={self.heads}{kv}, head_dim={self.head_dim}, cross={self.cross}, dropout={self.dropout}"


class InAttentionPosition(nn.Module):
    """Base of the runtime part of a position scheme acting inside attention (``Position.acts == "attention"``).

    Override ``rotate`` (rotary: transform each head's queries and keys by their
    positions) and/or ``score_bias`` with ``biases_scores = True`` (ALiBi: add a
    bias to the scores from query and key positions).
    """

    biases_scores = False
    key = ""  # identifies the score bias, so equal schemes share one tensor per call

    def rotate(self, q: Tensor, k: Tensor, ctx: Context) -> tuple[Tensor, Tensor]:
        """q ``(batch, heads, n, head_dim)`` and the new k ``(batch, kv_heads, n, head_dim)`` at ``ctx.positions``."""
        return q, k

    def score_bias(self, query_positions: Tensor, key_positions: Tensor) -> Tensor | None:
        """``(batch or 1, heads, queries, keys)`` added to the scores."""
        return None
