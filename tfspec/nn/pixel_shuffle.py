"""Blocks of a grid of patch vectors made one vector: a pixel shuffle (Idefics3's and SmolVLM's connector: each
``factor`` × ``factor`` block of neighbouring patches one vector ``factor²`` times as wide) or a mean (Gemma 3's: each
block averaged). Either way a picture gives ``factor²`` times fewer vectors. The grid is square unless its width is
given (pictures of any size: Qwen2.5-VL's, Mistral 3's). Torch only, so ``tfspec emit`` could copy them."""

from __future__ import annotations

from torch import Tensor, nn


class GridStep(nn.Module):
    """A connector's step over each picture's grid of vectors, row-major, in ``block`` × ``block`` blocks: the
    connector gives it the grid's width (``columns``; None: a square grid) and the grid it makes is ``block`` times
    narrower."""

    partial = False  # a partial block at the grid's right or bottom edge is left out (else refused)

    def __init__(self, block: int):
        super().__init__()
        self.block = block

    def grid(self, x: Tensor, columns: int | None) -> tuple[Tensor, int, int]:
        """``x`` as ``(batch, rows, columns, width)``, whole blocks (those at the edges left out where ``partial``),
        and its rows and columns; a ``ValueError`` saying what it got where the blocks are not whole."""
        length, b = x.shape[1], self.block
        if columns is None:
            columns = int(round(length ** 0.5))
            if columns * columns != length or columns % b:
                raise ValueError(f"{self.name}({b}) reads a square grid whose side divides by {b}; got {length} "
                                 "vectors")
        if columns <= 0 or length % columns or not self.partial and (length // columns % b or columns % b):
            raise ValueError(f"{self.name}({b}) reads a grid of whole {b} × {b} blocks; got {length} vectors "
                             f"{columns} a row")
        rows = length // columns
        x = x.reshape(x.shape[0], rows, columns, x.shape[2])
        if rows % b or columns % b:  # (partial: unfold's edges)
            rows, columns = rows - rows % b, columns - columns % b
            x = x[:, :rows, :columns]
        return x, rows, columns


class PixelShuffle(GridStep):
    """``(batch, rows · columns, width)`` -> ``(batch, rows · columns / factor², width · factor²)``, row-major over
    the grid: the vector of block (i, j) joins, in order, the patches (i·f + a, j·f + b) for a, then b (Idefics3's
    layout: a block's rows, each row's patches side by side); ``channel_major``: feature c of every patch of the
    block, for c, then a, then b (Mistral 3's: ``torch.nn.functional.unfold``'s, which leaves out a partial block
    at the right or bottom edge of a picture of another size)."""

    name = "pixel_shuffle"

    def __init__(self, factor: int, channel_major: bool = False):
        super().__init__(factor)
        self.factor, self.channel_major = factor, channel_major
        self.partial = channel_major

    def forward(self, x: Tensor, columns: int | None = None) -> Tensor:
        (batch, _, width), f = x.shape, self.factor
        x, rows, columns = self.grid(x, columns)
        x = x.reshape(batch, rows // f, f, columns // f, f, width)  # (batch, block row, a, block column, b, width)
        order = (0, 1, 3, 5, 2, 4) if self.channel_major else (0, 1, 3, 2, 4, 5)
        return x.permute(*order).reshape(batch, rows * columns // f // f, f * f * width)

    def extra_repr(self) -> str:
        return f"factor={self.factor}" + ", channel_major" * self.channel_major


class MeanPool(GridStep):
    """``(batch, rows · columns, width)`` -> ``(batch, rows · columns / block², width)``: each ``block`` × ``block``
    block of the row-major grid averaged, the blocks row-major (Gemma 3's ``AvgPool2d``)."""

    name = "mean_pool"

    def forward(self, x: Tensor, columns: int | None = None) -> Tensor:
        (batch, _, width), b = x.shape, self.block
        x, rows, columns = self.grid(x, columns)
        x = x.reshape(batch, rows // b, b, columns // b, b, width)
        return x.mean(dim=(2, 4)).reshape(batch, rows * columns // b // b, width)

    def extra_repr(self) -> str:
        return f"block={self.block}"
