"""The training loop: steps, evaluations, checkpoints, signals, progress, the estimate of its time."""

from __future__ import annotations

import json
import math
import signal
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch

from ..backend.compiler import compile as compile_spec
from ..errors import RunError, shown
from ..files import append_line
from ..ir.api import parse
from ..front.schema import Towers
from . import checkpoint as ckpt
from . import lora
from .config import TrainConfig
from .data import TRAIN
from .distributed import World, all_sum, full_state, gathered, gradients_synced, load_optimizer_state, unwrap, wrap
from .initial import Initial, load_initial
from .metrics import plot_losses, truncate_metrics
from .contrastive import AnsweringObjective, PairedObjective
from .objective import Objective
from .recipe import Recipe, paper_defaults, recipe_notes
from .watch import TensorBoard


# ---------------------------------------------------------------- the loop
@dataclass
class Run:
    """What a call to ``train`` did: losses per step (this call's), evaluations, where it saved."""

    model: torch.nn.Module
    objective: Objective
    recipe: Recipe
    step: int
    losses: list[float] = field(default_factory=list)
    evaluations: list[dict] = field(default_factory=list)
    checkpoint: Path | None = None
    interrupted: bool = False
    signal: str | None = None  # the signal that stopped it early ("SIGINT", "SIGTERM"), which it saved for
    seconds: float = 0.0


def _optimizer(model, recipe: Recipe):
    trained = [p for p in model.parameters() if p.requires_grad]  # frozen: adapters' bases, a correction bias
    decay = [p for p in trained if p.dim() >= 2]
    no_decay = [p for p in trained if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": recipe.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    cls = torch.optim.AdamW if recipe.optimizer == "adamw" else torch.optim.Adam
    # one fused kernel for every parameter (2.5 times as fast a step as the per-list kernels on the CPU), where
    # the parameters are plain tensors: a sharded model's (FSDP's DTensors) keeps the default
    fused = all(type(p.data) is torch.Tensor and p.device.type in ("cpu", "cuda") and p.is_floating_point()
                for p in trained) or None
    return cls(groups, lr=recipe.lr, betas=recipe.betas, eps=recipe.eps, fused=fused)


class _StopFlag:
    """The first Ctrl-C (SIGINT), or SIGTERM (a service manager's or a scheduler's stop, in a run of one process:
    torchrun stops its workers itself), asks the loop to stop after the current step and save; a second
    signal interrupts."""

    def __init__(self, terminate: bool = True):
        self.requested: str | None = None  # the signal's name
        self.signals = (signal.SIGINT, signal.SIGTERM) if terminate else (signal.SIGINT,)
        self.previous: dict = {}

    def __enter__(self):
        try:
            self.previous = {s: signal.signal(s, self._handle) for s in self.signals}
        except ValueError:  # not the main thread: leave signals alone
            self.previous = {}
        return self

    def _handle(self, signum, frame):
        if self.requested:
            raise KeyboardInterrupt
        self.requested = signal.Signals(signum).name

    def __exit__(self, *exc):
        for number, handler in self.previous.items():
            signal.signal(number, handler)


@dataclass(frozen=True)
class Start:
    """Where a run starts: its spec (text, the name it is read as, ``let`` overrides), and a checkpoint it
    resumes (``saved``) or weights it starts from (``initial``), if any."""

    spec_text: str
    name: str
    overrides: dict | None
    saved: ckpt.Checkpoint | None = None
    initial: Initial | None = None


@dataclass(frozen=True)
class Stops:
    """When a run stops before its last step: after ``after`` steps, or when ``until(metrics)`` says so."""

    after: int | None = None
    until: Callable[[dict], bool] | None = None


class Trainer:
    """A run in progress, by concern: set-up (model, data, optimiser, restored state), one optimiser step
    over a global batch (``step``), evaluation, checkpoints, metrics and the log; ``train`` drives them to
    the last step, an early stop or Ctrl-C."""

    def __init__(self, start: Start, config: TrainConfig, run_dir: str | Path | None, stops: Stops,
                 progress: bool, log: Callable[[str], None], world: World = World()) -> None:
        self.start, self.config, self.stops, self.world = start, config, stops, world
        self.run_dir = Path(run_dir) if run_dir is not None else None
        self.progress, self.log = progress, log
        if not world.main:  # metrics, progress, plots and checkpoints come from rank 0
            self.run_dir, self.progress, self.log = None, False, lambda line: None
        self.build()
        self.restore()
        self.metrics_path = self.run_dir / "metrics.jsonl" if self.run_dir is not None else None
        self.watchers = []
        if self.run_dir is not None:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            truncate_metrics(self.metrics_path, self.run.step)
            if "tensorboard" in config.log:
                self.watchers.append(TensorBoard(self.run_dir, self.run.step, self.spec, start.spec_text, self.log))
        self.bar = None

    # ------------------------------------------------------------ set-up
    def build(self) -> None:
        """The model (the same weights on every worker), its objective and data, the recipe and optimiser."""
        start, config, world = self.start, self.config, self.world
        self.spec = parse(start.spec_text, file=start.name, overrides=start.overrides)
        self.device = device = world.device(config.device)
        model = compile_spec(self.spec, device=device, seed=config.seed)
        vocab = start.saved.vocabulary() if start.saved is not None else \
            start.initial.vocab if start.initial is not None else None
        self.objective = objective_for(model, config, vocab, world)
        if start.initial is not None:
            load_initial(model, start.initial, start.name)
        kind = "connected towers" if isinstance(self.spec, Towers) and self.spec.connectors else self.spec.kind
        self.recipe = paper_defaults(kind, _width(model), config)
        if start.saved is not None:
            start.saved.load_weights(model)
        try:
            self.adapters = lora.apply(model, config.lora, config.seed) if config.lora is not None else None
        except ValueError as exc:  # a target that names no linear map
            raise RunError(str(exc)) from None
        if config.activation_checkpointing:
            model.checkpoint_activations()
        step = start.saved.step if start.saved is not None else 0
        dtype = getattr(torch, config.dtype)
        self.autocast = (lambda: torch.autocast(device.type, dtype=dtype)) if config.dtype != "float32" \
            else nullcontext
        self.last_step = config.steps if self.stops.after is None else min(self.stops.after, config.steps)
        self.estimate = (_estimate(model, self.objective, config, device, self.autocast, self.spec,
                                   config.steps - step, world.size, early_stop=self.stops.until is not None)
                         if step < self.last_step else [])
        self.parameters = sum(p.numel() for p in model.parameters())
        if config.compile:
            model.compile()  # in place: the state dict keeps its names
        self.model = wrap(model, world, self.objective.batch(TRAIN, 0).rows(slice(0, 1)).to(device).inputs)
        self.optimizer = _optimizer(self.model, self.recipe)
        self.scaler = torch.amp.GradScaler(device.type, enabled=config.dtype == "float16")
        self.run = Run(self.model, self.objective, self.recipe, step)
        self.meta = {"config": config.model_dump(), "overrides": start.overrides or {},
                     "vocab": self.objective.vocab.to_dict() if self.objective.vocab is not None else None,
                     "spec_file": start.name, "kind": self.spec.kind,
                     "recipe": self.recipe.__dict__, "workers": world.size,
                     "strategy": world.strategy if world.distributed else None}

    def restore(self) -> None:
        """Dropout's random stream, and a resumed run's optimiser, loss scaler and random states."""
        torch.manual_seed(self.config.seed + self.world.rank)  # the seed itself on one worker
        state = self.start.saved.training_state() if self.start.saved is not None else None
        if state is not None:
            misfit = ckpt.training_state_misfit(state, self.optimizer, self.scaler)
            if misfit is not None:
                where = shown(self.start.saved.path / "state.pt")
                raise ckpt.CheckpointError(f"{where}: it does not fit this run: {misfit}")
            if self.adapters is not None:
                try:
                    lora.restore(unwrap(self.model), state.get("lora") or {})
                except ValueError as exc:
                    raise ckpt.CheckpointError(f"{self.start.saved.path}: {exc}") from None
            load_optimizer_state(self.model, self.optimizer, state["optimizer"], self.world)
            self.scaler.load_state_dict(state["scaler"])
            _restore_rng(state, self.world, self.device, self.config.seed, self.run.step)

    def introduce(self) -> None:
        """What the run will do: data notes, the recipe, where it starts, workers and the time it will take."""
        start, log = self.start, self.log
        for note in self.objective.notes:
            log(note)
        log(self.recipe.describe() + (f"; resuming at step {self.run.step}" if start.saved is not None else "")
            + (f"; starting from the weights of {start.initial.source}" if start.initial is not None else ""))
        for note in recipe_notes(self.recipe, self.config, self.parameters):
            log(note)
        if self.adapters is not None:
            trainable, total = self.adapters
            log(f"LoRA {self.config.lora.describe()}: {trainable:,} trainable parameters of {total:,} "
                f"({100 * trainable / total:.2g}%); the rest is frozen")
        if self.world.distributed:
            log(f"{self.world.size} workers ({self.world.strategy}, "
                f"{'nccl' if self.device.type == 'cuda' else 'gloo'}), {self.config.batch // self.world.size} "
                f"sequences each of every global batch of {self.config.batch}")
        for line in self.estimate:
            log(line)

    # ------------------------------------------------------------ the loop
    def train(self) -> Run:
        """Steps to the last one, or until an evaluation, ``stop_after`` or Ctrl-C stops the run (which saves)."""
        config, run = self.config, self.run
        self.introduce()
        self.model.train()
        started, first_step = time.perf_counter(), run.step
        self.bar = _progress(self.progress, run.step, config.steps)
        log_every = config.log_every or max(config.steps // 100, 1)
        with _StopFlag(terminate=self.world.size == 1) as stop:
            while run.step < self.last_step and not _agreed(stop.requested is not None, self.world):
                tick = time.perf_counter()
                loss, lr, tokens = self.step()
                speed = tokens / max(time.perf_counter() - tick, 1e-9)
                self.record({"step": run.step, "loss": loss, "lr": lr, "grad_norm": self.grad_norm,
                             "tokens_per_s": round(speed, 1), **self.auxiliary}, "train")
                if self.bar is not None:
                    self.bar.update(1)
                    self.bar.set_postfix(loss=f"{loss:.4f}", lr=f"{lr:.2e}", tok_s=f"{speed:,.0f}")
                elif run.step % log_every == 0 or run.step in (first_step + 1, self.last_step):  # not a terminal
                    per_step = (time.perf_counter() - started) / (run.step - first_step)
                    extra = "".join(f", {k} {v:.4f}" for k, v in self.auxiliary.items())
                    unit = self.objective.unit
                    self.log(f"step {run.step:,}/{config.steps:,}: loss {loss:.4f}{extra}, lr {lr:.2e}, {speed:,.0f} "
                             f"{unit}/s, ETA {'at most ' if self.stops.until else ''}"
                             f"{duration(per_step * (self.last_step - run.step))}")
                if (run.step % config.eval_every == 0 or run.step == config.steps) and self.evaluate():
                    break
                if run.step % config.save_every == 0 or run.step == config.steps:
                    self.save()
            run.interrupted = stop.requested is not None and run.step < config.steps
            run.signal = stop.requested if run.interrupted else None
        if self.bar is not None:
            self.bar.close()
        for watcher in self.watchers:
            watcher.close()
        run.seconds = time.perf_counter() - started
        if 0 < run.step < config.steps:  # stopped early (Ctrl-C or stop_after): keep the place
            self.save()
        if self.metrics_path is not None and self.metrics_path.exists():
            plot_losses(self.metrics_path, self.run_dir / "loss.png", self.recipe.label_smoothing)
        run.model = unwrap(self.model)
        return run

    def step(self) -> tuple[float, float, int]:
        """One optimiser step over a global batch (in ``accumulate`` micro-batches, split among the workers):
        the mean loss per labelled token, the learning rate, and the labelled tokens it saw."""
        config, world, model, scaler, optimizer = self.config, self.world, self.model, self.scaler, self.optimizer
        sums, counts, auxiliary = [], [], {}
        for micro in range(config.accumulate):
            whole = self.objective.batch(TRAIN, self.run.step, micro)
            counts.append(max(whole.tokens, 1))  # the global batch's labelled tokens: what the loss averages
            batch = whole.rows(world.rows(self.objective.rows)).to(self.device)
            with gradients_synced(model, world, micro == config.accumulate - 1), self.autocast():
                summed = self.objective.loss(model, batch, self.recipe.label_smoothing)
                # workers' gradients are averaged: scaled by their number, they add up to the global mean's
                loss = summed * world.size / (counts[-1] * config.accumulate)
                # the sublayers' own training losses (a mixture of experts' load balancing), a mean per micro-batch
                extra = unwrap(model).auxiliary_losses()
                for name, value in extra.items():
                    loss = loss + value / config.accumulate
                    auxiliary[name] = auxiliary.get(name, 0.0) + value.item() / config.accumulate
                scaler.scale(loss).backward()
            sums.append(summed.item())
        self.auxiliary = {k: v / world.size for k, v in zip(auxiliary, all_sum(list(auxiliary.values()), world))} \
            if auxiliary else {}
        sums = all_sum(sums, world)
        loss_sum = sum(s / n for s, n in zip(sums, counts))
        lr = self.recipe.learning_rate(self.run.step + 1, config.steps, config.decay_from)
        for group in optimizer.param_groups:
            group["lr"] = lr
        scaler.unscale_(optimizer)  # the norm of the true gradients, clipped or not
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), self.recipe.grad_clip or math.inf)
        self.grad_norm = float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)  # sharded: the whole
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        self.run.step += 1
        loss = loss_sum / config.accumulate
        if not math.isfinite(loss):
            wider = " or use --dtype float32" if config.dtype != "float32" else ""
            raise RunError(f"the loss became {loss} at step {self.run.step}; lower --lr{wider}")
        self.run.losses.append(loss)
        return loss, lr, sum(counts)

    # ------------------------------------------------------------ evaluation, metrics, checkpoints
    def evaluate(self) -> bool:
        """Held-out metrics, logged and plotted; whether ``until`` asks to stop."""
        metrics = self.objective.evaluate(self.model, self.device, self.autocast)
        self.run.evaluations.append({"step": self.run.step, **metrics})
        self.record({"step": self.run.step, **metrics}, "eval")
        line = f"step {self.run.step}: " + ", ".join(f"{k} {v:.4f}" for k, v in metrics.items())
        with self.bar.external_write_mode() if self.bar is not None else nullcontext():  # keep the bar intact
            self.log(line)
        if self.run_dir is not None:
            plot_losses(self.metrics_path, self.run_dir / "loss.png", self.recipe.label_smoothing)
        return self.stops.until is not None and self.stops.until(metrics)

    def record(self, entry: dict, kind: str) -> None:
        """One line of ``metrics.jsonl`` (``kind``: "train" or "eval"), and the same figures to the watchers."""
        if self.metrics_path is not None:
            append_line(self.metrics_path, json.dumps(entry))
        for watcher in self.watchers:
            watcher.record(entry["step"], entry, kind)

    def save(self) -> None:
        """A checkpoint of the weights, optimiser, scaler and every worker's random state (all workers take part;
        rank 0 writes)."""
        model, world, device = self.model, self.world, self.device
        weights, optimizer_state = full_state(model, self.optimizer, world)
        rngs = gathered((torch.get_rng_state(), torch.cuda.get_rng_state(device) if device.type == "cuda" else None),
                        world)
        if self.run_dir is None:
            return
        state = {"optimizer": optimizer_state, "scaler": self.scaler.state_dict(), "rng": rngs[0][0],
                 "cuda_rng": rngs[0][1], "rng_per_worker": [r for r, _ in rngs] if world.distributed else None}
        if self.adapters is not None:  # the plain model's weights, merged; what resuming needs, apart
            state["lora"] = lora.training_tensors(weights)
            weights = lora.merged(weights, self.config.lora)
        last = self.run.evaluations[-1] if self.run.evaluations else None
        self.run.checkpoint = ckpt.save(self.run_dir, self.run.step, weights, self.start.spec_text,
                                        {**self.meta, "evaluation": last}, state,
                                        self.objective.vocab.files() if self.objective.vocab is not None else {})


def objective_for(model, config: TrainConfig, vocab, world: World) -> Objective | PairedObjective | AnsweringObjective:
    """What ``model`` learns: two towers joined by a contrastive head, generated examples paired with their
    classes' names; any other model, its kind's task or text."""
    if isinstance(model.spec, Towers):
        return (AnsweringObjective if model.spec.connectors else PairedObjective)(model, config, vocab, world)
    return Objective(model, config, vocab, world)


def _width(model) -> int:
    """The width a recipe's learning rate may read (Vaswani's d_model^-0.5): the last stack's; of towers, the width
    at which the contrastive head compares them."""
    if isinstance(model.spec, Towers):
        return model.spec.tower(model.spec.contrastive.towers[0]).head.out if model.spec.contrastive else \
            model.spec.width(model.spec.connectors[0].target) if model.spec.connectors else 0
    return model.embeddings[model.stack_embedding[model.spec.stacks[-1].role]].dim


def _agreed(stop: bool, world: World) -> bool:
    """Whether any worker was asked to stop (Ctrl-C reaches them at different moments; they stop together)."""
    return stop if not world.distributed else all_sum([float(stop)], world)[0] > 0


def _restore_rng(state: dict, world: World, device, seed: int, step: int) -> None:
    """Each worker's random state as saved; a worker the saved run did not have draws a fresh one."""
    per_worker = state.get("rng_per_worker") or [state["rng"]]
    if len(per_worker) == world.size:
        torch.set_rng_state(per_worker[world.rank])
    elif world.rank == 0:
        torch.set_rng_state(state["rng"])
    else:  # a seed of its own, from the run's seed, its rank and the step it joins at
        torch.manual_seed(hash((seed, world.rank, step)) % 2 ** 63)
    if device.type == "cuda" and state.get("cuda_rng") is not None and world.rank == 0:
        torch.cuda.set_rng_state(state["cuda_rng"], device)


def _estimate(model, objective: Objective, config: TrainConfig, device, autocast, spec, steps: int,
              workers: int = 1, early_stop: bool = False) -> list[str]:
    """Before the first step: the time a step will take, from the fastest of a few timed forward passes of a few
    rows of the first batch (after one to warm up; dropout off, so no random stream moves; the fastest, as a
    loaded machine slows some calls many times over) scaled to the batch and the accumulation, with backward at
    twice the forward; and the analysis' FLOPs per step. A warning when the run would take more than an hour.
    ``early_stop``: the run stops once its evaluations say so, so ``steps`` is an upper bound."""
    from ..inspect.analysis import AnalysisError, analyse

    share = config.batch // workers  # each worker's rows of a global batch
    rows = min(share, 4)
    inputs = objective.batch(TRAIN, 0).rows(slice(0, rows)).to(device).inputs
    was_training = model.training
    model.eval()
    with torch.no_grad(), autocast():
        model(**inputs)
        _synchronize(device)
        timings, began = [], time.perf_counter()
        while len(timings) < 5 and (len(timings) < 2 or time.perf_counter() - began < 0.5):
            start = time.perf_counter()
            model(**inputs)
            _synchronize(device)
            timings.append(time.perf_counter() - start)
        forward = min(timings)
    model.train(was_training)
    per_step = 3 * forward * share / rows * config.accumulate
    lengths = objective.lengths()
    try:
        if isinstance(spec, Towers):  # each tower at the length it reads
            flops = sum(analyse(t.spec, batch=share, seq_len=lengths[t.name]).training()["flops_forward_backward"]
                        for t in spec.towers) * config.accumulate
        else:
            sizes = ({"src_len": lengths["encoder"], "tgt_len": lengths["decoder"]} if len(lengths) == 2
                     else {"seq_len": next(iter(lengths.values()))})
            flops = analyse(spec, batch=share, **sizes).training()["flops_forward_backward"] * config.accumulate
        work = f"{flops / 1e9:,.3g} GFLOP a step at most, "
    except AnalysisError:
        work = ""
    bound = "at most " if early_stop else ""
    lines = [f"estimated {duration(per_step)} a step, {bound}{duration(per_step * steps)} for {bound}{steps:,} steps "
             f"({work}timed on a forward pass of {rows} sequences on {device.type})"]
    if per_step * steps > 3600:
        lines.append(f"warning: this run would take {'up to' if early_stop else 'about'} {duration(per_step * steps)} "
                     f"on {device.type}; use fewer --steps, a smaller model (--set) or a GPU (--device cuda)")
    return lines


def _synchronize(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def duration(seconds: float) -> str:
    """'0.42 s', '4 min 12 s', '3 h 05 min'.

    >>> duration(0.4237), duration(252), duration(11100)
    ('0.42 s', '4 min 12 s', '3 h 05 min')
    """
    if seconds < 60:
        return f"{seconds:.2g} s" if seconds < 10 else f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{int(seconds // 60)} min {int(seconds % 60):02d} s"
    return f"{int(seconds // 3600):,} h {int(seconds % 3600 // 60):02d} min"


def _progress(enabled: bool, done: int, total: int):
    if not enabled:
        return None
    from tqdm import tqdm

    bar = tqdm(total=total, initial=done, unit="step", dynamic_ncols=True, disable=None)
    return None if bar.disable else bar  # not a terminal: plain log lines instead
