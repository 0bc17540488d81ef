"""Squared ReLU (So et al. 2021, "Primer: Searching for Efficient Transformers for Language Modeling"): max(0, x)²,
the activation Primer's search found to matter most (Nemotron-4 and others use it), as Hugging Face's ``relu2``.

    feedforward d_ff=3072 activation=squared_relu
"""

from ..registry import ACTIVATIONS, Activation, Constructor


@ACTIVATIONS.register
class SquaredReLU(Activation):
    name = "squared_relu"
    title = "Squared ReLU"
    flops_per_element = 2  # max, then the square
    saves = "input"  # (what it keeps, its ReLU's output, is as large as its input)
    doc = "squared_relu: max(0, x)², Primer's activation (So et al. 2021)"

    def module(self):
        from ..nn.squared_relu import SquaredReLU as Module
        return Constructor(Module)

    def feedforward_saved(self, d_ff, dropout):
        # its ReLU's output (which the square's gradient reads), and the down projection's input: the square, or
        # with dropout the mask and the dropped values
        return (3 if dropout else 2) * d_ff
