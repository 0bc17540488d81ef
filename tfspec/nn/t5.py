"""T5's relative attention bias at run time: one learned scalar per (offset bucket, head), added to the scores.

A stack owns one ``BucketedRelativeBias`` per self-attention sublayer; its bias is built once per call and
every layer adds it (see ``tfspec.variants.t5``).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .position import InAttentionPositions


def relative_bucket(offset: Tensor, bidirectional: bool, num_buckets: int, max_distance: int) -> Tensor:
    """The bucket of each offset ``key - query`` (Raffel et al. 2020, as Mesh TensorFlow and Hugging Face compute
    it): offsets up to half the buckets (of a direction) exactly, larger ones in logarithmically wider buckets up
    to ``max_distance``, beyond which they share the last. One-directional: later keys share bucket 0."""
    buckets = torch.zeros_like(offset)
    if bidirectional:
        num_buckets //= 2
        buckets = buckets + (offset > 0).long() * num_buckets
        distance = offset.abs()
    else:
        distance = (-offset).clamp(min=0)
    exact = num_buckets // 2
    # float32 and truncation, exactly as the reference implementations, so buckets agree at every boundary
    logarithmic = exact + (torch.log(distance.float() / exact) / math.log(max_distance / exact)
                           * (num_buckets - exact)).long()
    logarithmic = logarithmic.clamp(max=num_buckets - 1)
    return buckets + torch.where(distance < exact, distance, logarithmic)


class BucketedRelativeBias(InAttentionPositions):
    """``score_bias(query_positions, key_positions)``: (batch or 1, heads, queries, keys) from a
    (num_buckets, heads) table indexed by the bucket of each offset. Torch only, so ``tfspec emit`` copies it."""


    def __init__(self, heads: int, num_buckets: int, max_distance: int, bidirectional: bool) -> None:
        super().__init__()
        self.num_buckets, self.max_distance, self.bidirectional = num_buckets, max_distance, bidirectional
        self.weight = nn.Parameter(torch.empty(num_buckets, heads))
        self.key = f"t5:{id(self)}"  # the stack's one table: every layer's attention reuses its bias in a call

    def score_bias(self, query_positions: Tensor, key_positions: Tensor) -> Tensor:
        offset = key_positions[:, None, :] - query_positions[:, :, None]  # (batch or 1, queries, keys)
        buckets = relative_bucket(offset, self.bidirectional, self.num_buckets, self.max_distance)
        return F.embedding(buckets, self.weight).permute(0, 3, 1, 2)

    def extra_repr(self) -> str:
        direction = "bidirectional" if self.bidirectional else "one-directional"
        return (f"buckets={self.num_buckets}, heads={self.weight.shape[1]}, max_distance={self.max_distance}, "
                f"{direction}")
