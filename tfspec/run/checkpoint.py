"""Checkpoints: a directory per step, published by a rename, so a failed save never hurts the last one.

A run directory holds ``checkpoints/step-0001234/`` with

- ``model.safetensors``  the weights (``safetensors.torch.load_file`` reads them anywhere),
- ``spec.tfs``           the spec text the weights belong to,
- ``checkpoint.json``    step, training configuration, vocabulary, ``let`` overrides, last evaluation, the
                         SHA-256 of every other file, and its own (of its other entries): checked on load, so a
                         flipped byte anywhere, an edited spec or swapped weights are refused unless the caller
                         accepts them,
- ``state.pt``           optimizer, gradient scaler and RNG states (loaded with ``weights_only=True``),

and ``latest`` naming the newest one. A save writes a hidden temporary
directory, renames it into place, then rewrites ``latest`` atomically: if it
stops at any point, ``latest`` still names a complete checkpoint.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import re
import shutil
import tempfile
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import torch
from safetensors.torch import load_file, save_file

from ..errors import CheckpointError, quoted, shown
from ..layout import latest
from ..files import (loads_json, moved_error, naming, open_regular, read_json, read_regular, regular_file, safe_reason,
                     write_atomically)

FORMAT = 1
KEEP = 3  # checkpoints kept per run (the newest ones)


@dataclass
class Checkpoint:
    path: Path
    spec_text: str
    meta: dict  # checkpoint.json
    weights: dict[str, torch.Tensor]
    accept_edits: bool = False  # files that differ from their digests are taken as they are

    @property
    def step(self) -> int:
        return self.meta["step"]

    def training_state(self) -> dict:
        """The optimizer, scaler and RNG states; a missing, damaged or foreign ``state.pt`` is a
        ``CheckpointError`` (a pickle that is not plain tensors and containers is refused by ``weights_only``).
        It is checked against its digest here, where it is read: ``--init`` and ``generate`` never read it."""
        if not self.accept_edits:
            _check_digests(self.path, self.meta, only=(STATE,))
        try:
            with warnings.catch_warnings():  # a foreign pickle's protocol warning: the error below says it all
                warnings.simplefilter("ignore")
                state = torch.load(regular_file(self.path / "state.pt"), weights_only=True, map_location="cpu")
        except FileNotFoundError:
            raise CheckpointError(f"{shown(self.path / 'state.pt')}: missing; the run cannot resume from it") from None
        except Exception as exc:  # torch raises UnpicklingError, RuntimeError, EOFError, ... for damaged files
            raise CheckpointError(f"{shown(self.path / 'state.pt')}: not a training state tfspec wrote "
                                  f"({safe_reason(exc)})") from None
        if not isinstance(state, dict) or not {"optimizer", "rng"} <= set(state):
            raise CheckpointError(f"{shown(self.path / 'state.pt')}: not a training state tfspec wrote (no optimizer "
                                  "and RNG states)")
        return state

    def vocabulary(self):
        """The vocabulary checkpoint.json names (None when it names none); an entry tfspec did not write, or a
        tokenizer file that is missing or damaged, is a ``CheckpointError``."""
        from .data import DataError, Vocabulary

        if self.meta.get("vocab") is None:
            return None
        try:
            return Vocabulary.from_dict(self.meta["vocab"], self.path)
        except (ValueError, DataError) as exc:
            raise CheckpointError(f"{shown(self.path / 'checkpoint.json')}: {exc}") from None

    def config(self):
        """The training configuration (a ``TrainConfig``; None for imported weights); one that is not valid is a
        ``CheckpointError`` naming its fields."""
        from pydantic import ValidationError

        from .config import TrainConfig

        if "config" not in self.meta:
            return None
        try:
            return TrainConfig.saved(self.meta["config"])
        except (ValidationError, TypeError, ValueError) as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()) \
                if isinstance(exc, ValidationError) else str(exc)
            raise CheckpointError(f"{shown(self.path / 'checkpoint.json')}: its training configuration is not valid: "
                                  f"{problems}") from None

    def model(self, device=None):
        """The compiled model with these weights, in eval mode."""
        from ..backend.compiler import compile as compile_spec

        model = compile_spec(self.spec(), device=device)
        self.load_weights(model)
        return model.eval()

    def load_weights(self, model) -> None:
        """These weights into ``model``, once every tensor is known to be there with its shape (a ``CheckpointError``
        naming what differs otherwise: a spec.tfs or model.safetensors edited under ``--accept-edits``)."""
        misfit = weights_misfit(model.state_dict(), self.weights)
        if misfit is not None:
            raise CheckpointError(f"{shown(self.path)}: the weights do not fit spec.tfs: {misfit}")
        model.load_state_dict(self.weights)

    def spec(self):
        from ..ir.api import parse

        return parse(self.spec_text, file=str(self.path / "spec.tfs"), overrides=self.meta.get("overrides") or None)


def weights_misfit(own: dict, weights: dict) -> str | None:
    """How ``weights`` differ from a model's state dict ``own`` (tensors missing, not in it, or of other shapes), the
    first few of each, in one line; None where they fit."""
    missing = sorted(set(own) - set(weights))
    extra = sorted(set(weights) - set(own))
    shapes = [f"{k} {tuple(weights[k].shape)} vs {tuple(own[k].shape)}" for k in own
              if k in weights and tuple(weights[k].shape) != tuple(own[k].shape)]
    details = [f"{what}: {', '.join(items[:6])}" + (f" and {len(items) - 6} more" if len(items) > 6 else "")
               for what, items in (("missing", missing), ("not in the spec", extra), ("shapes differ", shapes))
               if items]
    return "; ".join(details) if details else None


def training_state_misfit(state: dict, optimizer, scaler) -> str | None:
    """Why a saved training state cannot drive this run's ``optimizer`` and ``scaler`` (moments of another shape
    or type, parameter groups of other sizes, hyperparameters that are not numbers, a random state that is not
    one), naming the first thing that differs; None where it fits. Checked before anything is loaded: moments of
    another shape crashed the interpreter in the optimiser's fused step, and the rest were tracebacks."""
    saved = state.get("optimizer")
    if not isinstance(saved, dict) or not isinstance(saved.get("state"), dict) or \
            not isinstance(saved.get("param_groups"), list):
        return "its optimizer state is not one an optimizer wrote"
    groups, params = optimizer.param_groups, [p for group in optimizer.param_groups for p in group["params"]]
    if len(saved["param_groups"]) != len(groups):
        return f"its optimizer has {len(saved['param_groups'])} parameter groups, this run's {len(groups)}"
    for number, (theirs, ours) in enumerate(zip(saved["param_groups"], groups)):
        held = theirs.get("params") if isinstance(theirs, dict) else None
        if not isinstance(held, list) or len(held) != len(ours["params"]):
            size = len(held) if isinstance(held, list) else "no"
            return f"its optimizer's group {number} holds {size} parameters, this run's {len(ours['params'])}"
        for key, value in ours.items():  # the numbers the step computes with (lr, betas, eps, weight decay); the
            # switches (fused, foreach) may differ with the processes' configuration and are this run's
            if key != "params" and _kind(value) in ("a number", "2 numbers") and _kind(theirs.get(key)) != _kind(value):
                return f"its optimizer's group {number} has {key} {quoted(theirs.get(key))}, not {_kind(value)}"
    indices = [i for theirs in saved["param_groups"] for i in theirs["params"]]
    if sorted(indices) != list(range(len(params))):
        return "its optimizer's groups do not number this run's parameters 0 to " + str(len(params) - 1)
    for index, moments in saved["state"].items():
        if not isinstance(index, int) or not 0 <= index < len(params) or not isinstance(moments, dict):
            return f"its optimizer holds a state for parameter {quoted(index)}, which this run does not have"
        shape = tuple(params[index].shape)
        for key, value in moments.items():
            if not isinstance(value, torch.Tensor):
                return f"its optimizer's {key} of parameter {index} is {quoted(value)}, not a tensor"
            if key == "step":
                if value.numel() != 1:
                    return f"its optimizer's step of parameter {index} holds {value.numel()} numbers, not one"
            elif tuple(value.shape) != shape or not value.is_floating_point():
                return (f"its optimizer's {key} of parameter {index} is {value.dtype} {tuple(value.shape)}, the "
                        f"parameter {params[index].dtype} {shape}")
    rngs = [state.get("rng")] + list(state.get("rng_per_worker") or [])
    size = torch.get_rng_state().numel()
    if not all(isinstance(r, torch.Tensor) and r.dtype == torch.uint8 and r.numel() == size for r in rngs):
        return "its random state is not one torch.get_rng_state gives"
    expected = scaler.state_dict()
    theirs = state.get("scaler")
    if expected and (not isinstance(theirs, dict) or any(_kind(theirs.get(k)) != _kind(v) for k, v in expected.items())):
        return "its loss scaler's state is not one this run's scaler wrote"
    return None


def _kind(value) -> str:
    """What a state's entry is, as far as fitting is concerned: a number, a pair of them, a flag, or its type."""
    if isinstance(value, bool):
        return "a flag"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, (tuple, list)) and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
        return f"{len(value)} numbers"
    return "None" if value is None else type(value).__name__


def _write(path: Path, data: bytes) -> None:
    with naming(path), open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


@contextmanager
def _zip_write_errors(path: Path) -> Iterator[None]:
    """torch's zip writer reports a failed write (a full disk) as a ``RuntimeError`` ("[enforce fail at
    inline_container.cc] ... unexpected pos", "basic_ios::clear: iostream error"); it leaves as the ``OSError`` it
    was, naming ``path``."""
    try:
        yield
    except RuntimeError as exc:
        if not any(mark in str(exc) for mark in ("inline_container", "PytorchStreamWriter", "iostream error")):
            raise
        code = errno.ENOSPC if _full(path) else errno.EIO
        raise OSError(code, os.strerror(code), str(path)) from None


def _full(path: Path) -> bool:
    """Whether the file system of ``path`` has (almost) no room left: under a megabyte, or no free inode."""
    try:
        info = os.statvfs(path.parent)
    except OSError:
        return False
    return info.f_bavail * info.f_frsize < (1 << 20) or info.f_favail == 0


def save(run_dir: Path, step: int, model, spec_text: str, meta: dict, state: dict,
         files: dict[str, bytes] | None = None) -> Path:
    """Write the checkpoint of ``step`` into ``run_dir`` and point ``latest`` at it; returns its path.
    ``model``: a module or its full state dict; ``files``: more files it holds, by name (an imported model's
    ``tokenizer.json``)."""
    root = Path(run_dir) / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    name = f"step-{step:07d}"
    final = root / name
    if not _holds_step(final, step):  # a checkpoint of this step, saved before a resume from an earlier one, is kept
        tmp = Path(tempfile.mkdtemp(dir=root, prefix=f".{name}."))
        try:
            state_dict = model if isinstance(model, dict) else model.state_dict()
            weights = {k: v.detach().to("cpu").contiguous() for k, v in state_dict.items()}
            with naming(tmp / "model.safetensors"):
                save_file(weights, str(tmp / "model.safetensors"), metadata={"format": "pt"})
            _write(tmp / "spec.tfs", spec_text.encode("utf-8"))
            for file_name, data in (files or {}).items():
                _write(tmp / file_name, data)
            with naming(tmp / "state.pt"), _zip_write_errors(tmp / "state.pt"):
                torch.save(state, tmp / "state.pt")
            digests = {f.name: _digest(f) for f in sorted(tmp.iterdir())}  # every file it holds
            record = {"format": FORMAT, **meta, "step": step, "digests": digests}
            record[SELF_DIGEST] = _record_digest(record)
            _write(tmp / "checkpoint.json", json.dumps(record, indent=2).encode())
            if final.exists():  # a leftover without checkpoint.json, or another step's files: not this checkpoint
                shutil.rmtree(final)
            os.rename(tmp, final)
        except BaseException as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            error = moved_error(exc, tmp, final)
            if error is None:
                raise
            try:
                previous = latest(run_dir)
            except CheckpointError:
                previous = None
            kept = f"the previous one, {previous.name}, is intact" if previous else "no earlier checkpoint exists"
            file = str(error.filename)
            file = file[len(str(final)) + 1:] if file.startswith(str(final) + os.sep) else file
            raise CheckpointError(f"cannot save checkpoint {shown(final)} ({shown(file)}: {error.strerror}); "
                                  f"{kept}") from None
    write_atomically(Path(run_dir) / "latest", f"{name}\n".encode())
    _prune(root, keep=name)
    return final


def step_of_name(name: str) -> int | None:
    """The step a checkpoint directory's name says (``step-0000042``: 42), or None for another name."""
    return int(name[5:]) if re.fullmatch(r"step-\d{7,}", name) else None


def _holds_step(path: Path, step: int) -> bool:
    """Whether ``path`` is a published checkpoint whose record says ``step``."""
    try:
        meta = read_json(path / "checkpoint.json")
    except (OSError, ValueError):
        return False
    return isinstance(meta, dict) and meta.get("step") == step and type(meta.get("step")) is int


LOCK = ".lock"  # in a run directory: held (flock) by the one process writing it
RUN_FILES = ("latest", "checkpoints", "metrics.jsonl", LOCK)  # any of them marks a directory as a run


class RunBusy(CheckpointError):
    """A run directory another live process is writing."""


def is_run(path: str | Path) -> bool:
    """Whether ``path`` is a tfspec run directory (or one begun: metrics, a lock)."""
    return any((Path(path) / name).exists() for name in RUN_FILES)


@contextmanager
def sole_writer(run_dir: str | Path) -> Iterator[None]:
    """Hold ``run_dir`` for this process: an exclusive ``flock`` on ``run_dir/.lock`` (made with the directory),
    which records the holder's PID. Another process holding it is a ``RunBusy`` naming that PID; the kernel
    drops the lock of a process that dies, so a killed run never blocks the next.
    """
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(run_dir / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EACCES):
                raise
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
            who = f"process {holder}" if holder.isdigit() else "another process"
            raise RunBusy(f"{shown(run_dir)}: {who} is writing this run (tfspec train); wait for it to end, or choose "
                          "another --out") from None
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError:  # a full disk: the PID only helps a message; the lock holds without it
            pass
        yield
    finally:
        os.close(fd)  # releases the lock


def _prune(root: Path, keep: str) -> None:
    """Delete all but the newest KEEP checkpoints (never ``keep``) and stale temporary directories."""
    published = sorted(p for p in root.iterdir() if p.name.startswith("step-"))
    for old in published[:-KEEP]:
        if old.name != keep:
            shutil.rmtree(old, ignore_errors=True)
    for stale in root.glob(".step-*"):
        shutil.rmtree(stale, ignore_errors=True)


STATE = "state.pt"
SELF_DIGEST = "record_digest"  # checkpoint.json's own: the SHA-256 of its other entries, written canonically
EDITABLE = {"spec.tfs": "was edited", "model.safetensors": "are not the weights it was saved with"}


def _record_digest(record: dict) -> str:
    rest = {k: v for k, v in record.items() if k != SELF_DIGEST}
    return hashlib.sha256(json.dumps(rest, sort_keys=True, ensure_ascii=True).encode()).hexdigest()


def _digest(path: Path) -> str:
    digest = hashlib.sha256()
    with open_regular(path) as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def load(path: str | Path, *, accept_edits: bool = False) -> Checkpoint:
    """Read a checkpoint directory, or a run directory's latest checkpoint. Its ``spec.tfs`` and weights must be
    those it was saved with (``accept_edits``: a spec.tfs edited by hand, or other weights, are taken as they
    are), its ``checkpoint.json`` well formed, and its weights finite; otherwise a ``CheckpointError`` names the
    file and the problem."""
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"{shown(path)}: no such checkpoint or run directory")
    if not (path / "checkpoint.json").is_file():
        found = latest(path) if path.is_dir() else None
        if found is None:
            raise CheckpointError(f"{shown(path)}: not a checkpoint (no checkpoint.json) nor a run directory (no "
                                  "'latest')")
        path = found
    try:
        meta = loads_json(read_regular(path / "checkpoint.json", 64 << 20))  # never a FIFO, a device
        _check_meta(path, meta)
        if not accept_edits:
            _check_digests(path, meta, skip=(STATE,))
        spec_text = read_regular(path / "spec.tfs", 64 << 20).decode("utf-8")
        weights = load_file(str(regular_file(path / "model.safetensors")))
    except CheckpointError:
        raise
    except Exception as exc:  # a missing file, bad JSON, a truncated safetensors header
        raise CheckpointError(f"{shown(path)}: unreadable checkpoint: {exc}") from None
    broken = [name for name, t in weights.items() if t.is_floating_point() and not torch.isfinite(t).all()]
    if broken:
        raise CheckpointError(f"{shown(path / 'model.safetensors')}: non-finite values (inf or NaN) in "
                              f"{', '.join(broken[:8])}" + (f" and {len(broken) - 8} more" if len(broken) > 8 else ""))
    return Checkpoint(path, spec_text, meta, weights, accept_edits)


def _check_meta(path: Path, meta) -> None:
    """checkpoint.json's shape: an object of format FORMAT whose step is a whole number >= 0."""
    where = path / "checkpoint.json"
    if not isinstance(meta, dict):
        raise CheckpointError(f"{shown(where)}: not a JSON object")
    if meta.get("format") != FORMAT:
        raise CheckpointError(f"{shown(path)}: checkpoint format {meta.get('format')!r}, expected {FORMAT}")
    step = meta.get("step")
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        raise CheckpointError(f"{shown(where)}: step {step!r} is not a whole number >= 0")
    named = step_of_name(path.name)
    if named is not None and named != step:  # another step's files copied or moved in: its weights, its state
        raise CheckpointError(f"{shown(path)}: holds the checkpoint of step {step}, not of step {named} as its name "
                              "says; it is not this run's checkpoint of that step")
    for key in ("config", "vocab", "overrides", "digests"):
        if key in meta and meta[key] is not None and not isinstance(meta[key], dict):
            raise CheckpointError(f"{shown(where)}: {key} is {type(meta[key]).__name__}, not an object")


def _check_digests(path: Path, meta: dict, skip: tuple[str, ...] = (), only: tuple[str, ...] | None = None) -> None:
    """checkpoint.json and every file it lists are as they were saved: a flipped byte anywhere is refused.
    (Checkpoints from before digests are taken as they are; those from before the record's own digest and
    state.pt's have those unchecked.)"""
    where = path / "checkpoint.json"
    if only is None and SELF_DIGEST in meta and meta[SELF_DIGEST] != _record_digest(meta):
        raise CheckpointError(f"{shown(where)}: damaged or edited since the checkpoint was saved (its SHA-256 differs "
                              "from "
                              "the one it records); to use it as it is, pass --accept-edits")
    for name, expected in (meta.get("digests") or {}).items():
        if not isinstance(name, str) or Path(name).name != name or name in (".", "..", "checkpoint.json"):
            raise CheckpointError(f"{shown(where)}: its digests name {str(name)[:80]!r}, not a file of the checkpoint")
        if name in skip or only is not None and name not in only:
            continue
        file = path / name
        if not file.is_file() or file.is_symlink():
            raise CheckpointError(f"{shown(file)}: missing (checkpoint.json lists it); the checkpoint is incomplete")
        if _digest(file) != expected:
            what = EDITABLE.get(name, "is damaged or was replaced")
            raise CheckpointError(f"{shown(file)}: {what} since the checkpoint was saved (its SHA-256 differs "
                                  "from checkpoint.json's); to use it as it is, pass --accept-edits")
