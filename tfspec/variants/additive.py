"""Additive attention (Bahdanau et al. 2015), per head: score(q, k) = w . tanh(q + k)."""

from ..registry import ATTENTION_KINDS, AttentionKind
from .dot import projection_params


@ATTENTION_KINDS.register
class Additive(AttentionKind):
    name = "additive"
    doc = "Bahdanau attention: a learned vector scores tanh(q_i + k_j) in each head"

    def params(self, width, heads, bias, cross, memory_width):
        return {**projection_params(width, bias, cross, memory_width), "score": (heads, width // heads)}

    def build(self, width, heads, bias, cross, memory_width, dropout, masks):
        from ..nn.additive import AdditiveAttention
        return AdditiveAttention(width, heads, bias, cross, memory_width, dropout, masks)
