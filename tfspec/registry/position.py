"""The contract of a position scheme."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, Literal

from .contract import AttentionShape, Constructor, Param, Problem, Registry, RuntimeInput, StackOwned, Variant

if TYPE_CHECKING:
    from .attention import AttentionKind


class Position(StackOwned, Variant):
    """A position scheme. ``acts`` says where positions enter the model:

    - ``"embedding"``: an encoding added to the token embeddings (sinusoidal, learned);
      ``build(dim, options)`` maps position ids ``(..., length)`` to ``(..., length, dim)``;
    - ``"attention"``: applied inside each self-attention (rotary, ALiBi);
      ``build(shape, options)`` returns a module with ``tables``, ``rotate``, ``score_bias``
      and ``biases_scores`` (see ``tfspec.nn.attention.MultiHeadAttention``).
    """

    acts: ClassVar[Literal["embedding", "attention"]] = "embedding"
    enters: ClassVar[str] = "added"  # how diagrams label where it enters ("rotates q, k", "biases scores")
    # Outputs depend only on differences of positions: shifting every position id by a
    # constant changes nothing (offset invariance; rotary, ALiBi).
    relative: ClassVar[bool] = False
    # Works through dot products of queries and keys (rotary: rotating both by position
    # leaves q·k a function of their offset); kinds that score otherwise refuse it.
    needs_dot_product: ClassVar[bool] = False
    biases_scores: ClassVar[bool] = False  # adds a bias to the scores (ALiBi): no fused causal kernel then
    rotates: ClassVar[bool] = False  # turns queries and keys by angles of their positions (rotary): ``theta``, ...
    # its score bias has parameters of each layer's (KERPLE): a mask of structure it rides on keeps its bool
    # condition to route their gradient, once however many variants add such terms
    trains_score_terms: ClassVar[bool] = False
    # Enters the value sum too (Shaw): its runtime module's ``attend`` replaces the kind's ``mix``, so it
    # needs a kind whose mix is a plain softmax of dot products, and declares that mix's cost itself.
    mixes_values: ClassVar[bool] = False
    stack_attribute: ClassVar[str] = "positions"
    inputs: ClassVar[tuple[RuntimeInput, ...]] = ()  # run-time inputs its module reads (as ``Mask.inputs``)

    def params(self, where, options) -> dict[str, Param]:
        """``where``: the embedding's width (``acts == "embedding"``) or an ``AttentionShape``."""
        return {}

    def max_len(self, options) -> int | None:
        """The longest sequence it can encode (a learned table's size); None: unbounded."""
        return None

    def counts_real_tokens(self, options) -> int | None:
        """Where a padded batch's default position ids count real tokens only (each token: the real ones before
        it; RoBERTa, OPT), the lowest id a pad takes (its own offset below 0); None: positions are 0..n-1."""
        return None

    def embedding_problem(self, options, dim: int, grid: int | None, class_token: bool) -> Problem | None:
        """Its objection to numbering the positions of an embedding of width ``dim`` (``acts == "embedding"``):
        tokens (``grid`` None), or pictures' patches, ``grid`` a side, after a class token where ``class_token``."""
        return None

    def for_head_dim(self, options, head_dim: int):
        """The same scheme for heads of ``head_dim`` dimensions (``tfspec verify`` tests at small widths), where its
        options count a head's dimensions."""
        return options

    def regridded(self, options, grid: int):
        """The same scheme for pictures whose grid of patches is ``grid`` a side (``tfspec verify`` tests at small
        sizes), where it numbers a grid."""
        return options

    def grid_problem(self, options, grid: int | None, leading: int) -> Problem | None:
        """Its objection, acting inside attention, to numbering the positions of a stack whose embedding lays
        pictures' patches in a grid ``grid`` a side after ``leading`` learned vectors (``grid`` None: tokens)."""
        return None

    def misplaced(self, where: Literal["embedding", "attention"], choice) -> Problem | None:
        """Its objection to standing ``where`` (on an embedding, or in an attention) when it acts elsewhere."""
        if self.absent or self.acts == where:
            return None
        if where == "embedding":
            return Problem(f"{self.name} positions act inside attention, not on the embedding",
                           f"write `position {choice}` in the stack body (its self-attentions use it) or "
                           f"`position={choice}` on an attention, and `position none` here")
        return Problem(f"{self.name} positions are added to the token embeddings, not applied inside attention",
                       f"set `position {choice}` in the embedding's body")

    def conflicts(self, options, kind: "AttentionKind") -> list[Problem]:
        """Its objections to the attention kind it acts in (it needs dot products, or the kind's plain mix)."""
        problems = []
        if self.needs_dot_product and not kind.scores_by_dot_product and not kind.mixes_positions:
            problems.append(Problem(f"{self.name} positions need dot-product scores, but {kind.name} attention "
                                    "scores otherwise: its outputs would depend on absolute positions",
                                    "use kind=dot, or another position scheme"))
        if self.mixes_values and not kind.plain_softmax:
            problems.append(Problem(f"{self.name} positions enter the softmax's value sum, which {kind.name} "
                                    "attention computes otherwise", "use kind=dot, or another position scheme"))
        return problems

    def shrunk(self, options, max_len: int):
        """The same scheme for at most ``max_len`` positions (``tfspec verify`` tests at small sizes)."""
        return options

    def relative_with(self, options) -> bool:
        """Is it ``relative`` with these options (dynamically scaled rotary frequencies are not)?"""
        return self.relative

    def cacheable(self, options) -> bool:
        """Does a key encoded once stay valid for every later query, so a KV cache decodes exactly?"""
        return True

    def check(self, options, shape: AttentionShape) -> list[Problem]:
        """Objections to being used in an attention of this shape (``acts == "attention"`` only)."""
        return []

    def attention_flops(self, options, shape: AttentionShape, queries: int, keys: int) -> int:
        """Element-wise FLOPs per sequence this scheme adds inside one attention."""
        return 0

    def key_flops(self, options, shape: AttentionShape, keys: int) -> int:
        """The part of ``attention_flops`` spent on the new keys alone (rotating them), which an attention reading
        keys another layer made (``kv_from``) does not spend."""
        return 0

    def attention_matmul_flops(self, options, shape: AttentionShape, queries: int, keys: int) -> int:
        """Matrix-product FLOPs per sequence it adds inside one attention (what ``FlopCounterMode`` counts)."""
        return 0

    def mask_adds(self, options, shape: AttentionShape, queries: int, keys: int, mask_tensor: bool) -> int:
        """Element-wise additions of a mask tensor to one sequence's scores, given whether the attention needs
        one (``mask_tensor``): one per score, unless the scheme's own score bias carries the mask (its
        ``attention_flops`` count that addition)."""
        return shape.heads * queries * keys if mask_tensor and not self.biases_scores else 0

    def mix_saved(self, options, shape: AttentionShape, kind: "AttentionKind", kind_options, batch: int,
                  queries: int, keys: int, dropout: float, fused: bool) -> tuple[int, int]:
        """What the mix keeps for backward, as ``AttentionKind.core_saved``: the kind's, unless the scheme's
        ``attend`` computes the mix itself (``mixes_values``, which overrides this)."""
        return kind.core_saved(shape, kind_options, batch, queries, keys, dropout, fused)

    def mix_keeps_projection(self, options, shape: AttentionShape, kind: "AttentionKind", kind_options, batch: int
                             ) -> bool:
        """As ``AttentionKind.keeps_projection``, for the mix this scheme attends with (see ``mix_saved``)."""
        return kind.keeps_projection(shape, kind_options, batch)

    def layer_saved(self, options, shape: AttentionShape, queries: int, keys: int) -> int:
        """Bytes autograd keeps in each attention that uses the scheme, beyond the mix, for the default position
        ids: what differentiating a learned score bias of each layer's keeps (KERPLE's; the bool condition of a
        mask it rides on is counted apart, ``trains_score_terms``)."""
        return 0

    def call_saved(self, options, shape: AttentionShape, length: int) -> int:
        """Activation-dtype elements autograd keeps once per forward call for a stack of ``length`` positions
        (tables its attentions share, such as rotary's cos and sin)."""
        return 0

    def module(self, where, options) -> Constructor | None:
        """Its runtime module (None for ``none``); ``where`` as for ``params``."""
        raise NotImplementedError

    def build(self, where, options):
        constructor = self.module(where, options)
        return constructor.build() if constructor is not None else None


POSITIONS: Registry[Position] = Registry("position", Position)
