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

    def build(self, width, heads, bias, cross, memory_width, dropout, masks):
        from ..nn.attention import DotProductAttention
        return DotProductAttention(width, heads, bias, cross, memory_width, dropout, masks)
