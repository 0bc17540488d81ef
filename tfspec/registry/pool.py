"""The contract of a pool: how a head (``head linear(10) pool=first``) makes one vector of each sequence.

A pool reads its stack's output ``(batch, length, width)`` and, where it finds its position among them, the
sequence's token ids; it gives ``(batch, width)``, which the head projects.
"""

from __future__ import annotations

from typing import ClassVar

from .contract import Constructor, Param, Registry, Variant


class Pool(Variant):
    """One vector of each sequence. Each declares:

    - ``reads``: what it reads, as a sentence's object (``diff``, messages): "the first position";
    - ``reads_ids``: it finds its position among the token ids (CLIP's end of text), so its stack reads tokens;
    - ``params(width, options)``: its parameters, by their names in its module ({}: none);
    - ``flops(width, length, options)``: forward FLOPs per sequence, (those of matrix products, the rest);
    - ``keeps_input``: autograd keeps its whole input for it (a position's vector is a view of it, which what
      reads it keeps; an attention pool projects it to keys and values); ``view``: its output is a view of its input
      (else a tensor of its own, which a projection after it keeps);
    - ``saved(width, length, options, element_bytes)``: bytes autograd keeps per sequence for its own tensors
      (an attention pool's keys and values, probabilities, ...), beyond its input and its output;
    - ``heads(options)``: the heads it splits the width into (None: none), which must divide it;
    - ``token(options)``: the token id whose first position it reads (None: it finds no token), and
      ``reads_highest_id``: it reads the position of the highest id;
    - ``module(width, options)``: its runtime module, ``forward(x, ids)`` -> ``(batch, width)``, ``ids`` None
      where its stack reads no token ids.
    """

    reads: ClassVar[str]
    reads_ids: ClassVar[bool] = False
    keeps_input: ClassVar[bool] = False
    view: ClassVar[bool] = False
    reads_highest_id: ClassVar[bool] = False

    def params(self, width: int, options) -> dict[str, Param]:
        return {}

    def flops(self, width: int, length: int, options) -> tuple[int, int]:
        return 0, 0

    def saved(self, width: int, length: int, options, element_bytes: int) -> int:
        return 0

    def heads(self, options) -> int | None:
        return None

    def token(self, options) -> int | None:
        return None

    def describe(self, options) -> str:
        """What it reads, with its options: "the first position of token 49407"."""
        return self.reads

    def module(self, width: int, options) -> Constructor:
        raise NotImplementedError

    def build(self, width: int, options):
        return self.module(width, options).build()


POOLS: Registry[Pool] = Registry("pool", Pool)
