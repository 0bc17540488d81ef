"""Turn a sublayer's masks, position bias and the run-time padding into what SDPA takes.

A purely causal self-attention over a whole sequence takes SDPA's fused
``is_causal=True`` path and never materialises a T×T mask. Anything else
becomes an additive float mask: 0 where attention is allowed, the dtype's
finite minimum where it is not (so half precision does not overflow to -inf),
plus a position scheme's score bias (ALiBi). A query row that padding leaves
with no key at all falls back to its structural mask alone: the output at such
a (padded) position is meaningless, but finite, and still never reads the future.

The result is built once per call for every attention with the same masks
(``Context.once``), not once per layer.

Masks of bounded reach (``window``, ``block``) over a long sequence are built in
the banded layout instead, ``(batch or 1, blocks, chunk, span)``: for each block
of ``chunk`` queries, the ``span`` keys around it that it may see
(``band_indices``), so the mask, like the attention that reads it
(``MultiHeadAttention.mix_banded``), grows with n·k rather than n².
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

from .kernels import band_chunk
from .context import Context


class BoundRule:
    """A mask's ``rule`` with its ``options``, called as ``f(queries, keys, inputs)`` with the call's run-time inputs
    (those named in ``inputs`` are passed on): an object, not a closure, so that a compiled model pickles
    (``torch.save``, ``copy.deepcopy``, a process pool)."""

    def __init__(self, rule: Callable, options: dict, inputs, positional: bool = False):
        self.rule, self.options, self.inputs = rule, dict(options), tuple(inputs)
        self.positional = positional  # it compares position ids, not indices in the sequence

    def __call__(self, queries: Tensor, keys: Tensor, given: dict) -> Tensor:
        return self.rule(queries, keys, **self.options, **{n: given.get(n) for n in self.inputs})


class MaskSet:
    """The masks of one attention sublayer: ``rules``, each ``(rule, options, inputs)`` -- a mask's
    ``rule(queries, keys, **options, **inputs)`` and the names of the run-time inputs it reads; a fourth item
    True where it compares the queries' and keys' position ids rather than their indices in the sequence --, whether a
    mask reads the keys' padding, and whether queries and keys are different sequences (cross-attention).
    What the set lets an attention skip: ``fused_causal``, it is a lone causal mask, which over an unpadded
    sequence runs SDPA's fused ``is_causal`` with no mask tensor; ``band``, the keys ``(behind, ahead)`` a query may
    see where the masks bound them, so attention over a long sequence runs block by block; ``keep``, the past keys a
    KV cache needs (a bounded look-back; None: all).
    Torch only, so ``tfspec emit`` copies it; ``tfspec.nn.attention.mask_set`` makes one from a spec's masks."""

    def __init__(self, rules: list | tuple = (), reads_padding: bool = False, cross: bool = False,
                 regrid: tuple[str, ...] = (), fused_causal: bool = False, band: tuple[int, int] | None = None,
                 keep: int | None = None):
        self.fused_causal, self.band, self.keep = fused_causal, band, keep
        self.specs = tuple(rules)
        # run-time inputs that give a grid other than the options' (``RuntimeInput.grid``): given, the masks reach
        # farther than their options say, so the call attends densely
        self.regrid = tuple(regrid)
        self.rules = [self.bound(*spec) for spec in self.specs]
        self.reads_padding = reads_padding
        self.cross = cross
        # what the memo is keyed by: equal mask sets (the same rule functions, options and padding) share one
        # tensor per call; a rule is told by its identity, as two rules may share a name
        self.key = "mask:" + ("cross:" if cross else "self:") + "+".join(
            f"{rule.__name__}@{id(rule):x}{sorted(options.items())}" for rule, options, *_ in self.specs
        ) + f":{reads_padding}"
        self.reads_positions = any(rule.positional for rule in self.rules)

    @staticmethod
    def bound(rule: Callable, options: dict, inputs, positional: bool = False) -> Callable:
        """``rule`` with its options bound, as ``f(queries, keys, inputs)``: bound once, at build time."""
        return BoundRule(rule, options, inputs, positional)

    def allowed(self, ctx: Context, query_len: int, key_len: int, device, padding: Tensor | None,
                rows: slice = slice(None), keys: slice = slice(None), key_positions: Tensor | None = None
                ) -> Tensor | None:
        """Bool ``(batch or 1, 1, queries, keys)``: structure and the keys' ``padding``; None: all allowed.
        ``rows`` and ``keys``: part of the call's queries and keys (attention in blocks), each row of which
        must keep every key its structure allows (``seen_keys``); ``key_positions``: as ``structure`` takes."""
        padding = padding[:, keys] if padding is not None else None
        return with_padding(self.structure(ctx, query_len, key_len, device, rows, keys, key_positions), padding)

    def structure(self, ctx: Context, query_len: int, key_len: int, device, rows: slice = slice(None),
                  keys: slice = slice(None), key_positions: Tensor | None = None) -> Tensor | None:
        """Bool ``(batch or 1, 1, queries, keys)`` from positions (and declared inputs); queries are the last keys.
        ``rows`` and ``keys``: of the call's ``query_len`` queries and ``key_len`` keys, those to answer for.
        ``key_positions``: the keys' position ids ``(batch or 1, key_len)``, which a rule of ``positional`` masks
        compares (a KV cache's; default: the queries', over a whole sequence)."""
        if not self.rules:
            return None
        if self.reads_positions:
            query_positions = ctx.positions[:, rows]
            key_positions = (ctx.positions if key_positions is None else key_positions)[:, keys]
        # sequence indices: the queries follow ctx.offset cached positions and the keys end with them
        # (or, in cross-attention, are the memory's)
        end = ctx.offset + query_len
        queries = (ctx.offset + torch.arange(query_len, device=device))[rows]
        if self.cross:
            seen = torch.arange(key_len, device=device)
        elif ctx.slots:  # slot s holds the last position i < end with i % key_len == s (below 0: none yet)
            slot = torch.arange(key_len, device=device)
            seen = slot + key_len * torch.div(end - 1 - slot, key_len, rounding_mode="floor")
        else:
            seen = torch.arange(end - key_len, end, device=device)
        return allowed_keys(*(rule(query_positions, key_positions, ctx.inputs) if rule.positional
                              else rule(queries, seen[keys], ctx.inputs) for rule in self.rules))

    def seen_keys(self, ctx: Context, query_len: int, key_len: int, rows: slice, device,
                  key_positions: Tensor | None = None) -> slice:
        """The keys from the first to the last that a query of ``rows`` may see by structure (all: no rule), so
        a block of queries need not score the others (a causal block: none after its last query)."""
        allowed = self.structure(ctx, query_len, key_len, device, rows, key_positions=key_positions)
        if allowed is None:
            return slice(0, key_len)
        seen = allowed.flatten(0, -2).any(dim=0).nonzero()
        return slice(int(seen[0]), int(seen[-1]) + 1) if len(seen) else slice(0, key_len)

    def additive(self, ctx: Context, query_len: int, key_len: int, dtype, device, padding: Tensor | None,
                 bias: Callable[[], Tensor | None] | None = None, bias_key: str = "",
                 key_positions: Tensor | None = None) -> Tensor | None:
        """The additive mask (0 or the dtype's minimum) plus ``bias()``; ``None`` when there is neither.

        ``padding``: the keys' padding when a mask reads it (else pass None). ``bias``
        builds a score bias ``(batch or 1, heads, queries, keys)`` or None, called only the
        first time this call needs the mask (``bias_key`` tells equal biases apart). ``key_positions``: the
        keys' position ids (``structure``); equal mask sets keep equally many keys, so they hold the same ones.
        """
        def build():
            return additive_mask(self.allowed(ctx, query_len, key_len, device, padding, key_positions=key_positions),
                                 dtype, bias() if bias is not None else None)

        return ctx.once(f"{self.key}|{bias_key}|{query_len}x{key_len}|{dtype}", build)  # (one offset a call)

    def banded(self, inputs: dict, length: int, band: tuple[int, int], dtype, device, padding: Tensor | None,
               blocks: slice = slice(None), positions: Tensor | None = None) -> Tensor:
        """The additive mask of a whole sequence in the banded layout ``(batch or 1, blocks, chunk, span)``,
        for its ``blocks`` (all by default); ``inputs``: the call's run-time inputs (``Context.inputs``);
        ``positions``: its position ids ``(batch or 1, length)``, which ``positional`` rules compare."""
        def at(index: Tensor) -> Tensor:  # the position ids at sequence indices (past either end: never seen)
            return positions[:, index.clamp(0, length - 1)]

        rules = [(lambda queries, keys, rule=rule: rule(at(queries), at(keys), inputs)) if rule.positional else
                 (lambda queries, keys, rule=rule: rule(queries, keys, inputs)) for rule in self.rules]
        return banded_mask(length, band, rules, padding, dtype, device, blocks)


# Torch-only helpers, shared with the standalone files ``tfspec emit`` writes.
def allowed_keys(*rules: Tensor) -> Tensor | None:
    """Bool ``(batch or 1, 1, queries, keys)``: where every rule, ``(queries, keys)`` or ``(batch, queries, keys)``,
    allows a query to see a key; None when there is no rule."""
    allowed = None
    for rule in rules:
        rule = rule[None, None] if rule.dim() == 2 else rule[:, None]
        allowed = rule if allowed is None else allowed & rule
    return allowed


def with_padding(allowed: Tensor | None, padding: Tensor | None) -> Tensor | None:
    """``allowed`` without the padded keys (``padding``: (batch, keys), True at padding). A query row left with
    no key at all keeps ``allowed`` alone: its output is meaningless (it is padding) but finite."""
    if padding is None:
        return allowed
    keys = ~padding[:, None, None, :]
    kept = keys if allowed is None else allowed & keys
    empty = ~kept.any(dim=-1, keepdim=True)
    return kept | (empty if allowed is None else empty & allowed)


def additive_mask(allowed: Tensor | None, dtype: torch.dtype, bias: Tensor | None = None) -> Tensor | None:
    """What SDPA adds to the scores: ``bias`` (or 0) where ``allowed``, the dtype's finite minimum elsewhere
    (so half precision does not overflow to -inf); None when there is neither a mask nor a bias."""
    if allowed is None:
        return bias.to(dtype) if bias is not None else None
    base = torch.zeros((), dtype=dtype, device=allowed.device) if bias is None else bias.to(dtype)
    return torch.where(allowed, base, torch.finfo(dtype).min)


def band_indices(length: int, chunk: int, behind: int, ahead: int, device=None) -> tuple[Tensor, Tensor]:
    """Sequence indices of each block's queries ``(blocks, chunk)`` and of the keys it may see
    ``(blocks, chunk + behind + ahead)``; the last block runs past ``length``, and keys run past both ends."""
    blocks = -(-length // chunk)
    queries = torch.arange(blocks * chunk, device=device).view(blocks, chunk)
    keys = queries[:, :1] - behind + torch.arange(chunk + behind + ahead, device=device)
    return queries, keys


def banded_mask(length: int, band: tuple[int, int], rules, padding: Tensor | None, dtype: torch.dtype,
                device=None, blocks: slice = slice(None)) -> Tensor:
    """The additive mask ``(batch or 1, blocks, chunk, span)`` of banded attention over ``length`` positions,
    for its ``blocks`` (all by default).

    ``rules``: functions ``(queries, keys) -> bool`` of sequence indices with a leading block dimension
    (the masks' rules with options and inputs bound); keys outside the sequence are never seen, and
    ``padding`` (batch, length) removes padded keys, except from a row it would leave with none (as in
    ``with_padding``)."""
    behind, ahead = band
    queries, keys = band_indices(length, band_chunk(length, band), behind, ahead, device)
    queries, keys = queries[blocks], keys[blocks]
    allowed = ((keys >= 0) & (keys < length))[:, None, :]  # (blocks, 1, span)
    for rule in rules:
        allowed = allowed & rule(queries, keys)
    if allowed.dim() == 3:
        allowed = allowed[None]
    if padding is not None:
        kept = allowed & ~padding[:, keys.clamp(0, length - 1)][:, :, None, :]
        allowed = kept | (~kept.any(dim=-1, keepdim=True) & allowed)
    return additive_mask(allowed, dtype)
