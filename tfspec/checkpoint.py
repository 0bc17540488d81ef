"""Checkpoints: a directory per step, published by a rename, so a failed save never hurts the last one.

A run directory holds ``checkpoints/step-0001234/`` with

- ``model.safetensors``  the weights (``safetensors.torch.load_file`` reads them anywhere),
- ``spec.tfs``           the spec text the weights belong to,
- ``checkpoint.json``    step, training configuration, vocabulary, ``let`` overrides, last evaluation, and the
                         SHA-256 of ``spec.tfs`` and ``model.safetensors`` (checked on load: an edited spec or
                         swapped weights are refused unless the caller accepts them),
- ``state.pt``           optimizer, gradient scaler and RNG states (loaded with ``weights_only=True``),

and ``latest`` naming the newest one. A save writes a hidden temporary
directory, renames it into place, then rewrites ``latest`` atomically: if it
stops at any point, ``latest`` still names a complete checkpoint.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from .errors import RunError
from .files import write_atomically

FORMAT = 1
KEEP = 3  # checkpoints kept per run (the newest ones)


class CheckpointError(RunError):
    """A path that is not a usable checkpoint: exit 1 with the reason."""


@dataclass
class Checkpoint:
    path: Path
    spec_text: str
    meta: dict  # checkpoint.json
    weights: dict[str, torch.Tensor]

    @property
    def step(self) -> int:
        return self.meta["step"]

    def training_state(self) -> dict:
        """The optimizer, scaler and RNG states; a missing, damaged or foreign ``state.pt`` is a
        ``CheckpointError`` (a pickle that is not plain tensors and containers is refused by ``weights_only``)."""
        try:
            with warnings.catch_warnings():  # a foreign pickle's protocol warning: the error below says it all
                warnings.simplefilter("ignore")
                state = torch.load(self.path / "state.pt", weights_only=True, map_location="cpu")
        except FileNotFoundError:
            raise CheckpointError(f"{self.path / 'state.pt'}: missing; the run cannot resume from it") from None
        except Exception as exc:  # torch raises UnpicklingError, RuntimeError, EOFError, ... for damaged files
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise CheckpointError(f"{self.path / 'state.pt'}: not a training state tfspec wrote "
                                  f"({type(exc).__name__}: {first[:200]})") from None
        if not isinstance(state, dict) or not {"optimizer", "rng"} <= set(state):
            raise CheckpointError(f"{self.path / 'state.pt'}: not a training state tfspec wrote (no optimizer "
                                  "and RNG states)")
        return state

    def model(self, device=None):
        """The compiled model with these weights, in eval mode."""
        from .compiler import compile as compile_spec

        model = compile_spec(self.spec(), device=device)
        try:
            model.load_state_dict(self.weights)
        except RuntimeError as exc:  # names or shapes that do not match the spec
            raise CheckpointError(f"{self.path}: the weights do not fit spec.tfs: {exc}") from None
        return model.eval()

    def spec(self):
        from .api import parse

        return parse(self.spec_text, file=str(self.path / "spec.tfs"), overrides=self.meta.get("overrides") or None)


def _write(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def save(run_dir: Path, step: int, model, spec_text: str, meta: dict, state: dict,
         files: dict[str, bytes] | None = None) -> Path:
    """Write the checkpoint of ``step`` into ``run_dir`` and point ``latest`` at it; returns its path.
    ``model``: a module or its full state dict; ``files``: more files it holds, by name (an imported model's
    ``tokenizer.json``)."""
    root = Path(run_dir) / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    name = f"step-{step:07d}"
    final = root / name
    if not (final / "checkpoint.json").exists():
        tmp = Path(tempfile.mkdtemp(dir=root, prefix=f".{name}."))
        try:
            state_dict = model if isinstance(model, dict) else model.state_dict()
            weights = {k: v.detach().to("cpu").contiguous() for k, v in state_dict.items()}
            save_file(weights, str(tmp / "model.safetensors"), metadata={"format": "pt"})
            _write(tmp / "spec.tfs", spec_text.encode("utf-8"))
            for file_name, data in (files or {}).items():
                _write(tmp / file_name, data)
            torch.save(state, tmp / "state.pt")
            digests = {f: _digest(tmp / f) for f in DIGESTED}
            _write(tmp / "checkpoint.json", json.dumps({"format": FORMAT, **meta, "step": step, "digests": digests},
                                                       indent=2).encode())
            if final.exists():  # a leftover without checkpoint.json: never published, safe to replace
                shutil.rmtree(final)
            os.rename(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    write_atomically(Path(run_dir) / "latest", f"{name}\n".encode())
    _prune(root, keep=name)
    return final


def _prune(root: Path, keep: str) -> None:
    """Delete all but the newest KEEP checkpoints (never ``keep``) and stale temporary directories."""
    published = sorted(p for p in root.iterdir() if p.name.startswith("step-"))
    for old in published[:-KEEP]:
        if old.name != keep:
            shutil.rmtree(old, ignore_errors=True)
    for stale in root.glob(".step-*"):
        shutil.rmtree(stale, ignore_errors=True)


DIGESTED = ("spec.tfs", "model.safetensors")


def _digest(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def latest(run_dir: Path) -> Path | None:
    """The checkpoint ``run_dir/latest`` names, or None when the run has none yet; a ``latest`` that is not one
    checkpoint's name (not UTF-8, a path, absolute, pointing outside the run) is a ``CheckpointError``."""
    pointer = Path(run_dir) / "latest"
    if not pointer.is_file():
        return None
    try:
        name = pointer.read_bytes()[:256].decode("utf-8").strip()
    except (OSError, UnicodeDecodeError):
        raise CheckpointError(f"{pointer}: not the name of a checkpoint (not UTF-8 text)") from None
    if not re.fullmatch(r"step-\d{7,}", name):
        raise CheckpointError(f"{pointer}: names {name[:80]!r}, not a checkpoint of this run (step-NNNNNNN)")
    return Path(run_dir) / "checkpoints" / name


def spec_of(path: str | Path) -> tuple[Path, dict] | None:
    """(spec.tfs, ``let`` overrides) of a checkpoint or a run directory's latest one, without reading the weights;
    None when ``path`` is neither."""
    path = Path(path)
    found = path if (path / "checkpoint.json").is_file() else latest(path)
    if found is None or not (found / "checkpoint.json").is_file():
        return None
    try:
        meta = json.loads((found / "checkpoint.json").read_text())
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{found}: unreadable checkpoint: {exc}") from None
    overrides = meta.get("overrides") if isinstance(meta, dict) else None
    return found / "spec.tfs", overrides if isinstance(overrides, dict) else {}


def load(path: str | Path, *, accept_edits: bool = False) -> Checkpoint:
    """Read a checkpoint directory, or a run directory's latest checkpoint. Its ``spec.tfs`` and weights must be
    those it was saved with (``accept_edits``: a spec.tfs edited by hand, or other weights, are taken as they
    are), its ``checkpoint.json`` well formed, and its weights finite; otherwise a ``CheckpointError`` names the
    file and the problem."""
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"{path}: no such checkpoint or run directory")
    if not (path / "checkpoint.json").is_file():
        found = latest(path) if path.is_dir() else None
        if found is None:
            raise CheckpointError(f"{path}: not a checkpoint (no checkpoint.json) nor a run directory (no 'latest')")
        path = found
    try:
        meta = json.loads((path / "checkpoint.json").read_text())
        _check_meta(path, meta)
        if not accept_edits:
            _check_digests(path, meta)
        spec_text = (path / "spec.tfs").read_text(encoding="utf-8")
        weights = load_file(str(path / "model.safetensors"))
    except CheckpointError:
        raise
    except Exception as exc:  # a missing file, bad JSON, a truncated safetensors header
        raise CheckpointError(f"{path}: unreadable checkpoint: {exc}") from None
    broken = [name for name, t in weights.items() if t.is_floating_point() and not torch.isfinite(t).all()]
    if broken:
        raise CheckpointError(f"{path / 'model.safetensors'}: non-finite values (inf or NaN) in "
                              f"{', '.join(broken[:8])}" + (f" and {len(broken) - 8} more" if len(broken) > 8 else ""))
    return Checkpoint(path, spec_text, meta, weights)


def _check_meta(path: Path, meta) -> None:
    """checkpoint.json's shape: an object of format FORMAT whose step is a whole number >= 0."""
    where = path / "checkpoint.json"
    if not isinstance(meta, dict):
        raise CheckpointError(f"{where}: not a JSON object")
    if meta.get("format") != FORMAT:
        raise CheckpointError(f"{path}: checkpoint format {meta.get('format')!r}, expected {FORMAT}")
    step = meta.get("step")
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        raise CheckpointError(f"{where}: step {step!r} is not a whole number >= 0")
    for key in ("config", "vocab", "overrides", "digests"):
        if key in meta and meta[key] is not None and not isinstance(meta[key], dict):
            raise CheckpointError(f"{where}: {key} is {type(meta[key]).__name__}, not an object")


def _check_digests(path: Path, meta: dict) -> None:
    """The files are those the checkpoint was saved with (checkpoints from before digests are taken as they are)."""
    for name, expected in (meta.get("digests") or {}).items():
        if name in DIGESTED and (path / name).is_file() and _digest(path / name) != expected:
            what = "was edited" if name == "spec.tfs" else "are not the weights it was saved with"
            raise CheckpointError(f"{path / name}: {what} since the checkpoint was saved (its SHA-256 differs "
                                  "from checkpoint.json's); to use it as it is, pass --accept-edits")
