"""Pools at run time (``tfspec.variants.pools``): ``(batch, length, width)`` and the token ids -> ``(batch, width)``.
Torch only, so ``tfspec emit`` copies them."""

from __future__ import annotations

import torch
from torch import Tensor, nn


class Position(nn.Module):
    """The vector at one position of every sequence (0: the first; -1: the last)."""

    def __init__(self, index: int):
        super().__init__()
        self.index = index

    def forward(self, x: Tensor, ids: Tensor | None = None) -> Tensor:
        return x[:, self.index]


class Mean(nn.Module):
    """The mean of the positions' vectors."""

    def forward(self, x: Tensor, ids: Tensor | None = None) -> Tensor:
        return x.mean(dim=1)


def gathered(x: Tensor, positions: Tensor) -> Tensor:
    """Each sequence's vector at its own position: ``x[b, positions[b]]``."""
    return x[torch.arange(x.shape[0], device=x.device), positions.to(x.device)]


class FirstOf(nn.Module):
    """The vector of each sequence's first position holding token ``token``: CLIP's end of text. A sequence
    without it reads its first position (as ``argmax`` of all-false does, Hugging Face's)."""

    def __init__(self, token: int):
        super().__init__()
        self.token = token

    def forward(self, x: Tensor, ids: Tensor) -> Tensor:
        return gathered(x, (ids == self.token).int().argmax(dim=-1))


class HighestId(nn.Module):
    """The vector of each sequence's first position of its highest token id (CLIP's end of text was its
    vocabulary's last token)."""

    def forward(self, x: Tensor, ids: Tensor) -> Tensor:
        return gathered(x, ids.int().argmax(dim=-1))

    def extra_repr(self) -> str:
        return "the highest token id's position"
