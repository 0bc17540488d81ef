"""Forgetting attention (the Forgetting Transformer, Lin et al. 2025, "Forgetting Transformer: Softmax Attention
with a Forget Gate"): dot-product attention whose score of query i and key j ≤ i adds Σ_{l=j+1..i} log f_l, with a
forget gate f_t = sigmoid(w_h·x_t + b_h) per head: each head learns, from the content, how fast it forgets. It
needs no position scheme (the paper's FoX uses none) but takes any; it is causal by definition.

    decoder x 12 { attention self heads=8 kind=forgetting mask=causal + padding; ... }

Its step (``tfspec.nn.forgetting.ForgetGate``) makes the running sums of the log gates from the input, which a KV
cache keeps beside each key; the score terms are their differences, kept in float32.
"""

from ..registry import ATTENTION_KINDS, AttentionKind, Constructor, Param, Problem
from .dot import math_keeps_projection, math_saved, projection_params


@ATTENTION_KINDS.register
class Forgetting(AttentionKind):
    name = "forgetting"
    title = "Forgetting"
    fuses_causal = False  # its score terms ride on the mask: a causal mask is built
    runs_in_blocks = False  # bands take no score terms
    trains_score_terms = True  # the gates' sums, on the mask
    scores_by_dot_product = True
    doc = ("forgetting: softmax attention whose scores add the log forget gates Σ log f_l between key and query, "
           "f = sigmoid(w·x + b) per head (the Forgetting Transformer, Lin et al. 2025); causal")

    def params(self, shape, options):
        return {**projection_params(shape), "forget.weight": Param((shape.heads, shape.width), "matrix"),
                "forget.bias": Param((shape.heads,), "bias")}

    def check(self, options, shape):
        if shape.cross or not shape.causal:
            return [Problem("forgetting attention decays from each query back to earlier keys: it needs a causal "
                            "mask on self-attention", "add `causal` to its masks (mask=causal + padding)")]
        return []

    def projection_flops(self, shape, options, queries, keys):
        matmul, bias = super().projection_flops(shape, options, queries, keys)
        return matmul + 2 * queries * shape.width * shape.heads, bias + queries * shape.heads

    def core_flops(self, shape, options, queries, keys, pairs):
        # QK^T and weights @ V; scaling, the gates' difference and a 5-step softmax per score; a log-sigmoid and a
        # running sum per query
        return 4 * shape.heads * pairs * shape.head_dim, 7 * shape.heads * pairs + 2 * shape.heads * queries

    def keeps_projection(self, shape, options, batch):
        return math_keeps_projection(shape, batch)

    def projection_saved(self, shape, options, batch, queries, keys):
        return 0, 2 * batch * queries * shape.heads  # the gates' logits and log-sigmoid's buffer, in float32

    def core_saved(self, shape, options, batch, queries, keys, dropout, fused):
        return math_saved(shape, batch, queries, keys, dropout)

    def cache_elements(self, shape, options):
        return super().cache_elements(shape, options) + shape.heads  # each key's running sum, per head

    def core(self, config, options):
        from ..nn.attention import MultiHeadAttention, core_arguments
        from ..nn.forgetting import ForgetGate
        steps = {"forget": Constructor(ForgetGate, (config.shape.width, config.shape.heads))}
        return Constructor(MultiHeadAttention, kwargs=core_arguments(config, steps))
