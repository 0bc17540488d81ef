"""The position-wise feed-forward network (Vaswani et al. 2017, section 3.3): down(act(up(x))), one network for
every position. A gated activation (SwiGLU, GEGLU) makes its up projection produce gate and value."""

from ..registry import ACTIVATIONS, FEEDFORWARD_KINDS, Constructor, FeedForwardKind, linear_params


def dense_params(width: int, d_ff: int, activation, bias: bool, prefix: str = "", options=None) -> dict:
    """``up`` and ``down`` linear maps of one network (weights first, then biases), then what its activation
    trains (``options``: the activation's); ``down`` writes into the residual stream."""
    params = {**linear_params(f"{prefix}up", activation.up_features(d_ff), width, bias),
              **linear_params(f"{prefix}down", width, d_ff, bias, residual=True)}
    trained = {f"{prefix}activation.{k}": v for k, v in activation.params(d_ff, options).items()}
    return {**dict(sorted(params.items(), key=lambda item: item[1].role == "bias")), **trained}


def dense_flops(width: int, d_ff: int, activation, bias: bool, dropout: float) -> tuple[int, int]:
    """(matmul, element-wise) FLOPs of one network on one position."""
    up = activation.up_features(d_ff)
    elementwise = (up + width if bias else 0) + activation.flops(d_ff) + (d_ff if dropout else 0)
    return 2 * width * up + 2 * d_ff * width, elementwise


@FEEDFORWARD_KINDS.register
class Dense(FeedForwardKind):
    name = "dense"
    doc = "one two-layer network (or gated unit) applied to every position"

    def params(self, width, body, options):
        activation, values = ACTIVATIONS.of(body.activation)
        return dense_params(width, body.d_ff, activation, body.bias, options=values)

    def module(self, width, body, options):
        from ..nn.feedforward import FeedForward
        activation, values = ACTIVATIONS.of(body.activation)
        return Constructor(FeedForward,
                           (width, body.d_ff, activation.module_for(values), activation.up_features(body.d_ff),
                            body.bias, body.dropout))

    def flops(self, width, body, options):
        return dense_flops(width, body.d_ff, ACTIVATIONS[body.activation.name], body.bias, body.dropout)

    def saved(self, width, body, options):
        return ACTIVATIONS[body.activation.name].feedforward_saved(body.d_ff, bool(body.dropout)), 0

    def saved_bytes(self, width, body, options):
        return ACTIVATIONS[body.activation.name].feedforward_saved_bytes(body.d_ff)

    def call_saved(self, width, body, options, element_bytes):
        return ACTIVATIONS[body.activation.name].call_saved(element_bytes)

    def describe(self, body, options):
        return f"Feed Forward ({ACTIVATIONS.label(body.activation)}, {body.d_ff})"
