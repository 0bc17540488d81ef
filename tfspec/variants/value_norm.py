"""The value norm (Gemma 4): each head's values divided by their root mean square, with no weight, before a KV
cache keeps them -- the values' counterpart of a qk-norm, so that every position's value enters the mix at one
scale.

    decoder x 30 { attention self heads=8 kv_heads=4 qk_norm=rmsnorm mask=causal steps=value_norm(1e-6); ... }
"""

from pydantic import BaseModel, ConfigDict, Field

from ..registry import ATTENTION_STEPS, AttentionStepKind, Constructor, Problem


@ATTENTION_STEPS.register
class ValueNorm(AttentionStepKind):
    name = "value_norm"
    title = "value norm"
    positional = ("eps",)
    makes_values = True  # (it norms a copy: the mix keeps new values, not a view of the projection)
    examples = ({}, {"eps": 1e-3})
    doc = "value_norm(eps=1e-6): each head's values divided by their root mean square, no weight (Gemma 4)"

    class Options(BaseModel):
        model_config = ConfigDict(extra="forbid", frozen=True)
        eps: float = Field(1e-6, gt=0, lt=1)

    def check(self, options, shape, kind):
        if not kind.projects_values:
            return [Problem(f"{kind.name} attention makes its values after its KV cache (from a latent), where no "
                            "step can norm them as they are kept", "use value_norm with another kind")]
        return []

    def module(self, shape, options, source):
        from ..nn.value_norm import ValueNorm as Step
        return Constructor(Step, (options.eps,))

    def flops(self, shape, options, queries, keys):
        return 0, 3 * keys * shape.kv_width + 2 * keys * shape.kv_heads  # square, mean, scale; eps and 1/rms

    def saved(self, shape, options, batch, queries, keys, run):
        # the values' float32 copy the norm keeps (the normed values the mix keeps stand for the plain ones), and
        # 1/rms per head and key, twice (the power's input and output)
        return batch * keys * shape.kv_width, 2 * batch * keys * shape.kv_heads
