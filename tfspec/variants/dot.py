"""Scaled dot-product attention (Vaswani et al. 2017, section 3.2.1): softmax(QK^T / sqrt(d_k)) V."""

from ..registry import ATTENTION_KINDS, AttentionKind


def projection_params(width, bias, cross, memory_width):
    """Q/K/V/output projections: one fused qkv for self-attention, q + fused kv for cross."""
    def linear(name, out, inp):
        return {f"{name}.weight": (out, inp), **({f"{name}.bias": (out,)} if bias else {})}

    if cross:
        shapes = {**linear("q", width, width), **linear("kv", 2 * width, memory_width)}
    else:
        shapes = linear("qkv", 3 * width, width)
    return {**shapes, **linear("out", width, width)}


@ATTENTION_KINDS.register
class DotProduct(AttentionKind):
    name = "dot"
    doc = "scaled dot-product attention"

    def params(self, width, heads, bias, cross, memory_width):
        return projection_params(width, bias, cross, memory_width)

    def core_flops(self, heads, head_dim, pairs):
        # QK^T and weights @ V; scaling and a 5-step softmax (max, subtract, exp, sum, divide) per score
        return 4 * heads * pairs * head_dim, 6 * heads * pairs

    def core_saved(self, batch, heads, head_dim, queries, keys, dropout, fused, cross):
        # q, k, v and the output; the math path keeps the T x T probabilities (and, with
        # dropout, its mask and the dropped probabilities), a fused kernel a log-sum-exp per row
        vectors = batch * heads * head_dim * (2 * queries + 2 * keys)
        if fused:
            return vectors, batch * heads * queries
        if batch == 1 or heads == 1:  # v needs no copy: the math path keeps the whole (q)kv projection
            vectors += batch * heads * head_dim * (keys if cross else 2 * keys)
        scores = batch * heads * queries * keys
        return vectors + scores * (3 if dropout else 1), 0

    def build(self, width, heads, bias, cross, memory_width, dropout, masks):
        from ..nn.attention import DotProductAttention
        return DotProductAttention(width, heads, bias, cross, memory_width, dropout, masks)
