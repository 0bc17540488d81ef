"""Learned attention sinks (gpt-oss, 2025; after Xiao et al. 2024's attention sinks): dot-product attention whose
softmax over a query's keys has one more logit per head, a learned ``sinks`` value with no value vector, so a
head can give a query's keys less than all of its weight. With a window (gpt-oss's sliding layers) the sink stands
in for the tokens the window drops.

Scores are dot products, so rotary positions, every mask and grouped-query heads apply as for ``dot``, and masks of
bounded reach run in bands. No fused kernel adds the sink: the weights are computed in full, as SDPA's math path
does, with the sink's column beside them.

    decoder x 24 { attention self heads=64 kv_heads=8 kind=sinks mask=causal + window(128) + padding; ... }
"""

from ..registry import ATTENTION_KINDS, AttentionKind, Constructor, Param
from .dot import math_keeps_projection, math_saved, projection_params


@ATTENTION_KINDS.register
class Sinks(AttentionKind):
    name = "sinks"
    title = "Sink"
    fuses_causal = False  # the sink joins a softmax no SDPA kernel computes: a causal mask is built
    scores_by_dot_product = True
    doc = "sinks: softmax attention with one learned logit per head beside the keys, taking weight without a value"

    def params(self, shape, options):
        return {**projection_params(shape), "sinks.logits": Param((shape.heads,), "vector")}

    def core_flops(self, shape, options, queries, keys, pairs):
        # QK^T and weights @ V; scaling and a 5-step softmax per score, and the sink's exp per query
        return 4 * shape.heads * pairs * shape.head_dim, 6 * shape.heads * pairs + 5 * shape.heads * queries

    def keeps_projection(self, shape, options, batch):
        return math_keeps_projection(shape, batch)

    def core_saved(self, shape, options, batch, queries, keys, dropout, fused):
        scaled, words = math_saved(shape, batch, queries, keys, dropout)
        return scaled + batch * shape.heads * queries, words  # the softmax's output has the sink's column too

    def core(self, config, options):
        from ..nn.attention import MultiHeadAttention, core_arguments
        from ..nn.sinks import SinkWeights
        step = Constructor(SinkWeights, (config.shape.heads,))
        return Constructor(MultiHeadAttention, kwargs=core_arguments(config, {"sinks": step}))
