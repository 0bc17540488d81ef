"""The contract of what an embedding reads other than token ids: pictures cut into patches, and the like.

    embedding image { input patches(image=224, patch=16, class_token=true); dim 768; position learned(197) }

An input kind turns one tensor of the model's (``argument``: ``pixel_values``) into the sequence of vectors its
stack reads; the embedding then adds positions, a norm, dropout and a projection as it does to token vectors.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from .contract import Constructor, Param, Problem, Registry, Variant

if TYPE_CHECKING:
    from torch import Tensor


class InputKind(Variant):
    """An embedding's input other than token ids. Each declares:

    - ``argument``: the forward's keyword for it (``pixel_values``), and ``what`` it is, for messages;
    - ``shape(options)``: one example's shape (``(channels, side, side)``), the batch before it;
    - ``length(options)``: the sequence of vectors it makes, which fixes its stack's length;
    - ``leading(options)``: learned vectors before the rest (a class token), which no grid numbers;
    - ``grid(options)``: the side of the square grid its vectors lie in, for 2-D positions; None: no grid;
    - ``params(dim, options)``: its parameters, by their names in the embedding's module;
    - ``flops(dim, options)``: forward FLOPs per example, (those of matrix products, the rest); ``kept(dim,
      options)``: the elements autograd keeps per example;
    - ``module(dim, options, positions, norm, dropout, project)``: the embedding's runtime module, whose
      ``forward(x, positions)`` gives ``(batch, length, dim)`` and whose ``check(name, x, device)`` refuses a
      tensor of the wrong kind or shape with a ``ValueError`` naming ``name``;
    - ``smaller(options)``: the same kind at the smallest size that keeps its structure (what ``verify`` builds);
    - ``describe(options)``: what diagrams and ``summary`` call its node;
    - the generated task a run of ``tfspec train`` learns from it: ``task`` (its name), ``classes`` (what the
      head predicts), ``task_note(options)``, ``examples_of(options, count, generator)`` (inputs and labels) and
      ``task_problem(options)`` (its objection to a size the task cannot fill).
    """

    argument: ClassVar[str]
    what: ClassVar[str]
    task: ClassVar[str]
    classes: ClassVar[int]

    def shape(self, options) -> tuple[int, ...]:
        raise NotImplementedError

    def length(self, options) -> int:
        raise NotImplementedError

    def leading(self, options) -> int:
        return 0

    def grid(self, options) -> int | None:
        return None

    def params(self, dim: int, options) -> dict[str, Param]:
        raise NotImplementedError

    def flops(self, dim: int, options) -> tuple[int, int]:
        raise NotImplementedError

    def kept(self, dim: int, options) -> int:
        raise NotImplementedError

    def module(self, dim: int, options, positions: Constructor | None, norm: Constructor, dropout: float,
               project: int | None) -> Constructor:
        raise NotImplementedError

    def smaller(self, options):
        return options

    def describe(self, options) -> str:
        """What diagrams write in its node: ``Patch Embedding (16×16×3 → 768, class token)`` without the width."""
        return self.label(options)

    def task_note(self, options) -> str:
        raise NotImplementedError

    def task_problem(self, options) -> Problem | None:
        return None

    def examples_of(self, options, count: int, generator):
        raise NotImplementedError

    def example_from_file(self, options, path) -> Tensor:
        """One example read from a file (``tfspec generate --image``) as ``examples_of`` makes them: its tensor
        without the batch dimension; a ``DataError`` says why a file cannot be one."""
        raise NotImplementedError(f"{self.name} reads no example from a file")


INPUTS: Registry[InputKind] = Registry("input", InputKind)
