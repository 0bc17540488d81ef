"""Sparse attention through FlexAttention on CUDA: the masks' rules as a ``mask_mod``, skipped blocks never scored.

On CUDA, an attention whose pattern is structural (window, block, document, prefix, causal with padding;
BigBird's blocks) runs ``torch.nn.attention.flex_attention`` compiled, with a ``BlockMask`` built once per
call from the same rules the dense path evaluates, so only the tiles of keys a block of queries may see are
computed, forward and backward. Elsewhere it does not apply: FlexAttention has no backward on the CPU in
torch 2.13 (the CPU keeps the banded path of ``MultiHeadAttention.mix_banded``), no dropout on the
probabilities (training with ``attn_dropout`` keeps SDPA), nothing for incremental decoding (a KV
cache keeps SDPA), and on CUDA no heads under 16 dimensions nor a group of query heads per key/value head
that is not a power of two (its Triton kernels' limits; such attention keeps SDPA or the banded path). ``FLEX_DEVICES`` says where it runs; the tests add ``"cpu"`` to check it against the
dense computation there, forward only and uncompiled.

A padded query whose every key is padding gets zeros here, where the dense path gives its structural
mask's (equally meaningless, equally finite) average.
"""

from __future__ import annotations

import functools
from typing import Callable

import torch
from torch import Tensor

FLEX_DEVICES = {"cuda"}  # device types FlexAttention runs on (the CPU has no backward for it)
BLOCK = 128  # FlexAttention's tile: a block of queries against a block of keys is computed or skipped whole


def flex_runs(q: Tensor, k: Tensor, training_dropout: float) -> bool:
    """Does FlexAttention take this call: a device it runs on, no dropout on the probabilities, and on CUDA
    the shapes its Triton kernels take (heads of at least 16 dimensions; a power-of-two number of query heads
    per key/value head, which its short-sequence kernel needs)?"""
    if q.device.type not in FLEX_DEVICES or training_dropout or _flex_attention() is None:
        return False
    group = q.shape[1] // k.shape[1]
    return not q.is_cuda or (q.shape[-1] >= 16 and group & (group - 1) == 0)


def block_mask(rules: list[Callable], inputs: dict, padding: Tensor | None, batch: int, length: int, device,
               heads: int | None = None, per_head: Tensor | None = None, block: int = 1,
               positions: Tensor | None = None):
    """The ``BlockMask`` of a whole sequence of ``length``: where every rule ``(queries, keys, inputs) -> bool``
    (a mask's, options bound) allows, the key is not ``padding`` ((batch, length), True at padding), and,
    given ``per_head`` (heads, blocks, blocks), the head's table allows key block j for query block i.
    ``positions``: the sequence's position ids ``(batch or 1, length)``, which ``positional`` rules compare."""
    from torch.nn.attention.flex_attention import create_block_mask

    def mask_mod(b, h, q_idx, kv_idx):
        allowed = q_idx >= 0
        for rule in rules:
            if rule.positional:  # the row's positions, and the row's own of the inputs given per row
                row = b if positions.shape[0] > 1 else 0
                own = {name: value[b].view(1, *value.shape[1:]) if isinstance(value, Tensor) and value.shape[0] > 1
                       else value for name, value in inputs.items()}
                seen = rule(positions[row, q_idx].view(1), positions[row, kv_idx].view(1), own)
            else:  # (1, 1), or (batch, 1, 1) from a per-row input
                seen = rule(q_idx.view(1), kv_idx.view(1), inputs)
            allowed = allowed & (seen[b, 0, 0] if seen.dim() == 3 else seen[0, 0])
        if padding is not None:
            allowed = allowed & ~padding[b, kv_idx]
        if per_head is not None:
            allowed = allowed & per_head[h, q_idx // block, kv_idx // block]
        return allowed

    reads_rows = padding is not None or any(isinstance(v, Tensor) and v.shape[0] > 1 for v in inputs.values()) or (
        positions is not None and positions.shape[0] > 1 and any(r.positional for r in rules))
    return create_block_mask(mask_mod, batch if reads_rows else None, heads if per_head is not None else None,
                             length, length, device=device, BLOCK_SIZE=BLOCK,
                             _compile=torch.device(device).type == "cuda")


def flex_mix(q: Tensor, k: Tensor, v: Tensor, mask, scale: float | None) -> Tensor:
    """softmax(q k^T · scale, over the keys ``mask`` allows) v: (batch, heads, queries, head_dim)."""
    return _flex_attention()(q, k, v, block_mask=mask, scale=scale, enable_gqa=q.shape[1] != k.shape[1])


_compiled: dict[str, Callable] = {}


@functools.cache
def _flex_attention() -> Callable | None:
    """``flex_attention``: compiled on CUDA (its fused kernel), plain elsewhere (the tests' CPU check)."""
    try:
        from torch.nn.attention.flex_attention import flex_attention
    except ImportError:  # an older torch
        return None

    def run(q: Tensor, *args, **kwargs) -> Tensor:
        if q.is_cuda:
            if "cuda" not in _compiled:
                _compiled["cuda"] = torch.compile(flex_attention, dynamic=False)
            return _compiled["cuda"](q, *args, **kwargs)
        import warnings
        with warnings.catch_warnings():  # "called without torch.compile()": so it is, off CUDA
            warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
            return flex_attention(q, *args, **kwargs)
    return run
