"""What every layer of one forward (or ``extend``) call shares: built once per call, read by the sublayers.

A layer's generated forward is ``layer(x, ctx, cache)``; attention reads what it
needs from ``ctx`` -- position ids, the keys' padding, the encoder's memory, the
run-time inputs its variants declared (``prefix_lengths``, ...) -- so a variant
that needs a new input adds no argument anywhere. Masks and position tables that
several layers share are built on first use and kept in ``ctx.shared`` for the
rest of the call.
"""

from __future__ import annotations

from typing import Callable

from torch import Tensor


class Context:
    """One call's inputs to every layer (a plain class, torch only: ``tfspec emit`` copies it).

    positions: (batch or 1, length) position id of each query. padding: (batch, keys) True at padded keys of
    this stack's own sequence. memory: (batch, src_len, width) the encoder's output, for cross-attention;
    memory_padding: (batch, src_len) True at padded source positions. inputs: run-time inputs variants
    declared, by name. offset: positions already in the KV cache (incremental decoding); a 0-d tensor in a
    compiled decode step, whose caches keep position i in slot i % capacity (``StaticKVCache``): ``slots``.
    shared: the call's memo of masks and tables that layers share (``once``), each with the run of the layer that
    built it. carried: tensors layers hand on. layer, run: the stack's layer running now, and which run of it.
    """

    def __init__(self, positions: Tensor, padding: Tensor | None = None, memory: Tensor | None = None,
                 memory_padding: Tensor | None = None, inputs: dict[str, Tensor] | None = None, offset: int = 0
                 ) -> None:
        self.positions, self.padding = positions, padding
        self.memory, self.memory_padding = memory, memory_padding
        self.inputs = dict(inputs or {})
        self.offset = offset
        self.slots = isinstance(offset, Tensor)
        self.shared: dict = {}
        # the layer of its stack running now and that run of it (the stack sets both; activation checkpointing
        # runs a layer again in backward), for ``once``
        self.layer: int | None = None
        self.run = 0
        # tensors one layer hands on to later ones in this call, by key (the first layer's values, which value
        # residual learning reads): the graph IR declares each as an edge between the two attentions
        self.carried: dict[str, Tensor] = {}

    @property
    def whole(self) -> bool:
        """Are the queries a whole sequence (no cached positions before them)?"""
        return not self.slots and self.offset == 0

    def once(self, key: str, build: Callable[[], object]):
        """``build()`` the first time ``key`` is asked for in this call, the same object afterwards -- except when
        the layer that built it asks again in another run of it: its recomputation in backward (activation
        checkpointing) builds anew, as its first run did, so that it keeps for backward what that run kept (a
        learned score bias's graph)."""
        held = self.shared.get(key)
        if held is None or self.layer is not None and held[1] == self.layer and held[2] != self.run:
            held = self.shared[key] = (build(), self.layer, self.run)
        return held[0]
