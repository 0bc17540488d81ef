"""Per-layer inputs (Gemma 4's per-layer embeddings, "PLE"): besides the stream, each layer of the stack gets
features of its own for every token -- a table of ``layers · d`` per token id, scaled by √d, plus the embeddings
projected to as many, each layer's d of them normed, the two summed and scaled by 2^-½ -- and a feed-forward of
each layer gates its own with the stream: ``down(act(gate(x)) ⊙ e_layer)``. The table sits with the embedding
(``embedding tokens { ...; per_layer 256 }``), the gate in the layer:

    x = x + norm(feedforward(x, d_ff=256, activation=gelu_tanh, bias=false, kind=per_layer))

Gemma 4 E2B's tables hold 35 · 256 features for each of 262,144 tokens (2.3 billion parameters, read one row per
token: why its "effective" size is 2 billion)."""

from ..registry import ACTIVATIONS, FEEDFORWARD_KINDS, Constructor, FeedForwardKind, linear_params


@FEEDFORWARD_KINDS.register
class PerLayer(FeedForwardKind):
    name = "per_layer"
    doc = ("per_layer: down(act(gate(x)) ⊙ e), e its layer's per-layer inputs (d_ff of them: the embedding's "
           "per_layer), Gemma 4's per-layer embeddings")
    reads_per_layer = True
    trains_activation = False  # (a fixed function between the gate and the product)

    def params(self, width, body, options):
        params = {**linear_params("gate", body.d_ff, width, body.bias),
                  **linear_params("down", width, body.d_ff, body.bias, residual=True)}
        return dict(sorted(params.items(), key=lambda item: item[1].role == "bias"))

    def module(self, width, body, options):
        from ..nn.per_layer import PerLayerGate
        return Constructor(PerLayerGate, (width, body.d_ff, ACTIVATIONS[body.activation.name].module(), body.bias,
                                          body.dropout))

    def flops(self, width, body, options):
        activation, d_ff = ACTIVATIONS[body.activation.name], body.d_ff
        elementwise = (d_ff + width if body.bias else 0) + activation.flops(d_ff) + d_ff + (d_ff if body.dropout else 0)
        return 4 * width * d_ff, elementwise

    def saved(self, width, body, options):
        # the gate's output (the function's input) or the function's output, the function's output again (the
        # product's, for the inputs' gradient) and the product (the down projection's input); with dropout its
        # mask and the dropped values
        return 3 * body.d_ff + (2 * body.d_ff if body.dropout else 0), 0

    def describe(self, body, options):
        return f"Per-Layer Gate ({ACTIVATIONS.label(body.activation)}, {body.d_ff})"
