"""Linformer attention (Wang et al. 2020): keys and values projected along the sequence from n to k rows.

    head_i = softmax(q_i (E_i K_i)^T / sqrt(d)) (F_i V_i),   E_i, F_i: (k, max_len), sliced to the first n columns

so each query scores k mixtures of positions instead of n positions: O(n·k·d). Padded keys and values are
zeroed before the projection, so what padding holds never reaches a real position. With layer-wise sharing
the stack owns E and F (``LinformerProjections``) and every layer's attention reads the same ones.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .attention import MultiHeadAttention, sdpa


class LinformerProjections(nn.Module):
    """E (``proj_k``) and F (``proj_v``; None with key-value sharing), ``(k, max_len)``, or one per key/value
    head, ``(kv_heads, k, max_len)``: a layer's own, or its stack's for every layer (layer-wise sharing)."""

    def __init__(self, k: int, max_len: int, kv_heads: int, shared_heads: bool, shared_kv: bool) -> None:
        super().__init__()
        heads = () if shared_heads else (kv_heads,)
        self.proj_k = nn.Parameter(torch.empty(*heads, k, max_len))
        self.proj_v = None if shared_kv else nn.Parameter(torch.empty(*heads, k, max_len))


class LinformerAttention(MultiHeadAttention):
    """The core (torch only; ``tfspec emit`` copies it): ``MultiHeadAttention`` over projected keys and values.

    ``shared_heads``: one E and one F serve every head (else one per key/value head); ``shared_kv``: E = F;
    ``shared_layers``: the stack owns them, and hands them to every layer with ``share`` (section 4 of the
    paper)."""

    dropout_block = None  # it scores k projected keys, never n², with dropout too

    def __init__(self, *args, k: int, max_len: int, shared_heads: bool, shared_kv: bool,
                 shared_layers: bool = False, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.k, self.max_len, self.shared_heads, self.shared_kv = k, max_len, shared_heads, shared_kv
        self.shared_layers = shared_layers
        if not shared_layers:
            own = LinformerProjections(k, max_len, self.kv_heads, shared_heads, shared_kv)
            self.proj_k, self.proj_v = own.proj_k, own.proj_v
        else:
            self.proj_k = self.proj_v = None

    def share(self, projections: LinformerProjections) -> None:
        """Read the stack's E and F (layer-wise sharing). Kept as a plain reference, not a submodule, so the
        state dict holds them once, under the stack; moving the model moves them in place."""
        self.__dict__["stack_projections"] = projections

    def projections(self) -> tuple[Tensor, Tensor]:
        """(E, F) this layer uses."""
        owner = self.__dict__.get("stack_projections") if self.shared_layers else self
        if owner is None:
            raise RuntimeError("this Linformer attention shares its stack's projections: run it through its "
                               "model, or call share(LinformerProjections(...)) first")
        return owner.proj_k, owner.proj_k if owner.proj_v is None else owner.proj_v

    def mix(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, is_causal: bool) -> Tensor:
        assert not is_causal, "Linformer attention cannot be causal: the projection mixes every position"
        length = k.shape[2]
        # what E and F multiply is kept for backward: copies, never views of the whole projection
        k, v = (t.clone(memory_format=torch.contiguous_format) for t in (k, v))
        if mask is not None:  # padding only (structural masks are refused): zero the padded keys and values
            kept = (mask[:, :, :1, :] == 0).transpose(-1, -2).to(k.dtype)  # (batch or 1, 1, keys, 1)
            k, v = k * kept, v * kept
        proj_k, proj_v = self.projections()
        k = proj_k[..., :length] @ k  # (batch, kv_heads, k, head_dim)
        v = proj_v[..., :length] @ v
        return sdpa(q, k, v, scale=self.scale, enable_gqa=self.kv_heads != self.heads,
                    dropout_p=self.dropout if self.training else 0.0)

    def extra_repr(self) -> str:
        return (f"{super().extra_repr()}, k={self.k}, max_len={self.max_len}, shared_heads={self.shared_heads}, "
                f"shared_kv={self.shared_kv}, shared_layers={self.shared_layers}")
