"""Mamba (Gu & Dao 2023), as Jamba runs it: one projection makes x and the gate z; x passes a short causal depthwise
convolution and SiLU; a projection of it makes the time step's low-rank input, B and C (Jamba RMS-norms each), the
time step Δ = softplus(dt_proj(·)) per channel; each channel carries a state of ``state`` numbers,

    h_t = exp(Δ_t A) ⊙ h_{t-1} + Δ_t x_t B_t        y_t = h_t · C_t + D x_t

A (channels × state) learned and negative, B and C shared by the channels; y · SiLU(z) is projected back. The scan
runs position by position in training too (each channel's own decay per state number leaves no chunked matrix
form as cheap as Mamba-2's), memory growing linearly with the length; decoding continues it from the state. A padded
position's input is zeroed before the projection and its x after the convolution, as Hugging Face does.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class Mamba(nn.Module):
    """``forward(x, ctx=None, state=None)``: ``x`` (batch, length, width); ``state``: a ``RecurrentState`` holding
    the convolution's last inputs (``conv``) and the scan's state (``ssm``, float32, (batch, inner, state))."""

    def __init__(self, width: int, inner: int, state: int, kernel: int, dt_rank: int, conv_bias: bool, bias: bool,
                 norms: bool, eps: float) -> None:
        super().__init__()
        self.inner, self.state, self.kernel, self.dt_rank = inner, state, kernel, dt_rank
        self.in_proj = nn.Linear(width, 2 * inner, bias=bias)  # [x; z]
        self.conv1d = nn.Conv1d(inner, inner, kernel, groups=inner, bias=conv_bias)
        self.x_proj = nn.Linear(inner, dt_rank + 2 * state, bias=False)
        self.dt_proj = nn.Linear(dt_rank, inner)
        self.A_log = nn.Parameter(torch.zeros(inner, state))
        self.D = nn.Parameter(torch.ones(inner))
        self.out_proj = nn.Linear(inner, width, bias=bias)
        if norms:  # Jamba's: the time step's input, B and C each RMS-normed
            self.dt_layernorm, self.b_layernorm, self.c_layernorm = (WideRMSNorm(n, eps) for n in (dt_rank, state,
                                                                                                   state))
        else:
            self.dt_layernorm = self.b_layernorm = self.c_layernorm = None

    def forward(self, x: Tensor, ctx=None, state=None) -> Tensor:
        padding = ctx.padding if ctx is not None else None
        if padding is not None:
            x = x.masked_fill(padding[..., None], 0)
        xs, z = self.in_proj(x).chunk(2, dim=-1)
        xs = xs.transpose(1, 2)  # (batch, channels, length): as the convolution reads them
        past = state.get("conv") if state is not None else None
        window = F.pad(xs, (self.kernel - 1, 0)) if past is None else torch.cat((past, xs), dim=-1)
        if state is not None:
            state.keep("conv", window[..., window.shape[-1] - (self.kernel - 1):])
        # positions first in memory: what the projections and the scan read is laid out the same whatever the call
        xs = F.silu(self.conv1d(window)).transpose(1, 2).contiguous()
        if padding is not None:
            xs = xs.masked_fill(padding[..., None], 0)
        rank, B, C = self.x_proj(xs).split([self.dt_rank, self.state, self.state], dim=-1)
        if self.dt_layernorm is not None:
            rank, B, C = self.dt_layernorm(rank), self.b_layernorm(B), self.c_layernorm(C)
        wide = torch.promote_types(x.dtype, torch.float32)
        dt = F.softplus(self.dt_proj(rank).to(wide))
        A = -self.A_log.to(wide).exp()
        initial = state.get("ssm") if state is not None else None
        y, final = selective_scan(xs, dt, A, B, C, initial)
        if state is not None:
            state.keep("ssm", final)
        y = (y + xs.to(wide) * self.D.to(wide)) * F.silu(z.to(wide))
        return self.out_proj(y.to(x.dtype))

    def extra_repr(self) -> str:
        return f"inner={self.inner}, state={self.state}, kernel={self.kernel}, dt_rank={self.dt_rank}"


class WideRMSNorm(nn.Module):
    """RMSNorm computed in float32 at least, its weight applied in the input's dtype (Jamba's ``JambaRMSNorm``)."""

    def __init__(self, width: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))
        self.eps = eps

    def forward(self, x: Tensor) -> Tensor:
        wide = x.to(torch.promote_types(x.dtype, torch.float32))
        return self.weight * (wide * torch.rsqrt(wide.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype)


def selective_scan(x: Tensor, dt: Tensor, A: Tensor, B: Tensor, C: Tensor, initial: Tensor | None = None
                   ) -> tuple[Tensor, Tensor]:
    """The selective scan, position by position: h_t = exp(Δ_t A) ⊙ h_{t−1} + Δ_t x_t B_t, y_t = h_t · C_t (D's
    term is the caller's). ``x`` and ``dt`` (batch, length, inner), ``A`` (inner, state), ``B`` and ``C`` (batch,
    length, state). (y (batch, length, inner) in float32 at least, the final state (batch, inner, state))."""
    wide = torch.promote_types(x.dtype, torch.float32)
    x, dt, B, C = (t.to(wide) for t in (x, dt, B, C))
    batch, length, inner = x.shape
    h = initial.to(wide) if initial is not None else x.new_zeros(batch, inner, A.shape[-1])
    decay = (dt[..., None] * A).exp()  # (batch, length, inner, state)
    fed = (dt * x)[..., None] * B[:, :, None, :]
    out = []
    for t in range(length):
        h = decay[:, t] * h + fed[:, t]
        out.append((h * C[:, t, None, :]).sum(-1))
    return torch.stack(out, dim=1), h
