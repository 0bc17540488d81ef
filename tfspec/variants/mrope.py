"""Multimodal rotary positions (M-RoPE: Qwen2-VL, Qwen2.5-VL): rotary positions of a text model whose prompt holds
pictures, each picture's vectors numbered by where they stand in its grid.

Each head's frequency ladder θ^(-2i/d), i < d/2, is cut into three consecutive sections of ``temporal``, ``height``
and ``width`` frequencies (summing to d/2, Hugging Face's ``mrope_section``), turning by a token's temporal, height
and width positions. A text token's three positions are its position
id. A picture's vectors all stand at one position id, its first (the temporal position), with their row and column
in its grid of vectors added for the height and width ones; the picture advances the count by its longer side, not
by its vectors (a picture of 16 × 16 vectors takes 256 tokens and 16 positions, one of 8 × 20 160 tokens and 20). The model numbers a prompt so where its
connector puts pictures, and fills the run-time inputs ``picture_ids``, ``picture_rows`` and ``picture_columns``
itself: ``model(text=ids, vision=pixels)`` needs nothing more. Without pictures it is ``rotary``.

    decoder x 36 { position mrope(theta=1000000, temporal=16, height=24, width=24); attention self ...; }
"""

from pydantic import BaseModel, ConfigDict, Field

from .rotary import on_cross
from ..registry import POSITIONS, Constructor, Position, Problem, RuntimeInput
from .pictures import PICTURE_IDS


def _grid_example(axis: int):
    def example(length: int) -> list[int]:  # a picture of 3 × 3 vectors after a token
        return ([0] + [divmod(i, 3)[axis] for i in range(9)] + [0] * length)[:length]
    return example


PICTURE_ROWS = RuntimeInput("picture_rows", "each image token's row in its picture's grid of vectors (0 for "
                            "a token), filled from the image tokens by a model of towers", "position",
                            example=_grid_example(0), pictures="rows")
PICTURE_COLUMNS = RuntimeInput("picture_columns", "each image token's column in its picture's grid of "
                               "vectors (0 for a token), filled from the image tokens by a model of towers",
                               "position", example=_grid_example(1), pictures="columns")


@POSITIONS.register
class MRoPE(Position):
    name = "mrope"
    title = "M-RoPE"
    acts = "attention"
    enters = "rotates q, k"
    relative = True  # every position shifted alike shifts all three alike
    needs_dot_product = True
    inputs = (PICTURE_IDS, PICTURE_ROWS, PICTURE_COLUMNS)
    doc = ("mrope(theta=10000, temporal, height, width): rotary positions whose frequencies turn in three sections "
           "(of temporal, height and width frequencies) by a token's temporal, height and width positions; a "
           "picture's vectors at its first position, their rows and columns added (Qwen2-VL's, Qwen2.5-VL's)")
    examples = ({"temporal": 2, "height": 1, "width": 1}, {"theta": 100.0, "temporal": 0, "height": 2, "width": 2})

    class Options(BaseModel):
        model_config = ConfigDict(extra="forbid", frozen=True)
        theta: float = Field(10000.0, gt=1.0)
        # of each head's d/2 frequencies, the first ``temporal``, the next ``height``, the last ``width``
        temporal: int = Field(ge=0, le=1 << 12)
        height: int = Field(ge=0, le=1 << 12)
        width: int = Field(ge=0, le=1 << 12)

    @staticmethod
    def sections(options) -> list[int]:
        return [options.temporal, options.height, options.width]

    def for_head_dim(self, options, head_dim):
        """Its sections in the same proportions (each at least 1 where it had any) of ``head_dim / 2``."""
        sections, pairs = self.sections(options), head_dim // 2
        scaled = [max(1 if s else 0, s * pairs // sum(sections)) for s in sections]
        scaled[scaled.index(max(scaled))] += pairs - sum(scaled)
        return options.model_copy(update=dict(zip(("temporal", "height", "width"), scaled)))

    def check(self, options, shape):
        turned = sum(self.sections(options))
        if 2 * turned != shape.head_dim:
            return [Problem(f"mrope's sections turn {turned} frequencies ({options.temporal} + {options.height} + "
                            f"{options.width}); a head of {shape.head_dim} dimensions has {shape.head_dim // 2}",
                            "make temporal + height + width head_dim / 2 (Qwen2.5-VL: 16 + 24 + 24 of 128)")]
        return on_cross(shape)

    def attention_flops(self, options, shape, queries, keys):
        return 3 * shape.head_dim * (shape.heads * queries + shape.kv_heads * keys)

    def key_flops(self, options, shape, keys):
        return 3 * shape.head_dim * shape.kv_heads * keys

    def call_saved(self, options, shape, length):
        return 2 * length * shape.head_dim

    def module(self, where, options):
        from ..nn.rotary import MultimodalRotaryPositions
        return Constructor(MultimodalRotaryPositions, (where.head_dim, options.theta, self.sections(options)))
