"""Additive attention (Bahdanau et al. 2015), per head: score(q, k) = w . tanh(q + k)."""

from ..registry import ATTENTION_KINDS, AttentionKind
from .dot import projection_params


@ATTENTION_KINDS.register
class Additive(AttentionKind):
    name = "additive"
    doc = "Bahdanau attention: a learned vector scores tanh(q_i + k_j) in each head"

    def params(self, width, heads, bias, cross, memory_width):
        return {**projection_params(width, bias, cross, memory_width), "score": (heads, width // heads)}

    def core_flops(self, heads, head_dim, pairs):
        # w . tanh(q + k) and weights @ V as matmuls; the sum and tanh over head_dim, softmax per score
        mix, score, other = 2 * heads * pairs * head_dim, 2 * heads * pairs * head_dim, heads * pairs * (2 * head_dim + 5)
        if head_dim == 1:  # torch.einsum scores a single feature with a multiply, not a matrix product
            return mix, other + score
        return mix + score, other

    def core_saved(self, batch, heads, head_dim, queries, keys, dropout, fused, cross):
        # tanh(q + k) for every pair and head feature (no fused kernel exists), the probabilities, v, output
        scores = batch * heads * queries * keys
        kept = scores * head_dim + scores * (3 if dropout else 1) + batch * heads * head_dim * (keys + queries)
        if batch == 1 or heads == 1:  # v needs no copy: weights @ v keeps the whole (q)kv projection
            kept += batch * heads * head_dim * (keys if cross else 2 * keys)
        return kept, 0

    def build(self, width, heads, bias, cross, memory_width, dropout, masks):
        from ..nn.additive import AdditiveAttention
        return AdditiveAttention(width, heads, bias, cross, memory_width, dropout, masks)
