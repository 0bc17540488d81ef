"""Gemma's RMSNorm: the root-mean-square norm with its scale stored as an offset from one, ``x / rms(x) · (1 + w)``,
computed in float32 whatever the activations' dtype (as Gemma 1-3 compute it). ``w`` starts at 0, so a fresh norm
only normalises; weight decay then pulls the scale towards 1, not 0."""

from pydantic import BaseModel, ConfigDict, Field

from ..registry import NORMS, Constructor, Norm, Param


@NORMS.register
class GemmaRMSNorm(Norm):
    name = "gemma_rmsnorm"
    title = "RMSNorm (1 + w)"
    positional = ("eps",)
    doc = "gemma_rmsnorm(eps=1e-6): x / rms(x) · (1 + w) in float32, w starting at 0 (Gemma)"
    examples = ({}, {"eps": 1e-5})
    flops_per_element = 5  # square, sum, scale by 1/rms, times w, plus the unit

    def saved(self, dim, options=None):
        return (2 * dim, 1)  # the input and the normalised input (for w's gradient); 1/rms

    class Options(BaseModel):
        model_config = ConfigDict(extra="forbid", frozen=True)
        eps: float = Field(1e-6, gt=0, lt=1)

    def params(self, dim, options):
        return {"weight": Param((dim,), "norm_weight", value=0.0)}

    def module(self, dim, options):
        from ..nn.gemma_rmsnorm import UnitOffsetRMSNorm
        return Constructor(UnitOffsetRMSNorm, (dim,), {"eps": options.eps})
