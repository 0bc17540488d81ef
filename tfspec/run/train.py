"""Stage 7, train: a compiled spec learns a built-in task or a user's text, with checkpoints and evaluation.

What a model learns follows from its kind:

- encoder-decoder: a synthetic task (``copy``, ``reverse``, ``sort``) as source -> target, or sentence pairs
  from ``--data`` (see ``tfspec.run.corpus``);
- decoder-only: the same tasks as "source SEP target" (loss on the target), or ``--data`` as a language model;
- encoder-only: masked-language modelling (BERT's 15%; 80/10/10) on task sequences or a text.

A text's tokens are bytes, characters, a byte-level BPE learned from it (``bpe:N``) or a Hugging Face
``tokenizer.json``; whichever it is travels in every checkpoint. ``init`` starts from the weights of a run or a
checkpoint (fine-tuning), with the vocabulary they came with; those of a Hugging Face model directory come as
``initial``, read by the interop stage (``tfspec.train`` does both).

Defaults follow each kind's paper (``paper_defaults``); every one can be
overridden. Batches are a function of (seed, step), and the optimizer and RNG
states travel in the checkpoint, so on a CPU a resumed run's losses equal an
uninterrupted run's exactly. Several workers share each global batch (``tfspec.run.distributed``).

>>> config = TrainConfig(task="copy", steps=2, batch=4, max_len=6)
>>> run = train("examples/reverse.tfs", config, None, overrides={"layers": 1, "d_model": 32},
...             progress=False, log=lambda line: None)
>>> len(run.losses)
2
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from . import checkpoint as ckpt
from ..backend.compiler import looks_like_path
from ..errors import shown
from ..files import undo_directory
from ..ir.api import load, parse
from .config import TrainConfig
from .data import DataError
from .distributed import World
from .initial import Initial, initial_weights
from .metrics import plot_losses, read_metrics
from .objective import Objective
from .recipe import Recipe, paper_defaults, recipe_notes
from .trainer import Run, Start, Stops, Trainer


def _spec_text(source) -> tuple[str, str]:
    """(spec text, name for messages) of a path or text."""
    if isinstance(source, Path) or looks_like_path(source):
        path = Path(source)
        load(path)  # a clear SpecError for a missing or bad file
        return path.read_text(encoding="utf-8"), str(path)
    return source, "<spec>"


def train(spec, config: TrainConfig | None = None, run_dir: str | Path | None = None, *,
          overrides: dict | None = None, stop_after: int | None = None, until: Callable[[dict], bool] | None = None,
          progress: bool = True, log: Callable[[str], None] = print, initial: Initial | None = None,
          world: World = World()) -> Run:
    """Train ``spec`` (a ``.tfs`` path or spec text) by ``config``; checkpoints, metrics and plots go to ``run_dir``.

    ``overrides`` replace ``let`` parameters; ``stop_after`` stops (and saves)
    after that many steps, as Ctrl-C would; ``until(metrics)`` is asked after each
    evaluation and stops the run when it returns True (early stopping). Without
    ``run_dir`` nothing is written. With ``config.init``, ``spec`` may be None:
    the spec is the one the initial weights came with (``initial``: those weights, when already read).
    """
    config = _absolute_paths(config or TrainConfig())
    if run_dir is not None and world.main:
        path = Path(run_dir)
        if path.exists() and not path.is_dir():
            raise DataError(f"--out {shown(run_dir)}: a file, not a run directory")
        if path.is_dir() and not ckpt.is_run(path) and any(path.iterdir()):
            raise DataError(f"--out {shown(run_dir)}: holds files that are not a tfspec run; train into a new or empty "
                            "directory")
    with _sole_writer(run_dir, world, new=True):  # checked and run under the run directory's lock
        if run_dir is not None and ckpt.latest(run_dir) is not None:
            raise DataError(f"{shown(run_dir)} already holds a run; continue it with --resume, or choose another --out")
        if config.init and initial is None:
            initial = initial_weights(config.init)
        if spec is None:
            if initial is None:
                raise DataError("give a spec to train, or --init weights to start from")
            spec_text, name, overrides = initial.spec_text, initial.name, {**initial.overrides, **(overrides or {})}
        else:
            spec_text, name = _spec_text(spec)
        if initial is not None and initial.vocab is not None and config.tokenizer is not None:
            raise DataError(f"--init {shown(config.init)}: its weights come with their vocabulary "
                            f"({initial.vocab.describe()}); drop --tokenizer")
        if (initial is not None and initial.vocab is None and config.tokenizer is None  # (an input kind needs none)
                and parse(spec_text, file=name, overrides=overrides).embeddings[0].input is None):
            raise DataError(f"--init {shown(config.init)}: the weights come without a tokenizer; name the one they "
                            "were "
                            "trained with: --tokenizer PATH/tokenizer.json")
        return Trainer(Start(spec_text, name, overrides, initial=initial), config, run_dir,
                        Stops(stop_after, until), progress, log, world).train()


def resume(run_dir: str | Path, *, steps: int | None = None, device: str | None = None,
           stop_after: int | None = None, progress: bool = True, log: Callable[[str], None] = print,
           accept_edits: bool = False, world: World = World()) -> Run:
    """Continue ``run_dir`` from its latest checkpoint with its spec, configuration and vocabulary (on any
    number of workers: ``world``).

    ``steps`` may move the end (the warm-up stays; the decay goes on from where it is to the new end);
    ``device`` may move it; ``accept_edits``: continue with a spec.tfs edited since the save.
    """
    with _sole_writer(run_dir, world, new=False):
        saved = ckpt.load(run_dir, accept_edits=accept_edits)
        if (Path(run_dir) / "checkpoint.json").exists():
            raise DataError(f"{shown(run_dir)} is a checkpoint; --resume takes the run directory that holds it")
        if "config" not in saved.meta:
            raise DataError(f"{shown(run_dir)} holds imported weights, not a training run: there is nothing to resume; "
                            f"fine-tune them with --init {shown(run_dir)}")
        config = saved.config()
        if saved.step >= (steps or config.steps):
            raise DataError(f"{shown(run_dir)} already finished: it is at step {saved.step}, and --steps "
                            f"{steps or config.steps} is where it ends; give more with --steps")
        if steps is not None and steps != config.steps:
            config = _continued_schedule(config, saved, steps)
        config = config.model_copy(update={k: v for k, v in (("steps", steps), ("device", device)) if v is not None})
        start = Start(saved.spec_text, str(saved.path / "spec.tfs"), saved.meta.get("overrides") or None, saved)
        return Trainer(start, config, Path(run_dir), Stops(stop_after), progress, log, world).train()


def _absolute_paths(config: TrainConfig) -> TrainConfig:
    """The files a run reads, as absolute paths: ``--resume`` from another directory reads the same data."""
    def absolute(path: str | None) -> str | None:
        return os.path.abspath(path) if path else path

    tokenizer = config.tokenizer
    if tokenizer is not None and tokenizer not in ("bytes", "chars") and not tokenizer.startswith("bpe:"):
        tokenizer = absolute(tokenizer)
    return config.model_copy(update={"data": tuple(map(absolute, config.data)) if config.data else config.data,
                                     "eval_data": absolute(config.eval_data), "tokenizer": tokenizer})


@contextmanager
def _sole_writer(run_dir: str | Path | None, world: World, new: bool) -> Iterator[None]:
    """This process alone writes ``run_dir`` (rank 0 of several workers) while the block runs; a ``new`` run
    that fails before its first checkpoint leaves no directory behind (or an empty one as it found it)."""
    if run_dir is None or not world.main:
        yield
        return
    run_dir = Path(run_dir)
    if not new and (not ckpt.is_run(run_dir) or (run_dir / "checkpoint.json").exists()):
        yield  # not a run to resume: the block says why, and nothing is made
        return
    found = run_dir.exists() and (not run_dir.is_dir() or any(run_dir.iterdir()))
    existed = run_dir.exists()
    with ckpt.sole_writer(run_dir):
        try:
            yield
        except BaseException:
            if new and not found and _no_checkpoint(run_dir):  # undone while the lock is held
                undo_directory(run_dir, keep_empty=existed)
            raise


def _no_checkpoint(run_dir: Path) -> bool:
    try:
        return ckpt.latest(run_dir) is None
    except ckpt.CheckpointError:
        return False


def _continued_schedule(config: TrainConfig, saved, steps: int) -> TrainConfig:
    """``config`` for a run that stopped at ``saved.step`` and now ends at ``steps``: the warm-up stays the one
    it started with, and the decay goes on from where it is to the new end (the learning rate continues)."""
    kind = saved.meta.get("kind") or saved.spec().kind
    recipe = paper_defaults(kind, 1, config)  # the warm-up does not depend on the width
    step = saved.step + 1
    decay_from = ((step, recipe.progress(step, config.steps, config.decay_from))
                  if step > recipe.warmup else None)  # still warming up: the decay starts after it, as planned
    return config.model_copy(update={"warmup": recipe.warmup, "decay_from": decay_from})


# the stage's public names, from the modules that hold each idea (recipe, objective, trainer, metrics, initial weights)
__all__ = ["Initial", "Objective", "Recipe", "Run", "TrainConfig", "initial_weights", "paper_defaults", "plot_losses",
           "read_metrics", "recipe_notes", "resume", "train"]
