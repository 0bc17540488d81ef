"""Gated DeltaNet (Yang, Kautz & Hatamizadeh 2025), as Qwen3-Next and Qwen3.5 run it: a linear attention whose
state S (per value head, key_dim × value_dim) decays and is corrected by the delta rule at every position,

    S_t = α_t · S_{t-1} · (I − β_t k_t k_tᵀ) + β_t k_t v_tᵀ        o_t = S_tᵀ q_t / √key_dim

with α_t = exp(−exp(A_log) · softplus(a_t + dt_bias)), β_t = σ(b_t), and q, k L2-normed after a short causal
depthwise convolution (then SiLU) over [q; k; v]; the output is RMS-normed per head, times its weight and SiLU of a
gate z, and projected back. Training and prompts run the chunked form (WY representation, chunks of ``chunk``
positions: memory grows linearly with the length); decoding one token at a time runs the recurrence, from the state
the chunks leave. A padded position's input is zeroed (Hugging Face's): left padding leaves the state as the
unpadded row's.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class GatedDeltaNet(nn.Module):
    """``forward(x, ctx=None, state=None)``: ``x`` (batch, length, width); ``state``: a ``RecurrentState`` holding
    the convolution's last inputs (``conv``) and the delta rule's state (``recurrent``, float32)."""

    def __init__(self, width: int, heads: int, key_heads: int, key_dim: int, value_dim: int, kernel: int,
                 chunk: int, eps: float) -> None:
        super().__init__()
        self.heads, self.key_heads, self.key_dim, self.value_dim = heads, key_heads, key_dim, value_dim
        self.kernel, self.chunk, self.eps = kernel, chunk, eps
        mixed = 2 * key_heads * key_dim + heads * value_dim  # [q; k; v], which the convolution reads
        self.in_proj_qkv = nn.Linear(width, mixed, bias=False)
        self.in_proj_z = nn.Linear(width, heads * value_dim, bias=False)
        self.in_proj_b = nn.Linear(width, heads, bias=False)
        self.in_proj_a = nn.Linear(width, heads, bias=False)
        self.conv1d = nn.Conv1d(mixed, mixed, kernel, groups=mixed, bias=False)
        self.dt_bias = nn.Parameter(torch.ones(heads))
        self.A_log = nn.Parameter(torch.zeros(heads))
        self.norm = GatedRMSNorm(value_dim, eps)
        self.out_proj = nn.Linear(heads * value_dim, width, bias=False)

    def forward(self, x: Tensor, ctx=None, state=None) -> Tensor:
        padding = ctx.padding if ctx is not None else None
        if padding is not None:
            x = x.masked_fill(padding[..., None], 0)
        batch, length, _ = x.shape
        mixed = self.in_proj_qkv(x).transpose(1, 2)  # (batch, channels, length): as the convolution reads them
        past = state.get("conv") if state is not None else None
        window = F.pad(mixed, (self.kernel - 1, 0)) if past is None else torch.cat((past, mixed), dim=-1)
        if state is not None:
            state.keep("conv", window[..., window.shape[-1] - (self.kernel - 1):])
        mixed = F.silu(self.conv1d(window)).transpose(1, 2)
        keys = self.key_heads * self.key_dim
        q, k, v = mixed.split([keys, keys, self.heads * self.value_dim], dim=-1)
        q, k = (t.reshape(batch, length, self.key_heads, self.key_dim) for t in (q, k))
        v = v.reshape(batch, length, self.heads, self.value_dim)
        beta = self.in_proj_b(x).sigmoid()
        wide = torch.promote_types(x.dtype, torch.float32)  # (in half precision, exp(A_log) could overflow)
        g = -self.A_log.to(wide).exp() * F.softplus(self.in_proj_a(x).to(wide) + self.dt_bias)  # log α, ≤ 0
        initial = state.get("recurrent") if state is not None else None
        if initial is not None and length == 1:
            out, final = recurrent_gated_delta_rule(q, k, v, g, beta, initial)
        else:
            out, final = chunked_gated_delta_rule(q, k, v, g, beta, self.chunk, initial)
        if state is not None:
            state.keep("recurrent", final)
        z = self.in_proj_z(x).reshape(batch, length, self.heads, self.value_dim)
        return self.out_proj(self.norm(out, z).reshape(batch, length, -1))

    def extra_repr(self) -> str:
        return (f"heads={self.heads}, key_heads={self.key_heads}, key_dim={self.key_dim}, "
                f"value_dim={self.value_dim}, kernel={self.kernel}, chunk={self.chunk}")


class GatedRMSNorm(nn.Module):
    """RMSNorm over each head's output in float32, times its weight, times SiLU of the gate."""

    def __init__(self, width: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))
        self.eps = eps

    def forward(self, x: Tensor, gate: Tensor) -> Tensor:
        dtype = x.dtype
        wide = torch.promote_types(dtype, torch.float32)
        x = x.to(wide)
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return (self.weight * x.to(dtype) * F.silu(gate.to(wide))).to(dtype)


def l2_normed(x: Tensor, eps: float = 1e-6) -> Tensor:
    """x / sqrt(Σx² + eps) over the last dimension (the FLA library's, which Hugging Face follows)."""
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + eps)


def _heads_first(q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor) -> tuple[Tensor, ...]:
    """(batch, heads, length, ...) in float32 at least, each key head serving its group of value heads, q and k
    L2-normed and q scaled by 1/√key_dim."""
    group = v.shape[2] // k.shape[2]
    if group > 1:
        q, k = q.repeat_interleave(group, dim=2), k.repeat_interleave(group, dim=2)
    wide = torch.promote_types(v.dtype, torch.float32)
    q, k, v, g, beta = (t.transpose(1, 2).to(wide) for t in (q, k, v, g, beta))
    q, k = l2_normed(q), l2_normed(k)
    return q * q.shape[-1] ** -0.5, k, v, g, beta


def chunked_gated_delta_rule(q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor, chunk: int,
                             initial: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """The gated delta rule over a whole call, ``chunk`` positions at a time: within a chunk, its updates in closed
    form (a unit lower-triangular solve); across chunks, the state carried. (out (batch, length, heads, value_dim),
    final state (batch, heads, key_dim, value_dim) float32). ``initial``: the state before the call.

    Products are ``bmm``s of (chunks, chunk, features) views: autograd keeps each whole tensor once (what
    ``GatedDeltaNetMixer.saved`` counts), never a copy that a batched ``matmul`` might make."""
    dtype, length = v.dtype, v.shape[1]
    q, k, v, g, beta = _heads_first(q, k, v, g, beta)
    batch, heads, _, key_dim = k.shape
    value_dim = v.shape[-1]
    pad = (chunk - length % chunk) % chunk  # a last, partial chunk: zeros after it change nothing before them
    q, k, v = (F.pad(t, (0, 0, 0, pad)).reshape(-1, chunk, t.shape[-1]) for t in (q, k, v))
    g, beta = (F.pad(t, (0, pad)).reshape(-1, chunk) for t in (g, beta))
    n = (length + pad) // chunk
    decay = g.cumsum(-1)  # log of the decay from the chunk's start to each position
    since = decay.exp()
    # the decay between positions j ≤ i of a chunk; 0 for j > i (lower-triangular before exp: nothing overflows)
    between = (decay[:, :, None] - decay[:, None, :]).tril().exp().tril()
    k_beta = k * beta[..., None]
    # (I + its strictly lower part) solves the chunk's updates at once; a unit-triangular solve reads nothing else
    system = torch.bmm(k_beta, k.transpose(1, 2)) * between
    values = torch.linalg.solve_triangular(system, v * beta[..., None], upper=False, unitriangular=True)
    k_decayed = torch.linalg.solve_triangular(system, k_beta * since[..., None], upper=False, unitriangular=True)
    within = torch.bmm(q, k.transpose(1, 2)) * between
    q = q * since[..., None]
    k = k * (decay[:, -1:] - decay).exp()[..., None]
    chunk_decay = decay[:, -1].exp()

    def at(t: Tensor, i: int) -> Tensor:  # chunk i of every sequence and head
        return t.reshape(batch * heads, n, *t.shape[1:])[:, i]

    S = initial.to(v.dtype).reshape(batch * heads, key_dim, value_dim) if initial is not None else \
        q.new_zeros(batch * heads, key_dim, value_dim)
    out = []
    for i in range(n):
        corrected = at(values, i) - torch.bmm(at(k_decayed, i), S)
        out.append(torch.bmm(at(q, i), S) + torch.bmm(at(within, i), corrected))
        S = S * at(chunk_decay, i)[:, None, None] + torch.bmm(at(k, i).transpose(1, 2), corrected)
    out = torch.stack(out, dim=1).reshape(batch, heads, n * chunk, value_dim)[:, :, :length]
    return out.transpose(1, 2).to(dtype), S.reshape(batch, heads, key_dim, value_dim)


def recurrent_gated_delta_rule(q: Tensor, k: Tensor, v: Tensor, g: Tensor, beta: Tensor,
                               initial: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """The gated delta rule one position at a time (decoding's step; the reference the chunks are checked
    against): the same results as ``chunked_gated_delta_rule``."""
    dtype = v.dtype
    q, k, v, g, beta = _heads_first(q, k, v, g, beta)
    batch, heads, length, key_dim = k.shape
    S = initial.to(v.dtype) if initial is not None else q.new_zeros(batch, heads, key_dim, v.shape[-1])
    out = []
    for t in range(length):
        S = S * g[:, :, t].exp()[..., None, None]
        remembered = (S * k[:, :, t, :, None]).sum(-2)  # Sᵀk: what the state recalls for this key
        S = S + k[:, :, t, :, None] * ((v[:, :, t] - remembered) * beta[:, :, t, None])[..., None, :]
        out.append((S * q[:, :, t, :, None]).sum(-2))
    return torch.stack(out, dim=2).transpose(1, 2).to(dtype), S
