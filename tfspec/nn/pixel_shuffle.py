"""Blocks of a square grid of patch vectors made one vector: a pixel shuffle (Idefics3's and SmolVLM's connector:
each ``factor`` × ``factor`` block of neighbouring patches one vector ``factor²`` times as wide) or a mean (Gemma
3's: each block averaged). Either way a picture gives ``factor²`` times fewer vectors. Torch only, so ``tfspec
emit`` could copy them."""

from __future__ import annotations

from torch import Tensor, nn


class PixelShuffle(nn.Module):
    """``(batch, side², width)`` -> ``(batch, (side / factor)², width · factor²)``, row-major over the grid: the
    vector of block (i, j) joins, in order, the patches (i·f + a, j·f + b) for a, then b (Idefics3's layout: a
    block's rows, each row's patches side by side); ``channel_major``: feature c of every patch of the block, for
    c, then a, then b (Mistral 3's: ``torch.nn.functional.unfold``'s)."""

    def __init__(self, factor: int, channel_major: bool = False):
        super().__init__()
        self.factor, self.channel_major = factor, channel_major

    def forward(self, x: Tensor) -> Tensor:
        batch, length, width = x.shape
        side, f = int(round(length ** 0.5)), self.factor
        if side * side != length or side % f:
            raise ValueError(f"pixel_shuffle({f}) reads a square grid whose side divides by {f}; got {length} vectors")
        x = x.reshape(batch, side // f, f, side // f, f, width)  # (batch, block row, a, block column, b, width)
        order = (0, 1, 3, 5, 2, 4) if self.channel_major else (0, 1, 3, 2, 4, 5)
        return x.permute(*order).reshape(batch, (side // f) ** 2, f * f * width)

    def extra_repr(self) -> str:
        return f"factor={self.factor}" + ", channel_major" * self.channel_major


class MeanPool(nn.Module):
    """``(batch, side², width)`` -> ``(batch, (side / block)², width)``: each ``block`` × ``block`` block of the
    row-major grid averaged, the blocks row-major (Gemma 3's ``AvgPool2d``)."""

    def __init__(self, block: int):
        super().__init__()
        self.block = block

    def forward(self, x: Tensor) -> Tensor:
        batch, length, width = x.shape
        side, b = int(round(length ** 0.5)), self.block
        if side * side != length or side % b:
            raise ValueError(f"mean_pool({b}) reads a square grid whose side divides by {b}; got {length} vectors")
        x = x.reshape(batch, side // b, b, side // b, b, width)
        return x.mean(dim=(2, 4)).reshape(batch, (side // b) ** 2, width)

    def extra_repr(self) -> str:
        return f"block={self.block}"
