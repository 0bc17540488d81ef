"""A connector's steps (``connect vision -> text { ... }``): a linear map, an activation, a norm.

- ``linear(out, bias=true)``: each vector through one linear map to ``out`` features (LLaVA's projector's two);
- ``activation(kind)``: a function of each feature (``activation gelu``);
- ``norm(kind=layernorm, eps=1e-5)``: each vector normalised, with a learned scale (and a shift for LayerNorm);
- ``pixel_shuffle(factor, channel_major=false)``: each factor × factor block of a square grid of patches as one
  vector factor² times as wide (Idefics3's and SmolVLM's, before their projection; ``channel_major``: Mistral 3's
  patch merger's, ``torch.nn.functional.unfold``'s order);
- ``mean_pool(side)``: each side × side block of a square grid of patches averaged into one vector (Gemma 3's,
  256 vectors of a picture's 4096 patches).
"""

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from ..registry import ACTIVATIONS, CONNECTOR_STEPS, NORMS, ConnectorStep, Constructor, Param, Problem
from ..variants.attention_pool import ONE_INPUT


@CONNECTOR_STEPS.register
class Linear(ConnectorStep):
    name = "linear"
    positional = ("out",)
    doc = "linear(out, bias=true): each vector through one linear map to out features"
    examples = ({"out": 12}, {"out": 20, "bias": False})

    class Options(BaseModel):
        model_config = ConfigDict(extra="forbid", frozen=True)
        out: int = Field(gt=0, le=1 << 20)  # the features of each vector it gives
        bias: bool = True

    def width(self, width, options):
        return options.out

    def params(self, width, options):
        return {"weight": Param((options.out, width), "matrix"), **({"bias": Param((options.out,), "bias")}
                                                                    if options.bias else {})}

    def flops(self, width, length, options):
        return 2 * length * width * options.out, length * options.out * options.bias

    def module(self, width, options):
        return Constructor("Linear", (width, options.out), {"bias": options.bias})


@CONNECTOR_STEPS.register
class Activation(ConnectorStep):
    name = "activation"
    positional = ("kind",)
    doc = "activation(kind): a function of each feature (gelu, relu, ...)"
    examples = ({"kind": "gelu"}, {"kind": "silu"})

    class Options(BaseModel):
        model_config = ConfigDict(extra="forbid", frozen=True)
        kind: ONE_INPUT  # an activation of one input that trains nothing

    def flops(self, width, length, options):
        return 0, ACTIVATIONS[options.kind].flops(width) * length

    def module(self, width, options):
        return ACTIVATIONS[options.kind].module()


@CONNECTOR_STEPS.register
class Norm(ConnectorStep):
    name = "norm"
    positional = ("kind",)
    doc = ("norm(kind=layernorm, eps=1e-5): each vector normalised, with a learned scale (and shift); kind layernorm, "
           "rmsnorm or gemma_rmsnorm")
    examples = ({}, {"kind": "rmsnorm", "eps": 1e-6})

    class Options(BaseModel):
        model_config = ConfigDict(extra="forbid", frozen=True)
        kind: Literal["layernorm", "rmsnorm", "gemma_rmsnorm"] = "layernorm"  # (gemma_rmsnorm: Gemma 3's projector's)
        eps: float = Field(1e-5, gt=0, lt=1)

    def _norm(self, options):
        return NORMS.of(_choice(options.kind, eps=options.eps))

    def params(self, width, options):
        variant, norm_options = self._norm(options)
        return variant.params(width, norm_options)

    def flops(self, width, length, options):
        variant, _ = self._norm(options)
        return 0, variant.flops_per_element * width * length

    def module(self, width, options):
        variant, norm_options = self._norm(options)
        return variant.module(width, norm_options)


@CONNECTOR_STEPS.register
class PixelShuffle(ConnectorStep):
    name = "pixel_shuffle"
    positional = ("factor",)
    doc = ("pixel_shuffle(factor, channel_major=false): each factor × factor block of a square grid of patches as "
           "one vector factor² times as wide (a picture's vectors factor² times fewer); channel_major: each "
           "feature's block side by side (Mistral 3's unfold, which leaves out a partial block at the edge of a "
           "picture of another size), else each patch's vector (Idefics3's)")
    examples = ({"factor": 2}, {"factor": 3}, {"factor": 2, "channel_major": True})

    class Options(BaseModel):
        model_config = ConfigDict(extra="forbid", frozen=True)
        factor: int = Field(gt=0, le=64)  # the side of each block of patches made one vector
        channel_major: bool = False  # the vector's order: feature, row, column (else row, column, feature)

    def width(self, width, options):
        return width * options.factor ** 2

    def length(self, length, options):
        return length // options.factor ** 2

    def problem(self, width, length, options):
        return _square_grid("pixel_shuffle", options.factor, length)

    def regridded(self, options, length):
        return options.model_copy(update={"factor": _block_within(options.factor, length)})

    def module(self, width, options):
        from ..nn.pixel_shuffle import PixelShuffle as Runtime
        return Constructor(Runtime, (options.factor,), {"channel_major": options.channel_major})


def _block_within(block: int, length: int) -> int:
    """The largest block side, at most ``block``, that tiles a square grid of ``length`` vectors (1 where none)."""
    side = max(1, round(length ** 0.5))
    return max(b for b in range(1, min(block, side) + 1) if side % b == 0)


def _square_grid(name: str, side: int, length: int) -> Problem | None:
    """The objection of a step reading a square grid of patches in blocks of ``side`` to ``length`` vectors."""
    grid = round(length ** 0.5)
    if grid * grid == length and grid % side == 0:
        return None
    return Problem(f"{name}({side}) reads a square grid of patches whose side divides by {side}; it would read "
                   f"{length} vectors" + (f" ({grid} × {grid})" if grid * grid == length else " (no square)"),
                   "drop the class token first (drop=first), or choose a block dividing the grid's side")


@CONNECTOR_STEPS.register
class MeanPool(ConnectorStep):
    name = "mean_pool"
    positional = ("side",)
    doc = ("mean_pool(side): each side × side block of a square grid of patches averaged into one vector (a "
           "picture's vectors side² times fewer)")
    examples = ({"side": 2}, {"side": 3})

    class Options(BaseModel):
        model_config = ConfigDict(extra="forbid", frozen=True)
        side: int = Field(gt=0, le=64)  # the side of each block of patches averaged

    def length(self, length, options):
        return length // options.side ** 2

    def flops(self, width, length, options):
        return 0, length * width  # (an addition per patch and feature; the divisions by side² are fewer)

    def problem(self, width, length, options):
        return _square_grid("mean_pool", options.side, length)

    def regridded(self, options, length):
        return options.model_copy(update={"side": _block_within(options.side, length)})

    def module(self, width, options):
        from ..nn.pixel_shuffle import MeanPool as Runtime
        return Constructor(Runtime, (options.side,))


def _choice(name: str, **options):
    from ..front.schema import Choice
    return Choice(name=name, options=options)
