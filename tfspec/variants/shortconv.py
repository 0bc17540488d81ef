"""The gated short convolution (LFM2, Liquid AI 2025): y = out(C ⊙ conv(B ⊙ x)), where one linear map of the input
makes B, C and x, and ``conv`` is a causal depthwise convolution over the last ``kernel`` positions, each channel
its own. The smallest stateful mixer: decoding keeps the convolution's last ``kernel - 1`` inputs and nothing else.

    decoder x 16 { residual pre; norm rmsnorm; mixer shortconv(3); feedforward d_ff=4096 activation=swiglu }
"""

from pydantic import BaseModel, ConfigDict, Field

from ..registry import MIXERS, ComplexityClass, Constructor, Param, TokenMixer, linear_params


@MIXERS.register
class ShortConvolution(TokenMixer):
    name = "shortconv"
    title = "Short Convolution"
    positional = ("kernel",)
    module_name = "conv"  # LFM2's layer attribute (``model.layers.0.conv.in_proj``)
    examples = ({}, {"kernel": 4, "bias": True})
    doc = ("shortconv(kernel=3, bias=false): LFM2's gated short convolution, out(C ⊙ conv(B ⊙ x)) with a causal "
           "depthwise convolution over the last `kernel` positions; decoding keeps its last kernel − 1 inputs")

    class Options(BaseModel):
        model_config = ConfigDict(extra="forbid", frozen=True)
        kernel: int = Field(3, ge=1, le=4096)  # positions each output sees: its own and kernel − 1 before it
        bias: bool = False  # on the projections and the convolution

    def params(self, width, options):
        params = {**linear_params("in_proj", 3 * width, width, options.bias),
                  # a filter along the sequence per channel: drawn as a vector, by its length
                  "conv.weight": Param((width, 1, options.kernel), "vector"),
                  **({"conv.bias": Param((width,), "bias")} if options.bias else {}),
                  **linear_params("out_proj", width, width, options.bias, residual=True)}
        return dict(sorted(params.items(), key=lambda item: item[1].role == "bias"))

    def module(self, width, options):
        from ..nn.shortconv import ShortConv
        return Constructor(ShortConv, (width, options.kernel, options.bias))

    def flops(self, width, options, length):
        n, d, k = length, width, options.kernel
        matmul = 2 * n * d * 3 * d + 2 * n * k * d + 2 * n * d * d  # in, the convolution (as counted), out
        elementwise = 2 * n * d + (5 * n * d if options.bias else 0)  # B ⊙ x, C ⊙ conv; three biases
        return matmul, elementwise

    def saved(self, width, options, batch, length):
        # B, C and x (views of the projection: all of it), the convolution's zero-padded input and its output
        # (which C multiplies), and the output projection's input
        return batch * (3 * length * width + width * (length + options.kernel - 1) + 2 * length * width)

    def reach(self, options):
        return options.kernel - 1

    def state_elements(self, width, options):
        return width * (options.kernel - 1)

    def describe(self, options):
        return f"Short Convolution (kernel {options.kernel}{', bias' if options.bias else ''})"

    def complexity(self, options):
        return ComplexityClass("O(k·n·d)", "O(1)", "O(n/k)", f"k = {options.kernel} positions per output, "
                               "all computed at once in training")
