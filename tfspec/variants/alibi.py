"""ALiBi (Press et al. 2022, "Train Short, Test Long"): no position embedding; each head's scores get -m·|i - j|.

Head h of n has slope m_h = 2^(-8h/n) for h = 1..n when n is a power of two
(1/2, 1/4, ..., 1/256 for 8 heads). For other head counts the paper takes the
slopes of the closest smaller power of two, then every other slope of the next
one (its official code, and BLOOM's). ``max_bias`` (MPT's ``alibi_bias_max``)
replaces the 8. The bias depends only on the distance between positions, so
attention is offset invariant and extrapolates to longer sequences. Under a
causal mask, -m·(i - j) differs from BLOOM's m·j by a constant per query, which
the softmax removes.

    decoder x 24 { position alibi; attention self heads=16 mask=causal; ... }
"""

import math

from pydantic import BaseModel, ConfigDict, Field

from ..registry import POSITIONS, Constructor, Position, Problem


def alibi_slopes(heads: int, max_bias: float = 8.0) -> list[float]:
    """The paper's slope per head: ``alibi_slopes(8) == [1/2, 1/4, ..., 1/256]``."""
    def power_of_two(n: int) -> list[float]:
        start = 2.0 ** (-max_bias / n)
        return [start ** (i + 1) for i in range(n)]

    closest = 2 ** math.floor(math.log2(heads))
    if closest == heads:
        return power_of_two(heads)
    return power_of_two(closest) + alibi_slopes(2 * closest, max_bias)[0::2][:heads - closest]


@POSITIONS.register
class ALiBi(Position):
    name = "alibi"
    title = "ALiBi"
    acts = "attention"
    enters = "biases scores"
    relative = True
    biases_scores = True
    doc = "attention with linear biases: each head's scores are penalised by slope × distance (no embedding)"
    examples = ({}, {"max_bias": 16.0})

    class Options(BaseModel):
        model_config = ConfigDict(extra="forbid", frozen=True)
        max_bias: float = Field(8.0, gt=0.0, le=64.0)  # the slopes are 2^(-max_bias · h / heads)

    def check(self, options, shape):
        if shape.cross:
            return [Problem("ALiBi on cross-attention: queries and keys are positions of different sequences, "
                            "so their distance means nothing", "set position=none on the cross-attention")]
        return []

    def attention_flops(self, options, shape, queries, keys):
        return shape.heads * queries * keys  # one addition per score (the bias is built once per call)

    def module(self, where, options):
        from ..nn.alibi import LinearBiases
        return Constructor(LinearBiases, (alibi_slopes(where.heads, options.max_bias),))
