"""Root-mean-square normalisation (Zhang & Sennrich 2019): no centring, no shift. ``weight=false`` leaves out the
scale too (Llama 4's "L2 norm" of queries and keys: x / rms(x) alone)."""

from pydantic import BaseModel, ConfigDict, Field

from ..registry import NORMS, Constructor, Norm, Param


@NORMS.register
class RMSNorm(Norm):
    name = "rmsnorm"
    positional = ("eps",)
    doc = "rmsnorm(eps=1e-6, weight=true)"
    examples = ({}, {"eps": 1e-3}, {"weight": False})
    flops_per_element = 4  # square, sum, scale by 1/rms, weight

    def saved(self, dim, options=None):
        if options is not None and not options.weight:
            return (dim, 1)  # the input and 1/rms: no weight asks for the normalised input
        return (2 * dim, 1)  # the input and the normalised input (for the weight's gradient); 1/rms

    class Options(BaseModel):
        model_config = ConfigDict(extra="forbid", frozen=True)
        eps: float = Field(1e-6, gt=0, lt=1)
        weight: bool = True  # a trained scale per dimension (false: x / rms(x) alone, Llama 4's qk "L2 norm")

    def params(self, dim, options):
        return {"weight": Param((dim,), "norm_weight")} if options.weight else {}

    def module(self, dim, options):
        return Constructor("RMSNorm", (dim,), {"eps": options.eps, "elementwise_affine": options.weight})


@NORMS.register
class NoNorm(Norm):
    name = "none"
    absent = True
    doc = "no normalisation"

    def module(self, dim, options):
        return Constructor("Identity")
