"""The contract of a mask: which keys a query may see, as a rule the compiler runs and every stage reads."""

from __future__ import annotations

from typing import Callable, ClassVar

from .contract import AttentionShape, Problem, Registry, RuntimeInput, Variant


class Mask(Variant):
    """Which keys a query may see. A structural mask names its ``rule``: a function
    ``rule(queries, keys, **options, **inputs)`` of the queries' and keys' indices in the sequence (and of
    the run-time inputs it declares), written in the operations torch tensors and numpy arrays share
    (indexing, arithmetic, comparisons, ``abs``, ``clip``, ``reshape``), so ``tfspec mask`` draws it without
    torch; run-time inputs arrive on the device of the indices (the model checks that they do). ``queries``
    and ``keys`` are ``(..., q)`` and ``(..., k)`` with the same leading dimensions (none for a whole
    sequence, one per block of queries in banded attention); it returns bool ``(..., q, k)``, or
    ``(batch, ..., q, k)`` when it reads a per-sequence input. The compiled model calls it through
    ``allowed``; ``tfspec emit`` copies its source into standalone model files."""

    allowed_in_cross: ClassVar[bool] = True  # meaningful when queries and keys are different sequences
    fused_causal: ClassVar[bool] = False  # alone, equivalent to SDPA's is_causal=True
    reads_padding: ClassVar[bool] = False  # reads the keys' padding mask at run time
    inputs: ClassVar[tuple[RuntimeInput, ...]] = ()  # other run-time inputs ``rule`` reads (None when not given)
    # ``rule`` compares position ids (the queries' and the keys' ``position_ids``), not indices in the sequence:
    # a left-padded prompt's real tokens are counted from its first while decoding, as its positions count them.
    # Where attention runs in bands, a query still sees no key farther away in the sequence than ``reach``.
    reads_positions: ClassVar[bool] = False
    rule: ClassVar[Callable | None] = None  # set with staticmethod(function)

    def allowed(self, query_index, key_index, options, inputs: dict):
        """May query i see key j? ``query_index``/``key_index`` are indices in the sequence (the queries are
        the last ones during cached decoding); ``inputs`` holds the run-time inputs by name. None: no rule."""
        rule = self.bound_rule(options)
        return rule(query_index, key_index, inputs) if rule is not None else None

    def bound_rule(self, options) -> Callable | None:
        """``rule`` with its options bound, as ``f(query_index, key_index, inputs)``; bound once, at build time,
        so a traced forward (``torch.compile``) sees no pydantic."""
        if self.rule is None:
            return None
        rule, values, names = self.rule, options.model_dump(), [i.name for i in self.inputs]
        return lambda queries, keys, inputs: rule(queries, keys, **values, **{n: inputs.get(n) for n in names})

    @property
    def structural(self) -> bool:
        """Decides from positions (it has a ``rule``), unlike ``padding`` or ``none``."""
        return self.rule is not None

    def reach(self, options) -> tuple[int | None, int | None]:
        """How many keys behind and ahead of its own position a query may see (``None``: unbounded).

        The analysis derives mask-aware FLOPs and complexity classes from it, so
        it must agree with ``allowed`` (a test checks that it does).
        """
        return (None, None)

    def reach_at(self, options, position: int) -> tuple[int | None, int | None]:
        """``reach`` for the query at ``position``, where it varies along the sequence (``block(b)``): the
        analysis counts the pairs a mask allows from it, so it must agree with ``allowed`` exactly."""
        return self.reach(options)

    def keys_at(self, options, position: int, length: int) -> tuple[tuple[int, int], ...]:
        """The keys the query at ``position`` may see in a sequence of ``length``, as ranges ``[start, stop)``:
        one band by default (from ``reach_at``); several where the mask allows keys apart (an attention sink's
        first tokens and its recent window). The analysis counts the pairs a mask allows from these, so they
        must agree with ``allowed`` exactly (a test checks that they do)."""
        behind, ahead = self.reach_at(options, position)
        start = 0 if behind is None else max(0, position - behind)
        stop = length if ahead is None else min(length, position + ahead + 1)
        return ((start, stop),) if start < stop else ()

    @property
    def uniform_reach(self) -> bool:
        """Every query sees one band of the same reach (neither ``reach_at`` nor ``keys_at`` varies), so pairs
        have a closed form."""
        return type(self).reach_at is Mask.reach_at and type(self).keys_at is Mask.keys_at

    def pattern_length(self, options) -> int:
        """A sequence length at which its pattern shows in a picture (``tfspec mask``): twice its reach."""
        bounded = [r for r in self.reach(options) if r is not None]
        return 2 * max(bounded) if bounded else 0

    def chunk(self, options) -> int | None:
        """The size of the chunks of positions it confines each query to (``chunked(c)``), None where it does not:
        such a mask bounds the look-back without sliding over it (interop tells it from a sliding window)."""
        return None

    def window_after_prefix(self, options) -> int | None:
        """The sliding window it keeps a query to once past a prefix-LM's prefix, where its reach is unbounded only
        for the prefix's sake (``prefix_window(k)``: k); None elsewhere (interop reads the window of a
        prefix-LM's sliding layers: PaliGemma 2's)."""
        return None

    def causal_from(self, options) -> str | None:
        """Where a query stops seeing later keys: ``"start"`` (causal), a run-time input's name
        (``"prefix_lengths"``: causal after the prefix), or ``None`` (it may see ahead)."""
        return "start" if self.reach(options)[1] == 0 else None

    def regridded(self, options, grid: int):
        """The same mask for pictures whose grid of patches is ``grid`` a side (``tfspec verify`` tests at small
        sizes), where its rule reads a grid."""
        return options

    def grid_problem(self, options, grid: int | None, leading: int) -> Problem | None:
        """Its objection to the positions of a stack whose embedding lays pictures' patches in a grid ``grid`` a
        side after ``leading`` learned vectors (``grid`` None: tokens), where its rule reads a grid."""
        return None

    def check(self, options, shape: AttentionShape) -> list[Problem]:
        if shape.cross and not self.allowed_in_cross:
            return [Problem(f"'{self.name}' mask on cross-attention: queries and keys are positions of different "
                            "sequences", "cross-attention takes mask=padding (the source's padding) or no mask",
                            code="mask")]
        return []


def combined_reach(masks) -> tuple[int | None, int | None]:
    """Keys behind and ahead a query may see under all of ``masks``, ``(Mask, options)`` pairs (None: unbounded)."""
    behind = ahead = None
    for variant, options in masks:
        b, a = variant.reach(options)
        behind = b if behind is None else (behind if b is None else min(behind, b))
        ahead = a if ahead is None else (ahead if a is None else min(ahead, a))
    return behind, ahead


MASKS: Registry[Mask] = Registry("mask", Mask)
