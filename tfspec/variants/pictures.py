"""Pictures mask (Gemma 3's vision-language models): causal, and each picture's image tokens see one another.

A vision-language model puts a picture's vectors at a run of image tokens (``connect vision -> text ...``); Gemma 3
lets those positions attend to each other in both directions, as the vision tower's patches did, while every
other query stays causal. The run-time input ``picture_ids`` says which picture each token stands for (0: none; 1,
2, ... along the row); a model of towers fills it from the image tokens where its connector splices pictures, so
``model(text=ids, vision=pixels)`` needs nothing more. Without it (a text-only prompt) the mask is causal.

Pictures stand in a prompt, which decoding feeds whole in its first step: every later token is causal, and a KV
cache reproduces recomputation.

    decoder x 34 { attention self heads=8 mask=pictures + window(1024) + padding; ... }
"""

from ..registry import MASKS, Mask, RuntimeInput


def two_pictures(length: int) -> list[int]:
    """Example ids: a token, a picture of a quarter of the row, two tokens, another picture, the rest tokens."""
    quarter = max(1, length // 4)
    ids = [0] + [1] * quarter + [0, 0] + [2] * quarter
    return (ids + [0] * length)[:length]


PICTURE_IDS = RuntimeInput("picture_ids", "the picture each token stands for (0: none; 1, 2, ... along the row), "
                           "filled from the image tokens by a model of towers (default: no pictures)", "position",
                           example=two_pictures, pictures="ids")


def pictures(queries, keys, picture_ids=None):
    """Query i sees key j when j <= i, or when both stand for one picture (``picture_ids``: (batch or 1, length))."""
    causal = keys[..., None, :] <= queries[..., :, None]
    if picture_ids is None:
        return causal
    last = picture_ids.shape[1] - 1  # banded attention asks about keys beyond the ends, which it never shows
    mine, theirs = picture_ids[:, queries.clip(0, last)][..., :, None], picture_ids[:, keys.clip(0, last)][..., None, :]
    return causal | ((mine == theirs) & (mine > 0))


@MASKS.register
class Pictures(Mask):
    name = "pictures"
    allowed_in_cross = False
    inputs = (PICTURE_IDS,)
    doc = "causal, and each picture's image tokens see one another (picture_ids, filled from the image tokens)"

    rule = staticmethod(pictures)

    def reach(self, options):
        return (None, None)  # an image token sees the rest of its picture ahead

    def causal_from(self, options):
        # causal after the prompt, whose pictures the model marks itself: decoding feeds it whole in its first step
        return "start"
