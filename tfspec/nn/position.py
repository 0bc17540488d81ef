"""What every position scheme acting inside attention can do, each step doing nothing unless the scheme does it.

An attention core (``MultiHeadAttention``) calls every step of every scheme: ``tables`` once per call,
``rotate`` on its queries and keys (rotary), ``score_bias`` added to its scores (ALiBi, KERPLE, T5), and
``attend`` in place of the softmax mix (Shaw's relative representations). A scheme overrides what it does and
inherits the rest, so no stage asks which scheme it has. Torch only, so ``tfspec emit`` copies it.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor, nn


class InAttentionPositions(nn.Module):
    """The base of in-attention position schemes; ``key`` tells equal schemes apart in a call's memo."""

    key = ""

    def tables(self, positions: Tensor, dtype: torch.dtype):
        """What ``rotate`` needs for position ids ``(batch or 1, length)``, built once per call and shared by
        every attention with an equal ``key``."""
        return None

    def rotate(self, q: Tensor, k: Tensor, tables) -> tuple[Tensor, Tensor]:
        """Queries ``(batch, heads, n, head_dim)`` and keys ``(batch, kv_heads, n, head_dim)``, position-encoded."""
        return q, k

    def score_bias(self, query_positions: Tensor, key_positions: Tensor) -> Tensor | None:
        """``(batch or 1, heads, queries, keys)`` added to the scores; None: it adds none."""
        return None

    def attend(self, mix: Callable, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, query_positions: Tensor,
               key_positions: Tensor, scale: float | None, drop: Callable[[Tensor], Tensor]) -> Tensor:
        """The attention output ``(batch, heads, queries, head_dim)``: ``mix(q, k, v, mask)``, the kind's own
        mix, unless the scheme enters the value sum itself (then ``drop`` is the attention's dropout of weights)."""
        return mix(q, k, v, mask)
