"""A mixture of experts in place of the feed-forward network (``tfspec.variants.moe``): a router scores each
position against every expert, the ``top`` best run on it, and their outputs are summed by the routing weights.

The routing is parts (``RouterPart``), each holding its own parameters, so a family's router is a composition
rather than a flag: a linear map, and a ``Choice`` of experts and weights by its parts: what the router reads
(``NormedInput``: Gemma 4's; ``Jitter``: PhiMoE's), its scoring (``Softmax``, ``Sigmoid``, ``SparseMixer``), a
``Correction`` bias and a ``GroupLimit`` on the choice (DeepSeek's), and the weighing (``Renormalize``, ``Scale``,
``ExpertScale``).

Compute is dropless and grouped: the chosen (position, expert) pairs are sorted by expert, each expert runs once
on all its positions (one matrix product each way), and the results are scattered back. Nothing is computed for
an expert a position did not choose, and no position is dropped for capacity.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .recompute import linear_of_activation


class SparseMixerGradient(torch.autograd.Function):
    """A sparse mixer's routing weight, times 1 or 1/3 (``for_one``), whose gradient reaches the router's scores by
    Heun's third-order estimate (GRIN, Liu et al. 2024, as Phi-3.5-MoE trains): ``w · (onehot(chosen) − gates)``
    times the incoming gradient, the weight ``w`` itself receiving none."""

    @staticmethod
    def forward(ctx, scores: Tensor, weight: Tensor, chosen: Tensor, gates: Tensor, for_one: Tensor) -> Tensor:
        ctx.save_for_backward(weight, chosen, gates)
        return weight * for_one

    @staticmethod
    def backward(ctx, grad: Tensor):
        weight, chosen, gates = ctx.saved_tensors
        grad = grad * weight
        return (gates * -grad).scatter_add_(-1, chosen, grad), None, None, None, None


def sparse_mix_choice(scores: Tensor, candidates: Tensor, eps: float, training: bool, first: bool = True
                      ) -> tuple[Tensor, Tensor]:
    """One choice of the sparse mixer: among ``candidates`` (the scores, with experts already chosen at -inf), those
    within a relative ``2 · eps`` of the best stay; in eval the best is chosen, in training one is sampled by its
    softmax (Gumbel); the weight is its softmax among those that stay. (The random draws, in number and order, are
    Hugging Face's, so a seeded run draws what it draws: its second choice draws its uniform numbers twice.)"""
    with torch.no_grad():
        best, best_index = candidates.max(dim=-1, keepdim=True)
        far = (best - scores) / scores.abs().clamp(min=best) > 2 * eps
    if not training:
        weights = torch.softmax(candidates.masked_fill(far, float("-inf")), dim=-1)
        return weights.gather(-1, best_index), best_index
    with torch.no_grad():  # the weight's gradient is the estimate's (SparseMixerGradient), not the softmax's
        gates = candidates.masked_fill(far, float("-inf"))
        chosen = (gates - torch.empty_like(gates).exponential_().log()).max(dim=-1)[1].unsqueeze(-1)
        gates = torch.softmax(gates, dim=-1)
        top_gate, top = gates.max(dim=-1, keepdim=True)
        drawn = torch.rand_like(top_gate) if first else torch.rand_like(top_gate).uniform_()
        for_one = torch.add(0.3333, torch.logical_or(chosen == top, drawn > 0.75), alpha=0.6667).type_as(gates)
        weight = gates.gather(-1, chosen)
    return SparseMixerGradient.apply(scores, weight, chosen, gates, for_one), chosen


def sparse_mix(logits: Tensor, eps: float, training: bool) -> tuple[Tensor, Tensor]:
    """The sparse mixer's two choices (GRIN, Liu et al. 2024: Phi-3.5-MoE's routing): (weights ``(positions, 2)``,
    chosen experts ``(positions, 2)``), the second chosen as the first among the other experts."""
    first_weight, first = sparse_mix_choice(logits, logits, eps, training)
    second_weight, second = sparse_mix_choice(logits, logits.scatter(-1, first, float("-inf")), eps, training,
                                              first=False)
    return torch.cat((first_weight, second_weight), dim=-1), torch.cat((first, second), dim=-1)


class RouterPart(nn.Module):
    """A part of a mixture's router (``tfspec.variants.router_parts``): each hook does nothing unless the part does
    it. ``order``: where it acts among the router's parts (renormalise, then scale, then scale per expert),
    whatever the order the spec writes them in."""

    order = 0

    def inputs(self, x: Tensor) -> Tensor:
        """What the router and the experts read (training's jitter)."""
        return x

    def reads(self, x: Tensor) -> Tensor:
        """What the router's linear map reads (Gemma 4's normed input)."""
        return x

    def probabilities(self, logits: Tensor) -> Tensor | None:
        """Every expert's probability ``(positions, experts)``, float32, from the logits (a scoring part's)."""
        return None

    def choose(self, logits: Tensor, training: bool) -> tuple[Tensor, Tensor] | None:
        """(weights, chosen experts), where the part chooses them itself (the sparse mixer)."""
        return None

    def choosing(self, scores: Tensor, again: bool) -> Tensor:
        """The scores that choose (not differentiated): a correction bias added, groups not among the best out."""
        return scores

    def weigh(self, weights: Tensor, chosen: Tensor, dtype: torch.dtype) -> Tensor:
        """The chosen experts' weights ``(positions, top)``, float32 until a part casts them to ``dtype``."""
        return weights

    def counted(self, chosen: Tensor, probs: Tensor, top: int) -> Tensor:
        """The choices load balancing counts: those made (the sparse mixer's: by its probabilities)."""
        return chosen

    def chosen(self, chosen: Tensor) -> None:
        """After a training call's choice, outside the graph (a correction bias moving towards balance)."""


class Softmax(RouterPart):
    """A softmax over the experts' logits, in float32 (Mixtral's, Qwen's)."""

    def probabilities(self, logits: Tensor) -> Tensor:
        return logits.float().softmax(dim=-1)


class Sigmoid(RouterPart):
    """A sigmoid of each expert's logit, in float32 (DeepSeek-V3's, Llama 4's)."""

    def probabilities(self, logits: Tensor) -> Tensor:
        return logits.float().sigmoid()


class SparseMixer(Softmax):
    """Two experts chosen in turn by ``sparse_mix`` (``eps``: its threshold), the probabilities a softmax's."""

    def __init__(self, eps: float) -> None:
        super().__init__()
        self.eps = eps

    def choose(self, logits: Tensor, training: bool) -> tuple[Tensor, Tensor]:
        return sparse_mix(logits, self.eps, training)

    def counted(self, chosen: Tensor, probs: Tensor, top: int) -> Tensor:
        return probs.topk(top, dim=-1).indices  # (Phi-3.5-MoE balances the experts they rank first)


class Correction(RouterPart):
    """DeepSeek-V3's per-expert ``bias`` on the scores that choose (not on the weights), adjusted outside gradient
    descent (frozen): with ``rate`` γ, each training call raises an expert's bias by γ where it chose the expert less
    often than the mean and lowers it where more often (balancing without an auxiliary loss)."""

    order = 1

    def __init__(self, experts: int, rate: float = 0.0) -> None:
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(experts), requires_grad=False)
        self.rate = rate
        self.chosen_with: Tensor | None = None  # the bias the last training call chose with

    def choosing(self, scores: Tensor, again: bool) -> Tensor:
        return scores + self.current(self.training, again).float()

    def current(self, training: bool, again: bool) -> Tensor:
        """The bias this call chooses with: a checkpointed layer's second run (``again``) uses the first's, since
        the bias moves after each training call."""
        if not (training and self.rate):
            return self.bias
        if not again:
            self.chosen_with = self.bias.clone()
        return self.chosen_with

    @torch.no_grad()
    def chosen(self, chosen: Tensor) -> None:
        """Move the bias towards balance by the call's choices, counted over every process of a distributed run so
        that their biases stay equal."""
        if not self.rate or chosen.is_meta:  # (meta: no choices made)
            return
        counts = torch.bincount(chosen.reshape(-1), minlength=self.bias.numel()).float()
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.all_reduce(counts)
        self.bias += self.rate * torch.sign(counts.mean() - counts)


class GroupLimit(RouterPart):
    """Group-limited routing: the experts in ``groups`` groups, each position choosing among the ``top_groups``
    groups that score highest, a group by its two best scores' sum (``by="top2"``: DeepSeek-V3's) or its best
    (``"max"``: DeepSeek-V2's)."""

    order = 2

    def __init__(self, groups: int, top_groups: int, by: str = "top2") -> None:
        super().__init__()
        self.groups, self.top_groups, self.by = groups, top_groups, by

    def choosing(self, scores: Tensor, again: bool) -> Tensor:
        """``scores`` with the experts of every group not among the best at -inf."""
        per_group = scores.view(*scores.shape[:-1], self.groups, -1)
        ranked = per_group.topk(2, dim=-1).values.sum(dim=-1) if self.by == "top2" else per_group.amax(dim=-1)
        best = ranked.topk(self.top_groups, dim=-1).indices
        kept = torch.zeros_like(per_group[..., 0], dtype=torch.bool).scatter(-1, best, True)
        return scores.masked_fill(~kept.repeat_interleave(per_group.shape[-1], dim=-1), float("-inf"))


class Renormalize(RouterPart):
    """The chosen experts' weights divided by their sum (plus ``eps``: LFM2-MoE's 1e-6)."""

    order = 1

    def __init__(self, eps: float = 0.0) -> None:
        super().__init__()
        self.eps = eps

    def weigh(self, weights: Tensor, chosen: Tensor, dtype: torch.dtype) -> Tensor:
        total = weights.sum(dim=-1, keepdim=True)
        return weights / (total + self.eps if self.eps else total)


class Scale(RouterPart):
    """The weights times ``factor`` (DeepSeek's routed scaling factor)."""

    order = 2

    def __init__(self, factor: float) -> None:
        super().__init__()
        self.factor = factor

    def weigh(self, weights: Tensor, chosen: Tensor, dtype: torch.dtype) -> Tensor:
        return weights * self.factor


class ExpertScale(RouterPart):
    """A learned ``scale`` per expert on its weight, in the activations' dtype (Gemma 4's ``per_expert_scale``)."""

    order = 3

    def __init__(self, experts: int) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(experts))

    def weigh(self, weights: Tensor, chosen: Tensor, dtype: torch.dtype) -> Tensor:
        return weights.to(dtype) * self.scale[chosen].to(dtype)


class Jitter(RouterPart):
    """Training multiplies the input (the router's and the experts') by noise uniform in 1 ± ``amount``
    (PhiMoE's)."""

    def __init__(self, amount: float) -> None:
        super().__init__()
        self.amount = amount

    def inputs(self, x: Tensor) -> Tensor:
        if not self.training:
            return x
        return x * torch.empty_like(x).uniform_(1.0 - self.amount, 1.0 + self.amount)


class NormedInput(RouterPart):
    """What Gemma 4's router reads: rms(x) · ``scale`` / √width (``scale`` learned per channel)."""

    def __init__(self, width: int, eps: float) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(width))
        self.width, self.eps = width, eps

    def reads(self, x: Tensor) -> Tensor:
        return F.rms_norm(x, (self.width,), eps=self.eps) * self.scale * self.width ** -0.5


class Choice(nn.Module):
    """Which ``top`` experts each position runs and their weights, from the router's logits, by its ``parts``
    (``RouterPart``s, each a submodule under its name): the probabilities (the scoring part's), the choice of the
    ``top`` best by the scores the parts steer (not differentiated), the chosen experts' probabilities weighed by
    the parts, in their ``order``."""

    def __init__(self, top: int, parts: dict[str, RouterPart]) -> None:
        super().__init__()
        self.top = top
        for name, part in parts.items():
            self.add_module(name, part)
        self.part_names = tuple(sorted(parts, key=lambda name: parts[name].order))

    def parts(self) -> list[RouterPart]:
        return [getattr(self, name) for name in self.part_names]

    def inputs(self, x: Tensor) -> Tensor:
        for part in self.parts():
            x = part.inputs(x)
        return x

    def reads(self, x: Tensor) -> Tensor:
        for part in self.parts():
            x = part.reads(x)
        return x

    def forward(self, logits: Tensor, again: bool = False) -> tuple[Tensor, Tensor, Tensor]:
        """(routing weights ``(positions, top)`` in the logits' dtype, chosen experts ``(positions, top)``, every
        expert's probability ``(positions, experts)``); ``again``: a checkpointed layer's second run."""
        parts = self.parts()
        probs = next(p for p in (part.probabilities(logits) for part in parts) if p is not None)
        made = next((c for c in (part.choose(logits, self.training) for part in parts) if c is not None), None)
        if made is not None:
            weights, chosen = made
        else:
            with torch.no_grad():
                scores = probs
                for part in parts:
                    scores = part.choosing(scores, again)
                chosen = scores.topk(self.top, dim=-1).indices
            weights = probs.gather(-1, chosen)
        for part in parts:
            weights = part.weigh(weights, chosen, logits.dtype)
        return weights.to(logits.dtype), chosen, probs

    def counted(self, chosen: Tensor, probs: Tensor) -> Tensor:
        """The choices load balancing counts."""
        for part in self.parts():
            chosen = part.counted(chosen, probs, self.top)
        return chosen

    def chosen(self, chosen: Tensor) -> None:
        """After a training call's choice (not a checkpointed layer's second run)."""
        for part in self.parts():
            part.chosen(chosen)


def expert_counts(chosen: Tensor, experts: int) -> list[int]:
    """How many (position, choice) pairs chose each expert. On the meta device, which holds no values (the cost
    analysis traces there), every pair goes to the first expert: what is computed, and kept, depends only on their
    total, and one expert's products trace fastest."""
    if chosen.is_meta:
        return [chosen.numel()] + [0] * (experts - 1)
    return torch.bincount(chosen.reshape(-1), minlength=experts).tolist()


class Experts(nn.Module):
    """``experts`` networks as stacked weights: ``up`` ``(experts, up_features, width)``, ``down`` ``(experts,
    width, d_ff)`` (and biases); ``forward(x, weights, chosen)`` runs each expert once on the positions that chose
    it and returns their weighted sum per position."""

    def __init__(self, experts: int, width: int, d_ff: int, up_features: int, activation: nn.Module, bias: bool,
                 dropout: float, weigh_inputs: bool = False) -> None:
        super().__init__()
        self.weigh_inputs = weigh_inputs  # the weights scale each expert's input (Llama 4's), not its output
        self.up = nn.Parameter(torch.empty(experts, up_features, width))
        self.down = nn.Parameter(torch.empty(experts, width, d_ff))
        self.up_bias = nn.Parameter(torch.empty(experts, up_features)) if bias else None
        self.down_bias = nn.Parameter(torch.empty(experts, width)) if bias else None
        self.activation = activation
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor, weights: Tensor, chosen: Tensor) -> Tensor:
        positions, top = chosen.shape
        order = chosen.reshape(-1).argsort(stable=True)  # the (position, choice) pairs, grouped by expert
        counts = expert_counts(chosen, self.up.shape[0])
        grouped = x[order // top]  # each pair's position's input
        if self.weigh_inputs:
            grouped = grouped * weights.reshape(-1)[order, None]
        outputs, start = [], 0
        for expert, count in enumerate(counts):
            if count:
                part = grouped[start:start + count]
                h = F.linear(part, self.up[expert], None if self.up_bias is None else self.up_bias[expert])
                weight, bias = self.down[expert], None if self.down_bias is None else self.down_bias[expert]
                if self.training and self.dropout.p:  # ``down`` keeps the dropped values, not the activation's
                    outputs.append(F.linear(self.dropout(self.activation(h)), weight, bias))
                else:  # (called at once: the product's weight is this expert's)
                    outputs.append(linear_of_activation(lambda a: F.linear(a, weight, bias), self.activation, h))
                start += count
        if not outputs:  # no positions at all
            return x.new_zeros(x.shape)
        # back in (position, choice) order, then each position's choices summed by their weights: a gather and a
        # sum keep only indices for backward, where a scatter-add (index_add) would keep the outputs again
        y = torch.cat(outputs)[order.argsort()].view(positions, top, -1)
        return y.sum(dim=1) if self.weigh_inputs else (y * weights[..., None]).sum(dim=1)

    def extra_repr(self) -> str:
        experts, up, width = self.up.shape
        return f"experts={experts}, width={width}, d_ff={self.down.shape[-1]}, bias={self.up_bias is not None}"


class MixtureOfExperts(nn.Module):
    """A ``router`` (a linear map to one logit per expert, reading ``x`` as its ``choice``'s parts make it), its
    ``choice`` of experts and their weights (``Choice``), the ``experts``, and optionally a ``shared`` network every
    position runs (scaled by ``sigmoid(shared_gate(x))`` where it has a gate: Qwen2-MoE); ``experts_norm``: what the
    experts (and a shared network) read x through (Gemma 4's RMSNorm).

    In training, each call records its router's statistics (``balance``: the fraction of choices and the mean
    probability per expert; ``z``: the mean squared log-sum-exp of the logits) in ``router_stats``, which the
    model turns into its auxiliary losses (``CompiledModel.auxiliary_losses``) by ``aux_loss`` and ``z_loss``."""

    def __init__(self, router: nn.Linear, choice: Choice, experts: Experts, *, shared: nn.Module | None = None,
                 shared_gate: nn.Module | None = None, experts_norm: nn.Module | None = None, aux_loss: float = 0.0,
                 z_loss: float = 0.0) -> None:
        super().__init__()
        self.router, self.choice, self.experts = router, choice, experts
        self.shared, self.shared_gate = shared, shared_gate
        self.experts_norm, self.aux_loss, self.z_loss = experts_norm, aux_loss, z_loss
        self.router_stats: dict[str, Tensor] | None = None
        self.recomputing = False  # set by activation checkpointing (tfspec.nn.recompute) for its second run

    def forward(self, x: Tensor, ctx=None) -> Tensor:
        """``x`` (..., width); ``ctx``: the call's ``Context``, whose padding the router's statistics leave out."""
        flat = self.choice.inputs(x.reshape(-1, x.shape[-1]))
        logits = self.router(self.choice.reads(flat))
        again = self.recomputing  # a checkpointed layer's second run: route as the first did, change nothing
        weights, chosen, probs = self.choice(logits, again)
        inputs = flat if self.experts_norm is None else self.experts_norm(flat)
        y = self.experts(inputs, weights, chosen)
        if self.shared is not None:
            shared = self.shared(inputs)
            y = y + (shared if self.shared_gate is None else torch.sigmoid(self.shared_gate(inputs)) * shared)
        if again:
            return y.view(x.shape)
        real = None
        if ctx is not None and ctx.padding is not None and ctx.padding.shape == x.shape[:-1]:
            real = ~ctx.padding.reshape(-1)
        self.router_stats = self.statistics(logits, self.choice.counted(chosen, probs), probs, real) \
            if self.training else None
        if self.training:
            self.choice.chosen(chosen)
        return y.view(x.shape)

    def statistics(self, logits: Tensor, chosen: Tensor, probs: Tensor, real: Tensor | None = None
                   ) -> dict[str, Tensor]:
        """What the auxiliary losses read of this call, over its real positions (``real``: a bool per position;
        None: all of them), as Hugging Face's ``load_balancing_loss_func`` leaves out what its attention mask
        pads: per expert, the fraction of the positions' choices (``(top, experts)``, as Switch and Mixtral count
        them per choice) and the mean routing probability; and the router z-loss's mean squared log-sum-exp."""
        if real is not None:
            logits, chosen, probs = logits[real], chosen[real], probs[real]
        stats = {}
        if self.aux_loss:
            choices = F.one_hot(chosen, probs.shape[-1]).float().mean(dim=0)
            stats["balance"] = (choices, probs.mean(dim=0))
        if self.z_loss:
            stats["z"] = torch.logsumexp(logits.float(), dim=-1).square().mean()
        return stats


def auxiliary_losses(modules) -> dict[str, Tensor]:
    """The training losses of every mixture among ``modules`` from their last training call, each weighted by its
    coefficient: ``moe_balance``, Switch's and Mixtral's load-balancing loss ``experts · Σ f_e · P_e`` with the
    fractions f and probabilities P averaged over the mixtures of one shape (as Hugging Face concatenates its
    layers' router logits; mixtures of other shapes weighed in by their number), and ``moe_z``, the router z-loss (ST-MoE) averaged over them."""
    mixtures = [m for m in modules if isinstance(m, MixtureOfExperts) and m.router_stats is not None]
    losses = {}
    # mixtures of one shape (experts, choices) average their statistics first, as Hugging Face does over its
    # layers; those of other shapes (a schedule's) are weighed in by their number
    groups: dict[tuple, list] = {}
    for m in mixtures:
        if "balance" in m.router_stats:
            groups.setdefault(tuple(m.router_stats["balance"][0].shape), []).append(m)
    if groups:
        total = []
        for group in groups.values():
            choices = torch.stack([m.router_stats["balance"][0] for m in group]).mean(dim=0)
            probs = torch.stack([m.router_stats["balance"][1] for m in group]).mean(dim=0)
            total.append(len(group) * group[0].aux_loss * probs.shape[-1] * (choices * probs).sum())
        losses["moe_balance"] = torch.stack(total).sum() / sum(len(g) for g in groups.values())
    zs = [m for m in mixtures if "z" in m.router_stats]
    if zs:
        losses["moe_z"] = zs[0].z_loss * torch.stack([m.router_stats["z"] for m in zs]).mean()
    return losses
