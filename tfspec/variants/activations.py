"""Feed-forward activations (the plain ones; gated units live in glu.py)."""

from ..registry import ACTIVATIONS, Activation, Constructor


@ACTIVATIONS.register
class ReLU(Activation):
    name = "relu"
    title = "ReLU"
    flops_per_element = 1
    saves = "output"
    doc = "max(0, x), the paper's choice"

    def module(self):
        return Constructor("ReLU")


@ACTIVATIONS.register
class GELU(Activation):
    name = "gelu"
    title = "GELU"
    flops_per_element = 8
    doc = "exact GELU, x * Phi(x) (BERT, GPT-1)"

    def module(self):
        return Constructor("GELU")


@ACTIVATIONS.register
class GELUTanh(Activation):
    name = "gelu_tanh"
    title = "GELU (tanh)"
    flops_per_element = 9
    doc = "GELU's tanh approximation (GPT-2)"

    def module(self):
        return Constructor("GELU", kwargs={"approximate": "tanh"})


@ACTIVATIONS.register
class SiLU(Activation):
    name = "silu"
    title = "SiLU"
    flops_per_element = 4
    doc = "x * sigmoid(x)"

    def module(self):
        return Constructor("SiLU")


@ACTIVATIONS.register
class Tanh(Activation):
    name = "tanh"
    title = "tanh"
    flops_per_element = 4
    saves = "output"
    doc = "tanh(x) (BERT's pooler)"

    def module(self):
        return Constructor("Tanh")
