"""What a stateful mixer keeps between decoding calls: a ``RecurrentState`` per sublayer, beside attention's KV caches.

A layer's cache is a dict by sublayer name (``tfspec.run.decoding``): attention keeps a ``KVCache`` there, a token
mixer (``tfspec.registry.TokenMixer``) a ``RecurrentState`` -- named tensors of fixed shape whatever the length (a
short convolution's last inputs, a state-space model's state matrix), which its module reads and replaces each call.
In a compiled decoder's cache (``StaticCache``) the tensors are written in place, so a compiled step reads and writes
the same buffers at every position.
"""

from __future__ import annotations

from torch import Tensor


class StaticCache(dict):
    """One layer's caches for compiled decoding, by sublayer: each attention's a ``StaticKVCache`` of ``capacity``
    slots (or its look-back's), each mixer's a ``RecurrentState`` written in place."""

    def __init__(self, capacity: int) -> None:
        super().__init__()
        self.capacity = capacity


class RecurrentState:
    """A mixer's state: tensors by name, batch first. ``static``: written in place once made (compiled decoding)."""

    def __init__(self, static: bool = False) -> None:
        self.static = static
        self.tensors: dict[str, Tensor] = {}

    def __len__(self) -> int:
        return len(self.tensors)

    def get(self, name: str) -> Tensor | None:
        """The tensor ``name``, or None before the first call (a prompt)."""
        return self.tensors.get(name)

    def keep(self, name: str, value: Tensor) -> None:
        """Hold ``value`` as ``name`` for the next call: in place where the state is static and already made."""
        held = self.tensors.get(name)
        if self.static and held is not None:
            held.copy_(value)
        else:
            self.tensors[name] = value

    def reorder(self, rows: Tensor) -> None:
        """Keep batch rows ``rows`` (beam search follows its surviving hypotheses): in place where the batch keeps
        its size in a static state (a compiled step reads the same buffers), anew otherwise."""
        for name, held in self.tensors.items():
            if self.static and len(rows) == held.shape[0]:
                held.copy_(held.index_select(0, rows))
            else:
                self.tensors[name] = held.index_select(0, rows)


def state_slot(cache: dict | None, name: str) -> RecurrentState | None:
    """The state of mixer ``name`` in a layer's cache dict (created on first use); None without a cache."""
    if cache is None:
        return None
    if name not in cache:
        cache[name] = RecurrentState(static=isinstance(cache, StaticCache))
    return cache[name]
