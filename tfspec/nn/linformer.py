"""Linformer attention (Wang et al. 2020): keys and values projected along the sequence from n to k rows.

    head_i = softmax(q_i (E_i K_i)^T / sqrt(d)) (F_i V_i),   E_i, F_i: (k, max_len), sliced to the first n columns

so each query scores k mixtures of positions instead of n positions: O(n·k·d). Padded keys and values are
zeroed before the projection, so what padding holds never reaches a real position.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .attention import InContext, MultiHeadAttention, built, core_arguments


class LinformerAttention(MultiHeadAttention):
    """The core (torch only; ``tfspec emit`` copies it): ``MultiHeadAttention`` over projected keys and values.

    ``shared_heads``: one E and one F serve every head (else one per key/value head); ``shared_kv``: E = F
    (section 4 of the paper)."""

    def __init__(self, *args, k: int, max_len: int, shared_heads: bool, shared_kv: bool, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.k, self.max_len, self.shared_heads, self.shared_kv = k, max_len, shared_heads, shared_kv
        heads = () if shared_heads else (self.kv_heads,)
        self.proj_k = nn.Parameter(torch.empty(*heads, k, max_len))
        self.proj_v = None if shared_kv else nn.Parameter(torch.empty(*heads, k, max_len))

    def mix(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, is_causal: bool) -> Tensor:
        assert not is_causal, "Linformer attention cannot be causal: the projection mixes every position"
        length = k.shape[2]
        # what E and F multiply is kept for backward: copies, never views of the whole projection
        k, v = (t.clone(memory_format=torch.contiguous_format) for t in (k, v))
        if mask is not None:  # padding only (structural masks are refused): zero the padded keys and values
            kept = (mask[:, :, :1, :] == 0).transpose(-1, -2).to(k.dtype)  # (batch or 1, 1, keys, 1)
            k, v = k * kept, v * kept
        proj_v = self.proj_k if self.proj_v is None else self.proj_v
        k = self.proj_k[..., :length] @ k  # (batch, kv_heads, k, head_dim)
        v = proj_v[..., :length] @ v
        return F.scaled_dot_product_attention(q, k, v, scale=self.scale, enable_gqa=self.kv_heads != self.heads,
                                              dropout_p=self.dropout if self.training else 0.0)

    def extra_repr(self) -> str:
        return (f"{super().extra_repr()}, k={self.k}, max_len={self.max_len}, shared_heads={self.shared_heads}, "
                f"shared_kv={self.shared_kv}")


class LinformerAttentionInContext(InContext, LinformerAttention):
    """Linformer attention in a compiled model; ``config`` is a ``tfspec.registry.AttentionConfig``."""

    def __init__(self, config, k: int, max_len: int, shared_heads: bool, shared_kv: bool) -> None:
        LinformerAttention.__init__(self, **built(core_arguments(config)), k=k, max_len=max_len,
                                    shared_heads=shared_heads, shared_kv=shared_kv)
        self.in_context(config)
