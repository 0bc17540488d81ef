"""Lightning attention (Qin et al. 2024), MiniMax-01's linear attention: per head a head_dim × head_dim state that
decays by a constant rate, S_t = λ_h S_{t-1} + k_t v_tᵀ, read by o_t = S_tᵀ q_t, with q, k, v = SiLU of one
projection and λ_h = exp(−slope_h), the slopes ALiBi's (1/2^(8/heads))^(h+1) scaled down with the layer's depth; the
heads' outputs RMS-normed together, times σ of a gate projection, projected back. Training and prompts compute
``block`` positions at once (within a block the masked product of queries and keys, across blocks the state carried:
memory linear in the length); decoding one position at a time runs the recurrence from the state. A padded
position's q, k and v are zeroed, as Hugging Face's are: left padding leaves the state as the unpadded row's.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def slopes(heads: int, layer: int, layers: int) -> Tensor:
    """Each head's decay rate in layer ``layer`` of ``layers`` (MiniMax's ``get_slope_rate``), float32."""
    base = 1 / (2 ** (8 / heads))
    rate = base ** (torch.arange(heads) + 1)
    return rate * (1 - layer / (layers - 1 + 1e-5) + 1e-5)


class LightningAttention(nn.Module):
    """``forward(x, ctx=None, state=None)``: ``x`` (batch, length, width); ``state``: a ``RecurrentState`` holding
    each head's state (``kv``, float32, (batch, heads, head_dim, head_dim))."""

    def __init__(self, width: int, heads: int, head_dim: int, block: int, layer: int, layers: int,
                 eps: float) -> None:
        super().__init__()
        self.heads, self.head_dim, self.block, self.layer, self.layers = heads, head_dim, block, layer, layers
        inner = heads * head_dim
        self.qkv_proj = nn.Linear(width, 3 * inner, bias=False)  # per head [q; k; v]
        self.output_gate = nn.Linear(width, inner, bias=False)
        self.norm = nn.RMSNorm(inner, eps=eps)
        self.out_proj = nn.Linear(inner, width, bias=False)
        self.register_buffer("slope", slopes(heads, layer, layers), persistent=False)

    def forward(self, x: Tensor, ctx=None, state=None) -> Tensor:
        batch, length, _ = x.shape
        qkv = F.silu(self.qkv_proj(x))
        padding = ctx.padding if ctx is not None else None
        if padding is not None:
            qkv = qkv.masked_fill(padding[..., None], 0)
        wide = torch.promote_types(x.dtype, torch.float32)
        # heads first, each of q, k and v whole (the blocks' products read views of them)
        q, k, v = qkv.to(wide).view(batch, length, self.heads, 3, self.head_dim).permute(3, 0, 2, 1, 4).unbind(0)
        q, k, v = (t.contiguous() for t in (q, k, v))
        initial = state.get("kv") if state is not None else None
        if initial is not None and length == 1:
            out, final = recurrent_lightning(q, k, v, self.slope, initial)
        else:
            out, final = blocked_lightning(q, k, v, self.slope, self.block, initial, final_state=state is not None)
        if state is not None:
            state.keep("kv", final)
        out = out.transpose(1, 2).reshape(batch, length, -1).to(x.dtype)
        return self.out_proj(torch.sigmoid(self.output_gate(x)) * self.norm(out))

    def extra_repr(self) -> str:
        return (f"heads={self.heads}, head_dim={self.head_dim}, block={self.block}, layer={self.layer} of "
                f"{self.layers}")


def blocked_lightning(q: Tensor, k: Tensor, v: Tensor, slope: Tensor, block: int, initial: Tensor | None = None,
                      final_state: bool = True) -> tuple[Tensor, Tensor | None]:
    """Lightning attention over a whole call, ``block`` positions at a time: within a block, (q·kᵀ ⊙ λ^(i−j)) v for
    j ≤ i; across blocks, the state each leaves. ``q``, ``k``, ``v`` (batch, heads, length, head_dim), contiguous;
    ``slope`` (heads) float32; ``initial``: the state before the call. (out (batch, heads, length, head_dim), the
    state after the last position where ``final_state``, else None).

    Products are ``bmm``s of (blocks, block, features) views: autograd keeps each whole tensor once (what
    ``LightningMixer.saved`` counts)."""
    batch, heads, length, dim = q.shape
    pad = (block - length % block) % block  # a last, partial block: zeros after it change nothing before them
    n = (length + pad) // block
    qb, kb, vb = (F.pad(t, (0, 0, 0, pad)).view(batch * heads * n, block, dim) for t in (q, k, v))
    rate = slope.to(q.dtype).view(1, heads, 1, 1, 1)
    steps = torch.arange(block, device=q.device, dtype=q.dtype)
    # within a block: λ^(i−j) for j ≤ i, 0 above (−inf before exp)
    between = (steps[:, None] - steps[None, :]).masked_fill(steps[:, None] < steps[None, :], float("inf"))
    within = torch.bmm(qb, kb.transpose(1, 2)).view(batch, heads, n, block, block) * (-rate * between).exp()
    out = torch.bmm(within.view(-1, block, block), vb)
    # each block's own state, decayed to its last position, and the state entering each block
    to_end = (-rate.view(1, heads, 1, 1) * (block - 1 - steps).view(1, 1, block, 1)).exp()
    own = torch.bmm((kb.view(batch, heads, n, block, dim) * to_end[:, :, None]).view(-1, block, dim).transpose(1, 2),
                    vb).view(batch, heads, n, dim, dim)
    decay = (-slope.to(q.dtype) * block).exp().view(1, heads, 1, 1)
    S = initial.to(q.dtype) if initial is not None else q.new_zeros(batch, heads, dim, dim)
    entering = []
    for i in range(n):
        entering.append(S)
        S = S * decay + own[:, :, i]
    entering = torch.stack(entering, dim=2).view(-1, dim, dim)
    since = (-rate.view(1, heads, 1, 1) * (steps + 1).view(1, 1, block, 1)).exp()  # from the block's start
    before = torch.bmm((qb.view(batch, heads, n, block, dim) * since[:, :, None]).view(-1, block, dim), entering)
    out = (out + before).view(batch, heads, n * block, dim)[:, :, :length]
    if not final_state:
        return out, None
    # the state after the last real position: the last block's own positions decayed to it, not to the block's end
    last = length - (n - 1) * block
    S = entering.view(batch, heads, n, dim, dim)[:, :, -1] * (-slope.to(q.dtype) * last).exp().view(1, heads, 1, 1)
    tail = (-rate.view(1, heads, 1, 1) * (last - 1 - steps[:last]).view(1, 1, last, 1)).exp()
    S = S + (k[:, :, length - last:] * tail).transpose(-1, -2) @ v[:, :, length - last:]
    return out, S


def recurrent_lightning(q: Tensor, k: Tensor, v: Tensor, slope: Tensor, initial: Tensor | None = None
                        ) -> tuple[Tensor, Tensor]:
    """Lightning attention one position at a time (decoding's step; the reference the blocks are checked against):
    S_t = λ S_{t−1} + k_t v_tᵀ, o_t = S_tᵀ q_t."""
    batch, heads, length, dim = q.shape
    decay = (-slope.to(q.dtype)).exp().view(1, heads, 1, 1)
    S = initial.to(q.dtype) if initial is not None else q.new_zeros(batch, heads, dim, dim)
    out = []
    for t in range(length):
        S = S * decay + k[:, :, t, :, None] * v[:, :, t, None, :]
        out.append((q[:, :, t, None, :] @ S).squeeze(-2))
    return torch.stack(out, dim=2), S
