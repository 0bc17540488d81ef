"""Chunked attention (Llama 4's local layers): the positions fall in chunks of ``c``, and a query sees only the keys
of its own chunk -- with ``causal``, the earlier keys of its chunk, so the first query of each chunk sees itself
alone. Unlike a sliding window, the look-back grows from 0 to c − 1 along each chunk and then starts over.

    decoder x 48 { attention self heads=40 kv_heads=8 mask=causal + chunked(8192) + padding; ... }

Chunks are of position ids, not of indices in the sequence: a left-padded prompt's chunks start at its first real
token while decoding, whose positions count real tokens only (as Hugging Face's ``generate`` counts them, and as its
chunked mask counts from each row's first real token).
"""

from pydantic import BaseModel, ConfigDict, Field

from ..registry import MASKS, Mask


def chunked(queries, keys, c: int):
    """Query at position i sees the key at position j when ⌊i / c⌋ = ⌊j / c⌋."""
    return queries[..., :, None] // c == keys[..., None, :] // c


@MASKS.register
class Chunked(Mask):
    name = "chunked"
    positional = ("c",)
    allowed_in_cross = False
    reads_positions = True
    examples = ({"c": 1}, {"c": 4})
    doc = "chunked(c): chunks of c positions; a query sees the keys of its own chunk (Llama 4's local layers)"

    class Options(BaseModel):
        model_config = ConfigDict(extra="forbid", frozen=True)
        c: int = Field(gt=0, le=1 << 24)

    rule = staticmethod(chunked)

    def reach(self, options):
        return (options.c - 1, options.c - 1)

    def reach_at(self, options, position):
        within = position % options.c
        return (within, options.c - 1 - within)

    def chunk(self, options):
        return options.c
