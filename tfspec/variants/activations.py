"""Feed-forward activations (the plain ones; gated units live in glu.py)."""

from ..registry import ACTIVATIONS, Activation


@ACTIVATIONS.register
class ReLU(Activation):
    name = "relu"
    doc = "max(0, x), the paper's choice"


@ACTIVATIONS.register
class GELU(Activation):
    name = "gelu"
    doc = "exact GELU, x * Phi(x) (BERT, GPT-1)"


@ACTIVATIONS.register
class GELUTanh(Activation):
    name = "gelu_tanh"
    doc = "GELU's tanh approximation (GPT-2)"


@ACTIVATIONS.register
class SiLU(Activation):
    name = "silu"
    doc = "x * sigmoid(x)"


@ACTIVATIONS.register
class Tanh(Activation):
    name = "tanh"
    doc = "tanh(x) (BERT's pooler)"
