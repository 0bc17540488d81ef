"""Gated linear units: the up-projection makes two halves, one gates the other."""

from ..registry import ACTIVATIONS, Activation


@ACTIVATIONS.register
class SwiGLU(Activation):
    name = "swiglu"
    gated = True
    doc = "silu(x W) * (x V) (Shazeer 2020; LLaMA)"


@ACTIVATIONS.register
class GEGLU(Activation):
    name = "geglu"
    gated = True
    doc = "gelu(x W) * (x V) (Shazeer 2020)"
