"""``tfspec.export`` and ``tfspec export``: a compiled model, a run or a checkpoint written for other tools.

- ``to="hf"``: a Hugging Face model directory (``config.json``, ``model.safetensors``, the tokenizer a run has)
  that ``transformers``' ``from_pretrained`` loads, when a family computes exactly what the spec does;
- ``to="onnx"``: ``model.onnx``, checked by onnxruntime (``tfspec.interop.onnx``);
- ``to="torch"``: ``model.py`` (``tfspec emit``'s standalone file, torch only) and ``model.safetensors``.

The directory is written whole or not at all, and must be new (or empty).

>>> import tfspec, tempfile, pathlib
>>> model = tfspec.compile("examples/gpt2_small.tfs", overrides={"layers": 1, "d_model": 32, "heads": 2})
>>> out = pathlib.Path(tempfile.mkdtemp()) / "hf"
>>> tfspec.export(model, out, to="hf").startswith("a Hugging Face GPT2LMHeadModel")
True
"""

from __future__ import annotations

from pathlib import Path

from ..errors import RunError, shown
from ..files import new_directory, write_atomically

TARGETS = ("hf", "onnx", "torch")


class ExportError(RunError):
    """The model cannot be written as asked: no equivalent class, an exporter's failure, a directory in the way."""


def export(source, directory, to: str = "hf") -> str:
    """Write ``source`` — a compiled model, or the path of a run directory or checkpoint — into the new directory
    ``directory`` for ``to`` (``"hf"``, ``"onnx"`` or ``"torch"``); returns what was written, in a sentence."""
    from ..run import checkpoint as ckpt

    if to not in TARGETS:
        raise ValueError(f"to={to!r}: export writes one of {', '.join(TARGETS)}")
    out = Path(directory)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ExportError(f"{shown(out)}: already exists{'' if out.is_dir() else ' (a file)'}; name a new directory")
    saved = ckpt.load(source) if isinstance(source, (str, Path)) else None
    model = saved.model() if saved is not None else source
    with new_directory(out) as work:  # written whole or not at all
        return _write(to, saved, model, Path(work), out)


def _write(to: str, saved, model, out: Path, final: Path) -> str:
    if to == "hf":
        return _hugging_face(saved, model, out, final)
    if to == "torch":
        from safetensors.torch import save_file

        from ..backend.standalone import emit

        origin = str(saved.path / "spec.tfs") if saved is not None else model.spec.name
        write_atomically(out / "model.py", emit(model.spec, origin=origin).encode("utf-8"))
        save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(out / "model.safetensors"))
        return ("model.py (torch only) and model.safetensors; "
                "Model().load_state_dict(safetensors.torch.load_file(...)) gives the model")
    return _onnx(model, out)


def _hugging_face(saved, model, out: Path, final: Path) -> str:
    from ..run.data import hugging_face_tokenizer
    from .families import export_pretrained
    from .mapping import InteropError

    try:
        from transformers.utils import logging
        logging.disable_progress_bar()  # the command says what it wrote; no bars of transformers' own
    except ImportError:
        pass
    vocab = saved.vocabulary() if saved is not None else None
    meta = saved.meta if saved is not None else {}
    model.hf_carried = meta.get("hf_carried") or getattr(model, "hf_carried", None) or {}  # what an import carried
    try:
        cls = export_pretrained(model, out, prefer=meta.get("hf_class") or getattr(model, "hf_class", None),
                                token_ids=token_ids(vocab, model.spec.kind) if vocab else None)
    except InteropError as exc:
        raise ExportError(f"{shown(saved.path)}: {exc}" if saved is not None else str(exc)) from None
    written = ["config.json", "model.safetensors"]
    for name, data in (hugging_face_tokenizer(vocab) if vocab else {}).items():
        write_atomically(out / name, data)
        written.append(name)
    return (f"a Hugging Face {cls} ({', '.join(written)}); "
            f"transformers.{cls}.from_pretrained({str(final)!r}) loads it")


def token_ids(vocab, kind: str) -> dict[str, int]:
    """The configuration fields that name ``vocab``'s special tokens (an encoder-decoder's start is its decoder's)."""
    start = "decoder_start_token_id" if kind == "encoder-decoder" else "bos_token_id"
    fields = {"pad_token_id": vocab.pad, start: vocab.start, "eos_token_id": vocab.eos,
              "forced_bos_token_id": getattr(vocab, "first", None), "forced_eos_token_id": getattr(vocab, "last", None)}
    return {key: value for key, value in fields.items() if value is not None}


def _onnx(model, out: Path) -> str:
    from .onnx import OnnxError, export_onnx, missing_packages

    verify = not missing_packages(verify=True)
    try:
        done = export_onnx(model, out / "model.onnx", verify=verify)
    except OnnxError as exc:
        raise ExportError(str(exc)) from None
    checked = (f"onnxruntime gives PyTorch's {done.outputs[0]} to {done.max_difference:.1e} (relative)" if verify else
               "not run: pip install onnxruntime to check it")
    return (f"model.onnx (inputs {', '.join(done.inputs)}; outputs {', '.join(done.outputs)}; batch and lengths "
            f"dynamic); {checked}")
