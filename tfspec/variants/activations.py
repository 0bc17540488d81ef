"""Feed-forward activations (the plain ones; gated units live in glu.py)."""

from ..registry import ACTIVATIONS, Activation


@ACTIVATIONS.register
class ReLU(Activation):
    name = "relu"
    doc = "max(0, x), the paper's choice"

    def build(self):
        from torch import nn
        return nn.ReLU()


@ACTIVATIONS.register
class GELU(Activation):
    name = "gelu"
    doc = "exact GELU, x * Phi(x) (BERT, GPT-1)"

    def build(self):
        from torch import nn
        return nn.GELU()


@ACTIVATIONS.register
class GELUTanh(Activation):
    name = "gelu_tanh"
    doc = "GELU's tanh approximation (GPT-2)"

    def build(self):
        from torch import nn
        return nn.GELU(approximate="tanh")


@ACTIVATIONS.register
class SiLU(Activation):
    name = "silu"
    doc = "x * sigmoid(x)"

    def build(self):
        from torch import nn
        return nn.SiLU()


@ACTIVATIONS.register
class Tanh(Activation):
    name = "tanh"
    doc = "tanh(x) (BERT's pooler)"

    def build(self):
        from torch import nn
        return nn.Tanh()
