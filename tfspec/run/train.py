"""Stage 7, train: a compiled spec learns a built-in task or a user's text, with checkpoints and evaluation.

What a model learns follows from its kind:

- encoder-decoder: a synthetic task (``copy``, ``reverse``, ``sort``) as source -> target, or sentence pairs
  from ``--data`` (see ``tfspec.run.corpus``);
- decoder-only: the same tasks as "source SEP target" (loss on the target), or ``--data`` as a language model;
- encoder-only: masked-language modelling (BERT's 15%; 80/10/10) on task sequences or a text.

A text's tokens are bytes, characters, a byte-level BPE learned from it (``bpe:N``) or a Hugging Face
``tokenizer.json``; whichever it is travels in every checkpoint. ``init`` starts from the weights of a run, a
checkpoint or a Hugging Face model directory (fine-tuning), with the vocabulary they came with.

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

import json
import math
import os
import signal
import time
import warnings
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import torch
import torch.nn.functional as F

from . import checkpoint as ckpt
from . import lora
from ..front.api import load, parse
from ..backend.compiler import compile as compile_spec
from ..backend.compiler import looks_like_path
from .corpus import PairData, TextData, positions_in_documents
from .data import (BOS, DIGIT_CLASSES, EOS, EVAL, IGNORE, PAD, SEP, TRAIN, Batch, DataError, TaskData, Vocabulary,
                   digit_pictures, generator_for, mlm_batch, prompted_batch, seq2seq_batch)
from .decoding import Continuation, Restricted, sample
from .config import TrainConfig
from .watch import TensorBoard
from .distributed import World, all_sum, full_state, gathered, gradients_synced, load_optimizer_state, unwrap, wrap
from ..errors import LengthError, RunError, RunWarning, shown
from ..files import append_line, open_regular, save_figure, undo_directory, write_atomically


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
    """Vaswani et al. for encoder-decoder, GPT-2/3 for decoder-only, BERT for encoder-only.

    Warmup is the paper's, shortened to a quarter of ``steps`` when a run is too
    short to finish it.
    """
    if kind == "encoder-decoder":  # lr None: the schedule's own peak, d_model^-0.5 * warmup^-0.5
        base = dict(optimizer="adam", betas=(0.9, 0.98), eps=1e-9, weight_decay=0.0, schedule="noam", warmup=4000,
                    lr=None, label_smoothing=0.1, grad_clip=None, source="Vaswani et al. 2017, 5.3-5.4",
                    paper_steps=100_000, paper_parameters="65M")
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


# ---------------------------------------------------------------- the task a model learns
class Objective:
    """Makes batches for a model kind and data source, and evaluates on held-out data."""

    def __init__(self, model, config: TrainConfig, vocab=None, world: World = World()):
        """``vocab``: the vocabulary the weights already use (a resumed or fine-tuned run's); ``world``: the
        workers each global batch of ``config.batch`` rows is shared among."""
        spec = model.spec
        self.model, self.config, self.kind, self.world = model, config, spec.kind, world
        self.rows = config.batch
        if config.batch % world.size:
            raise DataError(f"--batch {config.batch} is the global batch, shared equally among {world.size} "
                            f"workers; make it a multiple of {world.size}")
        self.text = self.pairs = self.tasks = self.pictures = None
        self.notes: list[str] = []
        if spec.head is None:
            shipped = ("; examples/bert_base_mlm.tfs is BERT-base with its masked-language-modelling head"
                       if spec.kind == "encoder-only" else "")
            raise DataError(f"{spec.name} has no head, so there are no logits to train; add one, e.g. "
                            f"`head tied(tokens)` (a pooler alone is not an output layer){shipped}")
        source, held_out = config.source(), config.eval_source()
        if source is None and (config.tokenizer is not None or held_out is not None):
            raise DataError(f"--{'tokenizer' if config.tokenizer else 'eval-data'} goes with --data; a task's "
                            "sequences are letters")
        embedding = spec.embedding(spec.stacks[0].embedding)
        if embedding.image is not None:  # pictures: the generated digits, classified
            self.read_pictures(embedding, spec, source, vocab)
            return
        stack = getattr(model, spec.stacks[0].role)
        # the run-time input that keeps packed documents apart, when the spec's masks read one
        self.documents_input = next((name for name, i in stack.inputs.items() if i.documents), None)
        if source is not None and spec.kind == "encoder-decoder":
            self.pairs = PairData.read(source, config.tokenizer, self.window(model), vocab, held_out)
            self.vocab = self.pairs.vocab
            if self.pairs.skipped:
                self.notes.append(f"left out {self.pairs.skipped} sentence pairs longer than {self.window(model)} "
                                  "tokens a side (--seq-len)")
        elif source is not None:
            if len(source.paths) == 2:
                raise DataError(f"--data {' '.join(source.paths)}: two aligned files are sentence pairs, for an "
                                f"encoder-decoder; {spec.name} is {spec.kind} and learns from one")
            self.text = TextData.read(source, config.tokenizer, self.window(model), vocab, held_out)
            self.vocab = self.text.vocab
            if self.text.documents > 1:
                self.notes.append(self._packing_note())
        else:
            if vocab is not None and vocab.kind != "letters":
                raise DataError(f"these weights read {vocab.describe()}, not a task's letters; "
                                "train them on a text: --data PATH")
            self.vocab = vocab or Vocabulary.letters(config.symbols)
            self.tasks = TaskData(config.task, self.vocab, config.min_len, config.max_len)
        self.check_specials()
        self.check_fits(model)
        encoder, decoder = getattr(model, "encoder", None), getattr(model, "decoder", None)
        self.padding = {  # which padding masks the model reads (it rejects one it would ignore)
            "src": encoder is not None and (encoder.masks_padding or (decoder is not None and decoder.memory_masks_padding)),
            "tgt": spec.kind == "encoder-decoder" and decoder.masks_padding}
        self.eval_set = [self.batch(EVAL, i) for i in range(math.ceil(config.eval_size / self.rows))]

    def read_pictures(self, embedding, spec, source, vocab) -> None:
        """A model of pictures learns to classify the generated digits (``digit_pictures``) at its pictures' size;
        its head's outputs are the classes."""
        if source is not None or vocab is not None:
            raise DataError(f"{spec.name} reads pictures: it trains on the generated digits, not on "
                            f"{'--data' if source is not None else 'the token vocabulary of these weights'}")
        if spec.head.out < DIGIT_CLASSES:
            raise DataError(f"the head has {spec.head.out} outputs, but the digits task has {DIGIT_CLASSES} classes; "
                            f"give it linear({DIGIT_CLASSES}) or more")
        digit_pictures(1, embedding.image, embedding.channels, torch.Generator())  # (refuses pictures too small)
        self.pictures, self.vocab, self.padding = embedding, None, {}
        self.notes.append(f"classifying generated digits 0-{DIGIT_CLASSES - 1} in {embedding.image}×{embedding.image} "
                          f"pictures of {embedding.channels} channel{'s' if embedding.channels > 1 else ''}, "
                          "at random places and brightness, over noise")
        self.eval_set = [self.batch(EVAL, i) for i in range(math.ceil(self.config.eval_size / self.rows))]

    def _packing_note(self) -> str:
        from ..registry import MASKS

        packed = f"{self.text.documents:,} documents are packed into rows" + (
            " with the end token between them" if self.vocab.eos is not None else "")
        if self.documents_input is not None:
            return f"{packed}; each attends within itself ({self.documents_input}), positions restarting at 0"
        masks = [name for name in MASKS if any(i.documents for i in MASKS[name].inputs)]
        return (f"{packed}; attention crosses their boundaries, as in GPT-2 and nanoGPT (a mask that keeps each "
                f"to itself: {', '.join(masks)})")

    def check_specials(self) -> None:
        """The special ids this objective puts in batches exist in the vocabulary."""
        needed = {"encoder-only": ("mask",), "encoder-decoder": ("start", "eos")}.get(self.kind, ())
        missing = [role for role in needed if getattr(self.vocab, role) is None]
        if missing:
            if self.kind == "encoder-only":
                purpose, hint = "masked-language modelling", 'tokenizer_config.json\'s "mask_token", e.g. "[MASK]"'
            else:
                purpose, hint = "training an encoder-decoder", ("config.json's decoder_start_token_id and "
                                                                 "eos_token_id, or tokenizer_config.json's "
                                                                 "bos_token and eos_token")
            raise DataError(f"{self.vocab.describe()} has no {' or '.join(missing)} token, which {purpose} needs "
                            f"(named by {hint})")

    def window(self, model) -> int:
        role = model.spec.stacks[0].role
        limit = model.max_len[role]
        if self.config.seq_len is not None:
            return self.config.seq_len
        return min(256, limit) if limit else 256

    def lengths(self) -> dict[str, int]:
        """The longest input each stack sees."""
        c = self.config
        if self.pairs is not None:
            return {"encoder": self.window(self.model), "decoder": self.window(self.model)}
        if self.text is not None:
            return {self.model.spec.stacks[0].role: self.window(self.model)}
        if self.kind == "encoder-decoder":
            return {"encoder": c.max_len, "decoder": c.max_len + 1}
        if self.kind == "decoder-only":
            return {"decoder": 2 * c.max_len + 1}
        return {"encoder": 2 * c.max_len + 2}

    def check_fits(self, model) -> None:
        spec = model.spec
        for role, length in self.lengths().items():
            limit = model.max_len[role]
            if limit is not None and length > limit:
                what = "--seq-len" if self.config.data is not None else "--max-len"
                raise LengthError(f"sequences reach length {length} in the {role}, beyond its learned positions "
                                f"(learned({limit})); lower {what} or raise max_len in the spec")
        needed = self.vocab.size
        for name, embedding in model.embeddings.items():
            if embedding.vocab < needed:
                raise DataError(f"embedding '{name}' has vocab {embedding.vocab}, but this data needs {needed} ids "
                                f"({self.vocab.needs()}); raise its vocab")
        if spec.head.out < needed:
            raise DataError(f"the head has {spec.head.out} outputs, but this data needs {needed} "
                            f"({self.vocab.needs()})")

    def batch(self, stream: int, index: int, micro: int = 0) -> Batch:
        c = self.config
        generator = generator_for(c.seed, stream, index * c.accumulate + micro if stream == TRAIN else index)
        evaluation = stream == EVAL
        if self.pictures is not None:  # (held out by their own stream of the generator)
            pixels, labels = digit_pictures(self.rows, self.pictures.image, self.pictures.channels, generator)
            return Batch({"pixel_values": pixels}, labels)
        if self.pairs is not None:
            src, tgt, src_lengths, tgt_lengths = self.pairs.batch(self.rows, generator, evaluation)
            return seq2seq_batch(src, tgt, src_lengths, self.padding, tgt_lengths, self.vocab)
        if self.text is not None:
            windows, documents = self.text.windows(self.rows, self.window(self.model), generator, evaluation)
            if self.kind == "decoder-only":
                batch = Batch({"tokens": windows[:, :-1]}, windows[:, 1:])
            else:
                batch = mlm_batch(windows[:, :-1], generator, self.vocab, self.padding["src"])
            if self.documents_input is not None:  # each document its own sequence, as if it had a row to itself
                documents = documents[:, :-1]
                batch.inputs.update({self.documents_input: documents, "position_ids": positions_in_documents(documents)})
            return batch
        src, tgt, lengths = self.tasks.pairs(self.rows, generator, evaluation)
        if self.kind == "encoder-decoder":
            return seq2seq_batch(src, tgt, lengths, self.padding)
        prompted = prompted_batch(src, tgt, lengths)
        if self.kind == "decoder-only":
            return prompted
        sequence = torch.cat((prompted.inputs["tokens"], prompted.labels[:, -1:].clamp(min=0)), dim=1)
        return mlm_batch(sequence, generator, self.vocab, self.padding["src"])

    # ------------------------------------------------------------ evaluation
    @torch.no_grad()
    def evaluate(self, model, device, autocast) -> dict[str, float]:
        """Held-out loss and token accuracy; exact match of greedy decoding for the tasks. Each worker evaluates
        its rows of the held-out batches and the sums are added up, so every worker gets the same figures."""
        model = unwrap(model)
        was_training = model.training
        model.eval()
        nll = correct = total = text_bytes = 0.0
        language_model = self.text is not None and self.kind == "decoder-only"
        byte_lengths = self.vocab.byte_lengths() if language_model else None
        for batch in self.eval_set:
            batch = batch.rows(self.world.rows(self.rows)).to(device)
            with autocast():
                logits = output_logits(model(**batch.inputs))
            labelled = batch.labels != IGNORE
            nll += F.cross_entropy(logits.float()[labelled], batch.labels[labelled], reduction="sum").item()
            correct += (logits.argmax(-1)[labelled] == batch.labels[labelled]).sum().item()
            total += labelled.sum().item()
            if language_model:
                text_bytes += byte_lengths[batch.labels[labelled].cpu()].sum().item()
        nll, correct, total, text_bytes = all_sum([nll, correct, total, text_bytes], self.world)
        if self.pictures is not None:  # one label per picture
            model.train(was_training)
            return {"eval_loss": nll / total, "accuracy": correct / total}
        metrics = {"eval_loss": nll / total, "token_accuracy": correct / total}
        if language_model:  # per token, and per byte of text: comparable across tokenizers
            metrics["perplexity"] = math.exp(min(nll / total, 700.0))
            metrics["bits_per_byte"] = nll / math.log(2) / max(text_bytes, 1.0)
        if self.tasks is not None and self.kind != "encoder-only":
            metrics["exact_match"] = self.exact_match(model, device, autocast)
        model.train(was_training)
        return metrics

    def exact_match(self, model, device, autocast) -> float:
        examples = self.decode_examples(model, device, autocast)
        return sum(e["prediction"] == e["target"] for e in examples) / len(examples)

    @torch.no_grad()
    def decode_examples(self, model, device, autocast, count: int | None = None, draw: int = 0) -> list[dict]:
        """Greedy decoding of held-out sources: [{"source", "target", "prediction"}] (as text).

        ``draw`` 0 is the set the periodic evaluation uses; another number draws
        other held-out sequences (a final report independent of early stopping).
        """
        count = count or self.config.eval_size
        src, tgt, lengths = self.tasks.pairs(count, generator_for(self.config.seed, EVAL, (1 << 20) + draw), True)
        predictions: list[list[int]] = [[] for _ in range(count)]
        allowed = self.vocab.output_ids(model.spec.head.out, end=True)
        with autocast():
            if self.kind == "encoder-decoder":
                for rows in torch.arange(count).split(self.config.batch):
                    width = int(lengths[rows].max())
                    s = src[rows, :width].to(device)
                    steps = Restricted(Continuation(model, s, s == PAD if self.padding["src"] else None), allowed)
                    out = sample(steps, torch.full((len(rows), 1), BOS, device=device), self.config.max_len + 1, EOS)
                    for r, p in zip(rows.tolist(), out):
                        predictions[r] = p
            else:  # one prompt length per batch: "source SEP"
                for n in lengths.unique().tolist():
                    rows = (lengths == n).nonzero().squeeze(1)
                    prompt = torch.cat((src[rows, :n], torch.full((len(rows), 1), SEP)), dim=1).to(device)
                    out = sample(Restricted(Continuation(model), allowed), prompt, n + 1, EOS)
                    for r, p in zip(rows.tolist(), out):
                        predictions[r] = p
        decode = self.vocab.decode
        return [{"source": decode(src[i, : lengths[i]].tolist()), "target": decode(tgt[i, : lengths[i]].tolist()),
                 "prediction": decode(predictions[i] + [EOS])} for i in range(count)]


def output_logits(out):
    return out[0] if isinstance(out, tuple) else out


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


def _spec_text(source) -> tuple[str, str]:
    """(spec text, name for messages) of a path or text."""
    if isinstance(source, Path) or looks_like_path(source):
        path = Path(source)
        load(path)  # a clear SpecError for a missing or bad file
        return path.read_text(encoding="utf-8"), str(path)
    return source, "<spec>"


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


@dataclass
class Initial:
    """The weights a run starts from (``--init``), with the spec and vocabulary that came with them."""

    source: str
    spec_text: str
    name: str
    overrides: dict
    weights: dict
    vocab: object | None  # a tfspec.run.data vocabulary, or None when the weights came without one


def initial_weights(source: str | Path, accept_edits: bool = False) -> Initial:
    """Read ``source``: a run directory (its latest checkpoint), a checkpoint, or a Hugging Face model directory
    (``accept_edits``: a checkpoint whose spec.tfs or weights changed since its save)."""
    path = Path(source)
    if not path.exists():
        raise DataError(f"--init {shown(source)}: no such run, checkpoint or Hugging Face model directory")
    if path.is_dir() and (path / "config.json").exists() and not (path / "checkpoint.json").exists():
        from ..interop.families import import_config, from_pretrained, tokenizer_of
        from ..interop.mapping import InteropError
        try:
            text = import_config(path)
            model = from_pretrained(path)
            vocab = tokenizer_of(path, model)
        except InteropError as exc:
            raise DataError(f"--init {shown(source)}: {exc}") from None
        return Initial(str(source), text, str(path / "config.json"), {}, model.state_dict(), vocab)
    saved = ckpt.load(path, accept_edits=accept_edits)
    vocab = saved.vocabulary()
    return Initial(str(source), saved.spec_text, str(saved.path / "spec.tfs"), saved.meta.get("overrides") or {},
                   saved.weights, vocab)


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
        if (initial is not None and initial.vocab is None and config.tokenizer is None  # (pictures need none)
                and parse(spec_text, file=name, overrides=overrides).embeddings[0].image is None):
            raise DataError(f"--init {shown(config.init)}: the weights come without a tokenizer; name the one they "
                            "were "
                            "trained with: --tokenizer PATH/tokenizer.json")
        return _Trainer(_Start(spec_text, name, overrides, initial=initial), config, run_dir,
                        _Stops(stop_after, until), progress, log, world).train()


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
        start = _Start(saved.spec_text, str(saved.path / "spec.tfs"), saved.meta.get("overrides") or None, saved)
        return _Trainer(start, config, Path(run_dir), _Stops(stop_after), progress, log, world).train()


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


@dataclass(frozen=True)
class _Start:
    """Where a run starts: its spec (text, the name it is read as, ``let`` overrides), and a checkpoint it
    resumes (``saved``) or weights it starts from (``initial``), if any."""

    spec_text: str
    name: str
    overrides: dict | None
    saved: ckpt.Checkpoint | None = None
    initial: Initial | None = None


@dataclass(frozen=True)
class _Stops:
    """When a run stops before its last step: after ``after`` steps, or when ``until(metrics)`` says so."""

    after: int | None = None
    until: Callable[[dict], bool] | None = None


class _Trainer:
    """A run in progress, by concern: set-up (model, data, optimiser, restored state), one optimiser step
    over a global batch (``step``), evaluation, checkpoints, metrics and the log; ``train`` drives them to
    the last step, an early stop or Ctrl-C."""

    def __init__(self, start: _Start, config: TrainConfig, run_dir: str | Path | None, stops: _Stops,
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
            _truncate_metrics(self.metrics_path, self.run.step)
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
        self.objective = Objective(model, config, vocab, world)
        if start.initial is not None:
            _load_initial(model, start.initial, start.name)
        width = model.embeddings[model.stack_embedding[self.spec.stacks[-1].role]].dim
        self.recipe = paper_defaults(self.spec.kind, width, config)
        if start.saved is not None:
            model.load_state_dict(start.saved.weights)
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
                    unit = "pictures" if self.objective.pictures is not None else "tokens"
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
                logits = output_logits(model(**batch.inputs))
                summed = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), batch.labels.flatten(),
                                         ignore_index=IGNORE,
                                         label_smoothing=self.recipe.label_smoothing, reduction="sum")
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


def _load_initial(model, initial: Initial, name: str) -> None:
    """Copy ``initial``'s weights into ``model``; every tensor must be there, with its shape."""
    own = model.state_dict()
    missing = sorted(set(own) - set(initial.weights))
    extra = sorted(set(initial.weights) - set(own))
    shapes = [f"{k} {tuple(initial.weights[k].shape)} vs {tuple(own[k].shape)}" for k in own
              if k in initial.weights and initial.weights[k].shape != own[k].shape]
    if missing or extra or shapes:
        details = [f"{what}: {', '.join(items[:6])}" + (" …" if len(items) > 6 else "")
                   for what, items in (("missing", missing), ("not in the spec", extra), ("shapes differ", shapes))
                   if items]
        raise DataError(f"--init {initial.source}: its weights do not fit {name}: " + "; ".join(details))
    model.load_state_dict(initial.weights)


def _progress(enabled: bool, done: int, total: int):
    if not enabled:
        return None
    from tqdm import tqdm

    bar = tqdm(total=total, initial=done, unit="step", dynamic_ncols=True, disable=None)
    return None if bar.disable else bar  # not a terminal: plain log lines instead


def _truncate_metrics(path: Path, step: int) -> None:
    """Drop records past ``step``: after a resume they belong to a future that was not saved."""
    if not path.exists():
        return
    kept = [json.dumps(record) for record in _records(path) if record["step"] <= step]
    write_atomically(path, "".join(line + "\n" for line in kept).encode())


def read_metrics(path: Path) -> tuple[list[dict], list[dict]]:
    """(training records, evaluation records) of a metrics.jsonl."""
    records = list(_records(path))
    return [r for r in records if "loss" in r], [r for r in records if "eval_loss" in r]


def _records(path: Path) -> Iterator[dict]:
    """metrics.jsonl's records: objects of a whole ``step`` >= 0 and numbers. A line that is not one (cut short by
    a kill, edited by hand: ``"loss": "oops"``) is passed over with a ``RunWarning`` naming the first such line, so
    that one bad line never stops a run from resuming, plotting or being reported."""
    bad: list[int] = []
    with open_regular(path) as handle:  # a FIFO in its place is refused, not waited on
        for number, line in enumerate(handle, 1):
            try:
                record = json.loads(line)
            except ValueError:
                record = None
            if _is_record(record):
                yield record
            elif line.strip():
                bad.append(number)
    if bad:
        warnings.warn(RunWarning(f"{shown(path)}: {len(bad)} line{'s' if len(bad) > 1 else ''} that tfspec did not "
                                 f"write (line {bad[0]}{' first' if len(bad) > 1 else ''}) passed over"))


def _is_record(record) -> bool:
    numbers = all(type(v) in (int, float) for k, v in record.items() if k != "step") if isinstance(record, dict) \
        else False
    return numbers and type(record.get("step")) is int and record["step"] >= 0


def plot_losses(metrics_path: Path, png: Path, label_smoothing: float = 0.0) -> None:
    """Training loss per step (and its running mean) with held-out loss, log scale, written atomically."""

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps, evals = read_metrics(metrics_path)
    if not steps:
        return
    x = [r["step"] for r in steps]
    y = [r["loss"] for r in steps]
    span = max(len(y) // 50, 1)
    smooth = [sum(y[max(0, i - span + 1): i + 1]) / len(y[max(0, i - span + 1): i + 1]) for i in range(len(y))]
    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    smoothing = f" (label smoothing {label_smoothing:g})" if label_smoothing else ""
    ax.plot(x, y, color="#9db4d0", linewidth=0.8, label="training loss" + smoothing)
    ax.plot(x, smooth, color="#1f4e79", linewidth=1.6, label=f"training loss, mean of {span}")
    if evals:
        ax.plot([r["step"] for r in evals], [r["eval_loss"] for r in evals], "o-", color="#C0392B",
                label="held-out loss (no smoothing)")
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats per token)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    try:
        save_figure(fig, png)
    finally:
        plt.close(fig)


__all__ = ["Objective", "Recipe", "Run", "TrainConfig", "paper_defaults", "plot_losses", "read_metrics",
           "train"]
