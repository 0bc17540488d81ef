"""Fixed 2-D sine-cosine positions of a picture's patches (MAE, He et al. 2022; the ViT models of many papers).

Position p (after the class token, which gets zeros) is the patch at row ``(p - 1) // side`` and column
``(p - 1) % side`` of a grid ``side`` patches wide; a quarter of the width holds the sines of the row times a
geometric ladder of frequencies ``temperature^(-i / (dim / 4))``, a quarter their cosines, then the same of the
column: ``[sin(row) | cos(row) | sin(col) | cos(col)]`` (``columns_first``: the column's first, the layout of MAE's
released weights). Computed in float64 as Hugging Face's ``build_2d_sinusoidal_position_embedding`` is, then cast;
nothing is learned and nothing lands in the state dict. Token sequences are numbered in the same grid.

    embedding image { input patches(image=224, patch=16, class_token=true); dim 768; position sinusoidal_2d(14) }
"""

import math

from pydantic import BaseModel, ConfigDict, Field

from ..registry import POSITIONS, Constructor, Position, Problem


@POSITIONS.register
class Sinusoidal2D(Position):
    name = "sinusoidal_2d"
    title = "2-D sinusoidal"
    positional = ("side",)
    doc = ("sinusoidal_2d(side, class_token=true, columns_first=false): fixed sines and cosines of each patch's row "
           "and column in a grid side patches wide, the class token's zeros (MAE)")
    examples = ({"side": 9}, {"side": 9, "class_token": False, "columns_first": True, "temperature": 100.0})

    class Options(BaseModel):
        model_config = ConfigDict(extra="forbid", frozen=True)
        side: int = Field(gt=0, le=1 << 10)  # patches a row
        class_token: bool = True  # position 0 is a class token (zeros), the patches follow
        columns_first: bool = False  # [column's | row's] halves, MAE's released layout
        temperature: float = Field(10000.0, gt=1.0)

    def max_len(self, options):
        return options.side ** 2 + options.class_token

    def shrunk(self, options, max_len):
        return options.model_copy(update={"side": max(1, math.isqrt(max(1, max_len - options.class_token)))})

    def embedding_problem(self, options, dim, grid, class_token):
        if dim % 4:
            return Problem(f"2-D sinusoidal positions split the width into four quarters (the sines and cosines of "
                           f"the row and of the column); dim {dim} is not a multiple of 4", "use a multiple of 4")
        if grid is not None and (grid != options.side or class_token != options.class_token):
            token = "after a class token" if class_token else "with no class token"
            return Problem(f"the pictures make a grid {grid} patches a side, {token}; "
                           f"{self.label(options)} numbers one {options.side} a side "
                           f"{'after a class token' if options.class_token else 'with no class token'}",
                           f"write sinusoidal_2d({grid}{'' if class_token else ', class_token=false'})")
        return None

    def module(self, dim, options):
        from ..nn.embedding import Sinusoidal2DPositions
        return Constructor(Sinusoidal2DPositions, (dim, options.side),
                           {"first": int(options.class_token), "columns_first": options.columns_first,
                            "temperature": options.temperature})
