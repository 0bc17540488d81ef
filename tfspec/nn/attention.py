"""Multi-head attention through ``F.scaled_dot_product_attention``, with grouped-query heads and a KV cache.

Self-attention projects Q, K and V with one fused linear (``qkv``, rows
[q; k; v]); cross-attention projects queries with ``q`` and the memory with a
fused ``kv``. Heads are contiguous slices, as in ``torch.nn.MultiheadAttention``
and Hugging Face models, so weights map across without permutation. With fewer
key/value heads than query heads (grouped-query attention) SDPA's
``enable_gqa`` lets each kv head serve its group without copies.

Per head, optionally: a norm over queries and keys (qk-norm), then the steps its
variants contribute (``tfspec.nn.steps``), in order: the position scheme's (rotary
rotates q and k; ALiBi biases the scores), its kind's (forgetting attention's score
terms from the content, differential attention's paired heads) and those the spec
adds (value residual learning's first-layer values).

One forward: ``MultiHeadAttention`` (torch alone, so ``tfspec emit`` copies it into
standalone files) takes the call's ``Context`` -- positions, padding, memory, run-time
inputs, and a memo that builds each mask and position table once per call for every
layer -- and, while decoding, a ``KVCache``. A compiled model's attention adds only
``InContext``: FlexAttention for masks of structure on CUDA.

Attention dropout while training on the CPU, where SDPA's only kernel with dropout (its math kernel) keeps
the n² probabilities for backward, runs the same math written out (``mix``), with keep masks of 16 random
bits an element (``dropout_keep_mask``), over blocks of ``dropout_block`` queries (4 · head_dim) that backward recomputes
(``attend_in_blocks``): what it keeps grows with n·block, and a causal block scores no key after its last
query. On CUDA, SDPA's fused kernels drop weights themselves.

During incremental decoding a ``KVCache`` keeps each sublayer's keys and values
in a preallocated buffer (grown by doubling, so a token costs no copy of the
cache), and beside each key the extras its steps made of it, with a carry they
continue from: self-attention appends the new positions and attends over all of
them, cross-attention projects the memory once. A layer whose masks bound how far
back a query looks (``window(k)`` with ``causal``) keeps only that many keys.
"""

from __future__ import annotations

import functools
import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..registry import Constructor, built_value, combined_reach
from .kernels import band_chunk
from .context import Context
from .flex import block_mask, flex_mix, flex_runs
from .masking import MaskSet, additive_mask
from .state import RecurrentState, StaticCache
from .steps import Side


class KVCache:
    """Keys and values ``(batch, kv_heads, positions, head_dim)`` of one attention sublayer, with their
    position ids and padding; ``keep``: how many past keys the next query can still see (None: all)."""

    def __init__(self, keep: int | None = None) -> None:
        self.keep = keep
        self.k: Tensor | None = None  # a buffer; the first `length` positions are filled
        self.v: Tensor | None = None
        self.positions: Tensor | None = None  # (batch or 1, length)
        self.padding: Tensor | None = None  # (batch, length) or None: no padded keys
        self.extras: dict[str, Tensor] = {}  # per key, what its attention's steps made of it ((batch, heads, length))
        self.carry = RecurrentState(static=False)  # what a step continues from (FoX's running sum of log gates)
        self.length = 0

    def __len__(self) -> int:
        return self.length

    def append(self, k: Tensor, v: Tensor, positions: Tensor, padding: Tensor | None, extras: dict | None = None
               ) -> tuple[Tensor, Tensor, Tensor, Tensor | None, dict]:
        """Add new keys/values (and their ``extras``); return everything the new queries attend to."""
        new = k.shape[2]
        self.extras = {name: t if name not in self.extras else torch.cat((self.extras[name], t), dim=-1)
                       for name, t in (extras or {}).items()}
        if self.k is None or self.length + new > self.k.shape[2]:
            self._grow(max(2 * (self.length + new), 16), k, v)
        self.k[:, :, self.length:self.length + new] = k
        self.v[:, :, self.length:self.length + new] = v
        self.positions = positions if self.positions is None else torch.cat((self.positions, positions), dim=1)
        if padding is not None or self.padding is not None:
            old = self.padding if self.padding is not None else torch.zeros(
                k.shape[0], self.length, dtype=torch.bool, device=k.device)
            fresh = padding if padding is not None else torch.zeros(k.shape[0], new, dtype=torch.bool,
                                                                    device=k.device)
            self.padding = torch.cat((old, fresh), dim=1)
        self.length += new
        return (self.k[:, :, :self.length], self.v[:, :, :self.length], self.positions, self.padding,
                self.extras)

    def trim(self) -> None:
        """Forget keys no later query can see (a bounded look-back)."""
        if self.keep is None or self.length <= self.keep:
            return
        drop = self.length - self.keep
        # into new buffers: what this call handed on (views of the old ones, ``kv_from``) keeps its keys, and the
        # kept keys are copied once
        kept_k, kept_v = self.k[:, :, drop:self.length], self.v[:, :, drop:self.length]
        self.k, self.v = self.k.new_empty(self.k.shape), self.v.new_empty(self.v.shape)
        self.k[:, :, :self.keep], self.v[:, :, :self.keep] = kept_k, kept_v
        self.positions = self.positions[:, drop:]
        self.padding = self.padding[:, drop:] if self.padding is not None else None
        self.extras = {name: t[..., drop:] for name, t in self.extras.items()}
        self.length = self.keep

    def _grow(self, capacity: int, k: Tensor, v: Tensor) -> None:
        shape = (k.shape[0], k.shape[1], capacity, k.shape[3])
        buffers = (k.new_empty(shape), v.new_empty(shape[:3] + (v.shape[3],)))
        if self.k is not None:
            buffers[0][:, :, :self.length] = self.k[:, :, :self.length]
            buffers[1][:, :, :self.length] = self.v[:, :, :self.length]
        self.k, self.v = buffers

    def set(self, k: Tensor, v: Tensor) -> None:
        """Cross-attention: the memory's keys and values, projected once."""
        self.k, self.v, self.length = k, v, k.shape[2]

    def reorder(self, rows: Tensor) -> None:
        """Keep batch rows ``rows`` (beam search follows its surviving hypotheses)."""
        if self.k is not None:
            self.k, self.v = self.k.index_select(0, rows), self.v.index_select(0, rows)
        if self.positions is not None and self.positions.shape[0] > 1:
            self.positions = self.positions.index_select(0, rows)
        if self.padding is not None:
            self.padding = self.padding.index_select(0, rows)
        self.extras = {name: t.index_select(0, rows) for name, t in self.extras.items()}
        self.carry.reorder(rows)


def dropout_keep_mask(shape, p: float, device=None, dtype=torch.bool) -> tuple[Tensor, float]:
    """A keep mask for dropout with probability ``p`` (1 where kept, 0 where dropped, in ``dtype``), and the
    scale of what it keeps. Each element compares 16 random bits (four from each 64-bit draw of torch's
    generator: about 5 times as fast as ``bernoulli_`` on the CPU), so ``p`` is rounded to a multiple of 1/65536
    and the scale is the rounded p's, which keeps the expectation exact. A mask in the weights' dtype, written by
    the comparison itself, is 3 times as fast to make as a bool one and 4 times as fast to multiply by."""
    count = math.prod(shape)
    dropped = min(round(p * 65536), 65535)  # of 65536 equally likely values
    bits = torch.randint(-(1 << 63), (1 << 63) - 1, (-(-count // 4),), dtype=torch.int64, device=device)
    keep = torch.empty(shape, dtype=dtype, device=device)
    torch.ge(bits.view(torch.int16)[:count].view(shape), dropped - 32768, out=keep)
    return keep, 65536 / (65536 - dropped)


ALIGNED_DEVICES = {"cuda"}  # device types whose fused attention kernels need aligned inputs (tests add "cpu")
# device types where float32 attention with grouped heads has no fused kernel (tests add "cpu"): on CUDA neither
# flash nor cuDNN takes float32, and the memory-efficient kernel takes as many key/value heads as query heads only,
# so SDPA would fall back to its math path, which keeps every score for backward: memory quadratic in the length
UNGROUPED_FLOAT32_DEVICES = {"cuda"}


def sdpa(q: Tensor, k: Tensor, v: Tensor, **options) -> Tensor:
    """``F.scaled_dot_product_attention(q, k, v, **options)``, with each of q, k and v that does not start on a
    16-byte boundary copied first on CUDA: its fused kernels read 16-byte vectors from where a view starts without
    checking, and a view split off a wider projection at an odd offset (latent attention's values after each
    head's key part) fails as a 'misaligned address' that poisons every later CUDA call of the process. (Under
    ``torch.compile`` inductor aligns what it hands SDPA itself, and a pointer is not traced.) Grouped keys and
    values in float32 on CUDA are given one head per query head, for the memory-efficient kernel to take them
    (``UNGROUPED_FLOAT32_DEVICES``): a copy linear in the length, where the math path keeps quadratic scores."""
    if q.device.type in ALIGNED_DEVICES and not torch.compiler.is_compiling():
        q, k, v = (t if t.data_ptr() % 16 == 0 else t.contiguous() for t in (q, k, v))
    if options.get("enable_gqa") and q.dtype == torch.float32 and q.device.type in UNGROUPED_FLOAT32_DEVICES:
        k, v = (t.repeat_interleave(q.shape[1] // t.shape[1], dim=1) for t in (k, v))
        options = {**options, "enable_gqa": False}
    return F.scaled_dot_product_attention(q, k, v, **options)


def recomputed(function, *args):
    """``function(*args)``, recomputed in backward rather than keeping what it makes (``torch.utils.checkpoint``,
    which replays its random draws) when a gradient will flow through it: for attention whose blocks copy
    keys and values, so what backward keeps is its inputs alone, as a fused kernel's."""
    if torch.is_grad_enabled() and any(isinstance(a, Tensor) and a.requires_grad for a in args):
        return torch.utils.checkpoint.checkpoint(function, *args, use_reentrant=False)
    return function(*args)


class StaticKVCache(KVCache):
    """A ``KVCache`` whose buffers never change shape, so a compiled decode step (``torch.compile``) runs one graph
    at every position: ``capacity`` slots (a bounded look-back: its ``keep`` + 1), position i in slot i % capacity,
    written in place. The prompt goes in whole first (its queries attend to its own keys); then one position a
    step, at ``ctx.offset`` (a 0-d tensor: ``Context.slots``), and attention reads every slot: those not yet
    written are padding, and ``MaskSet.structure`` tells each slot's position from the offset."""

    def __init__(self, capacity: int, keep: int | None = None) -> None:
        super().__init__(keep)
        self.capacity = capacity if keep is None else min(capacity, keep + 1)  # the new position and its keep
        self.end: Tensor | None = None  # positions written so far (0-d), advanced in place
        self.carry = RecurrentState(static=True)

    def __len__(self) -> int:
        return super().__len__() if self.end is None else int(self.end)  # (cross-attention's: its memory's)

    def append(self, k: Tensor, v: Tensor, positions: Tensor, padding: Tensor | None, extras: dict | None = None
               ) -> tuple[Tensor, Tensor, Tensor, Tensor | None, dict]:
        new, extras = k.shape[2], extras or {}
        if self.end is None:  # the prompt, whole: attention reads its own keys; the cache keeps the last ones
            if new > self.capacity and self.keep is None:
                raise ValueError(f"the prompt has {new} positions, but the compiled decoder's cache holds "
                                 f"{self.capacity}: give a larger max_len")
            batch = k.shape[0]
            self.k = k.new_zeros(batch, k.shape[1], self.capacity, k.shape[3])
            self.v = v.new_zeros(batch, v.shape[1], self.capacity, v.shape[3])
            self.positions = positions.new_zeros(positions.shape[0], self.capacity)
            self.padding = torch.ones(batch, self.capacity, dtype=torch.bool, device=k.device)
            self.extras = {name: t.new_zeros(*t.shape[:-1], self.capacity) for name, t in extras.items()}
            kept = min(new, self.capacity)
            slots = torch.arange(new - kept, new, device=k.device) % self.capacity
            self.write(slots, k[:, :, new - kept:], v[:, :, new - kept:], positions[:, new - kept:],
                       None if padding is None else padding[:, new - kept:],
                       {name: t[..., new - kept:] for name, t in extras.items()})
            self.end = torch.tensor(new, device=k.device)
            return k, v, positions, padding, extras
        if new != 1:
            raise ValueError(f"a compiled decoder takes one token a step after the prompt, not {new}")
        self.write((self.end % self.capacity).view(1), k, v, positions, padding, extras)
        self.end.add_(1)
        return self.k, self.v, self.positions, self.padding, self.extras

    def write(self, slots: Tensor, k: Tensor, v: Tensor, positions: Tensor, padding: Tensor | None,
              extras: dict) -> None:
        self.k.index_copy_(2, slots, k)
        self.v.index_copy_(2, slots, v)
        self.positions.index_copy_(1, slots, positions.expand(self.positions.shape[0], -1))
        fresh = torch.zeros(k.shape[0], k.shape[2], dtype=torch.bool, device=k.device) if padding is None else padding
        self.padding.index_copy_(1, slots, fresh)
        for name, t in extras.items():
            self.extras[name].index_copy_(-1, slots, t)

    def trim(self) -> None:
        """Nothing to forget: a slot is overwritten when its position falls out of the look-back."""

    def reorder(self, rows: Tensor) -> None:
        """Keep batch rows ``rows``: in place where the batch keeps its size (a compiled step reads the same
        buffers), anew where it changes (a beam's first step; the next step compiles for the new batch)."""
        if self.end is None or len(rows) != self.k.shape[0]:  # (self.end: None for cross-attention's memory)
            return super().reorder(rows)
        for buffer in (self.k, self.v, self.padding, *self.extras.values()) + (
                (self.positions,) if self.positions.shape[0] > 1 else ()):
            buffer.copy_(buffer.index_select(0, rows))
        self.carry.reorder(rows)


def cache_slot(cache: dict[str, KVCache] | None, name: str, keep: int | None = None) -> KVCache | None:
    """The cache of sublayer ``name`` in a layer's cache dict (created on first use); None without one."""
    if cache is None:
        return None
    if name not in cache:
        cache[name] = StaticKVCache(cache.capacity, keep) if isinstance(cache, StaticCache) else KVCache(keep)
    return cache[name]


def kv_keep(masks) -> int | None:
    """How many past keys a KV cache must keep under these ``(Mask, options)``: a causal bound on the look-back
    (``window(k)`` with ``causal``), or None: all of them."""
    behind, ahead = combined_reach(masks)
    return behind if behind is not None and ahead == 0 else None


class UnbiasedKeys(nn.Linear):
    """A fused projection whose keys' rows have no bias (Whisper's ``k_proj``): rows [before; keys; after], its
    ``bias`` the rows before the keys' and after them. (A key's bias adds one value to all of a query's scores,
    which softmax ignores, so Whisper has none.)"""

    def __init__(self, in_features: int, before: int, keys: int, after: int) -> None:
        super().__init__(in_features, before + keys + after, bias=False)
        self.before, self.keys = before, keys
        self.bias = nn.Parameter(torch.zeros(before + after))

    def forward(self, x: Tensor) -> Tensor:
        bias = self.bias
        return F.linear(x, self.weight, torch.cat((bias[:self.before], bias.new_zeros(self.keys), bias[self.before:])))


class Geometry:
    """An attention's sizes: the input's ``width``, ``heads`` of queries and ``kv_heads`` of keys and values, each
    ``head_dim`` wide; ``memory_width``: the memory's width, which cross-attention reads (None: self-attention);
    ``bias`` and ``out_bias``: the q/k/v projections' and the output projection's; ``key_bias``: with ``bias``, on
    the keys' rows too (Whisper's have none). Torch only: ``tfspec emit`` copies it."""

    def __init__(self, width: int, heads: int, kv_heads: int, head_dim: int, memory_width: int | None = None,
                 bias: bool = True, out_bias: bool = True, key_bias: bool = True) -> None:
        self.width, self.heads, self.kv_heads, self.head_dim = width, heads, kv_heads, head_dim
        self.memory_width, self.bias, self.out_bias, self.key_bias = memory_width, bias, out_bias, key_bias


class QKNorm:
    """How an attention normalises each head's queries and keys once projected, before positions rotate them: by
    ``q`` and ``k`` (each a norm module; None: not at all). (Norms elsewhere are steps: ``full_qk_norm`` over all
    heads at once, ``rotated_qk_norm`` once rotated.) Torch only: ``tfspec emit`` copies it."""

    def __init__(self, q: nn.Module | None = None, k: nn.Module | None = None) -> None:
        self.q, self.k = q, k


class MultiHeadAttention(nn.Module):
    """softmax(q k^T · scale + mask) v per head, over whole sequences.

    The core every attention kind builds on, and what ``tfspec emit`` copies into
    a standalone model file, so it depends on torch alone. Its ``Geometry`` sizes it. Self-attention projects
    q, k and v with one fused ``qkv``; cross-attention (the geometry's ``memory_width`` given)
    projects queries with ``q`` and the memory with a fused ``kv``. ``qk_norm`` normalises the queries and keys
    (a ``QKNorm``: each head's, by ``q_norm`` and ``k_norm``, once projected); ``position`` is an
    in-attention position scheme (``tfspec.nn.position.InAttentionPositions``): its tables once per call,
    then it rotates q and k (rotary), biases the scores (ALiBi) and attends in place of ``mix`` (Shaw), each
    step a no-op unless the scheme does it. One its stack owns (T5's bias) arrives through ``share``.
    ``masks``: its ``MaskSet``, which says what it lets attention skip: a lone causal mask runs SDPA's fused
    ``is_causal`` (``fused_causal``); masks bounding the keys a query sees (``band``) run over a sequence long
    enough (``band_chunk``) block by block (``mix_in_bands``), the mask in the banded layout of
    ``tfspec.nn.masking.banded_mask``; ``keep``, the past keys a KV cache needs.
    """

    # With dropout while training on the CPU, attention runs at most this many queries at a time
    # (``attend_in_blocks``); None: whole sequences at once. A kind whose mix is not one query's row after another's
    # sets None. Each instance runs 4 · head_dim of them (16 at least): what a block holds for its backward, heads ×
    # rows × keys, then stays within what the layer keeps without dropout, whatever the length.
    dropout_block: int | None = 256
    band_rows = 1024  # attention in bands recomputes about this many queries at a time (``mix_in_bands``)
    dropout_keep = None  # tests: ``(shape, rows, keys) -> keep`` in place of drawn dropout masks (``drop``)
    part = (slice(None), slice(None))  # the call's queries and keys the current mix computes (``attend_rows``)

    def __init__(self, geometry: Geometry, dropout: float = 0.0, scale: float | None = None,
                 qk_norm: QKNorm | None = None, position: nn.Module | None = None, masks: MaskSet | None = None,
                 position_from_stack: bool = False, projections: bool = True,
                 steps: dict[str, nn.Module] | None = None, exports: str | None = None,
                 hands_on_kv: str | None = None, kv_source: str | None = None) -> None:
        super().__init__()
        width, heads, kv_heads, head_dim = geometry.width, geometry.heads, geometry.kv_heads, geometry.head_dim
        memory_width, bias, key_bias = geometry.memory_width, geometry.bias, geometry.key_bias
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, head_dim
        self.cross, self.dropout, self.scale = memory_width is not None, dropout, scale
        self.masks = masks if masks is not None else MaskSet(cross=self.cross)
        # what its masks let it skip (``MaskSet``); ``keep``: the past keys a KV cache must keep (None: all)
        self.fused_causal, self.band, self.keep = self.masks.fused_causal, self.masks.band, self.masks.keep
        # its position scheme is its stack's (T5's): ``share`` hands it over when the model is built
        self.position_from_stack = position_from_stack
        # it attends with the keys and values (and their positions and padding) an earlier layer's attention made,
        # handed on under ``kv_source`` of ``ctx.carried``, projecting only queries; ``hands_on_kv``: it hands its
        # own on under that key, @ the layer running it
        self.kv_source, self.hands_on_kv = kv_source, hands_on_kv
        if projections:  # (a kind that projects otherwise, such as latent attention, makes its own)
            if self.cross or kv_source is not None:
                self.q = nn.Linear(width, heads * head_dim, bias=bias)
            q_width, kv_width = heads * head_dim, kv_heads * head_dim
            if self.cross:
                self.kv = UnbiasedKeys(memory_width, 0, kv_width, kv_width) if bias and not key_bias else \
                    nn.Linear(memory_width, 2 * kv_width, bias=bias)
            elif kv_source is None:
                self.qkv = UnbiasedKeys(width, q_width, kv_width, kv_width) if bias and not key_bias else \
                    nn.Linear(width, q_width + 2 * kv_width, bias=bias)
            self.out = nn.Linear(heads * head_dim, width, bias=geometry.out_bias)
        qk_norm = qk_norm or QKNorm()
        self.q_norm, self.k_norm, self.position = qk_norm.q, qk_norm.k, position  # (the model's parameters' names)
        for name, step in (steps or {}).items():  # its kind's steps, after the position scheme's, in this order
            self.add_module(name, step)
        self.step_names = tuple(steps or ())
        if self.dropout_block is not None:
            self.dropout_block = min(type(self).dropout_block, max(16, 4 * head_dim))
        self.exports = exports  # hands its fresh values on to later layers, under this key of ``ctx.carried``

    def forward(self, x: Tensor, ctx: Context | None = None, cache: KVCache | None = None) -> Tensor:
        """``x`` (batch, length, width); ``ctx`` defaults to positions 0..length-1 and no padding or memory."""
        batch, length, _ = x.shape
        if self.position_from_stack and self.position is None:
            raise ValueError("this attention adds a position bias its stack owns: run it through its model, or "
                             "hand it the stack's module with share(module)")
        ctx = ctx if ctx is not None else Context(torch.arange(length, device=x.device)[None])
        q, k, v, queries, keys, key_padding = self.project_in_context(x, ctx, cache)
        for step in self.steps():  # (after the cache, which keeps the keys' own values)
            v = step.mixed_values(v)
        y = self.attend(q, k, v, ctx, queries, keys, key_padding)  # (batch, heads, length, value dimension)
        for step in self.steps():
            y = step.head_output(y)
        if cache is not None and not self.cross:
            cache.trim()
        return self.project_out(y.transpose(1, 2).reshape(batch, length, -1), x)  # heads · value dimension

    def project_out(self, y: Tensor, x: Tensor) -> Tensor:
        """The output projection of the heads' joined outputs ``y`` (batch, length, heads · value dimension), after
        the steps that transform them from the attention's input ``x`` (an output gate)."""
        for step in self.steps():
            y = step.joined_output(y, x)
        return self.out(y)

    def steps(self) -> list[nn.Module]:
        """Its pipeline's steps (``tfspec.nn.steps.AttentionStep``): the position scheme's, then its kind's."""
        own = [getattr(self, name) for name in self.step_names]
        return own if self.position is None else [self.position, *own]

    def project_in_context(self, x: Tensor, ctx: Context, cache: KVCache | None):
        """Queries, keys, values (per head, normed and position-encoded), the queries' and keys' ``Side``s
        (positions and the steps' extras) and the keys' padding."""
        if self.cross:
            padding = ctx.memory_padding if self.masks.reads_padding else None
            if cache is not None and cache.k is not None:
                return self.project_memory(x, None)[0], cache.k, cache.v, Side(ctx.positions), Side(None), padding
            q, k, v = self.project_memory(x, ctx.memory)
            if cache is not None:
                cache.set(k, v)
            return q, k, v, Side(ctx.positions), Side(None), padding
        if self.kv_source is not None:
            k, v, keys, padding = ctx.carried[self.kv_source]
            return self.queries_alone(x, ctx), k, v, Side(ctx.positions), keys, padding
        q, k, v = self.project(x)
        if self.exports is not None:  # the first layer's values, which later layers read (value residual)
            ctx.carried[self.exports] = v
        q, k, extras = self.encode(q, k, x, ctx, cache)
        for step in self.steps():
            v = step.fresh_values(v, ctx)
        positions, padding = ctx.positions, ctx.padding if self.masks.reads_padding else None
        key_extras = extras
        if cache is not None:
            k, v, positions, padding, key_extras = cache.append(k, v, positions, padding, extras)
        if self.hands_on_kv is not None:  # every key its queries see, for later layers' (``kv_from``)
            ctx.carried[f"{self.hands_on_kv}@{ctx.layer}"] = (k, v, Side(positions, key_extras), padding)
        return q, k, v, Side(ctx.positions, extras), Side(positions, key_extras), padding

    def queries_alone(self, x: Tensor, ctx: Context) -> Tensor:
        """The queries of an attention reading another layer's keys and values: projected, normed and rotated as
        that layer's were, then its own steps' (temperature tuning)."""
        q = self.q(x)
        for step in self.steps():
            q = step.projected_queries(q)
        q = self.norm_heads(self.split(q, self.heads), self.q_norm)
        for step in self.steps():
            if step.key:
                tables = ctx.once(f"{step.key}:{q.dtype}", lambda: step.tables_of(ctx, q.dtype))
                q = step.rotate_queries(q, tables)
        for step in self.steps():
            q = step.fresh_queries(q, ctx)
        return q

    def encode(self, q: Tensor, k: Tensor, x: Tensor, ctx: Context, cache: KVCache | None):
        """The steps' transforms of the new queries and keys (rotary positions, from tables built once per call),
        and the per-position extras they make of the input ``x`` (continued from the cache's carry)."""
        extras = {}
        for step in self.steps():
            if step.key:
                tables = ctx.once(f"{step.key}:{q.dtype}", lambda: step.tables_of(ctx, q.dtype))
                q, k = step.rotate(q, k, tables)
            extras.update(step.extras(x, ctx, cache.carry if cache is not None else None))
        for step in self.steps():
            q, k = step.fresh_queries(q, ctx), step.fresh_keys(k, ctx)
        return q, k, extras

    def attend(self, q: Tensor, k: Tensor, v: Tensor, ctx: Context, queries: Side, keys: Side,
               padding: Tensor | None) -> Tensor:
        """(batch, heads, queries, value dimension) attention output; ``padding``: the keys', when a mask reads it.

        The additive mask, with the steps' score terms (ALiBi's, the one the stack owns: T5's, FoX's) folded in,
        is built once per call for every layer with the same masks and steps."""
        query_len, key_len = q.shape[2], k.shape[2]
        regridded = any(name in ctx.inputs for name in self.masks.regrid)  # (pictures of another size)
        if self.band is not None and ctx.whole and query_len == key_len and not regridded:  # a whole sequence
            chunk = band_chunk(query_len, self.band)
            if chunk is not None:
                return self.mix_in_bands(q, k, v, ctx.inputs, padding, chunk, ctx.positions)
        if self.drops_in_blocks(q):
            return self.attend_in_blocks(q, k, v, ctx, queries, keys, padding)
        if self.causal_alone(padding, query_len, key_len):
            return self.mix_at(q, k, v, None, queries, keys)  # (SDPA's is_causal: no mask tensor)
        steps = self.steps()
        # a stack's scheme (T5's) has one key for every layer: built once per call
        bias_key = "+".join(step.key for step in steps)
        mask = self.masks.additive(ctx, query_len, key_len, self.mask_dtype(q), q.device, padding,
                                   lambda: self.score_terms(queries, keys), bias_key, keys.positions)
        return self.mix_at(q, k, v, mask, queries, keys)

    def causal_alone(self, padding: Tensor | None, query_len: int, key_len: int) -> bool:
        """Is a lone causal mask all there is to hide, over as many queries as keys with nothing padded? Then no
        mask tensor is built: SDPA's ``is_causal``, or ``mix`` hiding the later keys of its last square."""
        return self.fused_causal and padding is None and query_len == key_len

    def mask_dtype(self, q: Tensor) -> torch.dtype:
        """The additive mask's dtype: the queries', at least float32 where a step's score terms need it."""
        precise = any(step.float32_scores for step in self.steps())
        return torch.promote_types(q.dtype, torch.float32) if precise else q.dtype

    def score_terms(self, queries: Side, keys: Side) -> Tensor | None:
        """The sum of the steps' score terms ``(batch or 1, heads, queries, keys)``, in float32; None: none."""
        total = None
        for step in self.steps():
            term = step.score_terms(queries, keys)
            if term is not None:
                total = term if total is None else total + term
        return total

    def split(self, t: Tensor, heads: int) -> Tensor:
        """(batch, length, heads * head_dim) -> (batch, heads, length, head_dim)."""
        return t.view(t.shape[0], t.shape[1], heads, self.head_dim).transpose(1, 2)

    def projected(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Self-attention's queries, keys and values, all heads' side by side: the rows of ``qkv``."""
        q_width, kv_width = self.heads * self.head_dim, self.kv_heads * self.head_dim
        return self.qkv(x).split((q_width, kv_width, kv_width), dim=-1)

    def project(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Self-attention's queries, keys and values per head (queries and keys normed, not yet rotated)."""
        q, k, v = self.projected(x)
        for step in self.steps():
            q, k = step.projected_queries(q), step.projected_keys(k)
        q, k, v = self.split(q, self.heads), self.split(k, self.kv_heads), self.split(v, self.kv_heads)
        return self.norm_heads(q, self.q_norm), self.norm_heads(k, self.k_norm), v

    def project_memory(self, x: Tensor, memory: Tensor | None) -> tuple[Tensor, Tensor | None, Tensor | None]:
        """Cross-attention's queries from ``x``, and keys and values from ``memory`` (None: not projected)."""
        q = self.q(x)
        for step in self.steps():
            q = step.projected_queries(q)
        q = self.norm_heads(self.split(q, self.heads), self.q_norm)
        if memory is None:
            return q, None, None
        k, v = self.kv(memory).chunk(2, dim=-1)
        for step in self.steps():
            k = step.projected_keys(k)
        return q, self.norm_heads(self.split(k, self.kv_heads), self.k_norm), self.split(v, self.kv_heads)

    @staticmethod
    def norm_heads(t: Tensor, norm: nn.Module | None) -> Tensor:
        return t if norm is None else norm(t)

    def drops_in_blocks(self, q: Tensor) -> bool:
        """Does attention over these queries run ``dropout_block`` at a time (``attend_in_blocks``)? When it
        drops weights on the CPU: SDPA's CPU kernels with dropout keep every probability for backward."""
        return (self.training and self.dropout > 0 and self.dropout_block is not None
                and q.device.type == "cpu" and q.shape[2] > self.dropout_block)

    def attend_in_blocks(self, q: Tensor, k: Tensor, v: Tensor, ctx: Context, queries: Side, keys: Side,
                         padding: Tensor | None) -> Tensor:
        """``attend``, ``dropout_block`` queries at a time, each block recomputed in backward
        (``torch.utils.checkpoint``, which replays its random draws), so what attention keeps grows with
        n·block, not n². A block scores only the keys from the first to the last its queries may see (a causal
        block: none after its last query), with its masks and score bias built for its rows alone."""
        query_len, key_len = q.shape[2], k.shape[2]
        outputs = []
        # split, not sliced block by block: backward joins the blocks' query gradients in one pass, where a slice's
        # would be a zero tensor of all the queries for each block, added up
        blocks = list(zip(range(0, query_len, self.dropout_block), q.split(self.dropout_block, dim=2)))
        # the last block first: a causal block's tensors grow with its keys, and growing sizes each a little larger
        # than the last freed fragment the allocator's heap (glibc held 7.6x the memory of attention without dropout
        # over 8 steps at 8k tokens); shrinking sizes reuse the larger blocks freed before them
        for start, block in reversed(blocks):
            rows = slice(start, start + block.shape[2])
            seen = slice(0, rows.stop) if self.causal_alone(padding, query_len, key_len) else \
                self.masks.seen_keys(ctx, query_len, key_len, rows, q.device, keys.positions)
            outputs.append(recomputed(self.attend_rows, block, k[:, :, seen], v[:, :, seen], ctx,
                                      queries, keys, padding, (query_len, key_len), rows, seen))
        return torch.cat(outputs[::-1], dim=2)

    def attend_rows(self, q: Tensor, k: Tensor, v: Tensor, ctx: Context, queries: Side, keys: Side,
                    padding: Tensor | None, lengths: tuple[int, int], rows: slice, seen: slice) -> Tensor:
        """One block of ``attend_in_blocks``: queries ``rows`` of the call's ``lengths`` (queries, keys)
        against its keys ``seen``; ``q``, ``k`` and ``v`` are those already."""
        key_positions = keys.positions
        queries, keys = queries.part(rows), keys.part(seen)
        if self.causal_alone(padding, *lengths):
            mask = None  # ``mix`` hides the later keys of the block's last square, the only ones its queries see
        else:
            allowed = self.masks.allowed(ctx, *lengths, q.device, padding, rows, seen, key_positions)
            mask = additive_mask(allowed, self.mask_dtype(q), self.score_terms(queries, keys))
        self.part = rows, seen
        try:
            return self.mix_at(q, k, v, mask, queries, keys)
        finally:
            del self.part

    def drop(self, weights: Tensor) -> Tensor:
        """Attention dropout of ``weights`` (batch, heads, queries, keys) while training. On the CPU the keep
        mask comes from ``dropout_keep_mask``. A test may set ``dropout_keep(shape, rows, keys)`` to give the bool
        keep mask in place of a drawn one; ``rows`` and ``keys``: the call's queries and keys these weights are
        (all, or a block's in ``attend_in_blocks``)."""
        kept, scale = self.dropped(weights)
        return kept if scale == 1 else kept.mul_(scale)

    def dropped(self, weights: Tensor) -> tuple[Tensor, float]:
        """``drop``'s weights before the keep scale, and the scale, which ``weigh_values`` applies to the product
        (queries × head_dim), a pass over far fewer elements than the weights."""
        if not self.training or not self.dropout:
            return weights, 1
        if self.dropout_keep is not None:
            keep, scale = self.dropout_keep(weights.shape, *self.part).to(weights.dtype), 1 / (1 - self.dropout)
        elif weights.device.type == "cpu":
            keep, scale = dropout_keep_mask(weights.shape, self.dropout, weights.device, weights.dtype)
        else:  # a fused kernel of its own
            return F.dropout(weights, self.dropout, True), 1
        return weights * keep, scale  # (backward keeps the mask: a block's, recomputed, in blocks)

    def weigh_values(self, weights: Tensor, v: Tensor) -> Tensor:
        """``drop(weights) @ v``: (batch, heads, queries, head_dim)."""
        kept, scale = self.dropped(weights)
        mixed = kept @ v
        return mixed if scale == 1 else mixed.mul_(scale)  # (a product keeps its inputs, not itself)

    def mix(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, is_causal: bool) -> Tensor:
        """Score queries against keys and mix the values: (batch, heads, queries, head_dim). With dropout on the
        CPU, where SDPA's kernel with dropout is its math kernel, that math written out (``drop``'s masks); where
        a step weighs the scores itself, written out with its weights (``mix_weighed``)."""
        weigher = next((step for step in self.steps() if step.weighs), None)
        if weigher is not None:
            return self.mix_weighed(q, k, v, mask, weigher)
        # SDPA's CUDA kernels take a mask of the queries' dtype only: float32 score terms are added written out there
        precise = mask is not None and mask.dtype != q.dtype and q.device.type != "cpu"
        if not (self.training and self.dropout and q.device.type == "cpu") and not precise:
            if q.device.type == "cpu" and q.requires_grad and q.dtype in (torch.bfloat16, torch.float16):
                # the CPU flash kernel's half-precision backward over views into the joint projection takes 1.6x
                # as long (float32: 1.07x, not worth the copies' few MB at the peak)
                q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
            return sdpa(q, k, v, attn_mask=mask, is_causal=is_causal, scale=self.scale,
                        dropout_p=self.dropout if self.training else 0.0, enable_gqa=self.kv_heads != self.heads)
        if self.kv_heads != self.heads:
            k, v = (t.repeat_interleave(self.heads // self.kv_heads, dim=1) for t in (k, v))
        scale = self.scale if self.scale is not None else q.shape[-1] ** -0.5
        scores = (q * scale) @ k.transpose(-1, -2)  # (in place below: a product keeps its inputs, not itself)
        if is_causal:  # aligned at the last key: a block of the last queries sees all keys before its own
            rows, keys = scores.shape[-2:]
            later = ~torch.ones(rows, rows, dtype=torch.bool, device=q.device).tril()
            (scores if rows == keys else scores[..., keys - rows:]).masked_fill_(later, float("-inf"))
        if mask is not None and mask.dtype != scores.dtype:  # float32 score terms: the softmax in float32 too
            return self.weigh_values(torch.softmax(scores.float() + mask, dim=-1).to(v.dtype), v)
        if mask is not None:
            scores.add_(mask)
        return self.weigh_values(torch.softmax(scores, dim=-1), v)

    def mix_weighed(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, weigher: nn.Module) -> Tensor:
        """``mix`` where a step turns the scores into weights (soft-capping, sigmoid attention): no SDPA kernel
        computes it, so the math is written out, q and k each scaled by the root of the scale as SDPA's math
        kernel scales them."""
        if self.kv_heads != self.heads:  # grouped-query: each key/value head serves heads / kv_heads queries
            k, v = (t.repeat_interleave(self.heads // self.kv_heads, dim=1) for t in (k, v))
        root = weigher.score_scale(self.scale if self.scale is not None else q.shape[-1] ** -0.5) ** 0.5
        weights = weigher.weigh((q * root) @ (k * root).transpose(-1, -2), mask)
        return self.weigh_values(weights, v)

    def mix_at(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, queries: Side, keys: Side) -> Tensor:
        """``mix`` as the steps attend with it (Shaw's positions enter the values themselves)."""
        def mix(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> Tensor:
            return self.mix(q, k, v, mask, self.fused_causal and mask is None)

        for step in reversed(self.steps()):  # each step's attend wraps the mix of those after it
            mix = self.attending(step, mix, queries, keys)
        return mix(q, k, v, mask)

    def attending(self, step: nn.Module, mix, queries: Side, keys: Side):
        """``mix`` as ``step`` attends with it: ``(q, k, v, mask) -> output``."""
        def attend(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> Tensor:
            return step.attend(mix, q, k, v, mask, queries.positions, keys.positions, self.scale, self.drop)
        return attend

    def share(self, position: nn.Module) -> None:
        """Take the position scheme its stack owns (T5's bias: one table every layer reads) without registering
        it, so its parameters stay the stack's."""
        self.__dict__["position"] = position

    def mix_banded(self, q: Tensor, k: Tensor, v: Tensor, mask: Tensor, chunk: int, first: int = 0) -> Tensor:
        """``mix`` block by block: each block of ``chunk`` queries against the ``chunk + behind + ahead`` keys
        around it, with the banded ``mask`` (batch or 1, blocks, chunk, span) of blocks ``first`` on (so rows
        ``first · chunk`` on). Blocks fold into the batch, so one ``mix`` call scores ``rows · span`` pairs (not
        ``length²``) and keeps memory to match."""
        behind, ahead = self.band
        batch, heads, length, dim = q.shape
        blocks, span = mask.shape[1], chunk + behind + ahead
        start, end = first * chunk, (first + blocks) * chunk  # its queries' rows (the last block's may run past)
        rows = min(end, length) - start
        low, high = start - behind, end + ahead  # the keys its blocks see (past either end: padding)

        def windows(t: Tensor) -> Tensor:  # (batch * blocks, kv_heads, span, dim): the keys each block sees
            t = F.pad(t[:, :, max(low, 0):min(high, length)], (0, 0, max(-low, 0), max(high - length, 0)))
            t = t.unfold(2, span, chunk)  # (..., blocks, dim, span)
            # a copy always (reshape alone returns overlapping views for one sequence)
            return t.permute(0, 2, 1, 4, 3).reshape(batch * blocks, t.shape[1], span, t.shape[3]).contiguous()

        q = F.pad(q[:, :, start:start + rows], (0, 0, 0, end - start - rows)).view(batch, heads, blocks, chunk, dim)
        q = q.transpose(1, 2).reshape(batch * blocks, heads, chunk, dim)
        mask = mask.expand(batch, blocks, chunk, span).reshape(batch * blocks, 1, chunk, span)
        # (batch * blocks, heads, chunk, dim): mixed as the steps attend (no step reading positions runs in bands)
        y = self.mix_at(q, windows(k), windows(v), mask, Side(None), Side(None))
        y = y.view(batch, blocks, heads, chunk, y.shape[-1]).transpose(1, 2)
        return y.reshape(batch, heads, blocks * chunk, y.shape[-1])[:, :, :rows]

    def mix_in_bands(self, q: Tensor, k: Tensor, v: Tensor, inputs: dict, padding: Tensor | None, chunk: int,
                     positions: Tensor | None = None) -> Tensor:
        """``mix_banded`` over a whole sequence, ``band_rows`` queries at a time, each group's mask built and
        its attention recomputed in backward (``recomputed``): its copies of keys and values, their gradients
        and its mask exist for one group at a time, and what backward keeps is q, k and v, as a fused kernel's.
        ``inputs``: the call's run-time inputs, and ``positions`` its position ids, which masks may read."""
        blocks = -(-q.shape[2] // chunk)
        group = max(1, self.band_rows // chunk)
        # (the positions are no argument of the recomputed call: ids it need not keep, which the call holds anyway)
        group_of = self.mix_band_group if positions is None or not self.masks.reads_positions else \
            functools.partial(self.mix_band_group, positions=positions)
        parts = [recomputed(group_of, q, k, v, inputs, padding, chunk, first, min(first + group, blocks))
                 for first in range(0, blocks, group)]
        return parts[0] if len(parts) == 1 else torch.cat(parts, dim=2)

    def mix_band_group(self, q: Tensor, k: Tensor, v: Tensor, inputs: dict, padding: Tensor | None, chunk: int,
                       first: int, last: int, positions: Tensor | None = None) -> Tensor:
        """Blocks ``first`` to ``last`` of ``mix_in_bands``, with their mask."""
        mask = self.masks.banded(inputs, q.shape[2], self.band, q.dtype, q.device, padding, slice(first, last),
                                 positions)
        return self.mix_banded(q, k, v, mask, chunk, first)

    def extra_repr(self) -> str:
        kv = f", kv_heads={self.kv_heads}" if self.kv_heads != self.heads else ""
        return f"heads={self.heads}{kv}, head_dim={self.head_dim}, cross={self.cross}, dropout={self.dropout}"


def core_arguments(config, steps: dict | None = None) -> dict:
    """``MultiHeadAttention``'s arguments from an ``AttentionConfig`` (its modules as ``Constructor``s); ``steps``:
    its kind's own steps by name, which run before those the spec adds."""
    shape = config.shape
    qk_norm = position = None
    position_from_stack = False
    if config.qk_norm is not None:
        norm, options = config.qk_norm
        q_norm = k_norm = norm.module(shape.head_dim, options)
        if config.kv_source is not None:  # (the keys it reads were normed where they were made)
            k_norm = None
        qk_norm = Constructor(QKNorm, (q_norm, k_norm))
    if config.position is not None:
        scheme, options = config.position
        position = scheme.module(config.positioned, options)
        position_from_stack = bool(scheme.stack_params(config.positioned, options))
    defaults = {"memory_width": None, "bias": True, "out_bias": True, "key_bias": True}  # (written where not these)
    sizes = {"memory_width": shape.memory_width if shape.cross else None, "bias": shape.bias,
             "out_bias": shape.out_bias, "key_bias": shape.key_bias}
    geometry = Constructor(Geometry, kwargs={
        "width": shape.width, "heads": shape.heads, "kv_heads": shape.kv_heads, "head_dim": shape.head_dim,
        **{k: v for k, v in sizes.items() if v != defaults[k]}})
    return dict(geometry=geometry, dropout=config.dropout, scale=config.scale, qk_norm=qk_norm, position=position,
                masks=mask_set(config.masks, shape.cross, fused_causal=config.fused_causal, band=config.band),
                position_from_stack=position_from_stack, steps={**(steps or {}), **{
                    variant.name: variant.module(shape, options, source) for variant, options, source in config.steps}}
                or None, exports=config.exports, hands_on_kv=config.hands_on_kv, kv_source=config.kv_source)


def mask_set(masks, cross: bool, fused_causal: bool = False, band: tuple[int, int] | None = None) -> Constructor:
    """The ``MaskSet`` of ``(Mask, options)`` pairs: each mask of structure's rule, options and inputs, and what
    they let attention skip (``fused_causal``, ``band``, and the keys a KV cache keeps, ``kv_keep``)."""
    rules = [(variant.rule, options.model_dump(), tuple(i.name for i in variant.inputs))
             + ((True,) if variant.reads_positions else ()) for variant, options in masks if variant.structural]
    regrid = tuple(i.name for variant, _ in masks if variant.structural for i in variant.inputs if i.grid)
    skips = {k: v for k, v in {"fused_causal": fused_causal, "band": band, "keep": kv_keep(masks)}.items() if v}
    return Constructor(MaskSet, (rules, any(variant.reads_padding for variant, _ in masks), cross, regrid), skips)


def built(arguments: dict, layer: int | None = None) -> dict:
    """``arguments`` with every ``Constructor`` built into its module, for layer ``layer``."""
    return {k: built_value(v, layer) for k, v in arguments.items()}


class InContext:
    """What a compiled model adds to an attention core (mixed in before it): on CUDA, masks of structure run
    through FlexAttention (``tfspec.nn.flex``), which standalone files leave out."""

    def in_context(self, config) -> None:
        self.flex = config.flex  # its pattern can run through FlexAttention (``flex_attention_applies``)

    def attend(self, q: Tensor, k: Tensor, v: Tensor, ctx: Context, queries, keys, padding: Tensor | None) -> Tensor:
        query_len, key_len = q.shape[2], k.shape[2]
        if (self.flex and ctx.whole and query_len == key_len and not (self.fused_causal and padding is None)
                and flex_runs(q, k, self.training and self.dropout)):
            pattern = ctx.once(f"{self.masks.key}|flex|{query_len}x{q.shape[0]}", lambda: block_mask(
                self.masks.rules, ctx.inputs, padding, q.shape[0], query_len, q.device, positions=ctx.positions))
            return flex_mix(q, k, v, pattern, self.scale)
        return super().attend(q, k, v, ctx, queries, keys, padding)


class SameKeyValueCore(MultiHeadAttention):
    """``MultiHeadAttention`` whose values are its keys as projected (before a qk-norm and positions): ``qkv`` holds
    the query and key rows only (Gemma 4's global layers, ``attention_k_eq_v``). Torch only: ``tfspec emit`` copies
    it."""

    def __init__(self, geometry: Geometry, **attention) -> None:
        super().__init__(geometry, **attention)
        if self.kv_source is None:  # (one reading another layer's keys and values projects queries alone)
            self.qkv = nn.Linear(geometry.width, (self.heads + self.kv_heads) * self.head_dim,
                                 bias=geometry.bias)  # (no value rows)

    def projected(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        q, k = self.qkv(x).split((self.heads * self.head_dim, self.kv_heads * self.head_dim), dim=-1)
        return q, k, k


class DotProductAttention(InContext, MultiHeadAttention):
    """Scaled dot-product attention in a compiled model; ``config`` is a ``tfspec.registry.AttentionConfig``."""

    def __init__(self, config, layer: int | None = None) -> None:
        MultiHeadAttention.__init__(self, **built(core_arguments(config), layer))
        self.in_context(config)


class SameKeyValueAttention(InContext, SameKeyValueCore):
    """``SameKeyValueCore`` in a compiled model (``config``: a ``tfspec.registry.AttentionConfig``)."""

    def __init__(self, config, layer: int | None = None) -> None:
        SameKeyValueCore.__init__(self, **built(core_arguments(config), layer))
        self.in_context(config)
