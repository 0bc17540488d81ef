"""Turn a sublayer's masks, position bias and the run-time padding into what SDPA takes.

A purely causal self-attention over a whole sequence takes SDPA's fused
``is_causal=True`` path and never materialises a T×T mask. Anything else
becomes an additive float mask: 0 where attention is allowed, the dtype's
finite minimum where it is not (so half precision does not overflow to -inf),
plus a position scheme's score bias (ALiBi). A query row that padding leaves
with no key at all falls back to its structural mask alone: the output at such
a (padded) position is meaningless, but finite, and still never reads the future.

The result is built once per call for every attention with the same masks
(``Context.once``), not once per layer.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

from .context import Context


class MaskSet:
    """The masks of one attention sublayer, resolved to their variants at build time."""

    def __init__(self, masks, cross: bool):
        self.masks = tuple(masks)
        self.structural = [(variant, options) for variant, options in masks if variant.structural]
        self.rules = [variant.bound_rule(options) for variant, options in self.structural]
        self.reads_padding = any(variant.reads_padding for variant, _ in masks)
        self.cross = cross
        # what the memo is keyed by: equal mask sets share one tensor per call
        self.key = "mask:" + ("cross:" if cross else "self:") + "+".join(
            f"{variant.name}{options.model_dump()}" for variant, options in masks)

    def allowed(self, ctx: Context, query_len: int, key_len: int, device, padding: Tensor | None
                ) -> Tensor | None:
        """Bool ``(batch or 1, 1, queries, keys)``: structure and the keys' ``padding``; None: all allowed."""
        return with_padding(self.structure(ctx, query_len, key_len, device), padding)

    def structure(self, ctx: Context, query_len: int, key_len: int, device) -> Tensor | None:
        """Bool ``(batch or 1, 1, queries, keys)`` from positions (and declared inputs); queries are the last keys."""
        if not self.structural:
            return None
        # sequence indices: the queries follow ctx.offset cached positions and the keys end with them
        # (or, in cross-attention, are the memory's)
        end = ctx.offset + query_len
        queries = torch.arange(ctx.offset, end, device=device)
        keys = torch.arange(key_len, device=device) if self.cross else torch.arange(end - key_len, end, device=device)
        return allowed_keys(*(rule(queries, keys, ctx.inputs) for rule in self.rules))

    def additive(self, ctx: Context, query_len: int, key_len: int, dtype, device, padding: Tensor | None,
                 bias: Callable[[], Tensor] | None = None, bias_key: str = "") -> Tensor | None:
        """The additive mask (0 or the dtype's minimum) plus ``bias()``; ``None`` when there is neither.

        ``padding``: the keys' padding when a mask reads it (else pass None). ``bias``
        builds a score bias ``(batch or 1, heads, queries, keys)``, called only the
        first time this call needs the mask (``bias_key`` tells equal biases apart).
        """
        def build():
            return additive_mask(self.allowed(ctx, query_len, key_len, device, padding), dtype,
                                 bias() if bias is not None else None)

        return ctx.once(f"{self.key}|{bias_key}|{ctx.offset}+{query_len}x{key_len}|{dtype}", build)


# Torch-only helpers, shared with the standalone files ``tfspec emit`` writes.
def allowed_keys(*rules: Tensor) -> Tensor | None:
    """Bool ``(batch or 1, 1, queries, keys)``: where every rule, ``(queries, keys)`` or ``(batch, queries, keys)``,
    allows a query to see a key; None when there is no rule."""
    allowed = None
    for rule in rules:
        rule = rule[None, None] if rule.dim() == 2 else rule[:, None]
        allowed = rule if allowed is None else allowed & rule
    return allowed


def with_padding(allowed: Tensor | None, padding: Tensor | None) -> Tensor | None:
    """``allowed`` without the padded keys (``padding``: (batch, keys), True at padding). A query row left with
    no key at all keeps ``allowed`` alone: its output is meaningless (it is padding) but finite."""
    if padding is None:
        return allowed
    keys = ~padding[:, None, None, :]
    kept = keys if allowed is None else allowed & keys
    empty = ~kept.any(dim=-1, keepdim=True)
    return kept | (empty if allowed is None else empty & allowed)


def additive_mask(allowed: Tensor | None, dtype: torch.dtype, bias: Tensor | None = None) -> Tensor | None:
    """What SDPA adds to the scores: ``bias`` (or 0) where ``allowed``, the dtype's finite minimum elsewhere
    (so half precision does not overflow to -inf); None when there is neither a mask nor a bias."""
    if allowed is None:
        return bias.to(dtype) if bias is not None else None
    base = torch.zeros((), dtype=dtype, device=allowed.device) if bias is None else bias.to(dtype)
    return torch.where(allowed, base, torch.finfo(dtype).min)
