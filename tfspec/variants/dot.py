"""Scaled dot-product attention (Vaswani et al. 2017, section 3.2.1): softmax(QK^T / sqrt(d_k)) V.

With ``kv_heads`` < ``heads`` it is grouped-query attention (Ainslie et al. 2023;
``kv_heads=1``: multi-query, Shazeer 2019): each key/value head serves
``heads / kv_heads`` query heads.
"""

from ..registry import ATTENTION_KINDS, AttentionKind, Constructor, linear_params


def projection_params(shape):
    """Q/K/V/output projections: one fused qkv for self-attention (rows [q; k; v]), q + fused kv for cross; the
    output projection writes the attention's branch into the residual stream."""
    queries = dict(query_rows=shape.q_width, head_dim=shape.head_dim)
    if shape.cross:
        params = {**linear_params("q", shape.q_width, shape.width, shape.bias, **queries),
                  **linear_params("kv", 2 * shape.kv_width, shape.memory_width, shape.bias)}
    else:
        params = linear_params("qkv", shape.q_width + 2 * shape.kv_width, shape.width, shape.bias, **queries)
    return {**params, **linear_params("out", shape.width, shape.q_width, shape.out_bias, residual=True)}


@ATTENTION_KINDS.register
class DotProduct(AttentionKind):
    name = "dot"
    title = "Multi-Head"  # labels read "Multi-Head Attention (...)", as in the paper's figure
    doc = "scaled dot-product attention"
    scores_by_dot_product = True
    plain_softmax = True

    def params(self, shape, options):
        return projection_params(shape)

    def core_flops(self, shape, options, queries, keys, pairs):
        # QK^T and weights @ V; scaling and a 5-step softmax (max, subtract, exp, sum, divide) per score
        return 4 * shape.heads * pairs * shape.head_dim, 6 * shape.heads * pairs

    def keeps_projection(self, shape, options, batch, in_bands=False):
        # v needs no copy for the math path's matmul, which keeps a view of the whole (q)kv projection
        return not in_bands and shape.kv_heads == shape.heads and (batch == 1 or shape.heads == 1)

    def core_saved(self, shape, options, batch, queries, keys, dropout, fused, in_bands=False):
        # q, k, v and the output; the math path keeps the T x T probabilities (and, with
        # dropout, its mask and the dropped probabilities), a fused kernel a log-sum-exp per row
        heads, kv_heads, head_dim = shape.heads, shape.kv_heads, shape.head_dim
        vectors = batch * head_dim * (2 * heads * queries + 2 * kv_heads * keys)
        if fused:
            return vectors, batch * heads * queries
        if kv_heads != heads:  # the math path expands k and v to every query head and keeps the copies instead
            vectors = batch * head_dim * (2 * heads * queries + 2 * heads * keys)
        elif self.keeps_projection(shape, options, batch, in_bands):
            vectors += batch * heads * head_dim * (keys if shape.cross else 2 * keys)
        scores = batch * heads * queries * keys
        return vectors + scores * (3 if dropout else 1), 0

    def build(self, config, options):
        from ..nn.attention import DotProductAttention
        return DotProductAttention(config)

    def core(self, config, options):
        from ..nn.attention import MultiHeadAttention, core_arguments
        return Constructor(MultiHeadAttention, kwargs=core_arguments(config))
