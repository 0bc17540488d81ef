"""The steps of an attention's pipeline that variants contribute, each doing nothing unless a variant's step does it.

``MultiHeadAttention`` runs, in order: project the input to queries, keys and values → transform the
``projected_queries`` and ``projected_keys``, all heads' side by side (a full-width qk-norm) → ``rotate`` queries and
keys (rotary positions), from ``tables`` built once per call → transform the ``fresh_queries`` and ``fresh_keys``
(temperature tuning, a qk-norm of the rotated queries and keys) →
transform the ``fresh_values`` before a KV cache keeps them (value residual learning) → make per-position ``extras`` from the input (the
Forgetting Transformer's cumulative log forget gates), which a KV cache keeps beside each key → add ``score_terms``
computed from the queries' and the keys' positions and extras (ALiBi, T5, FoX) → mix (``weigh`` the scores in
place of the softmax: soft-capping, sigmoid attention; ``attend`` in place of the whole mix: Shaw's values) → transform the ``mixed_values`` (differential attention pairs heads) → each
head's output (``head_output``: a per-head norm) → the heads' outputs joined, from the input (``joined_output``: an
output gate). A step is an ``nn.Module``: its parameters are the attention's (under
the name it is given), and it may read its layer's index from its arguments. Torch only, so ``tfspec emit`` copies it.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor, nn


class Side:
    """What a score term reads of one side of a mix, the queries or the keys: their position ids ``(batch or 1, n)``
    (None for cross-attention's memory) and the ``extras`` steps made per position, by name (each ``(batch, heads,
    n)``), sliced alike for a block of them (``part``)."""

    def __init__(self, positions: Tensor | None, extras: dict[str, Tensor] | None = None) -> None:
        self.positions, self.extras = positions, extras or {}

    def part(self, index: slice) -> "Side":
        """The positions ``index`` of this side (a block of queries, the keys a block sees)."""
        positions = self.positions[:, index] if self.positions is not None else None
        return Side(positions, {name: t[..., index] for name, t in self.extras.items()})


class AttentionStep(nn.Module):
    """The base of a variant's attention step (a position scheme's, a kind's); ``key`` tells equal steps apart in a
    call's memo: two attentions whose steps share a key share their tables and position-only score bias."""

    key = ""
    weighs = False  # it turns scores into weights itself (``weigh``), in place of the softmax
    # its score terms are large and differ by little (FoX's sums of log gates over a thousand positions): the mask
    # that carries them stays float32 whatever the activations' dtype, so bfloat16 does not round them away
    float32_scores = False

    def tables(self, positions: Tensor, dtype: torch.dtype):
        """What ``rotate`` needs for position ids ``(batch or 1, length)``, built once per call and shared by
        every attention with an equal ``key``."""
        return None

    def tables_of(self, ctx, dtype: torch.dtype):
        """``tables`` for a call's ``Context``: of its position ids, and of the run-time inputs a step declares
        (the rows and columns of the pictures' vectors, M-RoPE's)."""
        return self.tables(ctx.positions, dtype)

    def numbered(self, positions: Tensor, inputs: dict) -> Tensor:
        """The call's default position ids ``(batch or 1, length)`` as the step numbers them, given its run-time
        ``inputs`` (M-RoPE's: a picture's vectors all at its first position, the picture advancing the count by its
        side); by default as they are."""
        return positions

    def rotate(self, q: Tensor, k: Tensor, tables) -> tuple[Tensor, Tensor]:
        """Queries ``(batch, heads, n, head_dim)`` and keys ``(batch, kv_heads, n, head_dim)``, transformed."""
        return q, k

    def rotate_queries(self, q: Tensor, tables) -> Tensor:
        """Queries alone, transformed as ``rotate`` transforms them (an attention attending with keys another layer
        rotated: ``kv_from``)."""
        return self.rotate(q, q, tables)[0]

    def projected_queries(self, q: Tensor) -> Tensor:
        """All heads' new queries side by side ``(batch, n, heads · head_dim)``, transformed before they are split
        into heads (OLMo 2's full-width qk-norm)."""
        return q

    def projected_keys(self, k: Tensor) -> Tensor:
        """All key heads' new keys side by side ``(batch, n, kv_heads · head_dim)``, transformed before they are
        split (an attention reading another layer's keys makes none)."""
        return k

    def fresh_queries(self, q: Tensor, ctx) -> Tensor:
        """The new queries ``(batch, heads, n, head_dim)``, rotated and normed, transformed before they score any
        key (Llama 4's temperature tuning scales them by their index in the sequence, ``ctx.offset`` on)."""
        return q

    def fresh_keys(self, k: Tensor, ctx) -> Tensor:
        """The new positions' keys ``(batch, kv_heads, n, head_dim)``, rotated, transformed before a KV cache keeps
        them (Hunyuan's qk-norm of the rotated keys)."""
        return k

    def fresh_values(self, v: Tensor, ctx) -> Tensor:
        """The new positions' values ``(batch, kv_heads, n, value_dim)``, transformed before a KV cache keeps them
        (value residual learning mixes in the first layer's, from ``ctx.carried``)."""
        return v

    def extras(self, x: Tensor, ctx, carry) -> dict[str, Tensor]:
        """Per-position tensors ``(batch, heads, n)`` of the input ``x`` that its score terms read, by name; a KV
        cache keeps them beside the keys. ``carry``: a ``RecurrentState`` the step continues from while decoding
        (None: a whole sequence)."""
        return {}

    def score_bias(self, query_positions: Tensor, key_positions: Tensor) -> Tensor | None:
        """``(batch or 1, heads, queries, keys)`` added to the scores from positions alone (built once per call for
        every attention with an equal ``key``); None: it adds none."""
        return None

    def score_terms(self, queries: Side, keys: Side) -> Tensor | None:
        """``(batch or 1, heads, queries, keys)`` added to the scores from the queries' and keys' ``Side``s:
        ``score_bias`` of their positions, unless the step reads their extras too."""
        return self.score_bias(queries.positions, keys.positions)

    def attend(self, mix: Callable, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, query_positions: Tensor,
               key_positions: Tensor, scale: float | None, drop: Callable[[Tensor], Tensor]) -> Tensor:
        """The attention output ``(batch, heads, queries, head_dim)``: ``mix(q, k, v, mask)``, the kind's own
        mix, unless the step enters the value sum itself (then ``drop`` is the attention's dropout of weights)."""
        return mix(q, k, v, mask)

    def score_scale(self, scale: float) -> float:
        """The factor on q·k of a mix whose scores this step ``weighs`` (the attention's scale, unless the step
        folds a factor of its own into it)."""
        return scale

    def weigh(self, scores: Tensor, mask: Tensor | None) -> Tensor:
        """The weights ``(batch, heads, queries, keys)`` of scaled scores, the additive ``mask`` (or None) not yet
        added (``weighs`` steps: soft-capped scores, sigmoid attention)."""
        raise NotImplementedError

    def mixed_values(self, v: Tensor) -> Tensor:
        """The values ``(batch, kv_heads, keys, value_dim)`` the queries mix, transformed (after the cache)."""
        return v

    def head_output(self, y: Tensor) -> Tensor:
        """Each head's output ``(batch, heads, queries, value_dim)``, transformed before the output projection."""
        return y

    def joined_output(self, y: Tensor, x: Tensor) -> Tensor:
        """The heads' outputs joined ``(batch, queries, heads · value_dim)``, transformed from the attention's input
        ``x`` (an output gate: Qwen3-Next's σ(x W_g) ⊙ y) before the output projection."""
        return y
