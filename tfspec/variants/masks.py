"""Attention masks; a sublayer combines them with '+', e.g. ``mask=causal + padding``.

A structural mask says, from positions in the sequence, which keys a query may
see; ``tfspec.nn.masking`` combines them with the run-time padding mask. Masks
whose reach is bounded (``window``, ``block``) are computed in bands of blocks
(``tfspec.nn.attention.MultiHeadAttention.mix_banded``), in time and memory
that grow with n·k rather than n².
"""

from pydantic import BaseModel, ConfigDict, Field

from ..registry import MASKS, Mask


def causal(queries, keys):
    """Query i sees key j when j <= i (indices in the sequence)."""
    return keys[..., None, :] <= queries[..., :, None]


def window(queries, keys, k: int):
    """Query i sees key j when |i - j| < k."""
    return abs(queries[..., :, None] - keys[..., None, :]) < k


@MASKS.register
class Causal(Mask):
    name = "causal"
    allowed_in_cross = False
    fused_causal = True
    doc = "position i attends to positions j <= i"

    rule = staticmethod(causal)

    def reach(self, options):
        return (None, 0)


@MASKS.register
class Padding(Mask):
    name = "padding"
    reads_padding = True
    doc = "keys at padded positions are ignored (the padding mask of the keys' sequence)"


@MASKS.register
class Window(Mask):
    name = "window"
    positional = ("k",)
    allowed_in_cross = False
    examples = ({"k": 1}, {"k": 3})
    doc = "window(k): position i attends to j with |i - j| < k (with causal: the last k positions)"

    class Options(BaseModel):
        model_config = ConfigDict(extra="forbid", frozen=True)
        k: int = Field(gt=0, le=1 << 20)

    rule = staticmethod(window)

    def reach(self, options):
        return (options.k - 1, options.k - 1)


@MASKS.register
class NoMask(Mask):
    name = "none"
    absent = True
    doc = "every position attends to every position"
