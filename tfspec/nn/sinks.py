"""Attention with learned sinks' step (``tfspec.variants.sinks``)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .steps import AttentionStep


class SinkWeights(AttentionStep):
    """A softmax over a query's keys with one more logit per head, ``logits`` (learned), that takes weight without a
    value: each query's weights over its keys sum to less than 1 where the sink outweighs them (gpt-oss; "attention
    sinks", Xiao et al. 2024). Torch only, so ``tfspec emit`` copies it."""

    weighs = True

    def __init__(self, heads: int) -> None:
        super().__init__()
        self.logits = nn.Parameter(torch.empty(heads))

    def weigh(self, scores: Tensor, mask: Tensor | None) -> Tensor:
        if mask is not None:
            scores = scores + mask
        sink = self.logits.to(scores.dtype).view(1, -1, 1, 1).expand(*scores.shape[:-1], 1)
        return torch.softmax(torch.cat((scores, sink), dim=-1), dim=-1)[..., :-1]  # the sink's column dropped
