"""Prefix-LM masks (UNILM, Dong et al. 2019; T5's "prefix LM"): bidirectional over a prefix, causal after it.

Query i may see key j when j <= i, or when j lies in the prefix (j < prefix
length). So prefix positions see the whole prefix, and later positions see the
prefix and what precedes them. The prefix length of each sequence is a run-time
input, ``model(tokens, prefix_lengths=torch.tensor([3, 5]))``; without it every
prefix is empty and the mask is plain causal. Generation feeds the prompt as the
prefix in one step (``tfspec.run.decoding.Continuation``), after which every new
token is causal, so a KV cache reproduces recomputation.

    decoder x 12 { attention self heads=12 mask=prefix + padding; ... }

A sliding window of such a model (PaliGemma 2's Gemma 2 layers) keeps the prefix whole: ``prefix_window(k)`` lets
a query see the keys within k positions, and the whole prefix where it stands in it (``mask=prefix +
prefix_window(4096) + padding``: causal and windowed after the prefix, bidirectional over it, however long).
"""

from pydantic import BaseModel, ConfigDict, Field

from ..registry import MASKS, Mask, RuntimeInput

def half(length: int) -> int:
    """An example prefix: the first half."""
    return length // 2


PREFIX_LENGTHS = RuntimeInput("prefix_lengths", "how many leading tokens of each sequence form its "
                              "bidirectional prefix (default 0: causal)",
                              example=half)


def prefix_lm(queries, keys, prefix_lengths=None):
    """Query i sees key j when j <= i or j is in its sequence's prefix (``prefix_lengths``: (batch,))."""
    causal = keys[..., None, :] <= queries[..., :, None]
    if prefix_lengths is None:
        return causal
    batch = prefix_lengths.reshape((-1,) + (1,) * (keys.ndim + 1))  # (batch, 1, ..., 1, 1)
    return causal | (keys[..., None, :] < batch)  # (batch, ..., queries, keys)


@MASKS.register
class PrefixLM(Mask):
    name = "prefix"
    allowed_in_cross = False
    inputs = (PREFIX_LENGTHS,)
    doc = "prefix-LM: positions in the prefix see the whole prefix; the rest see what precedes them"

    rule = staticmethod(prefix_lm)

    def reach(self, options):
        return (None, None)  # a prefix position may look ahead to the end of the prefix

    def causal_from(self, options):
        return PREFIX_LENGTHS.name


def prefix_window(queries, keys, k: int, prefix_lengths=None):
    """Query i sees key j when |i - j| < k, or when both are in their sequence's prefix (``prefix_lengths``)."""
    near = abs(queries[..., :, None] - keys[..., None, :]) < k
    if prefix_lengths is None:
        return near
    batch = prefix_lengths.reshape((-1,) + (1,) * (keys.ndim + 1))
    return near | ((queries[..., :, None] < batch) & (keys[..., None, :] < batch))


@MASKS.register
class PrefixWindow(Mask):
    name = "prefix_window"
    positional = ("k",)
    allowed_in_cross = False
    inputs = (PREFIX_LENGTHS,)
    examples = ({"k": 1}, {"k": 3})
    doc = ("prefix_window(k): position i attends to j with |i - j| < k, and to the whole prefix where it stands in "
           "it (with prefix: a prefix-LM's sliding window, PaliGemma 2's)")

    class Options(BaseModel):
        model_config = ConfigDict(extra="forbid", frozen=True)
        k: int = Field(gt=0, le=1 << 20)

    rule = staticmethod(prefix_window)

    def reach(self, options):
        return (None, None)  # a prefix position may see the whole prefix, however far

    def window_after_prefix(self, options):
        return options.k
