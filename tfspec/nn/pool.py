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


class AttentionPool(nn.Module):
    """Multi-head attention pooling (SigLIP's ``SiglipMultiheadAttentionPoolingHead``, Lee et al. 2019's PMA): a
    learned probe, projected to the query of ``heads`` heads, attends over the positions' keys and values; the
    heads' outputs joined and projected (``out``) are the pooled vector p, which a LayerNormed MLP adds to:
    ``p + down(act(up(norm(p))))``."""

    def __init__(self, width: int, heads: int, d_ff: int, activation: nn.Module, eps: float):
        super().__init__()
        self.heads = heads
        self.probe = nn.Parameter(torch.empty(width))
        self.q = nn.Linear(width, width)
        self.kv = nn.Linear(width, 2 * width)
        self.out = nn.Linear(width, width)
        self.norm = nn.LayerNorm(width, eps=eps)
        self.up = nn.Linear(width, d_ff)
        self.activation = activation
        self.down = nn.Linear(d_ff, width)

    def forward(self, x: Tensor, ids: Tensor | None = None) -> Tensor:
        batch, length, width = x.shape
        h, d = self.heads, width // self.heads
        # (the probe's query for each sequence, as Hugging Face's probe repeated over the batch)
        q = self.q(self.probe.to(x.dtype).expand(batch, width)).view(batch, h, 1, d)
        k, v = self.kv(x).view(batch, length, 2, h, d).permute(2, 0, 3, 1, 4)
        probs = torch.softmax(q @ k.transpose(-1, -2) * d ** -0.5, dim=-1)
        pooled = self.out((probs @ v).reshape(batch, width))
        return pooled + self.down(self.activation(self.up(self.norm(pooled))))

    def extra_repr(self) -> str:
        return f"heads={self.heads}"
