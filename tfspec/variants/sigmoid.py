"""Sigmoid attention (Ramapuram et al. 2024, "Theory, Analysis, and Best Practices for Sigmoid Self-Attention"):
each query weights each value by ``sigmoid(q·k / sqrt(d) - log(n))`` on its own, with no softmax across keys.

The bias ``-log(n)`` keeps the weights' sum near 1 at the start of training; ``n`` is the sequence length the
paper sets it from, written in the spec (``kind=sigmoid(1024)``) rather than counted per call, so that decoding
with a KV cache -- a single query over the keys so far -- computes what recomputing the sequence does. Scores
are dot products, so rotary positions, ALiBi and every mask apply as for ``dot``, and masks of bounded reach run
in bands.

    decoder x 12 { attention self heads=8 kind=sigmoid(1024) mask=causal; ... }
"""

from pydantic import BaseModel, ConfigDict, Field

from ..registry import ATTENTION_KINDS, AttentionKind, Constructor
from .dot import math_keeps_projection, math_saved, projection_params


@ATTENTION_KINDS.register
class Sigmoid(AttentionKind):
    name = "sigmoid"
    title = "Sigmoid"
    positional = ("n",)
    fuses_causal = False  # no SDPA kernel: a causal mask is built
    scores_by_dot_product = True
    examples = ({"n": 16}, {"n": 1024})
    doc = "sigmoid(n): each weight is sigmoid(q·k/√d − log n) on its own, no softmax (Ramapuram et al. 2024)"

    class Options(BaseModel):
        model_config = ConfigDict(extra="forbid", frozen=True)
        n: int = Field(gt=0, le=1 << 30)

    def params(self, shape, options):
        return projection_params(shape)

    def core_flops(self, shape, options, queries, keys, pairs):
        # QK^T and weights @ V; scaling, the bias and the sigmoid (exp, add 1, divide) per score
        return 4 * shape.heads * pairs * shape.head_dim, 5 * shape.heads * pairs

    def keeps_projection(self, shape, options, batch):
        return math_keeps_projection(shape, batch)

    def core_saved(self, shape, options, batch, queries, keys, dropout, fused):
        return math_saved(shape, batch, queries, keys, dropout)  # matmuls on scaled q and k, as SDPA's

    def core(self, config, options):
        from ..nn.attention import MultiHeadAttention, core_arguments
        from ..nn.sigmoid import SigmoidWeights
        step = Constructor(SigmoidWeights, (options.n,))
        return Constructor(MultiHeadAttention, kwargs=core_arguments(config, {"sigmoid": step}))
