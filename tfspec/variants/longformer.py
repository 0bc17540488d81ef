"""Longformer attention (Beltagy et al. 2020, "Longformer: The Long-Document Transformer"): a sliding window,
written as the mask (``mask=window(w/2 + 1) + padding`` for Hugging Face's ``attention_window`` w: w/2 keys each
side), plus global tokens.

The global tokens of a call are the run-time input ``global_tokens`` ``(batch, length)``, nonzero where a token
is global (Hugging Face's ``global_attention_mask``; question tokens in QA, the first token in classification).
Every query sees them besides the keys its masks allow, with the usual keys and values; a global token's own
output attends to every unpadded key through projections of its own, ``global_qkv`` (Hugging Face's
``query_global``, ``key_global``, ``value_global``). Without global tokens it is ``dot`` attention over its masks,
which runs in bands of blocks for a window, and the cost analysis counts that; each global token adds its key
to every block, and its global row costs 4·n·head_dim per head.

Global tokens see the whole sequence and every token sees them, so no causal mask can hold: this is an encoder's
attention (Longformer's, LED's encoder). Nor does it take a position scheme acting in attention (its global
projections have none): positions go on the embedding, as Longformer's do.

    encoder x 12 { attention self heads=12 kind=longformer mask=window(257) + padding; ... }
    model(tokens, padding_mask, global_tokens=first_token)
"""

from ..registry import (ATTENTION_KINDS, MASKS, AttentionKind, Constructor, Problem, RuntimeInput, combined_reach,
                        linear_params)
from .dot import math_keeps_projection, projection_params

def first_token(length: int) -> list[int]:
    """Example global tokens: the first (a classification token)."""
    return [1] + [0] * (length - 1)


GLOBAL_TOKENS = RuntimeInput("global_tokens", "1 at the tokens that see, and are seen by, every token (Longformer's "
                             "global attention; Hugging Face's global_attention_mask), 0 elsewhere (default: none)",
                             "position", example=first_token)


@ATTENTION_KINDS.register
class Longformer(AttentionKind):
    name = "longformer"
    title = "Longformer"
    scores_by_dot_product = True
    fuses_causal = False  # no causal mask holds beside global tokens
    inputs = (GLOBAL_TOKENS,)
    doc = ("longformer: dot-product attention over its masks (a window) plus global tokens, the run-time input "
           "global_tokens, which see and are seen by every token through projections of their own")

    def params(self, shape, options):
        return {**projection_params(shape),
                **linear_params("global_qkv", 3 * shape.q_width, shape.width, shape.bias, query_rows=shape.q_width,
                                head_dim=shape.head_dim)}

    def check(self, options, shape):
        if shape.cross:
            return [Problem("Longformer attention on cross-attention: its global tokens are positions of the "
                            "queries' own sequence", "use kind=dot on the cross-attention")]
        if shape.kv_heads != shape.heads:
            return [Problem(f"Longformer's global projections have a key and value head per query head; "
                            f"kv_heads={shape.kv_heads} has fewer", "leave kv_heads unset")]
        return []

    def conflicts(self, options, masks, position, position_choice):
        problems = super().conflicts(options, masks, position, position_choice)
        if masks and combined_reach([MASKS.of(m) for m in masks])[1] == 0:
            problems.append(Problem("longformer attention cannot take a causal mask: its global tokens see, and are "
                                    "seen by, every token, the future included",
                                    "use it in an encoder (mask=window(w) + padding), or kind=dot with this mask",
                                    "mask", next(m for m in masks if MASKS[m.name].structural)))
        if position.acts == "attention" and not position.absent:
            problems.append(Problem(f"{position.name} positions act inside attention, but Longformer's global "
                                    "projections take none", "add positions to the embedding instead",
                                    about=position_choice))
        return problems

    def pattern_note(self, options):
        return "plus the tokens global_tokens marks, which see and are seen by every token"

    # Without global tokens it computes what ``dot`` does, the same way (the analysis counts that call).
    def core_flops(self, shape, options, queries, keys, pairs):
        return 4 * shape.heads * pairs * shape.head_dim, 6 * shape.heads * pairs

    def keeps_projection(self, shape, options, batch):
        return math_keeps_projection(shape, batch)

    def core_saved(self, shape, options, batch, queries, keys, dropout, fused):
        return ATTENTION_KINDS["dot"].core_saved(shape, options, batch, queries, keys, dropout, fused)

    def core(self, config, options):
        from ..nn.attention import core_arguments
        from ..nn.longformer import LongformerAttention
        return Constructor(LongformerAttention, kwargs=core_arguments(config))
