"""KERPLE (Chi et al. 2022, "Kernelized Relative Positional Embedding for Length Extrapolation"), its log kernel:
head h adds -r1_h · log(1 + r2_h · |i - j|) to its scores, with r1 and r2 learned per layer and head (kept
positive, as the paper's code clamps them). It depends only on the distance between positions, so attention is
offset invariant and extrapolates like ALiBi, whose linear penalty it replaces by a learned logarithmic one.
``r1`` and ``r2`` are where training starts.

    decoder x 12 { position kerple; attention self heads=12 mask=causal; ... }
"""

from pydantic import BaseModel, ConfigDict, Field

from ..registry import POSITIONS, Constructor, Param, Position, Problem


@POSITIONS.register
class Kerple(Position):
    name = "kerple"
    title = "KERPLE"
    acts = "attention"
    enters = "biases scores"
    relative = True
    biases_scores = True
    trains_score_terms = True  # r1 and r2, each layer's
    doc = "kerple(r1=1, r2=1): KERPLE's log kernel, -r1·log(1 + r2·|i − j|) per head, r1 and r2 learned"
    examples = ({}, {"r1": 0.5, "r2": 2.0})

    class Options(BaseModel):
        model_config = ConfigDict(extra="forbid", frozen=True)
        r1: float = Field(1.0, gt=0.0, le=100.0)  # where training starts
        r2: float = Field(1.0, gt=0.0, le=100.0)

    def params(self, where, options):
        return {"r1": Param((where.heads,), "vector", value=options.r1),
                "r2": Param((where.heads,), "vector", value=options.r2)}

    def check(self, options, shape):
        if shape.cross:
            return [Problem("KERPLE on cross-attention: queries and keys are positions of different sequences, "
                            "so their distance means nothing", "set position=none on the cross-attention")]
        return []

    def attention_flops(self, options, shape, queries, keys):
        # |i - j| once, then per head and score: r2 · d, log1p, r1 ·, and the addition to the scores
        return queries * keys + 4 * shape.heads * queries * keys

    def layer_saved(self, options, shape, queries, keys):
        # float32 words: |i - j| (for r2's gradient), log1p's input and output per head, and the clamped r1
        return 4 * (queries * keys + 2 * shape.heads * queries * keys + shape.heads)

    def module(self, where, options):
        from ..nn.kerple import LogKernelBiases
        return Constructor(LogKernelBiases, (where.heads, options.r1, options.r2))
