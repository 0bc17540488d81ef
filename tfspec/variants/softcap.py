"""Logit soft-capping of attention scores (Gemma 2; Grok-1): each score s becomes ``cap · tanh(s / cap)`` before
the mask and the softmax, so no score leaves (-cap, cap) and no single key can take all of a query's weight however
large q·k grows.

Scores are dot products (scaled as ``dot``'s, or by ``scale=``), so rotary positions, every mask and grouped-query
heads apply as for ``dot``, and masks of bounded reach run in bands. A position scheme's score bias (ALiBi) is
added after the cap, with the mask. No fused kernel caps scores: the weights are computed in full, as SDPA's math
path does. The final logits' cap is the head's ``softcap=`` (``tfspec.nn.head``).

    decoder x 26 { attention self heads=8 kv_heads=4 kind=softcap(50) mask=causal; ... }
"""

from pydantic import BaseModel, ConfigDict, Field

from ..registry import ATTENTION_KINDS, AttentionKind, Constructor
from .dot import math_keeps_projection, math_saved, projection_params


@ATTENTION_KINDS.register
class SoftCap(AttentionKind):
    name = "softcap"
    title = "Soft-capped"
    positional = ("cap",)
    fuses_causal = False  # no SDPA kernel caps scores: a causal mask is built
    scores_by_dot_product = True
    examples = ({"cap": 0.5}, {"cap": 50.0})
    doc = "softcap(cap): softmax attention over scores capped as cap·tanh(score/cap) (Gemma 2)"

    class Options(BaseModel):
        model_config = ConfigDict(extra="forbid", frozen=True)
        cap: float = Field(gt=0.0, le=1e6)

    def params(self, shape, options):
        return projection_params(shape)

    def core_flops(self, shape, options, queries, keys, pairs):
        # QK^T and weights @ V; scaling by scale / cap, tanh, multiplying by cap and a 5-step softmax per score
        return 4 * shape.heads * pairs * shape.head_dim, 8 * shape.heads * pairs

    def keeps_projection(self, shape, options, batch):
        return math_keeps_projection(shape, batch)

    def core_saved(self, shape, options, batch, queries, keys, dropout, fused):
        scaled, words = math_saved(shape, batch, queries, keys, dropout)
        return scaled + batch * shape.heads * queries * keys, words  # tanh's output, kept for its gradient

    def core(self, config, options):
        from ..nn.attention import MultiHeadAttention, core_arguments
        from ..nn.softcap import SoftCap as Step
        step = Constructor(Step, (options.cap,))
        return Constructor(MultiHeadAttention, kwargs=core_arguments(config, {"softcap": step}))
