"""Mamba-2 (Dao & Gu, "Transformers are SSMs", ICML 2024), as mamba_ssm and Hugging Face's Mamba-2, Granite 4.0-H,
Bamba and Nemotron-H run it: one projection of the input makes the gate z, the scan's input x, its B and C, and a
time step per head; x, B and C pass a short causal depthwise convolution and SiLU; each head h then carries a state
S (head_dim × state) through the selective scan

    S_t = exp(Δ_t A_h) · S_{t-1} + Δ_t · x_t B_tᵀ        y_t = S_t C_t + D_h · x_t

with Δ_t = softplus(dt_t + dt_bias_h), A_h = −exp(A_log_h) and B, C shared by the heads of a group; y times SiLU(z)
is RMS-normed per group, scaled, and projected back (Falcon-H1: y RMS-normed, then gated; or gated alone; and the
projection's five parts each times a constant of its own). Training and prompts run the chunked form (state-space
duality: within a chunk, a masked attention-like product; across chunks, the state carried), whose memory grows
linearly with the length; decoding one token at a time runs the recurrence from the state the chunks leave. As
Hugging Face does, a padded position's input is zeroed before the projection and its x, B and C after the
convolution, so it adds nothing to the state.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class Mamba2(nn.Module):
    """``forward(x, ctx=None, state=None)``: ``x`` (batch, length, width); ``state``: a ``RecurrentState`` holding
    the convolution's last inputs (``conv``) and the scan's state (``ssm``, float32, (batch, groups, state,
    heads / groups · head_dim): each group's heads side by side)."""

    def __init__(self, width: int, heads: int, head_dim: int, state: int, groups: int, kernel: int, chunk: int,
                 conv_bias: bool, bias: bool, eps: float, norm: str = "gated",
                 scales: tuple[float, ...] = (1.0,) * 5) -> None:
        super().__init__()
        self.heads, self.head_dim, self.state, self.groups = heads, head_dim, state, groups
        self.kernel, self.chunk = kernel, chunk
        inner = heads * head_dim
        self.conv_dim = inner + 2 * groups * state  # [x; B; C], which the convolution reads
        self.in_proj = nn.Linear(width, inner + self.conv_dim + heads, bias=bias)  # [z; x; B; C; dt]
        if any(scale != 1.0 for scale in scales):  # each part of the projection times its own constant
            parts = (inner, inner, groups * state, groups * state, heads)
            self.register_buffer("scales", torch.cat([torch.full((n,), float(scale)) for n, scale in
                                                      zip(parts, scales)]), persistent=False)
        else:
            self.scales = None
        self.conv1d = nn.Conv1d(self.conv_dim, self.conv_dim, kernel, groups=self.conv_dim, bias=conv_bias)
        self.dt_bias = nn.Parameter(torch.ones(heads))
        self.A_log = nn.Parameter(torch.zeros(heads))
        self.D = nn.Parameter(torch.ones(heads))
        self.norm = GroupGatedRMSNorm(inner, groups, eps, before_gate=norm == "before_gate") if norm != "none" \
            else SiLUGate()
        self.out_proj = nn.Linear(inner, width, bias=bias)

    def forward(self, x: Tensor, ctx=None, state=None) -> Tensor:
        padding = ctx.padding if ctx is not None else None
        if padding is not None:
            x = x.masked_fill(padding[..., None], 0)
        batch, length, _ = x.shape
        inner, scanned = self.heads * self.head_dim, self.groups * self.state
        projected = self.in_proj(x)
        if self.scales is not None:
            projected = projected * self.scales
        z, mixed, dt = projected.split([inner, self.conv_dim, self.heads], dim=-1)
        mixed = mixed.transpose(1, 2)  # (batch, channels, length): as the convolution reads them
        past = state.get("conv") if state is not None else None
        window = F.pad(mixed, (self.kernel - 1, 0)) if past is None else torch.cat((past, mixed), dim=-1)
        if state is not None:
            state.keep("conv", window[..., window.shape[-1] - (self.kernel - 1):])
        # positions first in memory: what the scan's chunks read is then laid out the same whatever the call
        mixed = F.silu(self.conv1d(window)).transpose(1, 2).contiguous()
        if padding is not None:  # (the convolution's bias, or a padded neighbour, would enter the state)
            mixed = mixed.masked_fill(padding[..., None], 0)
        xs, B, C = mixed.split([inner, scanned, scanned], dim=-1)
        xs = xs.reshape(batch, length, self.heads, self.head_dim)
        B, C = (t.reshape(batch, length, self.groups, self.state) for t in (B, C))
        wide = torch.promote_types(x.dtype, torch.float32)  # (in half precision, exp(A_log) could overflow)
        dt = F.softplus(dt.to(wide) + self.dt_bias)
        A = -self.A_log.to(wide).exp()
        initial = state.get("ssm") if state is not None else None
        if initial is not None and length == 1:
            y, final = recurrent_ssd(xs, dt, A, B, C, initial)
        else:
            y, final = chunked_ssd(xs, dt, A, B, C, self.chunk, initial)
        if state is not None:
            state.keep("ssm", final)
        y = y + xs.to(y.dtype) * self.D.to(y.dtype)[:, None]
        return self.out_proj(self.norm(y.reshape(batch, length, inner), z).to(x.dtype))

    def extra_repr(self) -> str:
        return (f"heads={self.heads}, head_dim={self.head_dim}, state={self.state}, groups={self.groups}, "
                f"kernel={self.kernel}, chunk={self.chunk}")


class GroupGatedRMSNorm(nn.Module):
    """x · SiLU(gate), RMS-normed over each of ``groups`` equal parts of the features in float32, times the
    weight (mamba_ssm's ``RMSNormGated`` with the gate before the norm); ``before_gate``: x normed and scaled first,
    then times SiLU(gate) (its ``norm_before_gate``, Falcon-H1's)."""

    def __init__(self, width: int, groups: int, eps: float, before_gate: bool = False) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))
        self.groups, self.eps, self.before_gate = groups, eps, before_gate

    def forward(self, x: Tensor, gate: Tensor) -> Tensor:
        wide = torch.promote_types(x.dtype, torch.float32)
        x = x.to(wide)
        if not self.before_gate:
            x = x * F.silu(gate.to(wide))
        parts = x.unflatten(-1, (self.groups, -1))
        normed = self.weight * (parts * torch.rsqrt(parts.pow(2).mean(-1, keepdim=True) + self.eps)).flatten(-2)
        return normed * F.silu(gate.to(wide)) if self.before_gate else normed


class SiLUGate(nn.Module):
    """x · SiLU(gate), without a norm (Falcon-H1's Mamba-2 without ``mamba_rms_norm``)."""

    def forward(self, x: Tensor, gate: Tensor) -> Tensor:
        wide = torch.promote_types(x.dtype, torch.float32)
        return x.to(wide) * F.silu(gate.to(wide))


def _scan_inputs(x: Tensor, dt: Tensor, A: Tensor, B: Tensor, C: Tensor) -> tuple[Tensor, ...]:
    """In float32 at least: Δ·x (batch, length, heads, head_dim), the log decays Δ·A (batch, length, heads), B
    and C (batch, length, groups, state)."""
    wide = torch.promote_types(x.dtype, torch.float32)
    dt = dt.to(wide)
    return x.to(wide) * dt[..., None], dt * A.to(wide), B.to(wide), C.to(wide)


def chunked_ssd(x: Tensor, dt: Tensor, A: Tensor, B: Tensor, C: Tensor, chunk: int,
                initial: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """The selective scan over a whole call, ``chunk`` positions at a time (state-space duality): within a chunk,
    y_i = Σ_{j≤i} (C_i·B_j) exp(Σ_{j<t≤i} Δ_t A) Δ_j x_j; across chunks, the state each chunk leaves, carried with
    the chunk's decay. ``x`` (batch, length, heads, head_dim), ``dt`` (batch, length, heads) after softplus, ``A``
    (heads), ``B`` and ``C`` (batch, length, groups, state), ``initial``: the state before the call. (y (batch,
    length, heads, head_dim) in float32 at least, without D's term; the final state (batch, groups, state,
    heads / groups · head_dim)).

    Each group's B and C meet once per chunk, for all its heads; the products are ``bmm``s of views, so what autograd
    keeps is each whole tensor once (what ``Mamba2Mixer.saved`` counts)."""
    x, a, B, C = _scan_inputs(x, dt, A, B, C)
    batch, length, heads, head_dim = x.shape
    groups, state = B.shape[2], B.shape[3]
    per_group = heads // groups
    pad = (chunk - length % chunk) % chunk  # a last, partial chunk: zeros after it change nothing before them
    n = (length + pad) // chunk
    x, B, C = (F.pad(t, (0, 0, 0, 0, 0, pad)) for t in (x, B, C))
    # the log decay from each chunk's start to each of its positions, per head
    decay = F.pad(a, (0, 0, 0, pad)).transpose(1, 2).reshape(batch, heads, n, chunk).cumsum(-1)
    # B and C chunk by chunk, per group: (batch · groups · chunks, chunk, state)
    B, C = (t.transpose(1, 2).reshape(batch * groups * n, chunk, state) for t in (B, C))
    # within a chunk: C_i·B_j times the decay between positions j ≤ i (0 above: lower-triangular before exp)
    between = (decay[..., :, None] - decay[..., None, :]).tril().exp().tril()
    scores = torch.bmm(C, B.transpose(1, 2)).view(batch, groups, 1, n, chunk, chunk) * \
        between.view(batch, groups, per_group, n, chunk, chunk)
    by_head = x.permute(0, 2, 1, 3).reshape(batch * heads * n, chunk, head_dim)
    within = torch.bmm(scores.view(-1, chunk, chunk), by_head).view(batch, heads, n * chunk, head_dim)
    # each chunk's own contribution to the state: Σ_j B_j ⊗ exp(decay to the chunk's end) Δ_j x_j, a group's heads
    # side by side in the columns
    to_end = (decay[..., -1:] - decay).exp().view(batch, groups, per_group, n, chunk).permute(0, 1, 3, 4, 2)
    x_to_end = x.view(batch, n, chunk, groups, per_group, head_dim).permute(0, 3, 1, 2, 4, 5) * to_end[..., None]
    columns = per_group * head_dim
    own = torch.bmm(B.transpose(1, 2), x_to_end.reshape(batch * groups * n, chunk, columns))
    own = own.view(batch * groups, n, state, per_group, head_dim)
    # across chunks: the state entering each chunk
    chunk_decay = decay[..., -1].exp().view(batch * groups, per_group, n)
    S = initial.to(x.dtype).view(batch * groups, state, per_group, head_dim) if initial is not None else \
        x.new_zeros(batch * groups, state, per_group, head_dim)
    entering = []
    for i in range(n):
        entering.append(S)
        S = S * chunk_decay[:, None, :, i, None] + own[:, i]
    entering = torch.stack(entering, dim=1).view(batch * groups * n, state, columns)
    since = decay.exp().view(batch, groups, per_group, n, chunk).permute(0, 1, 3, 4, 2)
    before = torch.bmm(C, entering).view(batch, groups, n, chunk, per_group, head_dim) * since[..., None]
    y = within.view(batch, groups, per_group, n * chunk, head_dim).permute(0, 3, 1, 2, 4) + \
        before.reshape(batch, groups, n * chunk, per_group, head_dim).transpose(1, 2)
    return y.reshape(batch, n * chunk, heads, head_dim)[:, :length], S.view(batch, groups, state, columns)


def recurrent_ssd(x: Tensor, dt: Tensor, A: Tensor, B: Tensor, C: Tensor,
                  initial: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """The selective scan one position at a time (decoding's step; the reference the chunks are checked against):
    the same results as ``chunked_ssd``."""
    x, a, B, C = _scan_inputs(x, dt, A, B, C)
    batch, length, heads, head_dim = x.shape
    groups, state = B.shape[2], B.shape[3]
    per_group = heads // groups
    S = initial.to(x.dtype).view(batch * groups, state, per_group, head_dim) if initial is not None else \
        x.new_zeros(batch * groups, state, per_group, head_dim)
    out = []
    for t in range(length):
        decay = a[:, t].exp().view(batch * groups, 1, per_group, 1)
        S = S * decay + B[:, t].reshape(-1, state, 1, 1) * x[:, t].reshape(batch * groups, 1, per_group, head_dim)
        out.append(torch.bmm(C[:, t].reshape(-1, 1, state), S.view(batch * groups, state, -1)))
    y = torch.stack(out, dim=1).view(batch, groups, length, per_group, head_dim).transpose(1, 2)
    return y.reshape(batch, length, heads, head_dim), S.view(batch, groups, state, per_group * head_dim)
