"""Per-layer inputs at run time (``tfspec.variants.per_layer``): what the embedding makes for every layer, and
the gate each layer's feed-forward applies to its own. Torch only, so ``tfspec emit`` copies it."""

from __future__ import annotations

import math

from torch import Tensor, nn

CARRIED = "per_layer_inputs"  # the key of ``Context.carried`` under which a call's per-layer inputs travel


class PerLayerInputs(nn.Module):
    """``(table(ids) · √width + norm(projection(x) / √model_width)) / √2``, as ``(batch, length, layers, width)``:
    a token table of ``layers · width`` features per id and a projection of the embeddings ``x``, each layer's
    ``width`` of it normed by ``norm``."""

    def __init__(self, vocab: int, layers: int, width: int, model_width: int, norm: nn.Module) -> None:
        super().__init__()
        self.layers, self.width, self.model_width = layers, width, model_width
        self.table = nn.Embedding(vocab, layers * width)
        self.projection = nn.Linear(model_width, layers * width, bias=False)
        self.norm = norm

    def forward(self, ids: Tensor, x: Tensor) -> Tensor:
        shape = (*ids.shape, self.layers, self.width)
        tokens = (self.table(ids) * math.sqrt(self.width)).view(shape)
        projected = self.norm((self.projection(x) * self.model_width ** -0.5).view(shape))
        return (projected + tokens) * 2 ** -0.5

    def extra_repr(self) -> str:
        return f"layers={self.layers}, width={self.width}"


class PerLayerGate(nn.Module):
    """``down(act(gate(x)) ⊙ e)``, ``e`` the running layer's per-layer inputs (``ctx.carried``, ``ctx.layer``)."""

    def __init__(self, width: int, d_ff: int, activation: nn.Module, bias: bool, dropout: float) -> None:
        super().__init__()
        self.gate = nn.Linear(width, d_ff, bias=bias)
        self.activation = activation
        self.dropout = nn.Dropout(dropout)
        self.down = nn.Linear(d_ff, width, bias=bias)

    def forward(self, x: Tensor, ctx) -> Tensor:
        inputs = ctx.carried[CARRIED][:, :, ctx.layer]
        return self.down(self.dropout(self.activation(self.gate(x)) * inputs))
