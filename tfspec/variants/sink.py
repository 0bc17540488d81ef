"""Attention sinks with a sliding window (Xiao et al. 2024, StreamingLLM): each query sees the first ``s``
tokens of the sequence -- the "sinks" that absorb attention a softmax must put somewhere -- and the last ``w``
up to itself, so a model keeps attending stably far past its training length.

Query i sees key j when j <= i and (j < s or i - j < w): two ranges of keys apart, which the mask declares
(``keys_at``) so the analysis counts exactly the pairs it allows.

    decoder x 24 { attention self heads=16 mask=sink(4, 1024) + padding; ... }
"""

from pydantic import BaseModel, ConfigDict, Field

from ..registry import MASKS, Mask


def sink_window(queries, keys, s: int, w: int):
    """Query i sees key j when j <= i and j is one of the first ``s`` keys or one of the last ``w`` up to i."""
    behind = queries[..., :, None] - keys[..., None, :]
    return (behind >= 0) & ((keys[..., None, :] < s) | (behind < w))


@MASKS.register
class Sink(Mask):
    name = "sink"
    positional = ("s", "w")
    allowed_in_cross = False
    examples = ({"s": 1, "w": 2}, {"s": 4, "w": 3})
    doc = "sink(s, w): causal; a query sees the first s tokens and the last w up to itself (StreamingLLM)"

    class Options(BaseModel):
        model_config = ConfigDict(extra="forbid", frozen=True)
        s: int = Field(ge=0, le=1 << 20)
        w: int = Field(gt=0, le=1 << 20)

    rule = staticmethod(sink_window)

    def reach(self, options):
        return (None, 0)  # the sinks are at the start, however far behind: causal, unbounded behind

    def keys_at(self, options, position, length):
        recent = max(0, position - options.w + 1)
        if recent <= options.s:  # the window reaches back into the sinks: one range
            return ((0, position + 1),)
        return ((0, options.s), (recent, position + 1))

    def pattern_length(self, options):
        return 2 * (options.s + options.w)
