"""Value residual learning (Zhou et al. 2024, "Value Residual Learning For Alleviating Attention Concentration In
Transformers": ResFormer): every layer after the first mixes the first layer's values into its own,
v_n ← λ·v_n + (1 − λ)·v_1, so the first layer's token-level information reaches every layer's mix (the paper's
λ = 0.5). The first layer hands its values on, which makes it a kind of layer of its own; the graph has an edge from
its attention into every later one's.

    decoder x 12 { attention self heads=8 mask=causal steps=value_residual(0.5); ... }

A KV cache keeps each layer's mixed values, which the first layer's at the same positions never change.
"""

from pydantic import BaseModel, ConfigDict, Field

from ..registry import ATTENTION_STEPS, AttentionStepKind, Constructor, Problem


@ATTENTION_STEPS.register
class ValueResidualLearning(AttentionStepKind):
    name = "value_residual"
    title = "value residual"
    positional = ("lam",)
    reads = "values"
    makes_values = True
    examples = ({}, {"lam": 0.25})
    doc = ("value_residual(lam=0.5): each layer's values λ·v + (1 − λ)·v₁, v₁ the first layer's (ResFormer, "
           "Zhou et al. 2024)")

    class Options(BaseModel):
        model_config = ConfigDict(extra="forbid", frozen=True)
        lam: float = Field(0.5, ge=0, le=1)  # the weight of the layer's own values (1 − lam: the first layer's)

    def check(self, options, shape, kind):
        if shape.cross:
            return [Problem("value residual learning mixes the first layer's values into its own sequence's: it is "
                            "for self-attention", "drop steps=value_residual(...) from the cross-attention")]
        if not kind.projects_values:
            return [Problem(f"{kind.name} attention makes its values after its KV cache (from a latent), where no "
                            "step can mix the first layer's in", "use value_residual with another kind")]
        return []

    def module(self, shape, options, source):
        from ..nn.value_residual import ValueResidual
        return Constructor(ValueResidual, (source, options.lam))

    def flops(self, shape, options, queries, keys):
        return 0, 3 * queries * shape.kv_width  # two products with constants and a sum per new value

    def saved(self, shape, options, batch, queries, keys, run):
        return 0, 0
