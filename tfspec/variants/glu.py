"""Gated linear units: the up-projection makes two halves, act(gate) * value.

The first half of ``up``'s output is the gate, the second the value.
"""

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
