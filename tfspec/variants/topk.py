"""Top-k attention: softmax over each query's k highest scores; ``topk(1)`` is hard attention.

The notes classify attention as soft (every key weighted) or hard (one key
chosen). ``kind=topk(k)`` keeps the k best-scoring keys a query may see and
normalises over them (Gupta et al. 2021); the rest get weight 0. Scores are
dot products, so rotary positions, ALiBi and every mask apply as for ``dot``,
and masks of bounded reach run in bands. Cost: all scores (n²·d, to choose),
but the value sum over k keys (n·k·d); memory keeps the k weights, indices and
chosen values per query instead of the n² probabilities.

    decoder x 6 { attention self heads=8 kind=topk(8) mask=causal; ... }
"""

from pydantic import BaseModel, ConfigDict, Field

from ..registry import ATTENTION_KINDS, AttentionKind, ComplexityClass, Constructor
from .dot import projection_params


@ATTENTION_KINDS.register
class TopK(AttentionKind):
    name = "topk"
    title = "Top-k"
    positional = ("k",)
    fuses_causal = False  # no SDPA kernel keeps the k best: a causal mask is built
    scores_by_dot_product = True
    examples = ({"k": 1}, {"k": 3})
    doc = "top-k attention: only each query's k highest scores survive the softmax (k=1: hard attention)"

    class Options(BaseModel):
        model_config = ConfigDict(extra="forbid", frozen=True)
        k: int = Field(gt=0, le=1 << 20)

    def params(self, shape, options):
        return projection_params(shape)

    def pattern_note(self, options):
        return f"of these keys only the {options.k} best-scoring per query survive, chosen at run time"

    def kept_keys(self, options, heads):
        return options.k * heads  # each head its own

    def core_flops(self, shape, options, queries, keys, pairs):
        kept = min(options.k, keys)
        # QK^T over every pair; the k chosen values; scaling q, the mask add, and a softmax over k per query
        matmul = 2 * shape.heads * pairs * shape.head_dim + 2 * shape.heads * queries * kept * shape.head_dim
        return matmul, shape.heads * (pairs + 5 * queries * kept)

    def keeps_projection(self, shape, options, batch):
        # the gather of the chosen values keeps v, a view of the whole (q)kv projection unless repeated per
        # query head (grouped-query)
        return shape.kv_heads == shape.heads

    def core_saved(self, shape, options, batch, queries, keys, dropout, fused):
        heads, head_dim = shape.heads, shape.head_dim
        chosen = batch * heads * queries * min(options.k, keys)
        # scaled q and k (per query head), v, the output; the chosen values, the weights (with dropout also
        # its mask and the dropped weights), the indices of the chosen keys
        vectors = batch * heads * head_dim * (2 * queries + 2 * keys) + chosen * head_dim
        if self.keeps_projection(shape, options, batch):
            vectors += batch * heads * head_dim * (keys if shape.cross else 2 * keys)
        return vectors + chosen * (3 if dropout else 1), 2 * chosen  # int64 indices: two words each

    def complexity(self, options, cross, reach):
        base = super().complexity(options, cross, reach)
        note = f"values mixed from the k = {options.k} best keys per query (n·k·d)"
        return ComplexityClass(base.per_layer, base.sequential, base.path, "; ".join(filter(None, [base.note, note])))

    def core(self, config, options):
        from ..nn.attention import core_arguments
        from ..nn.topk import TopKAttention
        return Constructor(TopKAttention, kwargs={**core_arguments(config), "k": options.k})
