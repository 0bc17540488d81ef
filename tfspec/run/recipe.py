"""A run's recipe: optimiser, learning-rate schedule, label smoothing, clipping, each kind's paper defaults."""

from __future__ import annotations

import math
from dataclasses import dataclass

from .config import TrainConfig


@dataclass(frozen=True)
class Recipe:
    """The optimisation a paper used, resolved against a config."""

    optimizer: str  # "adam" | "adamw"
    betas: tuple[float, float]
    eps: float
    weight_decay: float
    schedule: str  # "noam" | "cosine" | "linear"
    lr: float
    warmup: int
    label_smoothing: float
    grad_clip: float | None
    source: str
    paper_steps: int | None = None  # the run the paper's learning rate was chosen for
    paper_parameters: str | None = None
    paper_warmup: int | None = None

    def describe(self) -> str:
        return (f"recipe ({self.source}): {self.optimizer} betas {self.betas} eps {self.eps:g}, {self.schedule} "
                f"schedule, peak lr {self.lr:.3g}, warmup {self.warmup}, label smoothing {self.label_smoothing:g}, "
                f"weight decay {self.weight_decay:g}, grad clip {self.grad_clip or 'none'}")

    def learning_rate(self, step: int, steps: int, decay_from: tuple[int, float] | None = None) -> float:
        """Learning rate of optimizer step ``step`` (1-based) out of ``steps``; ``decay_from`` = (step s,
        progress p): from step s on, the decay goes from p to its end at ``steps`` (a resumed, longer run)."""
        warmup = max(self.warmup, 1)
        if self.schedule == "noam":  # d_model^-0.5 * min(step^-0.5, step * warmup^-1.5), peak scaled to lr
            return self.lr * math.sqrt(warmup) * min(step ** -0.5, step * warmup ** -1.5)
        if step < warmup:
            return self.lr * step / warmup
        return self._decayed(self.progress(step, steps, decay_from))

    def progress(self, step: int, steps: int, decay_from: tuple[int, float] | None = None) -> float:
        """How far the decay after warm-up is at ``step``, from 0 to 1."""
        warmup = max(self.warmup, 1)
        start, done = decay_from if decay_from is not None and step >= decay_from[0] else (warmup, 0.0)
        return min(done + (1 - done) * (step - start) / max(steps - start, 1), 1.0)

    def _decayed(self, progress: float) -> float:
        if self.schedule == "cosine":  # down to a tenth of the peak (GPT-3, nanoGPT)
            return self.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))
        return self.lr * (1 - progress)


SMALL_RUN_LR = 1e-3  # nanoGPT's for its 10M-parameter character model: what small, short runs usually need


def recipe_notes(recipe: Recipe, config: TrainConfig, parameters: int) -> list[str]:
    """What a person should know when the paper's defaults were chosen for a much longer or larger run: the
    warm-up shortened to fit, a peak learning rate far below what a small, short run needs; each with the
    option that sets it."""
    notes = []
    if config.warmup is None and recipe.paper_warmup and recipe.warmup < recipe.paper_warmup:
        steps = f"{recipe.warmup:,} step{'s' if recipe.warmup != 1 else ''}"
        notes.append(f"warm-up {steps}: the paper's {recipe.paper_warmup:,}, shortened to a quarter of --steps "
                     f"{config.steps:,}; set it with --warmup")
    small_short = parameters < 20_000_000 and recipe.paper_steps and config.steps * 20 <= recipe.paper_steps
    if config.lr is None and recipe.schedule != "noam" and small_short and recipe.lr * 5 <= SMALL_RUN_LR:
        notes.append(f"peak lr {recipe.lr:g} is the paper's, chosen for {recipe.paper_steps:,} steps of a "
                     f"{recipe.paper_parameters}-parameter model; this run is {config.steps:,} steps of "
                     f"{parameters / 1e6:.1f}M, and runs that small and short usually learn far faster with "
                     f"--lr {SMALL_RUN_LR:g}")
    return notes


def paper_defaults(kind: str, d_model: int, config: TrainConfig) -> Recipe:
    """Vaswani et al. for encoder-decoder, GPT-2/3 for decoder-only, BERT for encoder-only, CLIP for towers joined
    by a contrastive head, LLaVA-1.5 for towers joined by a connector.

    Warmup is the paper's, shortened to a quarter of ``steps`` when a run is too
    short to finish it.
    """
    if kind == "encoder-decoder":  # lr None: the schedule's own peak, d_model^-0.5 * warmup^-0.5
        base = dict(optimizer="adam", betas=(0.9, 0.98), eps=1e-9, weight_decay=0.0, schedule="noam", warmup=4000,
                    lr=None, label_smoothing=0.1, grad_clip=None, source="Vaswani et al. 2017, 5.3-5.4",
                    paper_steps=100_000, paper_parameters="65M")
    elif kind == "connected towers":  # a vision-language model: LLaVA-1.5's instruction tuning (batch 128)
        base = dict(optimizer="adamw", betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, schedule="cosine", warmup=156,
                    lr=2e-5, label_smoothing=0.0, grad_clip=1.0, source="LLaVA-1.5 (Liu et al. 2023), table 9",
                    paper_steps=5_200, paper_parameters="7B")
    elif kind == "towers":  # a contrastive pair: CLIP's (its ViT-B/32 at batch 32,768, table 20)
        base = dict(optimizer="adamw", betas=(0.9, 0.98), eps=1e-6, weight_decay=0.2, schedule="cosine", warmup=2000,
                    lr=5e-4, label_smoothing=0.0, grad_clip=1.0, source="CLIP (Radford et al. 2021), 2.5 and F",
                    paper_steps=390_000, paper_parameters="151M")
    elif kind == "decoder-only":
        base = dict(optimizer="adamw", betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1, schedule="cosine",
                    warmup=2000, lr=6e-4, label_smoothing=0.0, grad_clip=1.0,
                    source="GPT-3 (Brown et al. 2020) / nanoGPT", paper_steps=600_000, paper_parameters="124M")
    else:
        base = dict(optimizer="adamw", betas=(0.9, 0.999), eps=1e-6, weight_decay=0.01, schedule="linear",
                    warmup=10000, lr=1e-4, label_smoothing=0.0, grad_clip=1.0, source="BERT (Devlin et al. 2018), A.2",
                    paper_steps=1_000_000, paper_parameters="110M")
    base["paper_warmup"] = base["warmup"]
    warmup = config.warmup if config.warmup is not None else min(base["warmup"], max(config.steps // 4, 1))
    lr = base["lr"] if base["lr"] is not None else d_model ** -0.5 * max(warmup, 1) ** -0.5
    base.update(warmup=warmup, lr=config.lr if config.lr is not None else lr)
    if config.label_smoothing is not None:
        base["label_smoothing"] = config.label_smoothing
    if config.weight_decay is not None:
        base["weight_decay"] = config.weight_decay
    if config.grad_clip is not None:
        base["grad_clip"] = config.grad_clip or None
    return Recipe(**base)
