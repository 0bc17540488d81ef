"""Positional encodings added to the token embeddings."""

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..registry import POSITIONS, Constructor, Param, Position

MAX_POSITIONS = 1 << 20


@POSITIONS.register
class Sinusoidal(Position):
    name = "sinusoidal"
    doc = ("sinusoidal(halves=false, endpoint=false): fixed sin/cos of geometric wavelengths (Vaswani et al. 2017, "
           "section 3.5), interleaved; halves=true puts every sine first, then every cosine (Marian, fairseq); "
           "endpoint=true spaces the d/2 frequencies from 1 to 1/10000 inclusive (Whisper's)")
    examples = ({}, {"halves": True}, {"halves": True, "endpoint": True})

    class Options(BaseModel):
        model_config = ConfigDict(extra="forbid", frozen=True)
        halves: bool = False  # [sin | cos] instead of sin and cos interleaved
        endpoint: bool = False  # the last frequency 1/10000 exactly: 10000^(-i / (d/2 - 1)), Whisper's

        @model_validator(mode="after")
        def _whisper(self):
            if self.endpoint and not self.halves:
                raise ValueError("endpoint=true is Whisper's ladder of frequencies, written in [sin | cos] halves: "
                                 "write halves=true too")
            return self

    def module(self, dim, options):
        from ..nn.embedding import SinusoidalPositions
        chosen = {k: v for k, v in options.model_dump().items() if v}
        return Constructor(SinusoidalPositions, (dim,), chosen)


@POSITIONS.register
class Learned(Position):
    name = "learned"
    positional = ("max_len",)
    doc = ("learned(max_len, offset=0, skip_padding=false): one trained vector per position (BERT, GPT); position "
           "p reads row p + offset (OPT, BART, RoBERTa: 2); skip_padding counts only real tokens (RoBERTa, OPT)")
    examples = ({"max_len": 64}, {"max_len": 32}, {"max_len": 34, "offset": 2, "skip_padding": True})

    class Options(BaseModel):
        model_config = ConfigDict(extra="forbid", frozen=True)
        max_len: int = Field(gt=0, le=MAX_POSITIONS)  # rows of the table
        offset: int = Field(0, ge=0, le=MAX_POSITIONS)  # position p reads row p + offset: rows it never reads first
        skip_padding: bool = False  # a padded batch's positions count real tokens only (pads read row offset - 1)

        @model_validator(mode="after")
        def _fits(self):
            if self.offset >= self.max_len:
                raise ValueError(f"offset={self.offset} leaves none of the {self.max_len} rows for a position")
            return self

    def params(self, dim, options):
        return {"weight": Param((options.max_len, dim), "position_table")}

    def max_len(self, options):
        return options.max_len - options.offset

    def counts_real_tokens(self, options) -> int | None:
        return options.offset if options.skip_padding else None

    def shrunk(self, options, max_len):
        return options.model_copy(update={"max_len": min(options.max_len, max_len + options.offset)})

    def module(self, dim, options):
        if options.offset:
            from ..nn.embedding import OffsetPositions
            return Constructor(OffsetPositions, (options.max_len, dim, options.offset))
        return Constructor("Embedding", (options.max_len, dim))


@POSITIONS.register
class NoPosition(Position):
    name = "none"
    absent = True
    relative = True  # nothing depends on positions at all
    doc = "no positional information: self-attention is then permutation-equivariant"

    def module(self, dim, options):
        return None
