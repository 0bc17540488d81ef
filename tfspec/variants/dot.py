"""Scaled dot-product attention (Vaswani et al. 2017, section 3.2.1): softmax(QK^T / sqrt(d_k)) V.

With ``kv_heads`` < ``heads`` it is grouped-query attention (Ainslie et al. 2023;
``kv_heads=1``: multi-query, Shazeer 2019): each key/value head serves
``heads / kv_heads`` query heads.
"""

from ..registry import ATTENTION_KINDS, AttentionKind, Constructor, Param, linear_params


def projection_params(shape):
    """Q/K/V/output projections: one fused qkv for self-attention (rows [q; k; v]), q + fused kv for cross; the
    output projection writes the attention's branch into the residual stream. Keys without a bias
    (``key_bias=false``): the fused bias holds the queries' and values' rows alone (``UnbiasedKeys``)."""
    queries = dict(query_rows=shape.q_width, head_dim=shape.head_dim)
    keyless = shape.bias and not shape.key_bias
    if shape.cross:
        params = {**linear_params("q", shape.q_width, shape.width, shape.bias, **queries),
                  **linear_params("kv", 2 * shape.kv_width, shape.memory_width, shape.bias and not keyless)}
        if keyless:
            params["kv.bias"] = Param((shape.kv_width,), "bias")
    else:
        rows = shape.q_width + 2 * shape.kv_width
        params = linear_params("qkv", rows, shape.width, shape.bias and not keyless, **queries)
        if keyless:
            params["qkv.bias"] = Param((shape.q_width + shape.kv_width,), "bias")
    return {**params, **linear_params("out", shape.width, shape.q_width, shape.out_bias, residual=True)}


def math_keeps_projection(shape, batch: int) -> bool:
    """Does attention computed by matmuls on scaled q and k (SDPA's math path, sigmoid attention) keep the whole
    (q)kv projection? v needs no copy for its matmul, which then keeps a view of it, for one sequence or one
    head, without grouped-query expansion."""
    return shape.kv_heads == shape.heads and (batch == 1 or shape.heads == 1)


def math_saved(shape, batch: int, queries: int, keys: int, dropout: float) -> tuple[int, int]:
    """What such attention keeps for backward: scaled q and k, v and the output; the projection where
    ``math_keeps_projection``; k's and v's copies where grouped-query attention expands them; the queries x keys
    weights (with dropout, also its mask and the dropped weights)."""
    heads, kv_heads, head_dim = shape.heads, shape.kv_heads, shape.head_dim
    vectors = batch * head_dim * (2 * heads * queries + 2 * kv_heads * keys)
    if kv_heads != heads:
        vectors = batch * head_dim * (2 * heads * queries + 2 * heads * keys)
    elif math_keeps_projection(shape, batch):
        vectors += batch * heads * head_dim * (keys if shape.cross else 2 * keys)
    return vectors + batch * heads * queries * keys * (3 if dropout else 1), 0


@ATTENTION_KINDS.register
class DotProduct(AttentionKind):
    name = "dot"
    title = "Multi-Head"  # labels read "Multi-Head Attention (...)", as in the paper's figure
    doc = "scaled dot-product attention"
    scores_by_dot_product = True
    plain_softmax = True

    reads_made_keys = True

    def params(self, shape, options):
        return projection_params(shape)

    def reader_params(self, shape, options):
        return {**linear_params("q", shape.q_width, shape.width, shape.bias, query_rows=shape.q_width,
                                head_dim=shape.head_dim),
                **linear_params("out", shape.width, shape.q_width, shape.out_bias, residual=True)}

    def core_flops(self, shape, options, queries, keys, pairs):
        # QK^T and weights @ V; scaling and a 5-step softmax (max, subtract, exp, sum, divide) per score
        return 4 * shape.heads * pairs * shape.head_dim, 6 * shape.heads * pairs

    def keeps_projection(self, shape, options, batch):
        return math_keeps_projection(shape, batch)

    def shared_saved(self, shape, options, batch, queries, keys, fused):
        if fused:  # the keys and values it was handed, which the kernel keeps as they are
            return 2 * batch * keys * shape.kv_width
        if math_keeps_projection(shape, batch):  # their layer's projection, kept whole through its values' view
            return batch * keys * (shape.q_width + shape.kv_width + self.value_rows(shape, options))
        return 0  # (scaled, expanded or made contiguous anew: its own copies)

    def core_saved(self, shape, options, batch, queries, keys, dropout, fused):
        if fused:  # q, k, v, the output and a log-sum-exp per row
            return batch * shape.head_dim * (2 * shape.heads * queries + 2 * shape.kv_heads * keys), \
                batch * shape.heads * queries
        return math_saved(shape, batch, queries, keys, dropout)

    def build(self, config, options, layer=None):
        from ..nn.attention import DotProductAttention
        return DotProductAttention(config, layer)

    def core(self, config, options):
        from ..nn.attention import MultiHeadAttention, core_arguments
        return Constructor(MultiHeadAttention, kwargs=core_arguments(config))
