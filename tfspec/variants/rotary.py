"""Rotary position embedding (RoPE; Su et al. 2021): rotate each head's queries and keys by their positions.

Pairs of dimensions (i, i + d/2) of a query or key at position p are rotated by
the angle p · θ^(-2i/d), so a query-key dot product depends only on the
difference of their positions: attention becomes offset invariant, and keys
rotated once stay valid in a KV cache. ``fraction`` rotates only the first
``fraction · head_dim`` dimensions of each head and passes the rest through
(GPT-NeoX, Pythia: 0.25). The half-split pairing is Hugging Face's layout
(Llama, Mistral, GPT-NeoX); ``interleaved=true`` pairs neighbours (2i, 2i + 1)
as GPT-J and Meta's original Llama code do.

    decoder x 32 { position rotary(theta=10000); attention self heads=32 mask=causal; ... }
"""

from pydantic import BaseModel, ConfigDict, Field

from ..registry import POSITIONS, Constructor, Position, Problem


@POSITIONS.register
class Rotary(Position):
    name = "rotary"
    title = "rotary"
    acts = "attention"
    enters = "rotates q, k"
    relative = True
    needs_dot_product = True  # only q·k of two rotated vectors depends on their offset alone
    doc = "rotary position embedding: queries and keys rotated by position-dependent angles (RoPE)"
    examples = ({}, {"theta": 500000.0, "fraction": 0.5}, {"interleaved": True})

    class Options(BaseModel):
        model_config = ConfigDict(extra="forbid", frozen=True)
        theta: float = Field(10000.0, gt=1.0)  # the base of the angles' geometric progression
        fraction: float = Field(1.0, gt=0.0, le=1.0)  # of each head's dimensions that rotate
        interleaved: bool = False  # pair dimensions (2i, 2i+1) instead of (i, i + d/2)

    def rotary_dim(self, options, head_dim: int) -> int:
        return int(head_dim * options.fraction)  # truncated, as Hugging Face and GPT-NeoX do

    def check(self, options, shape):
        rotated = self.rotary_dim(options, shape.head_dim)
        if rotated < 2 or rotated % 2:
            return [Problem(f"rotary(fraction={options.fraction:g}) rotates {rotated} of the {shape.head_dim} "
                            "dimensions per head; rotation needs an even number, at least 2",
                            f"choose a fraction with an even head_dim · fraction (e.g. "
                            f"{2 * max(1, shape.head_dim // 4) / shape.head_dim:g})")]
        if shape.cross:
            return [Problem("rotary positions on cross-attention: queries and keys are positions of different "
                            "sequences", "set position=none on the cross-attention")]
        return []

    def attention_flops(self, options, shape, queries, keys):
        # x·cos + rotate(x)·sin per rotated element of the queries and of the new keys
        rotated = self.rotary_dim(options, shape.head_dim)
        return 3 * rotated * (shape.heads * queries + shape.kv_heads * keys)

    def call_saved(self, options, shape, length):
        return 2 * length * self.rotary_dim(options, shape.head_dim)  # cos and sin, kept by q·cos and turn(q)·sin

    def module(self, where, options):
        from ..nn.rotary import RotaryPositions
        return Constructor(RotaryPositions, (self.rotary_dim(options, where.head_dim), options.theta),
                           {"interleaved": options.interleaved})
