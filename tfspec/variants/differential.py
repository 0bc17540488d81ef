"""Differential attention (Ye et al. 2024, "Differential Transformer"): heads in pairs, each pair's second softmax
subtracted, λ-weighted, from its first, which cancels the attention both give to irrelevant context ("attention
noise"); the difference normed per head. As Hugging Face's DiffLlama: the pairs are heads h and h + H/2, both
mixing values of two key/value heads' width (j and j + kv_heads/2), λ = exp(λ_q1·λ_k1) − exp(λ_q2·λ_k2) + λ_init
with λ_init = 0.8 − 0.6·exp(−0.3·layer) set by the layer's depth, and four λ vectors drawn from N(0, std).

    decoder x 16 { position rotary; attention self heads=16 kv_heads=8 kind=differential mask=causal; ... }

Each pair's two maps come from one score matrix; its values of two heads' width are mixed in two halves, as Hugging
Face's two calls, so SDPA's fused kernels run them (with attention dropout, each call drops its own weights).
"""

from pydantic import BaseModel, ConfigDict, Field

from ..registry import ATTENTION_KINDS, LAYER, AttentionKind, Constructor, Param, Problem
from .dot import projection_params


@ATTENTION_KINDS.register
class Differential(AttentionKind):
    name = "differential"
    title = "Differential"
    scores_by_dot_product = True
    examples = ({}, {"std": 0.2, "eps": 1e-6})
    doc = ("differential(std=0.1, eps=1e-5): heads in pairs, the second softmax's mix subtracted λ-weighted from "
           "the first's and the difference RMS-normed, λ_init set by the layer's depth (Ye et al. 2024; DiffLlama)")

    class Options(BaseModel):
        model_config = ConfigDict(extra="forbid", frozen=True)
        std: float = Field(0.1, gt=0, le=10)  # the λ vectors start at N(0, std) (DiffLlama's lambda_std_dev)
        eps: float = Field(1e-5, gt=0, lt=1)  # the per-head norm's epsilon

    def params(self, shape, options):
        vectors = {f"differential.lambda_{side}": Param((shape.head_dim,), "vector", std=options.std)
                   for side in ("q1", "k1", "q2", "k2")}
        return {**projection_params(shape), **vectors}

    def check(self, options, shape):
        if shape.heads % 2 or shape.kv_heads % 2:
            return [Problem(f"differential attention pairs heads, and key/value heads: {shape.heads} heads and "
                            f"{shape.kv_heads} key/value heads are not both even", "give an even number of each")]
        return []

    def core_flops(self, shape, options, queries, keys, pairs):
        # two mixes (one per half of the paired values): QK^T and weights @ values each, scaling and a 5-step
        # softmax per score; per query and pair of heads the difference, its RMS norm and the scale
        return 8 * shape.heads * pairs * shape.head_dim, \
            12 * shape.heads * pairs + 6 * shape.heads * queries * shape.head_dim

    def core_saved(self, shape, options, batch, queries, keys, dropout, fused):
        b, h, kv, d = batch, shape.heads, shape.kv_heads, shape.head_dim
        expand = kv != h  # grouped heads: each mix copies its keys and values per query head
        paired = b * kv * keys * 2 * d  # the paired values, whose halves the two mixes read
        if fused:  # per mix q, k and its values as they are, its output and a log-sum-exp per row
            kept, words = b * (h * queries * d + kv * keys * d) + paired + 2 * b * h * queries * d, 2 * b * h * queries
        else:  # per mix the scaled queries, a copy of the keys (per query head, where grouped) and the weights
            # (with dropout: its mask and the dropped weights); the values' copies per query head, or the pairs
            kept = 2 * (b * h * queries * d + b * h * queries * keys * (3 if dropout else 1))
            kept += 4 * b * h * keys * d if expand else 2 * b * kv * keys * d + paired
            words = 0
        # the pairs' outputs side by side, λ and the output; the norm's input (which it keeps in float32) and
        # statistics, and λ's two exponentials
        kept += b * h * queries * 2 * d + 1 + b * h * queries * d
        return kept, words + b * h * queries * d + b * (h // 2) * queries + 2

    def recomputed_saved(self, shape, options, batch, length, remade):
        h, kv, d = shape.heads, shape.kv_heads, shape.head_dim
        # q and k made anew (rotated, normed), or the projection they are views of; the paired values; after the
        # recomputed attention, as ``core_saved`` (the norm's float32 input and statistics and λ's exponentials
        # count as elements: exact in float32)
        inputs = (h + kv) * d if remade else (h + 2 * kv) * d
        after = h * 2 * d + h * d + h * d + h // 2
        return batch * length * (inputs + 2 * kv * d + after) + 3

    def core(self, config, options):
        from ..nn.attention import MultiHeadAttention, core_arguments
        from ..nn.differential import DifferentialHeads
        shape = config.shape
        step = Constructor(DifferentialHeads, (shape.head_dim, LAYER, options.eps))
        return Constructor(MultiHeadAttention, kwargs=core_arguments(config, {"differential": step}))
