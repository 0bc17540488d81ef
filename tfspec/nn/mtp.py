"""Multi-token prediction (DeepSeek-V3, §2.2): training's chain of modules predicting further tokens.

Module k (1-based) of D, at position i, joins the previous module's hidden state there (the decoder's final
output for k = 1) with the embedding of token i + k, maps the two to one vector, runs its own layer over the
sequence, and predicts token i + k + 1 through the model's head:

    h'_k = proj([enorm(embed(t_{i+k})); hnorm(h_{k-1})])        (the embedding first, as the checkpoints are)
    h_k  = norm(layer_k(h'_k))                                   p_k = head(h_k)

Training adds ``weight / D · Σ_k CE(p_k, t_{i+k+1})`` to the loss (``added_losses["mtp"]``); the modules do
not change the model's outputs, and inference does not run them. Module k's sequence is the decoder's,
shifted: at the last k positions it reads no token ahead, and predicts nothing there.
"""

from __future__ import annotations

from typing import Callable, Iterator

import torch
import torch.nn.functional as F
from torch import Tensor, nn

IGNORED = -100  # a label that has no loss (cross_entropy's ignore_index, and the trainer's)


class PredictionModule(nn.Module):
    """One depth: the norms, the projection of both joined, its own layer, and the norm before the head."""

    def __init__(self, width: int, enorm: nn.Module, hnorm: nn.Module, layer: nn.Module, norm: nn.Module):
        super().__init__()
        self.enorm, self.hnorm = enorm, hnorm
        self.proj = nn.Linear(2 * width, width, bias=False)
        self.layer = layer
        self.norm = norm

    def forward(self, hidden: Tensor, ahead: Tensor, ctx) -> Tensor:
        """``hidden``: the previous depth's (batch, length, width); ``ahead``: the embedded tokens k ahead."""
        return self.norm(self.layer(self.proj(torch.cat([self.enorm(ahead), self.hnorm(hidden)], dim=-1)), ctx))


class MultiTokenPrediction(nn.ModuleList):
    """The D ``PredictionModule``s in a chain; ``added_losses`` holds their weighted loss from the last training
    call (None otherwise). ``first_layer``: the layer number the first module's layer runs as (the decoder's
    layer count: its checkpoints' ``layers.{L}``), for a sublayer that keys what it keeps by layer."""

    def __init__(self, modules: list[PredictionModule], weight: float, first_layer: int):
        super().__init__(modules)
        self.weight, self.first_layer = weight, first_layer
        self.added_losses: dict[str, Tensor] | None = None

    def forward(self, hidden: Tensor, ids: Tensor, embed: Callable[[Tensor], Tensor],
                logits: Callable[[Tensor], Tensor], ctx, labels: Tensor | None = None) -> None:
        """Train the modules on one batch: ``hidden`` the decoder's output over ``ids`` (batch, length), ``embed``
        and ``logits`` the model's embedding and head, ``ctx`` the decoder's call's context. ``labels``: the next
        token's id at each position (-100 where none, as the trainer's); default: the next of ``ids``, none where
        it or the position is padding."""
        self.added_losses = None
        if not (self.training and torch.is_grad_enabled()):
            return
        if labels is None:
            labels = next_tokens(ids, ctx.padding)
        total = hidden.new_zeros((), dtype=torch.float32)
        for k, hidden in enumerate(self.chain(hidden, ids, embed, ctx), start=1):
            targets = F.pad(labels[:, k:], (0, k), value=IGNORED)  # module k's: the labels k positions on
            counted = (targets != IGNORED).sum()
            summed = F.cross_entropy(logits(hidden).float().flatten(0, 1), targets.flatten(), ignore_index=IGNORED,
                                     reduction="sum")
            total = total + summed / counted.clamp(min=1)
        self.added_losses = {"mtp": self.weight / len(self) * total}

    def chain(self, hidden: Tensor, ids: Tensor, embed: Callable[[Tensor], Tensor], ctx) -> Iterator[Tensor]:
        """Each module's hidden states in turn, module k's at position i reading token i + k (the last k
        positions read id 0, and mean nothing)."""
        for k, module in enumerate(self, start=1):
            ahead = F.pad(ids[:, k:], (0, k))
            ctx.layer, ctx.run = self.first_layer + k - 1, ctx.run + 1
            hidden = module(hidden, embed(ahead), ctx)
            yield hidden


def next_tokens(ids: Tensor, padding: Tensor | None) -> Tensor:
    """Each position's label for next-token prediction: the next id, -100 at the last position and where the
    position or the next is padding (True)."""
    labels = F.pad(ids[:, 1:], (0, 1), value=IGNORED)
    if padding is not None:
        unlabelled = padding | F.pad(padding[:, 1:], (0, 1), value=True)
        labels = labels.masked_fill(unlabelled, IGNORED)
    return labels
