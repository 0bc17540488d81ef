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
from .dot import projection_params


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

    def keeps_projection(self, shape, options, batch, in_bands=False):
        return not in_bands and shape.kv_heads == shape.heads and (batch == 1 or shape.heads == 1)

    def core_saved(self, shape, options, batch, queries, keys, dropout, fused, in_bands=False):
        heads, kv_heads, head_dim = shape.heads, shape.kv_heads, shape.head_dim
        # the scaled q and k, v, the output; v's matmul keeps a view of the whole (q)kv projection where it
        # needs no copy (one sequence, or one head), k and v's copies where grouped-query attention expands them
        vectors = batch * head_dim * (2 * heads * queries + 2 * kv_heads * keys)
        if kv_heads != heads:
            vectors = batch * head_dim * (2 * heads * queries + 2 * heads * keys)
        elif self.keeps_projection(shape, options, batch, in_bands):
            vectors += batch * heads * head_dim * (keys if shape.cross else 2 * keys)
        scores = batch * heads * queries * keys  # the weights (with dropout, also its mask and the dropped ones)
        return vectors + scores * (3 if dropout else 1), 0

    def build(self, config, options):
        from ..nn.sigmoid import SigmoidAttentionInContext
        return SigmoidAttentionInContext(config, options.n)

    def core(self, config, options):
        from ..nn.attention import core_arguments
        from ..nn.sigmoid import SigmoidAttention
        return Constructor(SigmoidAttention, kwargs={**core_arguments(config), "n": options.n})
