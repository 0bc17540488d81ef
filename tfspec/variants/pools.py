"""Pools: one vector of each sequence, which a head projects (``head linear(10) pool=first``).

- ``first``: the first position's (ViT's class token, BERT's [CLS]);
- ``last``: the last position's, whatever it holds (SigLIP's text tower, whose texts are padded to one length);
- ``mean``: the mean of the positions;
- ``token(id)``: the first position holding token ``id`` (CLIP's end of text);
- ``highest_id``: the first position of the sequence's highest token id (CLIP's checkpoints from before its
  end-of-text id was written in the configuration: that token was the vocabulary's last).
"""

from pydantic import BaseModel, ConfigDict, Field

from ..registry import Constructor, POOLS, Pool

MAX_ID = 1 << 24


@POOLS.register
class First(Pool):
    name = "first"
    reads = "the first position"
    keeps_input = view = True  # the vector it reads is a view of its input
    doc = "first: the first position's vector (a class token)"

    def module(self, width, options):
        from ..nn.pool import Position
        return Constructor(Position, (0,))


@POOLS.register
class Last(Pool):
    name = "last"
    reads = "the last position"
    keeps_input = view = True  # the vector it reads is a view of its input
    doc = "last: the last position's vector, whatever token it holds (SigLIP's text)"

    def module(self, width, options):
        from ..nn.pool import Position
        return Constructor(Position, (-1,))


@POOLS.register
class Mean(Pool):
    name = "mean"
    reads = "the mean of the positions"
    doc = "mean: the mean of the positions' vectors"

    def flops(self, width, length, options):
        return 0, length * width

    def module(self, width, options):
        from ..nn.pool import Mean as Module
        return Constructor(Module)


@POOLS.register
class Token(Pool):
    name = "token"
    positional = ("id",)
    reads_ids = True
    reads = "the first position of a token"
    doc = "token(id): the vector of the first position holding token id (CLIP's end of text)"
    examples = ({"id": 3}, {"id": 7})

    class Options(BaseModel):
        model_config = ConfigDict(extra="forbid", frozen=True)
        id: int = Field(ge=0, lt=MAX_ID)  # the token whose first position it reads

    def describe(self, options):
        return f"the first position of token {options.id}"

    def token(self, options):
        return options.id

    def saved(self, width, length, options, element_bytes):
        return 2 * 8  # a gather's int64 indices: the sequence's and the position's

    def module(self, width, options):
        from ..nn.pool import FirstOf
        return Constructor(FirstOf, (options.id,))


@POOLS.register
class HighestId(Pool):
    name = "highest_id"
    reads_ids = reads_highest_id = True
    reads = "the first position of the highest token id"
    doc = "highest_id: the vector of the first position of the sequence's highest token id (CLIP's first checkpoints)"

    def saved(self, width, length, options, element_bytes):
        return 2 * 8  # a gather's int64 indices: the sequence's and the position's

    def module(self, width, options):
        from ..nn.pool import HighestId as Module
        return Constructor(Module)
