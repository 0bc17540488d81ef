"""Initialisation conventions, chosen per model with ``defaults { init NAME }``.

Every scheme sets biases to 0, norm scales to 1 (shifts to 0), a parameter
declared with a constant (``Param.value``) to that constant and one declared with a distribution
(``Param.std``, ``Param.uniform``) from it; they differ in how
they draw matrices, embedding tables and other vectors. Each parameter arrives
with the role its variant declared (``tfspec.backend.compiler.ParamRole``), so a scheme
never guesses from names.
"""

import math

from pydantic import BaseModel, ConfigDict, Field

from ..registry import INITS, Init


def _fixed(tensor, role, norm_scale: float = 1.0, generator=None) -> bool:
    """Declared constants and distributions, biases, norm scales and shifts: the same for every scheme. True when
    handled."""
    import torch
    from torch import nn
    if role.value is not None:
        nn.init.constant_(tensor, role.value)
    elif role.std is not None:
        nn.init.normal_(tensor, 0.0, role.std, generator=generator)
    elif role.ramp:
        tensor.copy_(torch.arange(1, tensor.shape[-1] + 1, dtype=tensor.dtype).expand_as(tensor))
        if role.stored == "log":
            tensor.log_()
    elif role.uniform is not None:
        low, high = (math.log(b) for b in role.uniform) if role.log_spaced else role.uniform
        nn.init.uniform_(tensor, low, high, generator=generator)
        if role.log_spaced:
            tensor.exp_()
        if role.floor is not None:
            tensor.clamp_(min=role.floor)
        if role.stored == "log":
            tensor.log_()
        elif role.stored == "inverse_softplus":  # x + log(1 − e^−x): softplus of it is x (torch has no inverse)
            tensor.add_(torch.log(-torch.expm1(-tensor)))
    elif role.kind in ("bias", "norm_bias"):
        nn.init.zeros_(tensor)
    elif role.kind == "norm_weight":
        nn.init.constant_(tensor, norm_scale)
    else:
        return False
    return True


class _Std(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    std: float = Field(0.02, gt=0, lt=10)


@INITS.register
class Normal(Init):
    name = "normal"
    positional = ("std",)
    Options = _Std
    examples = ({}, {"std": 0.05})
    doc = "normal(std=0.02): every matrix, embedding and vector ~ N(0, std) (BERT, GPT-1)"

    def initialise(self, parameters, options, generator=None):
        from torch import nn
        std = options.std
        for _, tensor, role in parameters:
            if not _fixed(tensor, role, generator=generator):
                nn.init.normal_(tensor, 0.0, std, generator=generator)


@INITS.register
class GPT2(Init):
    name = "gpt2"
    positional = ("std",)
    Options = _Std
    examples = ({}, {"std": 0.05})
    doc = ("gpt2(std=0.02): normal(std), and projections into the residual stream (attention out, "
           "feed-forward down) ~ N(0, std / sqrt(residual branches in their stack)) (GPT-2)")

    def initialise(self, parameters, options, generator=None):
        from torch import nn
        std = options.std
        for _, tensor, role in parameters:
            if _fixed(tensor, role, generator=generator):
                continue
            branches = role.residual_branches
            nn.init.normal_(tensor, 0.0, std / math.sqrt(branches) if branches else std, generator=generator)


@INITS.register
class Xavier(Init):
    name = "xavier"
    doc = ("xavier: Glorot-uniform matrices (torch.nn.Transformer), embeddings ~ N(0, dim^-0.5) "
           "(Vaswani et al.'s shared, sqrt(d_model)-scaled embeddings), other vectors ~ N(0, 0.02)")

    def initialise(self, parameters, options, generator=None):
        from torch import nn
        for _, tensor, role in parameters:
            if _fixed(tensor, role, generator=generator):
                continue
            if role.kind in ("matrix", "unembedding"):
                for matrix in (tensor if tensor.dim() == 3 else [tensor]):  # a mixture's experts: each a matrix
                    nn.init.xavier_uniform_(matrix, generator=generator)
            elif role.kind in ("embedding", "position_table"):
                nn.init.normal_(tensor, 0.0, tensor.shape[-1] ** -0.5, generator=generator)
            else:
                nn.init.normal_(tensor, 0.0, 0.02, generator=generator)


class _Factor(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    factor: float = Field(1.0, gt=0, lt=100)


@INITS.register
class T5(Init):
    name = "t5"
    positional = ("factor",)
    Options = _Factor
    examples = ({}, {"factor": 0.5})
    doc = ("t5(factor=1): T5's (Mesh TensorFlow's): matrices ~ N(0, factor·fan_in^-0.5), query rows further "
           "×head_dim^-0.5 (the 1/sqrt(d) its attention leaves out: use scale=1), token embeddings and an untied "
           "head ~ N(0, factor), position tables (T5's relative bias) ~ N(0, factor·d_model^-0.5), norm scales = "
           "factor, biases 0")

    def initialise(self, parameters, options, generator=None):
        from torch import nn
        factor = options.factor
        for _, tensor, role in parameters:
            if _fixed(tensor, role, norm_scale=factor, generator=generator):
                continue
            if role.kind == "position_table":
                nn.init.normal_(tensor, 0.0, factor * role.width ** -0.5, generator=generator)
            elif role.kind in ("embedding", "unembedding"):
                nn.init.normal_(tensor, 0.0, factor, generator=generator)
            elif role.kind == "matrix":  # by its fan-in (a mixture's experts: each expert's)
                nn.init.normal_(tensor, 0.0, factor * tensor.shape[-1] ** -0.5, generator=generator)
                if role.query_rows:
                    tensor[:role.query_rows].mul_(role.head_dim ** -0.5)
            else:  # scorers, relative tables: by their last dimension, as a matrix by its fan-in
                nn.init.normal_(tensor, 0.0, factor * tensor.shape[-1] ** -0.5, generator=generator)
