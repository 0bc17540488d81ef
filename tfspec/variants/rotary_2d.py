"""Axial rotary positions of a picture's patches (2-D RoPE: Pixtral's vision encoder, Qwen2-VL's and Qwen2.5-VL's).

Position p is the patch at row ``p // side`` and column ``p % side`` of a grid ``side`` patches wide. Each head's
rotated pairs (i, i + d/2) split in two: the first d/4 pairs turn by the row times a frequency, the last d/4 by the
column times one. ``frequencies`` says which:

- ``alternate`` (Pixtral): the head's ladder θ^(-2i/d), i < d/2, dealt out in turn, the even rungs to the row and
  the odd ones to the column;
- ``shared`` (Qwen2-VL, Qwen2.5-VL): the row and the column each turn by θ^(-4i/d), i < d/4.

A query-key product then depends on the two patches' offsets in rows and in columns, not on where they are; a
token sequence is numbered on the same grid. The cos and sin tables are computed in float32 from the position ids
and cast, as for ``rotary``.

A tower of pictures fills the run-time input ``patch_columns`` with the width of its pictures' grid, whatever their
size (``CompiledModel.context``): pictures of another size than the spec's, square or not, are turned by the rows
and columns of their own grid (Qwen2.5-VL's and Pixtral's pictures of any size); ``side`` where it is not given.

    encoder x 24 { position rotary_2d(side=1024 // 16, theta=10000); attention self heads=16 bias=false; ... }
"""

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from .rotary import on_cross
from ..registry import POSITIONS, Constructor, Position, Problem, RuntimeInput


# (no example: where a tower does not fill it, as in the mask's picture, the grid is ``side`` wide)
PATCH_COLUMNS = RuntimeInput("patch_columns", "the width of each picture's grid of patches, filled by a tower of "
                             "pictures from their size", grid=True)


@POSITIONS.register
class Rotary2D(Position):
    name = "rotary_2d"
    title = "2-D rotary"
    positional = ("side",)
    acts = "attention"
    enters = "rotates q, k"
    needs_dot_product = True  # only q·k of two rotated vectors depends on their offsets alone
    inputs = (PATCH_COLUMNS,)
    doc = ("rotary_2d(side, theta=10000, frequencies=alternate): queries and keys turned by the row and the column "
           "of their patch in a grid side patches wide (2-D RoPE: Pixtral's; frequencies=shared: Qwen2-VL's)")
    examples = ({"side": 3, "theta": 100.0}, {"side": 4, "theta": 50.0, "frequencies": "shared"})

    class Options(BaseModel):
        model_config = ConfigDict(extra="forbid", frozen=True)
        side: int = Field(gt=0, le=1 << 12)  # patches a row
        theta: float = Field(10000.0, gt=1.0)  # the base of the angles' geometric progression
        frequencies: Literal["alternate", "shared"] = "alternate"  # how the row and column share the ladder

    def check(self, options, shape):
        if shape.head_dim % 4 or shape.head_dim == 0:
            return [Problem(f"rotary_2d turns a quarter of each head's dimensions by the row and a quarter by the "
                            f"column, in pairs; head_dim {shape.head_dim} is not a multiple of 4",
                            "choose heads whose head_dim divides by 4")]
        return on_cross(shape)

    def regridded(self, options, grid):
        return options.model_copy(update={"side": grid})

    def grid_problem(self, options, grid, leading):
        if grid is None:
            return None
        if leading:
            return Problem("rotary_2d numbers the patches from position 0, but a class token comes first: every "
                           "patch would take its neighbour's row and column", "drop the class token (class_token="
                           "false), as Pixtral and Qwen2-VL have none")
        if grid != options.side:
            return Problem(f"the pictures make a grid {grid} patches a side; rotary_2d(side={options.side}) numbers "
                           f"one {options.side} a side", f"write rotary_2d(side={grid})")
        return None

    def attention_flops(self, options, shape, queries, keys):
        # x·cos + turn(x)·sin per element of the queries and of the new keys, as rotary's
        return 3 * shape.head_dim * (shape.heads * queries + shape.kv_heads * keys)

    def key_flops(self, options, shape, keys):
        return 3 * shape.head_dim * shape.kv_heads * keys

    def call_saved(self, options, shape, length):
        return 2 * length * shape.head_dim  # cos and sin, kept by q·cos and turn(q)·sin

    def module(self, where, options):
        from ..nn.rotary import AxialRotaryPositions
        return Constructor(AxialRotaryPositions, (where.head_dim, options.theta, options.side),
                           {"shared": options.frequencies == "shared"})
