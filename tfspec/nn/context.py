"""What every layer of one forward (or ``extend``) call shares: built once per call, read by the sublayers.

A layer's generated forward is ``layer(x, ctx, cache)``; attention reads what it
needs from ``ctx`` -- position ids, the keys' padding, the encoder's memory, the
run-time inputs its variants declared (``prefix_lengths``, ...) -- so a variant
that needs a new input adds no argument anywhere. Masks and position tables that
several layers share are built on first use and kept in ``ctx.shared`` for the
rest of the call.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from torch import Tensor


@dataclass
class Context:
    positions: Tensor  # (batch or 1, length) position id of each query
    padding: Tensor | None = None  # (batch, keys) True at padded keys of this stack's own sequence
    memory: Tensor | None = None  # (batch, src_len, width) the encoder's output, for cross-attention
    memory_padding: Tensor | None = None  # (batch, src_len) True at padded source positions
    inputs: dict[str, Tensor] = field(default_factory=dict)  # run-time inputs variants declared, by name
    offset: int = 0  # positions already in the KV cache (incremental decoding)
    shared: dict = field(default_factory=dict)  # per-call memo: masks and tables that layers share

    def once(self, key: str, build: Callable[[], object]):
        """``build()`` the first time ``key`` is asked for in this call, the same object afterwards."""
        if key not in self.shared:
            self.shared[key] = build()
        return self.shared[key]
