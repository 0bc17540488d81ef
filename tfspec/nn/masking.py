"""Turn a sublayer's masks and the run-time padding mask into what SDPA takes.

A purely causal self-attention over a whole sequence takes SDPA's fused
``is_causal=True`` path and never materialises a T×T mask. Anything else
becomes an additive float mask: 0 where attention is allowed, the dtype's
finite minimum where it is not (so half precision does not overflow to -inf).
A query row that padding leaves with no key at all falls back to its
structural mask alone: the output at such a (padded) position is meaningless,
but finite, and still never reads the future.
"""

from __future__ import annotations

import torch
from torch import Tensor



class MaskSet:
    """The masks of one attention sublayer, resolved to their variants at build time."""

    def __init__(self, masks):
        self.structural = [(variant, options) for variant, options in masks if variant.structural]
        self.uses_padding = any(variant.uses_padding for variant, _ in masks)
        self.fused_causal = (len(self.structural) == 1 and self.structural[0][0].fused_causal)

    def __call__(self, query_len: int, key_len: int, key_padding_mask: Tensor | None, dtype: torch.dtype,
                 device: torch.device, allow_fused: bool = True) -> tuple[Tensor | None, bool]:
        """``(additive mask broadcastable to (batch, heads, queries, keys) or None, is_causal)``."""
        padding = key_padding_mask if self.uses_padding else None
        if padding is None and self.fused_causal and allow_fused and query_len == key_len:
            return None, True
        allowed = self.structure(query_len, key_len, device)
        if padding is not None:
            keys = ~padding[:, None, None, :]
            with_padding = keys if allowed is None else allowed & keys
            empty = ~with_padding.any(dim=-1, keepdim=True)
            allowed = with_padding | (empty if allowed is None else empty & allowed)
        if allowed is None:
            return None, False
        bias = torch.zeros(allowed.shape, dtype=dtype, device=device)
        return bias.masked_fill_(~allowed, torch.finfo(dtype).min), False

    def structure(self, query_len: int, key_len: int, device: torch.device) -> Tensor | None:
        """Bool ``(queries, keys)`` from positions alone; queries are the last ``query_len`` positions."""
        if not self.structural:
            return None
        keys = torch.arange(key_len, device=device)
        queries = keys[key_len - query_len:]
        allowed = None
        for variant, options in self.structural:
            rule = variant.allowed(queries, keys, options)
            allowed = rule if allowed is None else allowed & rule
        return allowed
