"""A training run's configuration (``TrainConfig``): every setting with its range, checked before any work.

Its own module, so that a checkpoint reads the configuration it was saved with without importing the trainer.
"""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ..front.schema import MAX_DIM
from .corpus import DEFAULT_GLOB, Source
from .data import LETTERS, TASKS
from .lora import LoraSettings

MAX_COUNT = 10 ** 9  # steps, sequences, lengths: beyond this a number is a typo, not a run
MAX_LR = 10.0


class TrainConfig(BaseModel):
    """Everything that decides a run; saved in each checkpoint. ``None`` means "the paper's default"."""

    model_config = ConfigDict(extra="forbid")
    task: str = "reverse"  # a name in tfspec.run.data.TASKS
    # text: language model (decoder-only), MLM (encoder-only), sentence pairs (encoder-decoder); see tfspec.run.corpus
    data: tuple[str, ...] | None = Field(None, min_length=1, max_length=2)  # a path, or two aligned files
    glob: str = DEFAULT_GLOB  # a directory's files
    field: str = "text"  # a JSONL record's string (source,target for pairs)
    eval_data: str | None = None  # held out (default: the end of the data)
    tokenizer: str | None = None  # bytes | chars | bpe:N | a tokenizer.json path; None: the weights' own, or bytes
    init: str | None = None  # start from these weights: a run, a checkpoint or a Hugging Face model directory
    symbols: int = Field(26, ge=2, le=len(LETTERS))  # task alphabet
    # Every number has a range (the README's table), checked before any work: Adam overflowed at lr 1e39
    min_len: int = Field(4, ge=1, le=MAX_COUNT)
    max_len: int = Field(24, ge=1, le=MAX_COUNT)  # task source lengths
    seq_len: int | None = Field(None, ge=1, le=MAX_COUNT)  # text window (default 256, or the learned positions)
    steps: int = Field(2000, ge=1, le=MAX_COUNT)
    batch: int = Field(64, ge=1, le=MAX_COUNT)
    accumulate: int = Field(1, ge=1, le=MAX_COUNT)
    lr: float | None = Field(None, gt=0, le=MAX_LR)  # peak learning rate
    warmup: int | None = Field(None, ge=0, le=MAX_COUNT)
    grad_clip: float | None = Field(None, ge=0, le=1e6)  # 0: no clipping
    label_smoothing: float | None = Field(None, ge=0, lt=1)
    weight_decay: float | None = Field(None, ge=0, le=10)
    seed: int = Field(0, ge=0, lt=2 ** 63)
    device: str = "cpu"
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    eval_every: int = Field(250, ge=1, le=MAX_COUNT)
    eval_size: int = Field(500, ge=1, le=MAX_COUNT)  # held-out sequences per evaluation
    save_every: int = Field(500, ge=1, le=MAX_COUNT)
    log_every: int | None = Field(None, ge=1, le=MAX_COUNT)  # a line every N steps without a bar (None: ~100 a run)
    log: tuple[Literal["tensorboard"], ...] = ()  # where else the run is written (tfspec.run.watch)
    lora: LoraSettings | None = None  # train low-rank adapters only (tfspec.run.lora)
    activation_checkpointing: bool = False  # keep each layer's input only; recompute the rest in backward
    compile: bool = False  # torch.compile the model
    # set by resume when --steps changes: the decay goes on from (step, progress) to the new last step, so the
    # learning rate continues where the run stopped
    decay_from: tuple[int, float] | None = None

    @classmethod
    def saved(cls, settings: dict) -> "TrainConfig":
        """The configuration a checkpoint holds."""
        settings = dict(settings)
        if "tokens" in settings:  # runs saved before --tokenizer named their text units "tokens"
            settings["tokenizer"] = settings.pop("tokens")
        if "text" in settings:  # runs saved before --data read one --text file
            text = settings.pop("text")
            settings["data"] = [text] if text is not None else None
        return cls(**settings)

    @field_validator("device")
    @classmethod
    def _device_name(cls, device: str) -> str:
        try:
            torch.device(device)
        except (RuntimeError, TypeError):
            raise ValueError(f"{device!r} is not a device name (cpu, cuda, cuda:1, mps)") from None
        return device

    @field_validator("task")
    @classmethod
    def _known_task(cls, task: str) -> str:
        if task not in TASKS:
            raise ValueError(f"unknown task {task!r}; the tasks are {', '.join(sorted(TASKS))}")
        return task

    @field_validator("tokenizer")
    @classmethod
    def _known_tokenizer(cls, tokenizer: str | None) -> str | None:
        if tokenizer is None:
            return None
        if tokenizer.startswith("bpe:") and not tokenizer[4:].isdigit():
            raise ValueError(f"{tokenizer!r}: bpe:N takes the number of tokens, e.g. bpe:1000")
        if tokenizer.startswith("bpe:") and int(tokenizer[4:]) > MAX_DIM:
            raise ValueError(f"{tokenizer!r}: at most bpe:{MAX_DIM}, the largest vocabulary a spec may embed")
        if not tokenizer.strip():
            raise ValueError("name a tokenizer: bytes, chars, bpe:N or the path of a tokenizer.json")
        return tokenizer

    @model_validator(mode="after")
    def _lengths_in_order(self):
        if self.min_len > self.max_len:
            raise ValueError(f"min_len {self.min_len} is above max_len {self.max_len}")
        return self

    def source(self) -> Source | None:
        """Where the text comes from (None: a task)."""
        return Source(self.data, self.glob, self.field) if self.data is not None else None

    def eval_source(self) -> Source | None:
        return Source((self.eval_data,), self.glob, self.field, "--eval-data") if self.eval_data else None
