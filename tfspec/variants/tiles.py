"""Attention within tiles of a grid of patches (Qwen2.5-VL's windowed vision layers; Swin's windows, unshifted).

Position p is the patch at row ``p // side`` and column ``p % side`` of a grid ``side`` patches wide; the grid is cut
into ``size`` × ``size`` tiles from its top-left corner (those at the right and bottom edges smaller where ``size``
does not divide the grid), and a query sees the keys of its own tile alone. A tile's patches are apart in the
sequence, row by row: the mask declares each row of the tile as a range of keys (``keys_at``), so the analysis counts
exactly the pairs it allows. A tower of pictures gives the width of its pictures' grid (``patch_columns``, as for
``rotary_2d``): pictures of another size are cut into tiles of their own grid, partial at its right and bottom
edges, as Qwen2.5-VL's windows of pictures of any size are.

    encoder x 32 {
      attention self heads=16 mask=tiles(side=1008 // 14, size=8)
      layers 7 15 23 31 { self_attn mask=none }   # every 8th layer sees the whole picture
    }
"""

from pydantic import BaseModel, ConfigDict, Field

from .rotary_2d import PATCH_COLUMNS
from ..registry import MASKS, Mask, Problem


def tiles(queries, keys, side: int, size: int, patch_columns=None):
    """Query at position i sees the key at position j when both are in one ``size`` × ``size`` tile of a grid
    ``side`` wide: the same ⌊row / size⌋ and the same ⌊column / size⌋. ``patch_columns`` ``(batch,)``: each
    picture's own grid width, in place of ``side`` (the positions ``(batch or 1, ...)``: the rule is positional)."""
    q, k = queries[..., :, None], keys[..., None, :]
    if patch_columns is not None:
        side = patch_columns.reshape(-1, *[1] * (q.ndim - 1))
    return (q // side // size == k // side // size) & (q % side // size == k % side // size)


@MASKS.register
class Tiles(Mask):
    name = "tiles"
    allowed_in_cross = False
    reads_positions = True
    inputs = (PATCH_COLUMNS,)
    examples = ({"side": 4, "size": 2}, {"side": 5, "size": 2})
    doc = ("tiles(side, size): a query sees the keys of its own size × size tile of a grid of patches side wide "
           "(Qwen2.5-VL's windowed vision attention)")

    class Options(BaseModel):
        model_config = ConfigDict(extra="forbid", frozen=True)
        side: int = Field(gt=0, le=1 << 12)  # patches a row
        size: int = Field(gt=0, le=1 << 12)  # patches a side of a tile

    rule = staticmethod(tiles)

    def reach(self, options):
        far = (options.size - 1) * (options.side + 1)  # a tile's corner to its opposite corner
        return (far, far)

    def reach_at(self, options, position):
        ranges = self.keys_at(options, position, position + options.size * options.side + 1)
        return (position - ranges[0][0], ranges[-1][1] - 1 - position)

    def keys_at(self, options, position, length):
        side, size = options.side, options.size
        row, column = divmod(position, side)
        top, left = row - row % size, column - column % size
        right = min(left + size, side)
        return tuple((r * side + left, min(r * side + right, length)) for r in range(top, top + size)
                     if r * side + left < length)

    def pattern_length(self, options):
        return options.side * min(options.side, 2 * options.size)

    def regridded(self, options, grid):
        return options.model_copy(update={"side": grid, "size": max(1, min(options.size, grid // 2))})

    def grid_problem(self, options, grid, leading):
        if grid is None:
            return None
        if leading:
            return Problem("tiles numbers the patches from position 0, but a class token comes first: every patch "
                           "would fall in its neighbour's tile", "drop the class token (class_token=false)")
        if grid != options.side:
            return Problem(f"the pictures make a grid {grid} patches a side; tiles(side={options.side}) cuts one "
                           f"{options.side} a side", f"write tiles(side={grid}, size={options.size})")
        return None
