"""T5's relative attention bias (Raffel et al. 2020, "Exploring the Limits of Transfer Learning", section 2.1):
one learned scalar per head for each bucket of the offset j - i, added to the attention scores.

Offsets are bucketed logarithmically: of ``num_buckets`` (per direction, half of them when bidirectional),
half hold the small offsets exactly and the rest cover offsets up to ``max_distance`` in ever wider buckets;
beyond it every offset shares the last. The direction follows the masks, as T5's does: bidirectional in an
encoder, one-directional under a causal mask (a decoder's self-attention: every bucket is then for earlier
keys; later ones, which the mask hides, would share bucket 0). The table belongs to the stack: computed once
per call, shared by every layer's attention, as T5 does (its first layer owns it). Only offsets matter, so a
model with ``position none`` on its embedding is offset invariant.

T5 does not scale the scores by 1/sqrt(head_dim) (it folds the factor into the initialisation): write
``scale=1`` on its attentions.

    encoder x 6 { position t5(num_buckets=32, max_distance=128); attention self heads=8 scale=1 mask=padding; ... }
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from ..registry import POSITIONS, Constructor, Param, Position, Problem


@POSITIONS.register
class T5RelativeBias(Position):
    name = "t5"
    title = "T5 relative bias"
    acts = "attention"
    enters = "biases scores (relative, shared by the stack)"
    relative = True
    biases_scores = True
    doc = "T5's relative attention bias: a learned scalar per head and log-bucketed offset, one table per stack"
    examples = ({}, {"num_buckets": 8, "max_distance": 20})

    class Options(BaseModel):
        model_config = ConfigDict(extra="forbid", frozen=True)
        num_buckets: int = Field(32, ge=2, le=1 << 16)
        max_distance: int = Field(128, gt=0, le=1 << 30)  # offsets at least this far share the last bucket

    def stack_params(self, shape, options):  # one table for the stack: each layer's attention adds its bias
        return {"weight": Param((options.num_buckets, shape.heads), "position_table")}

    def stack_label(self, options):
        return f"Position Bias ({self.label(options)}, one table shared by every layer)"

    def stack_edge(self, options):
        return self.enters

    def check(self, options, shape):
        if shape.cross:
            return [Problem("T5 relative bias on cross-attention: queries and keys are positions of different "
                            "sequences, so their offset means nothing (T5's cross-attention has no bias)",
                            "set position=none on the cross-attention")]
        per_direction = options.num_buckets if shape.causal else options.num_buckets // 2
        exact = per_direction // 2
        if exact < 1:
            return [Problem(f"t5(num_buckets={options.num_buckets}) leaves {per_direction} bucket(s) per direction: "
                            "at least 2 are needed (half exact, half logarithmic)", "use num_buckets=32, as T5")]
        if options.max_distance <= exact:
            return [Problem(f"t5(max_distance={options.max_distance}) must exceed the {exact} offsets that get a "
                            "bucket each", f"use max_distance > {exact} (T5: 128)")]
        return []

    def attention_flops(self, options, shape, queries, keys):
        return shape.heads * queries * keys  # one addition per score (the bias is built once per call)

    def stack_saved(self, options, shape, queries, keys, masked, element_bytes):
        # the int64 buckets, which the table lookup keeps to route gradients; a mask's where keeps its condition
        return 8 * queries * keys + (queries * keys if masked else 0)

    def module(self, where, options):
        return None  # each layer's attention receives the stack's module (``stack_module``)

    def stack_module(self, shape, options):
        from ..nn.t5 import BucketedRelativeBias
        return Constructor(BucketedRelativeBias, (shape.heads, options.num_buckets, options.max_distance,
                                                  not shape.causal))
