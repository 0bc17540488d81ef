"""The weights a run starts from (``--init``): a run, a checkpoint or a Hugging Face model directory."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import shown
from . import checkpoint as ckpt
from .data import DataError


@dataclass
class Initial:
    """The weights a run starts from (``--init``), with the spec and vocabulary that came with them."""

    source: str
    spec_text: str
    name: str
    overrides: dict
    weights: dict
    vocab: object | None  # a tfspec.run.data vocabulary, or None when the weights came without one


def is_hugging_face_directory(path: Path) -> bool:
    """Whether ``path`` is a Hugging Face model directory (its config.json, no checkpoint of a run)."""
    return path.is_dir() and (path / "config.json").exists() and not (path / "checkpoint.json").exists()


def initial_weights(source: str | Path, accept_edits: bool = False) -> Initial:
    """Read ``source``: a run directory (its latest checkpoint) or a checkpoint (``accept_edits``: one whose spec.tfs
    or weights changed since its save). A Hugging Face model directory is read by the interop stage, which meets
    Hugging Face: ``tfspec.interop.initial.read_initial`` (what ``tfspec.train`` and ``tfspec train --init`` use)."""
    path = Path(source)
    if not path.exists():
        raise DataError(f"--init {shown(source)}: no such run, checkpoint or Hugging Face model directory")
    if is_hugging_face_directory(path):
        raise DataError(f"--init {shown(source)}: a Hugging Face model directory; read it with "
                        "tfspec.interop.initial.read_initial and pass it as initial=, or train with tfspec.train")
    saved = ckpt.load(path, accept_edits=accept_edits)
    vocab = saved.vocabulary()
    return Initial(str(source), saved.spec_text, str(saved.path / "spec.tfs"), saved.meta.get("overrides") or {},
                   saved.weights, vocab)


def load_initial(model, initial: Initial, name: str) -> None:
    """Copy ``initial``'s weights into ``model``; every tensor must be there, with its shape."""
    misfit = ckpt.weights_misfit(model.state_dict(), initial.weights)
    if misfit is not None:
        raise DataError(f"--init {initial.source}: its weights do not fit {name}: {misfit}")
    model.load_state_dict(initial.weights)
