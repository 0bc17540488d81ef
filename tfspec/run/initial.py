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


def load_initial(model, initial: Initial, name: str) -> None:
    """Copy ``initial``'s weights into ``model``; every tensor must be there, with its shape."""
    misfit = ckpt.weights_misfit(model.state_dict(), initial.weights)
    if misfit is not None:
        raise DataError(f"--init {initial.source}: its weights do not fit {name}: {misfit}")
    model.load_state_dict(initial.weights)
