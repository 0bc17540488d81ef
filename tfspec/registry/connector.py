"""The contract of a connector's step: what maps one tower's vectors into another's (LLaVA's projector).

    connect vision -> text image_token=32000 layer=-2 drop=first {
      linear 4096
      activation gelu
      linear 4096
    }

A connector reads the source tower's vectors (of one example: ``(length, width)``), runs its steps in order and
hands the result to the target tower, whose embeddings it replaces at the positions of the image token.
"""

from __future__ import annotations

from .contract import Constructor, Param, Problem, Registry, Variant


class ConnectorStep(Variant):
    """One step of a connector. Each declares, from the width and number of the vectors it reads:

    - ``width(width, options)`` and ``length(length, options)``: those of what it gives (a linear map changes the
      width; a pixel shuffle trades length for width);
    - ``params(width, options)``: its parameters, by their names in its module;
    - ``flops(width, length, options)``: forward FLOPs per example, (those of matrix products, the rest);
    - ``module(width, options)``: its runtime module, ``(batch, length, width)`` -> ``(batch, length', width')``;
    - ``problem(width, length, options)``: its objection to the vectors it would read, or None.
    """

    def width(self, width: int, options) -> int:
        return width

    def length(self, length: int, options) -> int:
        return length

    def params(self, width: int, options) -> dict[str, Param]:
        return {}

    def flops(self, width: int, length: int, options) -> tuple[int, int]:
        return 0, 0

    def module(self, width: int, options) -> Constructor:
        raise NotImplementedError

    def regridded(self, options, length: int):
        """The same step for ``length`` vectors a picture (``tfspec verify`` tests at small sizes), where it reads
        them as a grid."""
        return options

    def problem(self, width: int, length: int, options) -> Problem | None:
        return None


CONNECTOR_STEPS: Registry[ConnectorStep] = Registry("connector step", ConnectorStep)
