"""Where a run directory keeps things: its checkpoints, the one ``latest`` names, and the spec each holds.

Torch-free and below every stage, so that ``tfspec.load`` (the front end) reads a run's spec (and ``check`` its
architecture) without the trainer.
"""

from __future__ import annotations

import re
from pathlib import Path

from .errors import CheckpointError, shown
from .files import read_json, read_regular


def latest(run_dir: Path) -> Path | None:
    """The checkpoint ``run_dir/latest`` names, or None when the run has none yet; a ``latest`` that is not one
    checkpoint's name (not UTF-8, a path, absolute, pointing outside the run) is a ``CheckpointError``."""
    pointer = Path(run_dir) / "latest"
    if not pointer.exists():
        return None
    try:
        name = read_regular(pointer, 256).decode("utf-8").strip()
    except UnicodeDecodeError:
        raise CheckpointError(f"{shown(pointer)}: not the name of a checkpoint (not UTF-8 text)") from None
    except OSError as exc:  # a FIFO, a device, a directory, a file far longer than a name
        raise CheckpointError(f"{shown(pointer)}: not the name of a checkpoint ({exc.strerror or exc})") from None
    if not re.fullmatch(r"step-\d{7,}", name):
        raise CheckpointError(f"{shown(pointer)}: names {name[:80]!r}, not a checkpoint of this run (step-NNNNNNN)")
    return Path(run_dir) / "checkpoints" / name


def spec_of(path: str | Path) -> tuple[Path, dict] | None:
    """(spec.tfs, ``let`` overrides) of a checkpoint or a run directory's latest one, without reading the weights;
    None when ``path`` is neither."""
    path = Path(path)
    found = path if (path / "checkpoint.json").is_file() else latest(path)
    if found is None or not (found / "checkpoint.json").is_file():
        return None
    try:
        meta = read_json(found / "checkpoint.json")
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"{shown(found)}: unreadable checkpoint: {exc}") from None
    overrides = meta.get("overrides") if isinstance(meta, dict) else None
    return found / "spec.tfs", overrides if isinstance(overrides, dict) else {}
