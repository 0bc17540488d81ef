"""Output head (optional BERT-style transform, then a projection to logits) and BERT's pooler."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class Head(nn.Module):
    """Logits = transform(x · scale) W^T + b, capped to ``softcap · tanh(logits / softcap)`` where ``softcap`` is
    set (Gemma 2); with ``pool`` (a module of ``tfspec.nn.pool``), of one vector per sequence, which it finds from
    the hidden states and the token ids. A tied head owns no ``weight``: the model passes the embedding's."""

    def __init__(self, width: int, out: int, bias: bool, tied: bool, transform: nn.Module | None = None,
                 transform_norm: nn.Module | None = None, scale: float = 1.0, softcap: float | None = None,
                 features: int | None = None, pool: nn.Module | None = None, transform_bias: bool = True,
                 projects: bool = True):
        super().__init__()
        self.tied, self.scale, self.softcap, self.pool = tied, scale, softcap, pool
        features = features or width  # the transform's output: a narrower tied table's width (ALBERT's head)
        if transform is not None:
            self.transform = nn.Linear(width, features, bias=transform_bias)
            self.transform_activation = transform
            self.transform_norm = transform_norm if transform_norm is not None else nn.Identity()
        else:
            self.transform = None
        self.projects = projects  # False: the pooled vectors as they are (SigLIP's vision tower)
        self.weight = None if tied or not projects else nn.Parameter(torch.empty(out, features))
        self.bias = nn.Parameter(torch.empty(out)) if bias else None

    def extra_repr(self) -> str:
        weight = "tied to the token embedding" if self.tied else "no projection" if not self.projects else \
            f"weight={tuple(self.weight.shape)}"
        scale = f", scale={self.scale:g}" if self.scale != 1.0 else ""
        cap = f", softcap={self.softcap:g}" if self.softcap is not None else ""
        return f"{weight}, bias={self.bias is not None}{scale}{cap}"

    def forward(self, x: Tensor, tied_weight: Tensor | None = None, ids: Tensor | None = None) -> Tensor:
        """``ids``: the token ids of the sequences, where its pool finds its position among them."""
        if self.pool is not None:  # one vector per sequence
            x = self.pool(x, ids)
        if not self.projects:
            return x
        if self.scale != 1.0:
            x = x * self.scale
        if self.transform is not None:
            x = self.transform_norm(self.transform_activation(self.transform(x)))
        logits = logits_of(x, tied_weight if self.tied else self.weight, self.bias)
        return logits if self.softcap is None else torch.tanh(logits / self.softcap) * self.softcap


def logits_of(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """``F.linear(x, weight, bias)``; over 2 to 64 rows of float32 on the CPU (decoding a batch: a token a
    sequence) and a vocabulary-wide ``weight`` (1k rows or more), as ``(weight · xᵀ)ᵀ``, which the CPU's BLAS
    computes 1.3-4x as fast there (the same over one row). The logits are then a transposed view."""
    rows = x.numel() // x.shape[-1] if x.shape[-1] else 0
    if not (x.device.type == "cpu" and x.dtype == weight.dtype == torch.float32 and 1 < rows <= 64
            and weight.shape[0] >= 1024):
        return F.linear(x, weight, bias)
    flat = x.reshape(rows, x.shape[-1]).t()
    out = torch.mm(weight, flat) if bias is None else torch.addmm(bias[:, None], weight, flat)
    return out.t().reshape(*x.shape[:-1], weight.shape[0])


class Pooler(nn.Module):
    """activation(dense(x[:, 0])): a summary vector of the first ([CLS]) position."""

    def __init__(self, width: int, activation: nn.Module):
        super().__init__()
        self.dense = nn.Linear(width, width)
        self.activation = activation

    def forward(self, x: Tensor) -> Tensor:
        return self.activation(self.dense(x[:, 0]))
