"""xIELU (Huang 2024, "Deriving Activation Functions Using Integration"): for x > 0, α_p·x² + β·x; otherwise
(expm1(min(x, ε)) − x)·α_n + β·x, with α_p = softplus(a_p) and α_n = β + softplus(a_n) trained, one pair per
feed-forward network -- Apertus's activation, as Hugging Face's ``xielu``. The trained values start where the paper
starts them (``alpha_p``, ``alpha_n``: α_p = 0.8 and α_n = 0.8 under every init scheme).

    feedforward d_ff=14336 activation=xielu
    feedforward d_ff=14336 activation=xielu(alpha_p=0.8, alpha_n=0.8, beta=0.5, eps=-1e-6)
"""

import math

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..registry import ACTIVATIONS, Activation, Constructor, Param


def _inverse_softplus(y: float) -> float:
    return math.log(math.expm1(y))


@ACTIVATIONS.register
class XIELU(Activation):
    name = "xielu"
    title = "xIELU"
    flops_per_element = 8  # the comparison, both branches (a square, an expm1 and its clamp), the select
    saves = "input"
    doc = "xielu(alpha_p=0.8, alpha_n=0.8, beta=0.5, eps=-1e-6): xIELU, trained quadratic and exponential branches"
    examples = ({}, {"alpha_p": 1.2, "alpha_n": 0.9, "beta": 0.25})

    class Options(BaseModel):
        model_config = ConfigDict(extra="forbid", frozen=True)
        alpha_p: float = Field(0.8, gt=0.0)  # where α_p starts
        alpha_n: float = Field(0.8, gt=0.0)  # where α_n starts (above beta)
        beta: float = Field(0.5, ge=0.0)
        eps: float = Field(-1e-6, lt=0.0)  # the negative branch reads min(x, eps)

        @model_validator(mode="after")
        def _above_beta(self):
            if self.alpha_n <= self.beta:
                raise ValueError(f"alpha_n ({self.alpha_n:g}) starts above beta ({self.beta:g}): α_n = β + softplus")
            return self

    def params(self, d_ff, options) -> dict[str, Param]:
        return {"alpha_p": Param((1,), "vector", value=_inverse_softplus(options.alpha_p)),
                "alpha_n": Param((1,), "vector", value=_inverse_softplus(options.alpha_n - options.beta))}

    def module(self):
        return self.module_for(self.Options())

    def module_for(self, options):
        from ..nn.xielu import XIELU as Module
        return Constructor(Module, kwargs={"beta": options.beta, "eps": options.eps})

    def feedforward_saved(self, d_ff, dropout):
        # its input (read by both branches), α_p·x (the square's other factor), expm1's output and the negative
        # branch's (expm1 − x), and the down projection's input: its output, or with dropout the mask and the
        # dropped values
        return (5 + (2 if dropout else 0)) * d_ff

    def feedforward_saved_bytes(self, d_ff):
        return d_ff  # the select's condition, x > 0: one byte an element

    def call_saved(self, element_bytes):
        return 2 * element_bytes  # α_p and α_n, made of its two trained values (which are parameters)
