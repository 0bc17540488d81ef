"""``--init`` weights from wherever they come: a Hugging Face model directory is read here, through its family;
a run or a checkpoint by the run stage (``tfspec.run.initial``)."""

from __future__ import annotations

from pathlib import Path

from ..errors import shown
from ..run.data import DataError
from ..run.initial import Initial, initial_weights, is_hugging_face_directory


def read_initial(source: str | Path, accept_edits: bool = False) -> Initial:
    """The weights ``source`` names (a run directory, a checkpoint or a Hugging Face model directory), with the spec
    and vocabulary that came with them (``accept_edits``: a checkpoint whose spec.tfs or weights changed since)."""
    path = Path(source)
    if not is_hugging_face_directory(path):
        return initial_weights(source, accept_edits=accept_edits)
    from .families import from_pretrained, import_config, tokenizer_of
    from .mapping import InteropError

    try:
        text = import_config(path)
        model = from_pretrained(path)
        vocab = tokenizer_of(path, model)
    except InteropError as exc:
        raise DataError(f"--init {shown(source)}: {exc}") from None
    return Initial(str(source), text, str(path / "config.json"), {}, model.state_dict(), vocab)
