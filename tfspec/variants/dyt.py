"""Dynamic Tanh (Zhu et al. 2025, "Transformers without Normalization"): ``weight · tanh(α · x) + bias`` in a
norm's place, with no per-position statistics; α is one learned scalar, initialised to ``alpha``."""

from pydantic import BaseModel, ConfigDict, Field

from ..registry import NORMS, Constructor, Norm, Param


@NORMS.register
class DyT(Norm):
    name = "dyt"
    positional = ("alpha",)
    doc = "dyt(alpha=0.5): weight·tanh(α·x) + bias, α a learned scalar starting at alpha (no statistics)"
    examples = ({}, {"alpha": 1.5})
    flops_per_element = 4  # α·x, tanh, weight, bias

    def saved(self, dim, options=None):
        return (2 * dim, 0)  # the input (α's gradient) and tanh's output (its own and the weight's gradients)

    class Options(BaseModel):
        model_config = ConfigDict(extra="forbid", frozen=True)
        alpha: float = Field(0.5, gt=0, le=100)

    def params(self, dim, options):
        return {"alpha": Param((1,), "vector", value=options.alpha), "weight": Param((dim,), "norm_weight"),
                "bias": Param((dim,), "norm_bias")}

    def module(self, dim, options):
        from ..nn.dyt import DynamicTanh
        return Constructor(DynamicTanh, (dim, options.alpha))
