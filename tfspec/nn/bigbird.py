"""BigBird's block-sparse attention (Zaheer et al. 2020, ITC): window, global and random blocks, computed sparsely.

The sequence is cut into blocks of ``block`` positions (padded up to a whole block, the padding masked).
The first and last query blocks are global: they attend to every key. Every other query block attends to
the first and last key blocks (global), to its own block and its two neighbours (the window), and to
``random`` further blocks, drawn per head. Only those key blocks are gathered, so scores and copies grow
as n·(5 + random)·block, not n². At lengths of at most (5 + 2·random)·block the pattern would cover
nearly everything, and attention is dense (as Hugging Face does). The pattern is drawn in numpy
(``bigbird_pattern.py``), so tools that only draw or cost it need no torch.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from .attention import InContext, MultiHeadAttention, built, core_arguments, recomputed, sdpa
from .bigbird_pattern import bigbird_block_table, bigbird_key_blocks, bigbird_sparse
from .flex import block_mask, flex_mix, flex_runs


class BigBirdAttention(MultiHeadAttention):
    """The core (torch, and numpy for its pattern; ``tfspec emit`` copies it): ``MultiHeadAttention`` whose
    ``mix`` is block-sparse.

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
            self.patterns[blocks] = torch.from_numpy(bigbird_key_blocks(blocks, self.heads, self.random, self.seed))
        return self.patterns[blocks].to(device)

    def mix(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, is_causal: bool) -> Tensor:
        assert not is_causal, "BigBird attention has no fused causal kernel"
        if not bigbird_sparse(q.shape[2], self.block, self.random):
            # copies, whatever the batch, heads and length (``contiguous`` is a no-op on a single position), so
            # what backward keeps never includes the projection itself
            k, v = (t.clone(memory_format=torch.contiguous_format) for t in (k, v))
            return super().mix(q, k, v, mask, False)
        # its gathered key blocks are copies: recomputed in backward, not kept, ``band_rows`` queries at a time
        length, blocks = q.shape[2], -(-q.shape[2] // self.block)
        group = max(1, self.band_rows // self.block)
        parts = [recomputed(self.mix_sparse, q, k, v, mask, first, min(first + group, blocks))
                 for first in range(0, blocks, group)]
        return (parts[0] if len(parts) == 1 else torch.cat(parts, dim=2))[:, :, :length]

    def mix_sparse(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, first: int, last: int) -> Tensor:
        """Query blocks ``first`` to ``last`` of the block-sparse pattern (``bigbird_sparse``), ``(batch, heads,
        (last - first) · block, dim)``: a global block (the first, the last) against every key, a middle block
        against its 5 + random key blocks, gathered."""
        batch, heads, length, dim = q.shape
        b = self.block
        blocks = -(-length // b)
        pad = blocks * b - length
        if pad:  # whole blocks: the padded keys are masked, the padded queries dropped by ``mix``
            q, k, v = (F.pad(t, (0, 0, 0, pad)) for t in (q, k, v))
            keys = torch.zeros(1, 1, 1, length, dtype=q.dtype, device=q.device) if mask is None else mask
            mask = F.pad(keys, (0, pad), value=torch.finfo(q.dtype).min)
        dropout = self.dropout if self.training else 0.0
        parts = []
        if first == 0:  # the first query block is global: every key
            parts.append(sdpa(q[:, :, :b], k, v, attn_mask=mask, dropout_p=dropout, scale=self.scale))
        low, high = max(first, 1), min(last, blocks - 1)  # its middle blocks
        if high > low:
            seen = self.key_blocks(blocks, q.device)[:, low - 1:high - 1]  # (heads, middle, 5 + random)
            middle, span = high - low, seen.shape[-1] * b
            head = torch.arange(heads, device=q.device)[:, None, None]

            def gathered(t: Tensor) -> Tensor:  # (batch, heads * middle, span, dim)
                return t.view(batch, heads, blocks, b, dim)[:, head, seen].reshape(batch, -1, span, dim)

            rows = q.view(batch, heads, blocks, b, dim)[:, :, low:high].reshape(batch, -1, b, dim)
            # the second block's left neighbour is the first block, the last but one's right neighbour the last:
            # seen twice in their rows, so the copy is masked
            twice = torch.zeros(middle, 5 + self.random, b, dtype=q.dtype, device=q.device)
            if low == 1:
                twice[0, 1] = torch.finfo(q.dtype).min
            if high == blocks - 1:
                twice[-1, 3] = torch.finfo(q.dtype).min
            if mask is None:
                seen_mask = twice.view(1, 1, middle, span).expand(1, heads, -1, -1).reshape(1, -1, 1, span)
            else:
                count = mask.shape[0]
                seen_mask = mask.view(count, blocks, b)[:, seen].reshape(count, heads, middle, span)
                seen_mask = (seen_mask + twice.view(1, 1, middle, span)).clamp(min=torch.finfo(q.dtype).min)
                seen_mask = seen_mask.reshape(count, -1, 1, span)
            rows = sdpa(rows, gathered(k), gathered(v), attn_mask=seen_mask, dropout_p=dropout, scale=self.scale)
            # reshaped, not viewed: CUDA's kernels lay their output out as (batch, rows, heads, dim)
            parts.append(rows.reshape(batch, heads, middle * b, dim))
        if last == blocks:  # the last query block is global too
            parts.append(sdpa(q[:, :, -b:], k, v, attn_mask=mask, dropout_p=dropout, scale=self.scale))
        return parts[0] if len(parts) == 1 else torch.cat(parts, dim=2)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, block={self.block}, random={self.random}, seed={self.seed}"


class BigBirdAttentionInContext(InContext, BigBirdAttention):
    """BigBird attention in a compiled model; ``config`` is a ``tfspec.registry.AttentionConfig``."""

    def __init__(self, config, block: int, random: int, seed: int, layer: int | None = None) -> None:
        BigBirdAttention.__init__(self, **built(core_arguments(config), layer), block=block, random=random, seed=seed)
        self.in_context(config)

    def mix(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, is_causal: bool) -> Tensor:
        """On CUDA, the block-sparse pattern through FlexAttention (``tfspec.nn.flex``); elsewhere the core's."""
        batch, heads, length, _ = q.shape
        if not bigbird_sparse(length, self.block, self.random) or not flex_runs(q, k, self.training and self.dropout):
            return super().mix(q, k, v, mask, is_causal)
        drawn = self.key_blocks(-(-length // self.block), "cpu").numpy()
        table = torch.from_numpy(bigbird_block_table(drawn)).to(q.device)
        padding = None if mask is None else (mask[:, 0, 0, :] < 0).expand(batch, -1)  # the padded keys
        pattern = block_mask([], {}, padding, batch, length, q.device, heads, table, self.block)
        return flex_mix(q, k, v, pattern, self.scale)
