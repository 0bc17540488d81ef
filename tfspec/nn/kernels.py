"""Which kernel an attention sublayer runs, from its variants: SDPA's fused causal path (no mask tensor),
FlexAttention (its pattern from the masks' rules), or attention in bands of blocks (and how many queries a block
holds). The compiler asks when it builds the runtime modules, and the cost analysis when it counts what they do, so
both agree; torch-free, as the analysis is.
"""

from __future__ import annotations

from ..registry import combined_reach


def fused_causal_kernel(masks, kind, position=None) -> bool:
    """Does an attention with these variants (``Mask``s, an ``AttentionKind``, an in-attention ``Position`` or
    None) run SDPA's fused causal kernel over an unpadded sequence, with no mask tensor?"""
    return lone_causal(masks) and kind.fuses_causal and not _works_on_scores(position)



def _works_on_scores(position) -> bool:
    """Does an in-attention position scheme (or None) change the scores or the mix itself (ALiBi, Shaw), so
    that neither a fused kernel nor attention in bands can compute it?"""
    return position is not None and (position.biases_scores or position.mixes_values)



def flex_attention_applies(masks, kind, position=None, cross: bool = False) -> bool:
    """Can FlexAttention compute attention with these variants from its masks' rules alone (``tfspec.nn.flex``):
    a plain softmax over a pattern of structure (causal, window, block, prefix, document), with no score bias
    or value term of a position scheme, on the queries' own sequence?"""
    structural = any(variant.structural for variant, _ in masks)
    return (structural and kind.plain_softmax and not cross and not _works_on_scores(position))



def attention_band(masks, kind, position=None, cross: bool = False) -> tuple[int, int] | None:
    """The ``(behind, ahead)`` keys a query may see when attention with these variants (``(Mask, options)``
    pairs, an ``AttentionKind``, an in-attention ``Position`` or None) can run in bands of blocks
    (``MultiHeadAttention.mix_banded``), else None: the reach must be bounded both ways, the kind must mix
    block by block, and no position scheme may bias the scores or mix the values (it works on whole sequences)."""
    if cross or not kind.runs_in_blocks or _works_on_scores(position):
        return None
    behind, ahead = combined_reach(masks)
    return (behind, ahead) if behind is not None and ahead is not None else None



def band_chunk(length: int, band: tuple[int, int]) -> int | None:
    """Queries per block of banded attention over ``length`` positions, or None where dense attention is
    cheaper. Each block of ``chunk`` queries scores ``chunk + behind + ahead`` keys, so the work is
    ``length · (chunk + behind + ahead)`` pairs rather than ``length²``; half the reach per block keeps the
    pairs scored within 1.5 times those allowed, with copies of the keys 3 times their size."""
    behind, ahead = band
    chunk = max(16, (behind + ahead + 2) // 2)
    return chunk if length >= 2 * (chunk + behind + ahead) else None



def lone_causal(masks) -> bool:
    """Are these ``Mask``s' structure a lone causal mask (what SDPA's ``is_causal`` stands for)?"""
    structural = [m for m in masks if m.structural]
    return len(structural) == 1 and structural[0].fused_causal
