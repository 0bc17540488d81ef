"""Positional encodings added to the token embeddings."""

from pydantic import BaseModel, ConfigDict, Field

from ..registry import POSITIONS, Constructor, Param, Position

MAX_POSITIONS = 1 << 20


@POSITIONS.register
class Sinusoidal(Position):
    name = "sinusoidal"
    doc = "fixed sin/cos of geometric wavelengths (Vaswani et al. 2017, section 3.5)"

    def module(self, dim, options):
        from ..nn.embedding import SinusoidalPositions
        return Constructor(SinusoidalPositions, (dim,))


@POSITIONS.register
class Learned(Position):
    name = "learned"
    positional = ("max_len",)
    doc = "learned(max_len): one trained vector per position (BERT, GPT)"
    examples = ({"max_len": 64}, {"max_len": 32})

    class Options(BaseModel):
        model_config = ConfigDict(extra="forbid", frozen=True)
        max_len: int = Field(gt=0, le=MAX_POSITIONS)

    def params(self, dim, options):
        return {"weight": Param((options.max_len, dim), "position_table")}

    def max_len(self, options):
        return options.max_len

    def shrunk(self, options, max_len):
        return options.model_copy(update={"max_len": min(options.max_len, max_len)})

    def module(self, dim, options):
        return Constructor("Embedding", (options.max_len, dim))


@POSITIONS.register
class NoPosition(Position):
    name = "none"
    absent = True
    relative = True  # nothing depends on positions at all
    doc = "no positional information: self-attention is then permutation-equivariant"

    def module(self, dim, options):
        return None
