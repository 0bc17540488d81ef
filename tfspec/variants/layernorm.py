"""Layer normalisation (Ba et al. 2016): per-position mean and variance, then scale and shift."""

from pydantic import BaseModel, ConfigDict, Field

from ..registry import NORMS, Constructor, Norm, Param


@NORMS.register
class LayerNorm(Norm):
    name = "layernorm"
    positional = ("eps",)
    doc = "layernorm(eps=1e-5, bias=true)"
    examples = ({}, {"eps": 1e-3, "bias": False})
    flops_per_element = 7  # mean, centre, square, sum, scale by 1/std, weight, bias

    def saved(self, dim, options=None):
        return (dim, 2)  # the input; mean and 1/std in float32

    class Options(BaseModel):
        model_config = ConfigDict(extra="forbid", frozen=True)
        eps: float = Field(1e-5, gt=0, lt=1)
        bias: bool = True

    def params(self, dim, options):
        return {"weight": Param((dim,), "norm_weight"), **({"bias": Param((dim,), "norm_bias")} if options.bias else {})}

    def module(self, dim, options):
        return Constructor("LayerNorm", (dim,), {"eps": options.eps, "bias": options.bias})
