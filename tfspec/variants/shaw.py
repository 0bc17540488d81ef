"""Relative position representations (Shaw, Uszkoreit & Vaswani 2018, "Self-Attention with Relative Position
Representations"): learned vectors for the offset j - i, clipped to ±k, added to the keys and to the values.

    e_ij = q_i · (k_j + a^K_ij) / sqrt(d),   z_i = sum_j softmax_j(e_ij) (v_j + a^V_ij),   a_ij = w_clip(j-i, k)

Each table holds 2k + 1 vectors of size head_dim, shared across heads, one pair of tables per layer (the
paper's choice; k = 16 in its base model, which found no gain beyond). Only offsets matter, so a model with
``position none`` on its embedding is offset invariant. The value term is why no SDPA kernel computes this:
the mix runs in plain products (``tfspec.nn.shaw``), at n²·d like ordinary attention plus n·(2k+1)·d for
the two tables and two passes over the n² offsets, and it keeps the n² probabilities for backward.

    encoder x 6 { position shaw(16); attention self heads=8 mask=padding; ... }
"""

from pydantic import BaseModel, ConfigDict, Field

from ..registry import POSITIONS, Constructor, Param, Position, Problem


@POSITIONS.register
class Shaw(Position):
    name = "shaw"
    title = "Shaw relative"
    positional = ("k",)
    acts = "attention"
    enters = "keys and values (relative)"
    relative = True
    mixes_values = True
    examples = ({"k": 2}, {"k": 16})
    doc = "Shaw et al.'s relative positions: learned offset vectors (clipped to ±k) added to keys and values"

    class Options(BaseModel):
        model_config = ConfigDict(extra="forbid", frozen=True)
        k: int = Field(gt=0, le=1 << 16)  # offsets beyond ±k share the outermost vector

    def params(self, where, options):
        table = (2 * options.k + 1, where.head_dim)
        return {"keys": Param(table, "vector"), "values": Param(table, "vector")}

    def check(self, options, shape):
        if shape.cross:
            return [Problem("Shaw relative positions on cross-attention: queries and keys are positions of "
                            "different sequences, so their offset means nothing", "set position=none on the "
                            "cross-attention")]
        return []

    def attention_flops(self, options, shape, queries, keys):
        return 2 * shape.heads * queries * keys  # adding the gathered key term; summing weights per offset

    def attention_matmul_flops(self, options, shape, queries, keys):
        # q against the key table, and the weights per offset against the value table
        return 2 * 2 * shape.heads * queries * (2 * options.k + 1) * shape.head_dim

    def mix_keeps_projection(self, options, shape, kind, kind_options, batch):
        return False  # it keeps contiguous copies of q, k and v

    def mix_saved(self, options, shape, kind, kind_options, batch, queries, keys, dropout, fused):
        heads, head_dim, offsets = shape.heads, shape.head_dim, 2 * options.k + 1
        # scaled q and k (per query head), v, the output; q against the key table, the probabilities (with
        # dropout also its mask and the dropped ones), the weights summed per offset
        vectors = batch * heads * head_dim * (2 * queries + 2 * keys)
        scores = batch * heads * queries * (2 * offsets + keys * (3 if dropout else 1))
        return vectors + scores, 2 * queries * keys  # the offsets, int64 (1, queries, keys) from default ids

    def module(self, where, options):
        from ..nn.shaw import RelativeRepresentations
        return Constructor(RelativeRepresentations, (where.head_dim, options.k))
