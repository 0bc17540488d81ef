"""Multi-head latent attention's runtime module (``tfspec.variants.latent``)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .attention import Geometry, KVCache, MultiHeadAttention
from .steps import Side
from .context import Context


class LatentAttention(MultiHeadAttention):
    """The core (torch only; ``tfspec emit`` copies it): ``MultiHeadAttention`` whose keys and values come from a
    compressed latent (DeepSeek-V2's MLA). Per position, ``kv_down`` makes a latent of ``kv_rank`` features
    (normed by ``kv_latent_norm``) and one key of ``rope_dim`` features that every head shares and the position
    scheme rotates; ``kv_up`` expands the latent into each head's key part without positions and its value.
    Queries come from ``q``, or through a low-rank ``q_down`` → ``q_latent_norm`` → ``q_up``; each head's query
    is ``[unrotated; rotated]`` as its key is. A KV cache keeps the latent and the rotated shared key, ``kv_rank +
    rope_dim`` numbers per position, and expands them for each step."""

    def __init__(self, geometry: Geometry, rope_dim: int, value_dim: int, kv_rank: int, kv_latent_norm: nn.Module,
                 q_rank: int = 0, q_latent_norm: nn.Module | None = None, **attention) -> None:
        width, heads, head_dim, bias = geometry.width, geometry.heads, geometry.head_dim, geometry.bias
        super().__init__(Geometry(width, heads, heads, head_dim, bias=bias, out_bias=geometry.out_bias),
                         projections=False, **attention)
        self.rope_dim, self.value_dim, self.kv_rank, self.q_rank = rope_dim, value_dim, kv_rank, q_rank
        if q_rank:
            self.q_down = nn.Linear(width, q_rank, bias=bias)
            self.q_latent_norm = q_latent_norm
            self.q_up = nn.Linear(q_rank, heads * head_dim, bias=False)
        else:
            self.q = nn.Linear(width, heads * head_dim, bias=False)
        self.kv_down = nn.Linear(width, kv_rank + rope_dim, bias=bias)
        self.kv_latent_norm = kv_latent_norm
        self.kv_up = nn.Linear(kv_rank, heads * (head_dim - rope_dim + value_dim), bias=False)
        self.out = nn.Linear(heads * value_dim, width, bias=geometry.out_bias)

    def queries(self, x: Tensor) -> Tensor:
        """(batch, heads, length, head_dim), not yet rotated."""
        q = self.q_up(self.q_latent_norm(self.q_down(x))) if self.q_rank else self.q(x)
        return self.split(q, self.heads)

    def project_in_context(self, x: Tensor, ctx: Context, cache: KVCache | None):
        q_pass, q_rot = self.queries(x).split((self.head_dim - self.rope_dim, self.rope_dim), dim=-1)
        latent, k_rot = self.kv_down(x).split((self.kv_rank, self.rope_dim), dim=-1)
        latent, k_rot = self.kv_latent_norm(latent)[:, None], k_rot[:, None]  # (batch, 1, length, features)
        q_rot, k_rot, extras = self.encode(q_rot, k_rot, x, ctx, cache)
        positions, padding = ctx.positions, ctx.padding if self.masks.reads_padding else None
        key_extras = extras
        if cache is not None:  # the latent and the shared rotated key, not every head's keys and values
            latent, k_rot, positions, padding, key_extras = cache.append(latent, k_rot, positions, padding, extras)
        k, v = self.expand(latent, k_rot)
        return torch.cat((q_pass, q_rot), dim=-1), k, v, Side(ctx.positions, extras), Side(positions, key_extras), \
            padding

    def expand(self, latent: Tensor, k_rot: Tensor) -> tuple[Tensor, Tensor]:
        """Each head's keys ``(batch, heads, n, head_dim)`` and values ``(batch, heads, n, value_dim)`` from the
        latent ``(batch, 1, n, kv_rank)`` and the shared rotated key ``(batch, 1, n, rope_dim)``."""
        batch, _, length, _ = latent.shape
        kv = self.kv_up(latent[:, 0]).view(batch, length, self.heads, -1).transpose(1, 2)
        k_pass, v = kv.split((self.head_dim - self.rope_dim, self.value_dim), dim=-1)
        return torch.cat((k_pass, k_rot.expand(-1, self.heads, -1, -1)), dim=-1), v

    def extra_repr(self) -> str:
        return (f"heads={self.heads}, head_dim={self.head_dim}, rope_dim={self.rope_dim}, "
                f"value_dim={self.value_dim}, kv_rank={self.kv_rank}, dropout={self.dropout}")
