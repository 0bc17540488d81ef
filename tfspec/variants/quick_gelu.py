"""Quick GELU (Radford et al. 2021, CLIP): x · sigmoid(1.702 x), the sigmoid approximation of GELU that OpenAI's
CLIP was trained with (Hugging Face's ``quick_gelu``).

    feedforward d_ff=2048 activation=quick_gelu
"""

from ..registry import ACTIVATIONS, Activation, Constructor


@ACTIVATIONS.register
class QuickGELU(Activation):
    name = "quick_gelu"
    title = "Quick GELU"
    flops_per_element = 4  # the scale, the sigmoid's exp and division, the product
    doc = "quick_gelu: x · sigmoid(1.702 x), CLIP's approximation of GELU"

    def module(self):
        from ..nn.quick_gelu import QuickGELU as Module
        return Constructor(Module)

    def feedforward_saved(self, d_ff, dropout):
        # its input and its sigmoid's output (which the product's gradient reads), and the down projection's
        # input: the product, or with dropout the mask and the dropped values
        return (4 if dropout else 3) * d_ff
