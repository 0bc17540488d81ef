"""Top-k attention: each query's softmax runs over its k highest scores only (k = 1: hard attention).

The notes' "hard attention" picks one key per query; top-k (Gupta et al. 2021,
"Memory-efficient Transformers via Top-k Attention") keeps the k best and
normalises over them. The scores are computed in full (choosing the k best
needs them all), but the values are mixed from the k chosen keys alone, by a
gather, so the value term costs n·k·d instead of n²·d. Gradients reach the
queries and keys through the kept scores; the choice itself is not
differentiable, so with k = 1 (a single weight, always 1) only the chosen value
learns from the output.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .attention import MultiHeadAttention


class TopKAttention(MultiHeadAttention):
    """The core (torch only; ``tfspec emit`` copies it): ``MultiHeadAttention`` keeping the ``k`` best keys."""

    def __init__(self, *args, k: int, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.k = k

    def mix(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, is_causal: bool) -> Tensor:
        assert not is_causal, "top-k attention has no fused causal kernel: pass the mask"
        if self.kv_heads != self.heads:  # grouped-query: each key/value head serves heads / kv_heads queries
            k = k.repeat_interleave(self.heads // self.kv_heads, dim=1)
            v = v.repeat_interleave(self.heads // self.kv_heads, dim=1)
        root = (self.scale if self.scale is not None else q.shape[-1] ** -0.5) ** 0.5  # as SDPA scales q and k
        scores = (q * root) @ (k * root).transpose(-1, -2)  # (batch, heads, queries, keys)
        if mask is not None:  # a masked score is the dtype's minimum: chosen only when too few keys are allowed,
            scores = scores + mask  # and then its weight is exp(minimum - best) = 0
        best, chosen = scores.topk(min(self.k, scores.shape[-1]), dim=-1)  # (..., queries, k), best first
        weights = self.drop(torch.softmax(best, dim=-1))
        batch, heads, queries, kept = chosen.shape
        values = v.gather(2, chosen.reshape(batch, heads, queries * kept, 1).expand(-1, -1, -1, v.shape[-1]))
        values = values.view(batch, heads, queries, kept, v.shape[-1])
        return (weights.unsqueeze(-2) @ values).squeeze(-2)  # (batch, heads, queries, head_dim)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, k={self.k}"
