"""Attention with learned sinks' runtime module (``tfspec.variants.sinks``)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .attention import MultiHeadAttention


class SinkAttention(MultiHeadAttention):
    """The core (torch only; ``tfspec emit`` copies it): ``MultiHeadAttention`` whose softmax has one more logit
    per head, ``sinks`` (learned), that takes weight without a value: each query's weights over its keys sum to
    less than 1 where the sink outweighs them (gpt-oss; "attention sinks", Xiao et al. 2024)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.sinks = nn.Parameter(torch.empty(self.heads))

    def mix(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, is_causal: bool) -> Tensor:
        assert not is_causal, "attention with sinks has no fused causal kernel: pass the mask"
        if self.kv_heads != self.heads:  # grouped-query: each key/value head serves heads / kv_heads queries
            k = k.repeat_interleave(self.heads // self.kv_heads, dim=1)
            v = v.repeat_interleave(self.heads // self.kv_heads, dim=1)
        scale = self.scale if self.scale is not None else q.shape[-1] ** -0.5
        root = scale ** 0.5  # q and k scaled as SDPA's math path scales them
        scores = (q * root) @ (k * root).transpose(-1, -2)
        if mask is not None:
            scores = scores + mask
        sink = self.sinks.to(scores.dtype).view(1, -1, 1, 1).expand(*scores.shape[:-1], 1)
        weights = torch.softmax(torch.cat((scores, sink), dim=-1), dim=-1)[..., :-1]  # the sink's column dropped
        return self.drop(weights) @ v
