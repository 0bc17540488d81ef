"""BigBird attention (Zaheer et al. 2020, "Big Bird: Transformers for Longer Sequences"; ITC, as in Hugging
Face's ``attention_type="block_sparse"``): block-sparse attention with window, global and random blocks.

The sequence is cut into blocks of ``block`` positions. The first and last blocks are global (they see,
and are seen by, every position); every other block of queries sees its own block and its two neighbours
(w = 3 blocks), the two global blocks (g = 2) and ``random`` = r further blocks drawn per head. Queries
score (w + g + r)·block keys each, so time and memory grow as n·(w + g + r)·block, and any two positions
are two steps apart through a global block.

Length rules: a sequence is padded internally to whole blocks (the padding masked, its outputs dropped);
at lengths of at most (5 + 2r)·block the blocks would cover almost every key, so attention there is dense,
as Hugging Face switches to full attention. The random blocks are drawn once per length and head from a
generator seeded by ``seed`` (and the number of blocks): training is reproducible and evaluation
deterministic, and every layer draws the same ones. The pattern is its own mask: it takes ``padding``
only, and no position scheme that biases scores (rotary, or positions on the embedding, are fine).

    encoder x 12 { attention self heads=12 kind=bigbird(64, random=3) mask=padding; ... }
"""

from pydantic import BaseModel, ConfigDict, Field

from ..registry import ATTENTION_KINDS, AttentionKind, ComplexityClass, Constructor, Problem
from .dot import projection_params


def blocks_of(length: int, block: int) -> int:
    return -(-length // block)


@ATTENTION_KINDS.register
class BigBird(AttentionKind):
    name = "bigbird"
    title = "BigBird"
    positional = ("block",)
    scores_by_dot_product = True
    fuses_causal = False
    runs_in_blocks = False  # its blocks are its own, not a mask's band
    own_pattern = True
    examples = ({"block": 2, "random": 1}, {"block": 3, "random": 2, "seed": 7})
    doc = "BigBird: block-sparse attention over window, global and random blocks (n·(5 + r)·block pairs)"

    class Options(BaseModel):
        model_config = ConfigDict(extra="forbid", frozen=True)
        block: int = Field(gt=0, le=1 << 16)  # positions per block (Hugging Face's block_size; 64 in the paper)
        random: int = Field(3, ge=0, le=1 << 10)  # random key blocks per query block (num_random_blocks)
        seed: int = Field(0, ge=0, le=(1 << 31) - 1)  # of the random blocks' generator

    def params(self, shape, options):
        return projection_params(shape)

    def check(self, options, shape):
        if shape.cross:
            return [Problem("BigBird attention on cross-attention: its window and random blocks are positions of "
                            "the queries' own sequence", "use kind=dot on the cross-attention")]
        if shape.kv_heads != shape.heads:
            return [Problem(f"BigBird draws random blocks per query head; kv_heads={shape.kv_heads} would share "
                            "keys across heads that see different blocks", "leave kv_heads unset")]
        return []

    def sparse(self, options, length: int) -> bool:
        from ..nn.bigbird_pattern import bigbird_sparse
        return bigbird_sparse(length, options.block, options.random)

    def pattern(self, options, length: int) -> tuple[int, int]:
        """(query rows, query-key pairs) it scores over ``length`` positions, as executed (padded to blocks)."""
        if not self.sparse(options, length):
            return length, length * length
        b, blocks = options.block, blocks_of(length, options.block)
        return blocks * b, 2 * b * blocks * b + (blocks - 2) * b * (5 + options.random) * b

    def sees(self, options, shape, length, head=0):
        import numpy as np

        from ..nn.bigbird_pattern import bigbird_allowed, bigbird_key_blocks
        if not self.sparse(options, length):
            return np.ones((length, length), dtype=bool)
        seen = bigbird_key_blocks(blocks_of(length, options.block), shape.heads, options.random, options.seed)
        return bigbird_allowed(seen[head:head + 1], length, options.block)[0]

    def pattern_note(self, options):
        return f"random blocks drawn per head (seed {options.seed}); dense up to " \
               f"{(5 + 2 * options.random) * options.block} positions"

    def pattern_length(self, options):
        return (5 + 2 * options.random + 5) * options.block  # sparse, with five middle blocks to spare

    def core_flops(self, shape, options, queries, keys, pairs):
        _, pairs = self.pattern(options, queries)
        # QK^T and weights @ V over the pattern's pairs; scaling and a 5-step softmax per score
        return 4 * shape.heads * pairs * shape.head_dim, 6 * shape.heads * pairs

    def recomputes(self, options, length):
        return self.sparse(options, length)  # its gathered blocks, recomputed in backward rather than kept

    def keeps_projection(self, shape, options, batch):
        return False  # its keys and values are contiguous copies (then padded or gathered), never views

    def core_saved(self, shape, options, batch, queries, keys, dropout, fused):
        heads, d = shape.heads, shape.head_dim
        probabilities = 3 if dropout else 1  # with dropout also its mask and the dropped probabilities
        # dense (sparse, it ``recomputes``): scaled q and k, v, the output, the probabilities
        return batch * heads * (4 * queries * d + queries * keys * probabilities), 0

    def complexity(self, options, cross, reach):
        r = options.random
        return ComplexityClass("O(n·(w+g+r)·b·d)", "O(1)", "O(1)",
                               f"b = {options.block} positions per block; w = 3 window, g = 2 global and r = {r} "
                               "random blocks per query block; two steps apart through a global block")

    def build(self, config, options, layer=None):
        from ..nn.bigbird import BigBirdAttentionInContext
        return BigBirdAttentionInContext(config, options.block, options.random, options.seed, layer)

    def core(self, config, options):
        from ..nn.attention import core_arguments
        from ..nn.bigbird import BigBirdAttention
        return Constructor(BigBirdAttention, kwargs={**core_arguments(config), "block": options.block,
                                                     "random": options.random, "seed": options.seed})
