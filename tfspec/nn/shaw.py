"""Shaw et al. 2018's relative position representations at run time: learned offset vectors in keys and values.

    e_ij = q_i · (k_j + a^K_ij) / sqrt(d),   z_i = sum_j softmax_j(e_ij) (v_j + a^V_ij),
    a_ij = w_clip(j - i, k)   (2k + 1 vectors per table, shared by the heads)

Never materialised per pair: q_i · a^K_ij is a gather from q @ W^K^T (queries × (2k + 1)), and the value
term sums each query's weights per clipped offset (a scatter-add) and multiplies by W^V, which costs
n·(2k + 1)·d on top of ordinary attention's n²·d, plus two n² index passes.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor, nn

from .position import InAttentionPositions


class RelativeRepresentations(InAttentionPositions):
    """An in-attention position scheme that mixes values itself (``attend`` replaces the kind's mix)."""


    def __init__(self, head_dim: int, clip: int) -> None:
        super().__init__()
        self.clip = clip
        self.keys = nn.Parameter(torch.empty(2 * clip + 1, head_dim))  # offsets -clip..clip
        self.values = nn.Parameter(torch.empty(2 * clip + 1, head_dim))
        self.key = f"shaw:{clip}"

    def attend(self, mix, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, query_positions: Tensor,
               key_positions: Tensor, scale: float | None, drop: Callable[[Tensor], Tensor]) -> Tensor:
        """(batch, heads, queries, head_dim), computed here in place of ``mix``; ``mask`` additive; positions
        (batch or 1, queries / keys)."""
        if k.shape[1] != q.shape[1]:  # grouped-query: each key/value head serves heads / kv_heads queries
            k, v = (t.repeat_interleave(q.shape[1] // t.shape[1], dim=1) for t in (k, v))
        offsets = (key_positions[:, None, :] - query_positions[:, :, None]).clamp(-self.clip, self.clip) + self.clip
        index = offsets[:, None].expand(q.shape[0], q.shape[1], -1, -1)  # (batch, heads, queries, keys)
        root = (scale if scale is not None else q.shape[-1] ** -0.5) ** 0.5  # as SDPA scales q and k
        # contiguous, so every product below keeps these three tensors and no view of the projection
        q, k = (q * root).contiguous(), (k * root).contiguous()
        v = v.clone(memory_format=torch.contiguous_format)
        scores = q @ k.transpose(-1, -2) + (q @ self.keys.T).gather(-1, index) * root
        if mask is not None:
            scores = scores + mask
        weights = drop(torch.softmax(scores, dim=-1))
        per_offset = weights.new_zeros(weights.shape[:-1] + (2 * self.clip + 1,)).scatter_add(-1, index, weights)
        return weights @ v + per_offset @ self.values

    def extra_repr(self) -> str:
        return f"clip={self.clip}, head_dim={self.keys.shape[1]}"
