"""Soft-capped attention's runtime module (``tfspec.variants.softcap``)."""

from __future__ import annotations

import torch
from torch import Tensor

from .attention import MultiHeadAttention


class SoftCappedAttention(MultiHeadAttention):
    """The core (torch only; ``tfspec emit`` copies it): ``MultiHeadAttention`` whose scores are capped to
    ``cap · tanh(score / cap)`` before the mask is added and the softmax taken (Gemma 2)."""

    def __init__(self, *args, cap: float, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.cap = cap

    def mix(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, is_causal: bool) -> Tensor:
        assert not is_causal, "soft-capped attention has no fused causal kernel: pass the mask"
        if self.kv_heads != self.heads:  # grouped-query: each key/value head serves heads / kv_heads queries
            k = k.repeat_interleave(self.heads // self.kv_heads, dim=1)
            v = v.repeat_interleave(self.heads // self.kv_heads, dim=1)
        scale = self.scale if self.scale is not None else q.shape[-1] ** -0.5
        root = (scale / self.cap) ** 0.5  # q and k scaled as SDPA's math path scales them, by 1 / cap too
        scores = torch.tanh((q * root) @ (k * root).transpose(-1, -2)) * self.cap
        if mask is not None:  # after the cap: a masked score stays the dtype's minimum
            scores = scores + mask
        weights = self.drop(torch.softmax(scores, dim=-1))
        return weights @ v  # (batch, heads, queries, head_dim)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, cap={self.cap:g}"
