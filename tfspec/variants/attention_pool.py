"""Multi-head attention pooling (Lee et al. 2019, "Set Transformer"'s PMA; SigLIP's vision head, Zhai et al. 2023):
a learned probe attends over the positions, then a LayerNormed MLP adds to what it read.

    head pool=attention(12, d_ff=3072)   # SigLIP-base's vision tower: the pooled vector, projected by nothing

``attention(heads, d_ff, activation=gelu_tanh, eps=1e-6)``: the probe's query against the positions' keys, their
values mixed by the softmax, per head; the heads joined and projected (p); then ``p + down(act(up(layernorm(p))))``.
"""

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from ..registry import ACTIVATIONS, POOLS, Constructor, Param, Pool, linear_params

MAX_HEADS = 1 << 12
# the activations its MLP may apply: those of one input that train nothing (a test keeps this the registry's list)
ONE_INPUT = Literal["gelu", "gelu_tanh", "quick_gelu", "relu", "silu", "squared_relu", "tanh"]


@POOLS.register
class AttentionPooling(Pool):
    name = "attention"
    positional = ("heads",)
    reads = "a learned probe's attention over the positions"
    keeps_input = True  # its keys' and values' projection keeps it
    doc = ("attention(heads, d_ff, activation=gelu_tanh, eps=1e-6): a learned probe attends over the positions, a "
           "LayerNormed MLP adds to what it read (SigLIP's vision head)")
    examples = ({"heads": 2, "d_ff": 24}, {"heads": 4, "d_ff": 12, "activation": "relu", "eps": 1e-5})

    class Options(BaseModel):
        model_config = ConfigDict(extra="forbid", frozen=True)
        heads: int = Field(gt=0, le=MAX_HEADS)  # of the probe's attention; they divide the width
        d_ff: int = Field(gt=0, le=1 << 20)  # the MLP's hidden width
        activation: ONE_INPUT = "gelu_tanh"  # the MLP's (an activation of one input, training nothing)
        eps: float = Field(1e-6, gt=0, lt=1)  # of its LayerNorm

    def describe(self, options):
        return f"a learned probe's attention over the positions ({options.heads} heads), then an MLP"

    def heads(self, options):
        return options.heads

    def params(self, width, options):
        return {"probe": Param((width,), "embedding"), **linear_params("q", width, width, True),
                **linear_params("kv", 2 * width, width, True), **linear_params("out", width, width, True),
                "norm.weight": Param((width,), "norm_weight"), "norm.bias": Param((width,), "norm_bias"),
                **linear_params("up", options.d_ff, width, True), **linear_params("down", width, options.d_ff, True)}

    def flops(self, width, length, options):
        d_ff, heads = options.d_ff, options.heads
        # the query, keys and values, scores and mixing, the joined heads' projection, the MLP
        matmul = 2 * width * width + 4 * length * width * width + 4 * length * width + 2 * width * width \
            + 4 * width * d_ff
        activation = ACTIVATIONS[options.activation]
        # biases; the scale and softmax of the scores; the LayerNorm; the activation; the residual sum
        other = 3 * width + 2 * length * width + d_ff + heads * length * 6 + 7 * width \
            + activation.flops_per_element * d_ff + width
        return matmul, other

    def saved(self, width, length, options, element_bytes):
        # the query, the keys and values (one tensor), the probabilities, the heads' joined output, the pooled
        # vector (its norm's input) with the norm's mean and 1/std in float32, the norm's output, and the MLP's
        # hidden values: the activation's input and its output, or its output alone where it keeps that
        activation = ACTIVATIONS[options.activation]
        hidden = options.d_ff * (2 if activation.saves == "input" else 1)
        return element_bytes * (4 * width + 2 * length * width + options.heads * length + hidden) + 2 * 4

    def module(self, width, options):
        from ..nn.pool import AttentionPool
        return Constructor(AttentionPool, (width, options.heads, options.d_ff,
                                           ACTIVATIONS[options.activation].module(), options.eps))
