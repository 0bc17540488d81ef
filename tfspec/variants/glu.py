"""Gated linear units: the up-projection makes two halves, act(gate) * value.

The first half of ``up``'s output is the gate, the second the value.
"""

from ..registry import ACTIVATIONS, Activation, Constructor


@ACTIVATIONS.register
class SwiGLU(Activation):
    name = "swiglu"
    title = "SwiGLU"
    flops_per_element = 4  # silu of the gate (the product with the value is counted by the analysis)
    gated = True
    doc = "silu(x W) * (x V) (Shazeer 2020; LLaMA)"

    def module(self):
        return Constructor("SiLU")


@ACTIVATIONS.register
class GEGLU(Activation):
    name = "geglu"
    title = "GEGLU"
    flops_per_element = 8
    gated = True
    doc = "gelu(x W) * (x V) (Shazeer 2020)"

    def module(self):
        return Constructor("GELU")


@ACTIVATIONS.register
class GEGLUTanh(Activation):
    name = "geglu_tanh"
    title = "GEGLU (tanh)"
    flops_per_element = 9
    gated = True
    doc = "gelu_tanh(x W) * (x V): GEGLU with the tanh approximation (T5 v1.1's gated-gelu, Gemma)"

    def module(self):
        return Constructor("GELU", kwargs={"approximate": "tanh"})
