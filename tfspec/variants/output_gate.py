"""The output gate (Qiu et al., "Gated Attention for Large Language Models", 2025; Qwen3-Next's and Qwen3.5's full
attention): the heads' joined outputs multiplied, feature by feature, by σ(x W_g) of the attention's input before the
output projection -- a query-dependent sparsity that lets a head give nothing, which removes the attention sink.

    decoder x 48 { attention self heads=16 kv_heads=2 mask=causal + padding steps=output_gate; ... }
"""

from pydantic import BaseModel, ConfigDict

from ..registry import ATTENTION_STEPS, AttentionKind, AttentionStepKind, Constructor, Problem, linear_params


@ATTENTION_STEPS.register
class OutputGateStep(AttentionStepKind):
    name = "output_gate"
    title = "output gate"
    queries_only = True  # it reads the input and acts on the output: a reader of another layer's keys may take it
    gates_output = True
    examples = ({}, {"bias": True})
    doc = ("output_gate(bias=false): the heads' joined outputs times σ(x W_g + b) of the attention's input, before "
           "the output projection (Qwen3-Next's and Qwen3.5's gated attention)")

    class Options(BaseModel):
        model_config = ConfigDict(extra="forbid", frozen=True)
        bias: bool = False

    def params(self, shape, options):
        return linear_params("proj", shape.q_width, shape.width, options.bias)

    def check(self, options, shape, kind):
        if type(kind).value_dim is not AttentionKind.value_dim:  # its outputs are not heads · head_dim wide
            return [Problem(f"{kind.name} attention sizes its values apart from its heads' head_dim, and the gate is "
                            "one per feature of heads · head_dim", "use output_gate with another kind")]
        if shape.cross:
            return [Problem("the output gate reads the queries' own input: it gates self-attention",
                            "drop it from cross-attention")]
        return []

    def module(self, shape, options, source):
        from ..nn.output_gate import OutputGate
        return Constructor(OutputGate, (shape.width, shape.q_width, options.bias))

    def flops(self, shape, options, queries, keys):
        features = queries * shape.q_width
        return 2 * features * shape.width, 5 * features + (features if options.bias else 0)  # σ (4) and the product

    def saved(self, shape, options, batch, queries, keys, run):
        # the joined outputs and the gate (the product), the output projection keeping the product in their place
        return 2 * batch * queries * shape.q_width, 0
