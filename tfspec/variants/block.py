"""Local block attention (the notes' "local attention"; Parmar et al. 2018's 1-D local blocks, Longformer-style
locality without the sliding window): the sequence is cut into blocks of ``b`` positions, and each query sees
every key of its own block and of the previous one.

So query i (block i // b) sees keys j with i // b - 1 <= j // b <= i // b: at most 2b keys, up to
b + i % b behind and b - 1 - i % b ahead, which makes its reach (2b - 1, b - 1). With ``causal`` it sees the
previous block and its own block up to itself. Like ``window``, it is computed in bands of blocks, in time and
memory that grow with n·b.

    encoder x 6 { attention self heads=8 mask=block(128) + padding; ... }
"""

from pydantic import BaseModel, ConfigDict, Field

from ..registry import MASKS, Mask


def local_blocks(queries, keys, b: int):
    """Query i sees key j when j's block of ``b`` positions is i's or the one before it."""
    offset = queries[..., :, None] // b - keys[..., None, :] // b  # blocks between the query's and the key's
    return (offset >= 0) & (offset <= 1)


@MASKS.register
class LocalBlocks(Mask):
    name = "block"
    positional = ("b",)
    allowed_in_cross = False
    examples = ({"b": 1}, {"b": 4})
    doc = "block(b): blocks of b positions; a query sees its own block and the previous one"

    class Options(BaseModel):
        model_config = ConfigDict(extra="forbid", frozen=True)
        b: int = Field(gt=0, le=1 << 20)

    rule = staticmethod(local_blocks)

    def reach(self, options):
        return (2 * options.b - 1, options.b - 1)

    def reach_at(self, options, position):
        within = position % options.b
        return (options.b + within, options.b - 1 - within)
