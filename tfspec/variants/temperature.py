"""Attention temperature tuning (Llama 4's layers without positions; Nakanishi 2025, "Scalable-Softmax Is Superior
for Attention"): each query is multiplied by 1 + scale · log(1 + ⌊(i + 1) / floor⌋), i its index in the sequence,
so that a query far into a long context scores its keys more sharply -- its softmax does not flatten as the keys it
sees grow in number. Up to index floor − 2 the factor is 1; Llama 4 uses floor 8192 and scale 0.1.

    layers 3, 7, 11 { self_attn mask=causal + padding steps=temperature(floor=8192, scale=0.1); position none }

The index counts every token of the sequence, a left-padded prompt's pads included, as Llama 4's reference and
Hugging Face count it (so a left-padded row differs from its unpadded self once a query reaches index floor − 1).
"""

from pydantic import BaseModel, ConfigDict, Field

from ..registry import ATTENTION_STEPS, AttentionStepKind, Constructor


@ATTENTION_STEPS.register
class TemperatureTuning(AttentionStepKind):
    name = "temperature"
    title = "temperature tuning"
    queries_only = True
    examples = ({"floor": 3, "scale": 0.5}, {})
    doc = ("temperature(floor=8192, scale=0.1): each query times 1 + scale · log(1 + ⌊(i + 1) / floor⌋), i its "
           "index in the sequence (Llama 4's layers without positions)")

    class Options(BaseModel):
        model_config = ConfigDict(extra="forbid", frozen=True)
        floor: int = Field(8192, gt=0, le=1 << 30)  # the index span over which the factor stays constant
        scale: float = Field(0.1, ge=0, le=1e3)  # how fast it grows with the log of the index

    def module(self, shape, options, source):
        from ..nn.temperature import TemperatureTuning as Step
        return Constructor(Step, (options.floor, options.scale))

    def flops(self, shape, options, queries, keys):
        return 0, queries * (shape.q_width + 5)  # each query's factor (5 operations), then its product

    def saved(self, shape, options, batch, queries, keys, run):
        return 0, queries  # the factors, float32, one per query (the product's backward reads them)
