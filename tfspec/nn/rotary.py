"""Rotary positions at run time: cos/sin tables built once per call in float32, applied per head.

Equal to Hugging Face's ``apply_rotary_pos_emb`` (half-split layout) with
``inv_freq = 1 / θ^(2i/d)``, or the scaled frequencies of ``tfspec.nn.rope_scaling``:
the angles and their cos/sin are computed in float32 from the position ids, then
cast to the activations' dtype, as transformers does, so a bfloat16 model rotates
by the same angles.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .position import InAttentionPositions
from .rope_scaling import rope_frequencies


class RotaryPositions(InAttentionPositions):
    """An in-attention position scheme (see ``MultiHeadAttention``); torch only, so ``tfspec emit`` copies it."""


    def __init__(self, rotary_dim: int, theta: float, interleaved: bool = False, scaling: dict | None = None,
                 clockwise: bool = False) -> None:
        super().__init__()
        self.rotary_dim, self.theta, self.interleaved, self.scaling = rotary_dim, theta, interleaved, scaling
        self.clockwise = clockwise  # every angle negated (NanoChat's): its sines change sign
        # equal schemes share their tables in a call
        self.key = f"rotary:{rotary_dim}:{theta!r}:{interleaved}:{sorted((scaling or {}).items())}" + \
            (":clockwise" if clockwise else "")

    def tables(self, positions: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        """cos, sin ``(batch or 1, 1, length, rotary_dim)`` for position ids ``(batch or 1, length)``: computed
        in float32, then cast to ``dtype``."""
        dynamic = self.scaling is not None and self.scaling["kind"] == "dynamic"  # reads the call's longest position
        inv_freq, magnitude = rope_frequencies(self.rotary_dim, self.theta, self.scaling,
                                               positions.max() + 1 if dynamic else None, positions.device)
        # an element-wise product, not a matmul: autocast leaves it in float32
        angles = positions[..., None].float() * inv_freq  # (batch or 1, length, rotary_dim / 2)
        angles = angles.repeat_interleave(2, dim=-1) if self.interleaved else torch.cat((angles, angles), dim=-1)
        cos, sin = angles.cos(), (-angles if self.clockwise else angles).sin()
        if magnitude != 1.0:  # YaRN's attention factor
            cos, sin = cos * magnitude, sin * magnitude
        return cos[:, None].to(dtype), sin[:, None].to(dtype)

    def rotate(self, q: Tensor, k: Tensor, tables: tuple[Tensor, Tensor]) -> tuple[Tensor, Tensor]:
        """q ``(batch, heads, n, head_dim)`` and k ``(batch, kv_heads, n, head_dim)``, rotated by ``tables``."""
        cos, sin = tables
        return self.apply(q, cos, sin), self.apply(k, cos, sin)

    def rotate_queries(self, q: Tensor, tables: tuple[Tensor, Tensor]) -> Tensor:
        return self.apply(q, *tables)

    def apply(self, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        """Rotate the first ``rotary_dim`` dimensions of each head; pass the rest through."""
        rotated, passed = x[..., :self.rotary_dim], x[..., self.rotary_dim:]
        rotated = rotated * cos + self.turn(rotated) * sin
        return torch.cat((rotated, passed), dim=-1) if passed.shape[-1] else rotated

    def turn(self, x: Tensor) -> Tensor:
        """The quarter turn of each pair: (a, b) -> (-b, a)."""
        if self.interleaved:
            even, odd = x[..., 0::2], x[..., 1::2]
            return torch.stack((-odd, even), dim=-1).flatten(-2)
        first, second = x.chunk(2, dim=-1)
        return torch.cat((-second, first), dim=-1)

    def extra_repr(self) -> str:
        layout = ", interleaved" if self.interleaved else ""
        scaling = f", scaling={self.scaling['kind']}" if self.scaling else ""
        return f"rotary_dim={self.rotary_dim}, theta={self.theta:g}{layout}{scaling}" + \
            (", clockwise" if self.clockwise else "")


class AxialRotaryPositions(RotaryPositions):
    """Rotary positions of patches in a grid ``side`` wide (``rotary_2d``), or as wide as the call's pictures'
    (``patch_columns``): position p turns the first half of each head's pairs by its row ``p // side`` and the
    second by its column ``p % side``. ``shared``: both halves
    at the frequencies θ^(-4i/d) (Qwen2-VL); else the ladder θ^(-2i/d) dealt out in turn, even rungs to the row
    (Pixtral). Rotates as ``RotaryPositions`` does, the half-split pairs (i, i + d/2)."""

    def __init__(self, head_dim: int, theta: float, side: int, shared: bool = False) -> None:
        super().__init__(head_dim, theta)
        self.side, self.shared = side, shared
        self.key = f"rotary_2d:{head_dim}:{theta!r}:{side}:{shared}"

    def tables_of(self, ctx, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        """The call's tables, on the grid of its pictures where the tower gives its width (``patch_columns``
        ``(batch,)``: pictures of any size), else on one ``side`` wide."""
        width = ctx.inputs.get("patch_columns")
        return self.tables(ctx.positions, dtype, self.side if width is None else width[:, None])

    def tables(self, positions: Tensor, dtype: torch.dtype, width: Tensor | int | None = None
               ) -> tuple[Tensor, Tensor]:
        """cos and sin ``(batch or 1, 1, length, head_dim)`` of the patches at ``positions`` on a grid ``width``
        wide (``side`` by default)."""
        width = self.side if width is None else width
        rows, columns = torch.div(positions, width, rounding_mode="floor"), positions % width
        ladder = 1.0 / self.theta ** (torch.arange(0, self.rotary_dim, 2, device=positions.device).float()
                                      / self.rotary_dim)
        by_row, by_column = ladder[0::2], ladder[0::2] if self.shared else ladder[1::2]
        # (an element-wise product, not a matmul: autocast leaves it in float32)
        angles = torch.cat((rows[..., None].float() * by_row, columns[..., None].float() * by_column), dim=-1)
        angles = torch.cat((angles, angles), dim=-1)
        return angles.cos()[:, None].to(dtype), angles.sin()[:, None].to(dtype)

    def extra_repr(self) -> str:
        return f"head_dim={self.rotary_dim}, theta={self.theta:g}, side={self.side}" + ", shared" * self.shared


class MultimodalRotaryPositions(RotaryPositions):
    """M-RoPE (``mrope``): the frequencies θ^(-2i/d) in three consecutive ``sections``, turned by a token's position
    id (temporal), that plus its row in its picture (height) and that plus its column (width); ``picture_rows`` and
    ``picture_columns`` are 0 for a token, and absent without pictures. ``numbered``: a picture's vectors all at its
    first position, the picture advancing the count by its longer side."""

    def __init__(self, head_dim: int, theta: float, sections: list[int]) -> None:
        super().__init__(head_dim, theta)
        self.sections = sections
        self.key = f"mrope:{head_dim}:{theta!r}:{sections}"

    def tables_of(self, ctx, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
        positions = ctx.positions
        ladder = 1.0 / self.theta ** (torch.arange(0, self.rotary_dim, 2, device=positions.device).float()
                                      / self.rotary_dim)
        rows, columns = ctx.inputs.get("picture_rows"), ctx.inputs.get("picture_columns")
        # which of the three positions each frequency turns by: 0 temporal, 1 height, 2 width
        axis = torch.tensor([i for i, count in enumerate(self.sections) for _ in range(count)],
                            device=positions.device)
        angles = positions[..., None].float() * ladder  # (batch or 1, length, d / 2)
        if rows is not None:  # (the prompt's pictures; later tokens stand at one position on all three)
            extra = torch.stack((torch.zeros_like(rows), rows, columns), dim=-1).float()  # (batch, length, 3)
            angles = angles + extra[..., axis] * ladder
        angles = torch.cat((angles, angles), dim=-1)
        return angles.cos()[:, None].to(dtype), angles.sin()[:, None].to(dtype)

    def numbered(self, positions: Tensor, inputs: dict) -> Tensor:
        ids, rows, columns = inputs.get("picture_ids"), inputs.get("picture_rows"), inputs.get("picture_columns")
        if ids is None or rows is None or columns is None:
            return positions
        image = ids > 0
        last = image & (ids != torch.nn.functional.pad(ids, (0, 1))[:, 1:])  # each picture's last vector
        # each token's change to the count after it: a picture's vectors -1 each (they share its first position),
        # its last one then + its longer side (its last row or column, + 1)
        change = torch.where(image, torch.where(last, torch.maximum(rows, columns), -1), 0)
        return positions + change.cumsum(dim=1) - change

    def extra_repr(self) -> str:
        return f"head_dim={self.rotary_dim}, theta={self.theta:g}, sections={self.sections}"
