"""The contracts of attention: a kind (its projection, core and cache), and the steps a spec adds to it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .contract import (AttentionShape, ComplexityClass, Constructor, Param, Problem, Registry, RuntimeInput, StackOwned,
                       Variant)
from .mask import MASKS


class AttentionKind(StackOwned, Variant):
    """How queries score keys and mix values. Projections and the output are part of the kind's parameters."""

    scores_by_dot_product: ClassVar[bool] = False  # scores depend on q and k only through q·k
    fuses_causal: ClassVar[bool] = True  # a lone causal mask needs no mask tensor (SDPA's is_causal)
    # Its ``mix`` treats each query on its own, given the keys it may see, so a mask of bounded reach can be
    # computed block by block (``attention_band``); not so for a kind that mixes positions before scoring.
    runs_in_blocks: ClassVar[bool] = True
    # Its mix is softmax(q·k · scale + mask) v and nothing else, so a position scheme that enters the values
    # (``Position.mixes_values``) may compute it in its place.
    plain_softmax: ClassVar[bool] = False
    # Mixes positions before scoring (Linformer's projection along the sequence): no mask of structure
    # (causal, window, ...) and no in-attention position scheme can hold, so both are spec errors.
    mixes_positions: ClassVar[bool] = False
    # Decides itself which keys each query sees (BigBird's blocks) and takes only the keys' padding as its mask
    # (``(batch, 1, 1, keys)``): masks of structure and position schemes that bias the scores are spec errors.
    own_pattern: ClassVar[bool] = False
    inputs: ClassVar[tuple[RuntimeInput, ...]] = ()  # run-time inputs its module reads (as ``Mask.inputs``)
    # Projects each key/value head's values from its input before a KV cache keeps them, so a step may transform
    # them there (value residual learning); not so where values are expanded from a cached latent
    projects_values: ClassVar[bool] = True
    # Its steps add score terms computed from the content (FoX's log forget gates): a mask of structure they ride
    # on keeps its bool condition to route their gradient, once however many variants add such terms
    trains_score_terms: ClassVar[bool] = False
    # It can attend with the keys and values another layer made (``kv_from``), projecting its queries alone
    # (``reader_params``): Gemma 4's layers sharing keys and values
    reads_made_keys: ClassVar[bool] = False

    def conflicts(self, options, masks, position, position_choice) -> list[Problem]:
        """Its objections to the masks (``Choice``s) and the in-attention position scheme (a ``Position``, and the
        ``Choice`` it was written as) it is combined with: a kind that mixes positions first, or decides its own
        pattern, can honour neither a mask of structure nor a scheme acting on keys by position."""
        problems = []
        structural = [m for m in masks if MASKS[m.name].structural]
        if self.mixes_positions:
            if structural:
                problems.append(Problem(
                    f"{self.name} attention cannot take mask={structural[0]}: it projects keys and values along the "
                    "sequence, so every projected key mixes all positions and a query would see keys its mask "
                    "forbids (for causal masks, its future)", "use it where attention is bidirectional (an encoder, "
                    "mask=padding or none), or kind=dot with this mask", "mask", structural[0]))
            if position.acts == "attention" and not position.absent:
                problems.append(Problem(f"{position.name} positions act on keys by position, but {self.name} "
                                        "attention projects keys along the sequence first",
                                        "add positions to the embedding instead", about=position_choice))
        if self.own_pattern:
            if structural:
                problems.append(Problem(
                    f"{self.name} attention cannot take mask={structural[0]}: it decides itself which keys each "
                    "query sees (its blocks), and takes only the keys' padding",
                    "use mask=padding (or none), or kind=dot with this mask", "mask", structural[0]))
            if position.biases_scores:
                problems.append(Problem(f"{position.name} positions bias every query-key score, but {self.name} "
                                        "attention scores only the pairs of its blocks",
                                        "use rotary positions, or positions on the embedding", about=position_choice))
        return problems

    def params(self, shape: AttentionShape, options) -> dict[str, Param]:
        raise NotImplementedError

    def reader_params(self, shape: AttentionShape, options) -> dict[str, Param]:
        """Its parameters where it reads another layer's keys and values (``reads_made_keys``): its queries' rows
        (``q``), the output and whatever else it owns, no key or value rows. A kind that cannot read them declares
        its own parameters (and validation refuses the reading)."""
        return self.params(shape, options)

    def reader_projection_flops(self, shape: AttentionShape, options, queries: int) -> tuple[int, int]:
        """``projection_flops`` where it reads another layer's keys and values: q and the output only."""
        matmul = 4 * queries * shape.width * shape.q_width
        bias = (queries * shape.q_width if shape.bias else 0) + (queries * shape.width if shape.out_bias else 0)
        return matmul, bias

    def shared_saved(self, shape: AttentionShape, options, batch: int, queries: int, keys: int, fused: bool) -> int:
        """The activation-dtype elements ``core_saved`` counts that an attention reading another layer's keys and
        values (``kv_from``) shares with it: what its mix keeps of them as they were made, the same storages."""
        return 0

    def value_dim(self, shape: AttentionShape, options) -> int:
        """Each head's value (and output) dimension: ``head_dim`` unless the kind sizes values apart from keys."""
        return shape.head_dim

    def position_shape(self, shape: AttentionShape, options) -> AttentionShape:
        """The geometry an in-attention position scheme acts on: the attention's own, unless positions enter only
        part of each head (latent attention rotates a shared key of ``rope_dim`` dimensions)."""
        return shape

    def shrunk(self, options, head_dim: int, width: int):
        """The same kind at test size (``tfspec verify``): its own widths capped by the shrunk ``head_dim`` and
        ``width`` (a latent attention's ranks); the options themselves where it sizes nothing."""
        return options

    def qk_norm_problem(self, options) -> Problem | None:
        """Its objection to a qk-norm (``attention ... qk_norm=...``); None: per-head norms of queries and keys
        apply."""
        return None

    def projection_flops(self, shape: AttentionShape, options, queries: int, keys: int) -> tuple[int, int]:
        """(matmul, element-wise) FLOPs per sequence of projecting ``queries`` queries and ``keys`` keys and values
        and of the output projection (biases included): q, k and v from the stream (or the memory), then out."""
        q_width, kv_width = shape.q_width, shape.kv_width
        matmul = 2 * queries * shape.width * q_width + 2 * keys * shape.memory_width * 2 * kv_width \
            + 2 * queries * q_width * shape.width
        bias = (queries * q_width + keys * 2 * kv_width if shape.bias else 0) \
            + (queries * shape.width if shape.out_bias else 0)
        return matmul, bias

    def projection_saved(self, shape: AttentionShape, options, batch: int, queries: int, keys: int
                         ) -> tuple[int, int]:
        """(activation-dtype elements, 4-byte words) its projections keep for backward beyond the attention's input
        and what ``core_saved`` counts (a latent attention's norms and up projections); 0 for one linear map each."""
        return 0, 0

    def value_rows(self, shape: AttentionShape, options) -> int:
        """The rows of its projection that are values, per key (a ``same_kv`` attention's values are its keys':
        none of their own)."""
        return shape.kv_width

    def cache_elements(self, shape: AttentionShape, options) -> int:
        """Elements a KV cache keeps per token of self-attention: each kv head's key and value (and the extras
        its steps keep per key)."""
        return shape.kv_heads * (shape.head_dim + self.value_dim(shape, options))

    def max_len(self, options) -> int | None:
        """The longest sequence it accepts (Linformer's projection size); None: unbounded."""
        return None

    def check(self, options, shape: AttentionShape) -> list[Problem]:
        return []

    def sees(self, options, shape: AttentionShape, length: int, head: int = 0):
        """Bool array ``(length, length)``: the keys each query of a sequence of ``length`` positions may see
        in query head ``head`` by the kind's own pattern, before any mask, exactly as its module computes
        (``own_pattern`` kinds); None: every key the masks allow. ``tfspec mask`` draws it."""
        return None

    def pattern_note(self, options) -> str:
        """What a picture of the keys each query may see leaves out (top-k's choice among them at run time)."""
        return ""

    def kept_keys(self, options, heads: int) -> int | None:
        """The most keys a query's output (all ``heads`` heads) reads of those its masks allow, chosen at run time
        by their scores (top-k's best, a sparse attention's indexer's); None: every one."""
        return None

    def pattern_length(self, options) -> int:
        """A sequence length at which its pattern shows in a picture (``tfspec mask``'s default); 0: any."""
        return 0

    @property
    def mixes_by_place(self) -> bool:
        """Do its outputs depend on where keys stand in the sequence, whatever the positions say (a projection
        along the sequence, or blocks of its own)? Then permuting the tokens changes them."""
        return self.mixes_positions or self.own_pattern

    def build(self, config: "AttentionConfig", options, layer: int | None = None):
        """The runtime ``nn.Module``: ``forward(x, ctx, cache=None)`` (see ``tfspec.nn.attention``): its ``core``
        for layer ``layer`` of its stack, unless the kind adds what runs on CUDA alone (FlexAttention)."""
        return self.core(config, options).build(layer)

    def core(self, config: "AttentionConfig", options) -> Constructor:
        """The torch-only core the runtime module extends, for standalone files (``tfspec emit``):
        ``forward(x, ctx=None, cache=None)``, the compiled model's own forward (``build`` adds only what runs on
        CUDA alone)."""
        raise NotImplementedError

    def call_saved(self, options, position, positioned: AttentionShape, length: int) -> int:
        """Activation-dtype elements autograd keeps once per forward call for every layer of a stack of ``length``
        positions that uses it, beside its position scheme ``position`` (a ``Position``) acting on ``positioned``:
        tables its layers share (DeepSeek Sparse Attention's indexer's cos and sin)."""
        return 0

    def core_flops(self, shape: AttentionShape, options, queries: int, keys: int, pairs: int) -> tuple[int, int]:
        """(matmul, element-wise) FLOPs of scoring ``pairs`` query-key pairs and mixing values, per sequence:
        ``queries`` rows, each scored against (up to) ``keys`` keys.

        Multiply-adds count 2; the projections are counted by the analysis.
        """
        raise NotImplementedError

    def keeps_projection(self, shape: AttentionShape, options, batch: int) -> bool:
        """Does the core keep the projection its keys and values come from (``qkv``, or cross-attention's
        ``kv``) alive for backward, by saving a view of it? (Then a qk-norm, which keeps its input, adds none.)
        Attention recomputed in backward counts what it keeps with ``recomputed_saved`` instead."""
        return False

    def recomputes(self, options, length: int) -> bool:
        """Does its mix over a sequence of ``length`` run in blocks of its own that backward recomputes
        (``tfspec.nn.attention.recomputed``), as attention in bands (``attention_band``) always does?"""
        return False

    def recomputed_saved(self, shape: AttentionShape, options, batch: int, length: int, remade: bool) -> int:
        """Activation-dtype elements attention recomputed in backward (in bands, or ``recomputes``) keeps over a
        sequence of ``length``: its inputs, q, k and v, and its output (the output projection's input). v is a
        view of the projection, which it keeps whole: where q and k are ``remade`` (rotated, or normed), the
        projection's q and k rows too."""
        value_dim = self.value_dim(shape, options)
        inputs = shape.heads * (shape.head_dim + value_dim) + shape.kv_heads * (shape.head_dim + value_dim)
        return batch * length * (inputs + (shape.q_width + shape.kv_width if remade else 0))

    def shared_recomputed(self, shape: AttentionShape, options, batch: int, length: int, remade: bool) -> int:
        """What ``recomputed_saved`` counts that an attention reading another layer's keys and values shares with
        it: those keys and values, and the projection its values' view keeps whole."""
        return self.recomputed_saved(shape, options, batch, length, remade) \
            - batch * length * shape.heads * (shape.head_dim + self.value_dim(shape, options))

    def core_saved(self, shape: AttentionShape, options, batch: int, queries: int, keys: int, dropout: float,
                   fused: bool) -> tuple[int, int]:
        """(activation-dtype elements, 4-byte words) autograd keeps between the projections, for the batch,
        including the output (``batch · queries · heads · head_dim``, the output projection's input). The
        words are what stays float32 whatever the dtype (log-sum-exps); an int64 index counts two. Attention
        recomputed in backward counts what it keeps with ``recomputed_saved`` instead."""
        raise NotImplementedError

    def complexity(self, options, cross: bool, reach: tuple[int | None, int | None]) -> "ComplexityClass":
        """Its row of Table 1 ("Attention Is All You Need"), given the masks' combined reach.

        The default is for attention that scores every allowed query-key pair:
        quadratic unless a window bounds the keys per query.
        """
        if cross:
            return ComplexityClass("O(n·m·d)", "O(1)", "O(1)")
        behind, ahead = reach
        if behind is not None and ahead is not None:
            r = behind + ahead + 1
            return ComplexityClass("O(r·n·d)", "O(1)", "O(n/r)",
                                   f"r = {r} keys per query; {max(behind, ahead)} positions further per layer")
        return ComplexityClass("O(n²·d)", "O(1)", "O(1)", "each position sees only earlier ones" if ahead == 0 else "")


@dataclass(frozen=True)
class AttentionConfig:
    """Everything an attention's runtime module is built from, resolved from the IR (torch-free)."""

    shape: AttentionShape
    positioned: AttentionShape  # what its position scheme acts on (``AttentionKind.position_shape``)
    dropout: float  # on the attention probabilities
    masks: tuple  # (Mask, options) pairs
    position: tuple | None  # (Position, options) acting inside attention, or None
    qk_norm: tuple | None  # (Norm, options) applied per head to queries and keys, or None
    scale: float | None  # softmax scale; None: 1 / sqrt(head_dim)
    fused_causal: bool = False  # unpadded, it runs SDPA's fused causal kernel (``fused_causal_kernel``)
    band: tuple[int, int] | None = None  # keys behind and ahead when it runs in bands (``attention_band``)
    flex: bool = False  # on CUDA, its masks' pattern runs through FlexAttention (``flex_attention_applies``)
    # the spec's steps: (AttentionStepKind, options, the key of what it reads in ``Context.carried`` or None)
    steps: tuple = ()
    exports: str | None = None  # the key under which it hands its values on to later layers' readers
    # it hands its keys and values on to later layers' (``kv_from``) under this key, @ the layer running it
    hands_on_kv: str | None = None
    kv_source: str | None = None  # the key of the keys and values it attends with, an earlier layer's (``kv_from``)


class AttentionStepKind(Variant):
    """A step a spec adds to an attention's pipeline (``attention self ... steps=value_residual(0.5)``), beside what
    its kind, masks and position scheme do: its whole contract, from the attention's ``AttentionShape``: parameters
    with their roles, checks, cost, label, and the runtime step (a ``tfspec.nn.steps.AttentionStep``).

    ``reads``: a tensor another layer produced that the step reads, as a declared input: ``"values"``, the values
    the same sublayer of its stack's first layer projects (value residual learning). The stack's first layer then
    hands them on (``schema.Attention.exports``), which makes it a kind of layer of its own, and the graph has an
    edge from its attention into every reader's (port ``values``), which validation, the diagram and the cost
    follow."""

    reads: ClassVar[str | None] = None
    # It acts on the queries (or the scores, or the output) alone, so an attention reading another layer's keys
    # and values (``kv_from``) may take it; one acting on fresh keys or values would have nothing to act on there
    queries_only: ClassVar[bool] = False
    # It makes the fresh values anew (``fresh_values``): the mix keeps its tensor, not a view of the projection, so
    # the analysis does not count the projection as kept through the values
    makes_values: ClassVar[bool] = False
    # It multiplies the heads' joined outputs by a gate computed from the attention's input (``joined_output``)
    gates_output: ClassVar[bool] = False
    # It normalises the queries and keys (elsewhere than ``qk_norm=`` does): they are made anew, not views of the
    # projection, and an attention norms them once, whichever way
    norms_queries_and_keys: ClassVar[bool] = False

    def params(self, shape: AttentionShape, options) -> dict[str, Param]:
        """Its parameters (under ``NAME.`` in the attention's), with their roles."""
        return {}

    def check(self, options, shape: AttentionShape, kind: "AttentionKind") -> list[Problem]:
        """Objections to its attention's shape and kind."""
        return []

    def module(self, shape: AttentionShape, options, source: str | None) -> Constructor:
        """The runtime step; ``source``: the key of the tensor it reads in its call's ``Context.carried`` (what
        ``reads`` names, handed on by the first layer), None where it reads none."""
        raise NotImplementedError

    def flops(self, shape: AttentionShape, options, queries: int, keys: int) -> tuple[int, int]:
        """(matmul, element-wise) FLOPs it adds per sequence of ``queries`` queries and ``keys`` keys."""
        return 0, 0

    def saved(self, shape: AttentionShape, options, batch: int, queries: int, keys: int,
              run: "AttentionRun") -> tuple[int, int]:
        """(activation-dtype elements, 4-byte words) autograd keeps for it beyond what the attention keeps, as
        the attention ``run``s."""
        return 0, 0


@dataclass(frozen=True)
class AttentionRun:
    """How an attention runs, as far as what autograd keeps for a step depends on it."""

    recomputed: bool  # its mix is recomputed in backward (bands, a kind's blocks): it keeps its inputs alone
    keeps_projection: bool  # its mix keeps a view of the q/k/v projection, which then stays whole
    values_made: bool  # a step makes the values anew: no view of the projection keeps it through them
    rotates: bool  # its position scheme rotates the queries and keys
    value_rows: int  # the projection's rows of values (0: a kind whose values are its keys)


def qk_norm_saved(norm, options, sides, shape: AttentionShape, batch: int, queries: int, keys: int, run: AttentionRun,
                  rotated: bool = False) -> tuple[int, int]:
    """(elements, words) a norm of queries and keys keeps: its own for each of ``sides`` ((width, rows)), and its
    inputs where nothing else keeps them: the rotated queries and keys (``rotated``: it norms them once the
    positions have turned them), or the projection its inputs are views of."""
    kept = stats = norm_kept = 0
    for dim, rows in sides:
        norm_kept, norm_stats = norm.saved(dim, options)
        kept, stats = kept + (norm_kept - dim) * rows, stats + norm_stats * rows
    if not norm_kept:
        return kept, stats
    q, kv = batch * queries * shape.q_width, batch * keys * shape.kv_width
    kept += q if shape.cross else 0  # cross-attention's q projection
    if shape.reads_keys:  # its queries' own projection, or their rotation: never a view of what the maker kept
        return kept + q, stats
    if rotated and run.rotates:  # its inputs are the rotated queries and keys, kept whatever keeps the projection
        return kept + kv + q, stats
    if (run.recomputed or run.keeps_projection) and not run.values_made:  # (``recomputed_saved`` counts it)
        return kept, stats
    return kept + kv + batch * keys * run.value_rows + (0 if shape.cross else q), stats


ATTENTION_KINDS: Registry[AttentionKind] = Registry("attention kind", AttentionKind)
ATTENTION_STEPS: Registry[AttentionStepKind] = Registry("attention step", AttentionStepKind)
