"""Root-mean-square normalisation (Zhang & Sennrich 2019): no centring, no shift."""

from pydantic import BaseModel, ConfigDict, Field

from ..registry import NORMS, Constructor, Norm, Param


@NORMS.register
class RMSNorm(Norm):
    name = "rmsnorm"
    positional = ("eps",)
    doc = "rmsnorm(eps=1e-6)"
    examples = ({}, {"eps": 1e-3})
    flops_per_element = 4  # square, sum, scale by 1/rms, weight

    def saved(self, dim):
        return (2 * dim, 1)  # the input and the normalised input (for the weight's gradient); 1/rms

    class Options(BaseModel):
        model_config = ConfigDict(extra="forbid", frozen=True)
        eps: float = Field(1e-6, gt=0, lt=1)

    def params(self, dim, options):
        return {"weight": Param((dim,), "norm_weight")}

    def module(self, dim, options):
        return Constructor("RMSNorm", (dim,), {"eps": options.eps})


@NORMS.register
class NoNorm(Norm):
    name = "none"
    absent = True
    doc = "no normalisation"

    def module(self, dim, options):
        return Constructor("Identity")
