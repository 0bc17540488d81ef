"""A connector's steps (``connect vision -> text { ... }``): a linear map, an activation, a norm.

- ``linear(out, bias=true)``: each vector through one linear map to ``out`` features (LLaVA's projector's two);
- ``activation(kind)``: a function of each feature (``activation gelu``);
- ``norm(kind=layernorm, eps=1e-5)``: each vector normalised, with a learned scale (and a shift for LayerNorm);
- ``pixel_shuffle(factor)``: each factor × factor block of a square grid of patches as one vector factor² times as
  wide (Idefics3's and SmolVLM's, before their projection).
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
    doc = "norm(kind=layernorm, eps=1e-5): each vector normalised, with a learned scale (and shift)"
    examples = ({}, {"kind": "rmsnorm", "eps": 1e-6})

    class Options(BaseModel):
        model_config = ConfigDict(extra="forbid", frozen=True)
        kind: Literal["layernorm", "rmsnorm"] = "layernorm"
        eps: float = Field(1e-5, gt=0, lt=1)

    def _norm(self, options):
        return NORMS.of({"layernorm": _choice("layernorm", eps=options.eps),
                         "rmsnorm": _choice("rmsnorm", eps=options.eps)}[options.kind])

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
    doc = ("pixel_shuffle(factor): each factor × factor block of a square grid of patches as one vector factor² "
           "times as wide (a picture's vectors factor² times fewer)")
    examples = ({"factor": 2}, {"factor": 3})

    class Options(BaseModel):
        model_config = ConfigDict(extra="forbid", frozen=True)
        factor: int = Field(gt=0, le=64)  # the side of each block of patches made one vector

    def width(self, width, options):
        return width * options.factor ** 2

    def length(self, length, options):
        return length // options.factor ** 2

    def problem(self, width, length, options):
        side = round(length ** 0.5)
        if side * side != length or side % options.factor:
            return Problem(f"pixel_shuffle({options.factor}) reads a square grid of patches whose side divides by "
                           f"{options.factor}; it would read {length} vectors"
                           + (f" ({side} × {side})" if side * side == length else " (no square)"),
                           "drop the class token first (drop=first), or choose a factor dividing the grid's side")
        return None

    def module(self, width, options):
        from ..nn.pixel_shuffle import PixelShuffle as Runtime
        return Constructor(Runtime, (options.factor,))


def _choice(name: str, **options):
    from ..front.schema import Choice
    return Choice(name=name, options=options)
