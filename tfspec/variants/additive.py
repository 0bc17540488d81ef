"""Additive attention (Bahdanau et al. 2015), per head: score(q, k) = w . tanh(q + k)."""

from ..registry import ATTENTION_KINDS, AttentionKind, Constructor, Param, Problem
from .dot import projection_params


@ATTENTION_KINDS.register
class Additive(AttentionKind):
    name = "additive"
    title = "Additive"
    fuses_causal = False  # no kernel scores w . tanh(q + k): a causal mask is always built
    doc = "Bahdanau attention: a learned vector scores tanh(q_i + k_j) in each head"

    def params(self, shape, options):
        return {**projection_params(shape), "score": Param((shape.heads, shape.head_dim), "vector")}

    def check(self, options, shape):
        if shape.kv_heads != shape.heads:
            return [Problem("additive attention scores each query head against its own key head, so it takes "
                            f"no kv_heads={shape.kv_heads} (grouped-query attention is for dot-product attention)",
                            "remove kv_heads, or use kind=dot")]
        return []

    def core_flops(self, shape, options, queries, keys, pairs):
        heads, head_dim = shape.heads, shape.head_dim
        # weights @ V as a matmul; q + k, tanh, the product with w and its sum over head_dim, softmax per score
        return 2 * heads * pairs * head_dim, heads * pairs * (4 * head_dim + 5)

    def keeps_projection(self, shape, options, batch):
        return batch == 1 or shape.heads == 1  # v needs no copy: weights @ v keeps a view of the (q)kv projection

    def core_saved(self, shape, options, batch, queries, keys, dropout, fused):
        heads, head_dim = shape.heads, shape.head_dim
        # tanh(q + k) for every pair and head feature (no fused kernel exists), the probabilities, v, output
        scores = batch * heads * queries * keys
        kept = scores * head_dim + scores * (3 if dropout else 1) + batch * heads * head_dim * (keys + queries)
        if self.keeps_projection(shape, options, batch):
            kept += batch * heads * head_dim * (keys if shape.cross else 2 * keys)
        return kept, 0

    def core(self, config, options):
        from ..nn.additive import AdditiveAttention
        from ..nn.attention import core_arguments
        return Constructor(AdditiveAttention, kwargs=core_arguments(config))
