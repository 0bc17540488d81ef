"""LFM2's gated short convolution (Liquid AI 2025): y = out(C ⊙ conv(B ⊙ x)), with B, C and x one linear map of the
input and ``conv`` a causal depthwise convolution over the last ``kernel`` positions, each channel its own.

Its decoding state is the convolution's input at the last ``kernel - 1`` positions: a new position's output needs
those and its own, nothing older. A padded position enters the convolution as zeros, as the positions before the
first do, so a left-padded row computes what the same row unpadded does.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class ShortConv(nn.Module):
    """``forward(x, ctx=None, state=None)``: ``x`` (batch, length, width); ``state``: a ``RecurrentState``, read
    and replaced while decoding (None: a whole sequence)."""

    def __init__(self, width: int, kernel: int, bias: bool) -> None:
        super().__init__()
        self.kernel = kernel
        self.in_proj = nn.Linear(width, 3 * width, bias=bias)  # rows: B, C, x (Hugging Face's Lfm2ShortConv)
        self.conv = nn.Conv1d(width, width, kernel, groups=width, bias=bias)
        self.out_proj = nn.Linear(width, width, bias=bias)

    def forward(self, x: Tensor, ctx=None, state=None) -> Tensor:
        b, c, h = self.in_proj(x).chunk(3, dim=-1)
        bx = b * h
        padding = ctx.padding if ctx is not None else None
        if padding is not None:
            bx = bx.masked_fill(padding[..., None], 0)
        bx = bx.transpose(1, 2)  # (batch, width, length): channels first, as a convolution reads them
        past = state.get("inputs") if state is not None else None
        window = F.pad(bx, (self.kernel - 1, 0)) if past is None else torch.cat((past, bx), dim=-1)
        if state is not None:
            state.keep("inputs", window[..., window.shape[-1] - (self.kernel - 1):])
        y = c * self.conv(window).transpose(1, 2)
        return self.out_proj(y)

    def extra_repr(self) -> str:
        return f"kernel={self.kernel}"
