"""BigBird's block-sparse attention (Zaheer et al. 2020, ITC): window, global and random blocks, computed sparsely.

The sequence is cut into blocks of ``block`` positions (padded up to a whole block, the padding masked).
The first and last query blocks are global: they attend to every key. Every other query block attends to
the first and last key blocks (global), to its own block and its two neighbours (the window), and to
``random`` further blocks, drawn per head. Only those key blocks are gathered, so scores and copies grow
as n·(5 + random)·block, not n². At lengths of at most (5 + 2·random)·block the pattern would cover
nearly everything, and attention is dense (as Hugging Face does).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from .attention import InContext, MultiHeadAttention, built, core_arguments
from .flex import block_mask, flex_mix, flex_runs


def bigbird_sparse(length: int, block: int, random: int) -> bool:
    """Does BigBird attention over ``length`` positions run block-sparse? (Else dense, as Hugging Face's.)"""
    return length > (5 + 2 * random) * block


def bigbird_key_blocks(blocks: int, heads: int, random: int, seed: int) -> Tensor:
    """The key blocks each middle query block sees, ``(heads, blocks - 2, 5 + random)``: the first, its own
    and its neighbours, the last, then ``random`` others drawn per head (never one it sees already) from a
    generator seeded by ``seed`` and the number of blocks, so a length always gets the same pattern."""
    generator = torch.Generator().manual_seed(seed * 1_000_003 + blocks)
    rows = []
    for _ in range(heads):
        for i in range(1, blocks - 1):
            fixed = [0, i - 1, i, i + 1, blocks - 1]
            others = [j for j in range(1, blocks - 1) if abs(j - i) > 1]
            drawn = torch.randperm(len(others), generator=generator)[:random].tolist()
            rows.append(fixed + [others[j] for j in drawn])
    return torch.tensor(rows, dtype=torch.long).view(heads, blocks - 2, 5 + random)


def bigbird_block_table(seen: Tensor) -> Tensor:
    """Bool ``(heads, blocks, blocks)``: which key blocks each query block sees, given the key blocks ``seen``
    of the middle query blocks (``bigbird_key_blocks``); the first and last query blocks see every key."""
    heads, middle, _ = seen.shape
    blocks = middle + 2
    allowed = torch.zeros(heads, blocks, blocks, dtype=torch.bool, device=seen.device)
    allowed[:, 0] = allowed[:, -1] = True
    rows = torch.arange(1, blocks - 1, device=seen.device)[None, :, None]
    allowed[torch.arange(heads, device=seen.device)[:, None, None], rows, seen] = True
    return allowed


def bigbird_allowed(seen: Tensor, length: int, block: int) -> Tensor:
    """Bool ``(heads, length, length)``: which key each query sees (``bigbird_block_table`` position by position)."""
    allowed = bigbird_block_table(seen)
    return allowed.repeat_interleave(block, 1).repeat_interleave(block, 2)[:, :length, :length]


class BigBirdAttention(MultiHeadAttention):
    """The core (torch only; ``tfspec emit`` copies it): ``MultiHeadAttention`` whose ``mix`` is block-sparse.

    ``mask``: None, or the keys' additive padding mask ``(batch or 1, 1, 1, keys)``; ``key_blocks``
    (a ``(heads, blocks - 2, 5 + random)`` tensor) replaces the drawn pattern, e.g. with another
    implementation's."""

    dropout_block = None  # its mix is block-sparse over a whole sequence, and keeps no n² state with dropout

    def __init__(self, *args, block: int, random: int, seed: int = 0, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.block, self.random, self.seed = block, random, seed
        self.patterns: dict[int, Tensor] = {}  # number of blocks -> key blocks, drawn once

    def key_blocks(self, blocks: int, device) -> Tensor:
        if blocks not in self.patterns:
            self.patterns[blocks] = bigbird_key_blocks(blocks, self.heads, self.random, self.seed)
        return self.patterns[blocks].to(device)

    def mix(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, is_causal: bool) -> Tensor:
        assert not is_causal, "BigBird attention has no fused causal kernel"
        batch, heads, length, dim = q.shape
        # copies, whatever the batch, heads and length (``contiguous`` is a no-op on a single position), so what
        # backward keeps never includes the projection itself
        k, v = (t.clone(memory_format=torch.contiguous_format) for t in (k, v))
        if not bigbird_sparse(length, self.block, self.random):
            return super().mix(q, k, v, mask, False)
        b = self.block
        blocks = -(-length // b)
        pad = blocks * b - length
        if pad:  # whole blocks: the padded keys are masked, the padded queries dropped at the end
            q, k, v = (F.pad(t, (0, 0, 0, pad)) for t in (q, k, v))
            keys = torch.zeros(1, 1, 1, length, dtype=q.dtype, device=q.device) if mask is None else mask
            mask = F.pad(keys, (0, pad), value=torch.finfo(q.dtype).min)
        dropout = self.dropout if self.training else 0.0
        # global query blocks, the first and the last: every key
        ends = q.view(batch, heads, blocks, b, dim)[:, :, [0, blocks - 1]].reshape(batch, heads, 2 * b, dim)
        ends = F.scaled_dot_product_attention(ends, k, v, attn_mask=mask, dropout_p=dropout, scale=self.scale)
        # the middle query blocks: each against its 5 + random key blocks, gathered
        seen = self.key_blocks(blocks, q.device)  # (heads, blocks - 2, 5 + random)
        head = torch.arange(heads, device=q.device)[:, None, None]
        span = seen.shape[-1] * b

        def gathered(t: Tensor) -> Tensor:  # (batch, heads * (blocks - 2), span, dim)
            return t.view(batch, heads, blocks, b, dim)[:, head, seen].reshape(batch, -1, span, dim)

        middle = q.view(batch, heads, blocks, b, dim)[:, :, 1:-1].reshape(batch, -1, b, dim)
        # the second block's left neighbour is the first block, the last but one's right neighbour the last:
        # seen twice in their rows, so the copy is masked
        twice = torch.zeros(blocks - 2, 5 + self.random, b, dtype=q.dtype, device=q.device)
        twice[0, 1] = twice[-1, 3] = torch.finfo(q.dtype).min
        if mask is None:
            mask = twice.view(1, 1, blocks - 2, span).expand(1, heads, -1, -1).reshape(1, -1, 1, span)
        else:
            rows = mask.shape[0]
            mask = mask.view(rows, blocks, b)[:, seen].reshape(rows, heads, blocks - 2, span)
            mask = (mask + twice.view(1, 1, blocks - 2, span)).clamp(min=torch.finfo(q.dtype).min)
            mask = mask.reshape(rows, -1, 1, span)
        middle = F.scaled_dot_product_attention(middle, gathered(k), gathered(v), attn_mask=mask,
                                                dropout_p=dropout, scale=self.scale)
        y = torch.cat([ends[:, :, None, :b], middle.view(batch, heads, blocks - 2, b, dim),
                       ends[:, :, None, b:]], dim=2).view(batch, heads, blocks * b, dim)
        # unpadded in memory of its own, so the output projection never keeps the padded rows alive
        return y[:, :, :length].clone() if pad else y

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, block={self.block}, random={self.random}, seed={self.seed}"


class BigBirdAttentionInContext(InContext, BigBirdAttention):
    """BigBird attention in a compiled model; ``config`` is a ``tfspec.registry.AttentionConfig``."""

    def __init__(self, config, block: int, random: int, seed: int) -> None:
        BigBirdAttention.__init__(self, **built(core_arguments(config)), block=block, random=random, seed=seed)
        self.in_context(config)

    def mix(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, is_causal: bool) -> Tensor:
        """On CUDA, the block-sparse pattern through FlexAttention (``tfspec.nn.flex``); elsewhere the core's."""
        batch, heads, length, _ = q.shape
        if not bigbird_sparse(length, self.block, self.random) or not flex_runs(q, k, self.training and self.dropout):
            return super().mix(q, k, v, mask, is_causal)
        table = bigbird_block_table(self.key_blocks(-(-length // self.block), q.device))
        padding = None if mask is None else (mask[:, 0, 0, :] < 0).expand(batch, -1)  # the padded keys
        pattern = block_mask([], {}, padding, batch, length, q.device, heads, table, self.block)
        return flex_mix(q, k, v, pattern, self.scale)
