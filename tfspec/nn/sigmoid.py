"""Sigmoid attention's runtime module (``tfspec.variants.sigmoid``)."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from .attention import MultiHeadAttention


class SigmoidAttention(MultiHeadAttention):
    """The core (torch only; ``tfspec emit`` copies it): ``MultiHeadAttention`` weighting each value by
    ``sigmoid(q·k · scale - log(n))`` on its own, with no softmax across keys (Ramapuram et al. 2024). ``n`` is a
    fixed sequence length (the paper's), not the keys of the call, so a KV cache computes what recomputation does."""

    def __init__(self, *args, n: int, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.n = n

    def mix(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, is_causal: bool) -> Tensor:
        assert not is_causal, "sigmoid attention has no fused causal kernel: pass the mask"
        if self.kv_heads != self.heads:  # grouped-query: each key/value head serves heads / kv_heads queries
            k = k.repeat_interleave(self.heads // self.kv_heads, dim=1)
            v = v.repeat_interleave(self.heads // self.kv_heads, dim=1)
        root = (self.scale if self.scale is not None else q.shape[-1] ** -0.5) ** 0.5  # as SDPA scales q and k
        scores = (q * root) @ (k * root).transpose(-1, -2) - math.log(self.n)
        if mask is not None:  # a masked score is the dtype's minimum, whose sigmoid is 0
            scores = scores + mask
        weights = self.drop(torch.sigmoid(scores))
        return weights @ v  # (batch, heads, queries, head_dim)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, n={self.n}"
