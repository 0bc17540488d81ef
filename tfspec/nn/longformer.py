"""Longformer attention's runtime module (``tfspec.variants.longformer``): the masks' pattern plus global tokens."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .kernels import band_chunk
from .attention import MultiHeadAttention, sdpa
from .context import Context


def global_slots(is_global: Tensor) -> tuple[Tensor, Tensor]:
    """The positions of each row's global tokens, in order, ``(batch, most)``, and which slots hold one (a row
    with fewer has slots to spare): Hugging Face's layout, which lets rows have different numbers of them."""
    counts = is_global.sum(1)
    most = int(counts.max())
    order = torch.argsort((~is_global).to(torch.int8), dim=1, stable=True)[:, :most]  # global positions first
    return order, torch.arange(most, device=is_global.device)[None] < counts[:, None]


class LongformerAttention(MultiHeadAttention):
    """The core (torch only; ``tfspec emit`` copies it): ``MultiHeadAttention`` plus Longformer's global tokens
    (Beltagy et al. 2020).

    ``ctx.inputs["global_tokens"]`` ``(batch, length)``, nonzero at global tokens (padded positions never are):
    every query sees them besides the keys its masks allow -- with the usual keys and values -- and each global
    token's own output attends to every unpadded key through projections of its own, ``global_qkv`` (rows
    [q; k; v]). A call without global tokens is ``MultiHeadAttention``'s: a sliding window runs in bands, and so
    does the local attention beside global tokens, which add their keys to every block."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.global_qkv = nn.Linear(self.out.out_features, 3 * self.heads * self.head_dim,
                                    bias=self.qkv.bias is not None)

    def forward(self, x: Tensor, ctx: Context | None = None, cache=None) -> Tensor:
        tokens = None if ctx is None else ctx.inputs.get("global_tokens")
        if tokens is None or not bool(tokens.any()):
            return super().forward(x, ctx, cache)
        if cache is not None:
            raise ValueError("global tokens attend to every token of a whole sequence; they cannot be decoded "
                             "incrementally")
        batch, length, _ = x.shape
        q, k, v, _, _, padding = self.project_in_context(x, ctx, None)
        is_global = (tokens != 0).expand(batch, length)
        if ctx.padding is not None:
            is_global = is_global & ~ctx.padding
        order, filled = global_slots(is_global)
        chunk = band_chunk(length, self.band) if self.band is not None else None
        if chunk is not None:
            mask = self.masks.banded(ctx.inputs, length, self.band, q.dtype, q.device, padding,
                                     positions=ctx.positions)
            y = self.mix_banded_with(q, k, v, mask, chunk, is_global, order, filled)
        else:
            mask = self.masks.additive(ctx, length, length, q.dtype, q.device, padding)
            if mask is not None:  # (None: every key is seen already)
                mask = torch.where(is_global[:, None, None], torch.zeros((), dtype=q.dtype, device=q.device), mask)
            y = self.mix(q, k, v, mask, False)
        y = self.attend_globally(x, y, order, filled, ctx.padding)
        return self.project_out(y.transpose(1, 2).reshape(batch, length, self.heads * self.head_dim), x)

    def mix_banded_with(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor, chunk: int, is_global: Tensor,
                        order: Tensor, filled: Tensor) -> Tensor:
        """``mix_banded`` with each row's global keys added to every block: a window's copy of a global key is
        masked, since the global keys stand beside it once."""
        behind, ahead = self.band
        batch, heads, length, dim = q.shape
        blocks, span, most = mask.shape[1], chunk + behind + ahead, order.shape[1]
        padded = blocks * chunk
        low = torch.finfo(q.dtype).min
        in_window = F.pad(is_global, (behind, padded - length + ahead)).unfold(1, span, chunk)  # (batch, blocks, span)
        local = torch.where(in_window[:, :, None], low, mask)  # (batch, blocks, chunk, span)
        extra = torch.where(filled, 0.0, low).to(q.dtype)[:, None, None].expand(batch, blocks, chunk, most)
        mask = torch.cat((extra, local), dim=-1).reshape(batch * blocks, 1, chunk, most + span)

        def windows(t: Tensor) -> Tensor:  # (batch * blocks, heads, most + span, dim): global keys, then the window's
            glob = t.gather(2, order[:, None, :, None].expand(batch, t.shape[1], most, dim))
            t = F.pad(t, (0, 0, behind, padded - length + ahead)).unfold(2, span, chunk).permute(0, 2, 1, 4, 3)
            glob = glob[:, None].expand(batch, blocks, t.shape[2], most, dim)
            return torch.cat((glob, t), dim=3).reshape(batch * blocks, t.shape[2], most + span, dim)

        q = F.pad(q, (0, 0, 0, padded - length)).view(batch, heads, blocks, chunk, dim)
        q = q.transpose(1, 2).reshape(batch * blocks, heads, chunk, dim)
        y = self.mix(q, windows(k), windows(v), mask, False)  # (batch * blocks, heads, chunk, dim)
        y = y.view(batch, blocks, heads, chunk, dim).transpose(1, 2).reshape(batch, heads, padded, dim)
        return y[:, :, :length]

    def attend_globally(self, x: Tensor, y: Tensor, order: Tensor, filled: Tensor, padding: Tensor | None
                        ) -> Tensor:
        """``y`` with each global token's row replaced: its global query against every unpadded key, through the
        global projections."""
        batch, heads, length, dim = y.shape
        q, k, v = (self.split(t, heads) for t in self.global_qkv(x).chunk(3, dim=-1))
        q = q.gather(2, order[:, None, :, None].expand(batch, heads, order.shape[1], dim))
        mask = None if padding is None else torch.where(padding, torch.finfo(q.dtype).min, 0.0).to(q.dtype)[:, None,
                                                                                                           None]
        rows = sdpa(q, k, v, attn_mask=mask, scale=self.scale, dropout_p=self.dropout if self.training else 0.0)
        # written back where a slot holds a global token; a spare slot writes to a row past the end, dropped
        where = torch.where(filled, order, length)[:, None, :, None].expand(batch, heads, order.shape[1], dim)
        return torch.cat((y, y.new_zeros(batch, heads, 1, dim)), dim=2).scatter(2, where, rows)[:, :, :length]
