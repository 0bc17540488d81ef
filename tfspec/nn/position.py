"""The base of position schemes acting inside attention: an attention step (``tfspec.nn.steps``) that reads
positions only -- ``tables`` once per call, ``rotate`` on queries and keys (rotary), ``score_bias`` added to the
scores (ALiBi, KERPLE, T5) and ``attend`` in place of the softmax mix (Shaw's relative representations). A scheme
overrides what it does and inherits the rest, so no stage asks which scheme it has. Torch only, so ``tfspec emit``
copies it.
"""

from __future__ import annotations

from .steps import AttentionStep


class InAttentionPositions(AttentionStep):
    """The base of in-attention position schemes; ``key`` tells equal schemes apart in a call's memo."""
