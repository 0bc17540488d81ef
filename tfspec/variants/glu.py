"""Gated linear units: the up-projection makes two halves, act(gate) * value.

The first half of ``up``'s output is the gate, the second the value.
"""

from pydantic import BaseModel, ConfigDict, Field

from ..registry import ACTIVATIONS, Activation, Constructor


class GatedUnit(Activation):
    """act(gate) * value over ``up``'s two halves: twice the features up, the product's FLOP, and the halves,
    act(gate) and the product kept for backward. ``gate()``: the gate's element-wise function."""

    def gate(self) -> Constructor:
        raise NotImplementedError

    def module(self):
        from ..nn.feedforward import Gated
        return Constructor(Gated, (self.gate(),))

    def up_features(self, d_ff):
        return 2 * d_ff

    def flops(self, d_ff):
        return (self.flops_per_element + 1) * d_ff

    def feedforward_saved(self, d_ff, dropout):
        return (2 + 1 + (2 if dropout else 1)) * d_ff  # up's output (gate and value), act(gate), the product


@ACTIVATIONS.register
class SwiGLU(GatedUnit):
    name = "swiglu"
    title = "SwiGLU"
    flops_per_element = 4  # silu of the gate (the product with the value is counted by the analysis)
    doc = "silu(x W) * (x V) (Shazeer 2020; LLaMA)"

    def gate(self):
        return Constructor("SiLU")


@ACTIVATIONS.register
class ReGLU(GatedUnit):
    name = "reglu"
    title = "ReGLU"
    flops_per_element = 1
    doc = "relu(x W) * (x V) (Shazeer 2020; ModernBERT with hidden_activation relu)"

    def gate(self):
        return Constructor("ReLU")


@ACTIVATIONS.register
class GEGLU(GatedUnit):
    name = "geglu"
    title = "GEGLU"
    flops_per_element = 8
    doc = "gelu(x W) * (x V) (Shazeer 2020)"

    def gate(self):
        return Constructor("GELU")


@ACTIVATIONS.register
class GEGLUTanh(GatedUnit):
    name = "geglu_tanh"
    title = "GEGLU (tanh)"
    flops_per_element = 9
    doc = "gelu_tanh(x W) * (x V): GEGLU with the tanh approximation (T5 v1.1's gated-gelu, Gemma)"

    def gate(self):
        return Constructor("GELU", kwargs={"approximate": "tanh"})


@ACTIVATIONS.register
class ClampedSwiGLU(GatedUnit):
    name = "swiglu_clamped"
    title = "clamped SwiGLU"
    flops_per_element = 9  # two clamps, the scaled sigmoid, the product with the gate, value + 1
    examples = ({}, {"alpha": 1.5, "limit": 3.0})
    doc = ("swiglu_clamped(alpha=1.702, limit=7): gpt-oss's gated unit, (clamp(v, -limit, limit) + 1) · g · "
           "sigmoid(alpha · g) with the gate g = min(x W, limit) and the value v = x V")

    class Options(BaseModel):
        model_config = ConfigDict(extra="forbid", frozen=True)
        alpha: float = Field(1.702, gt=0, le=1e3)
        limit: float = Field(7.0, gt=0, le=1e6)

    def module(self):
        return self.module_for(self.Options())

    def module_for(self, options):
        from ..nn.feedforward import ClampedSwiGLU
        return Constructor(ClampedSwiGLU, (options.alpha, options.limit))

    def feedforward_saved(self, d_ff, dropout):
        # up's output (both clamps read it), the clamped gate, its scaled sigmoid, value + 1, the gated
        # product, and the down projection's input (with dropout: its mask and the dropped values)
        return (2 + 4 + (2 if dropout else 1)) * d_ff


@ACTIVATIONS.register
class ScaledSwiGLU(GatedUnit):
    name = "swiglu_scaled"
    title = "SwiGLU (scaled gate)"
    flops_per_element = 5  # the gate times its constant, then its silu
    examples = ({}, {"gate_scale": 0.5})
    doc = ("swiglu_scaled(gate_scale=1): silu(s · x W) * (x V), the gate multiplied by a constant before its silu "
           "(Falcon-H1's mlp_multipliers[0], µP)")

    class Options(BaseModel):
        model_config = ConfigDict(extra="forbid", frozen=True)
        gate_scale: float = Field(1.0, gt=0, le=1e6)

    def module(self):
        return self.module_for(self.Options())

    def module_for(self, options):
        from ..nn.feedforward import Gated, ScaledSiLU
        return Constructor(Gated, (Constructor(ScaledSiLU, (options.gate_scale,)),))

    def feedforward_saved(self, d_ff, dropout):
        # up's output (gate and value), the scaled gate (silu's input), silu's output, the product
        return (2 + 1 + 1 + (2 if dropout else 1)) * d_ff
