"""Argument checks at the model boundary: a wrong input gets a ValueError naming the argument.

Value checks (ids within the vocabulary) read the tensor, which synchronises
with an accelerator; they are skipped while ``torch.compile`` traces, and a
model's ``check_inputs = False`` turns all of them off.
"""

from __future__ import annotations

import torch
from torch import Tensor

INTEGER_DTYPES = (torch.int64, torch.int32)


def _tensor(name: str, value, what: str) -> Tensor:
    if not isinstance(value, Tensor):
        raise ValueError(f"{name} must be a torch.Tensor of {what}, got {type(value).__name__}")
    return value


def _same_device(name: str, value: Tensor, device: torch.device) -> None:
    if value.device != device and device.type != "meta":
        raise ValueError(f"{name} is on {value.device} but the model is on {device}; move it with .to({str(device)!r})")


def check_ids(name: str, ids, vocab: int, device: torch.device, max_len: int | None = None, offset: int = 0,
              what: str = "token ids", table: str = "the vocabulary", limited_by: str = "learned positions") -> Tensor:
    ids = _tensor(name, ids, what)
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise ValueError(f"offset must be a whole number >= 0 (the positions already in the cache), got {offset!r}")
    if ids.dtype not in INTEGER_DTYPES:
        raise ValueError(f"{name} must hold integer {what} (torch.long), got {ids.dtype}")
    if ids.dim() != 2:
        raise ValueError(f"{name} must be shaped (batch, length), got shape {tuple(ids.shape)}")
    if ids.shape[0] == 0 or ids.shape[1] == 0:
        raise ValueError(f"{name} is empty (shape {tuple(ids.shape)}); give at least one position")
    if max_len is not None and offset + ids.shape[1] > max_len:
        raise ValueError(f"{name} has length {offset + ids.shape[1]}, but the {limited_by} cover {max_len} "
                         f"(max_len={max_len}); shorten it or raise max_len in the spec")
    _same_device(name, ids, device)
    if not torch.compiler.is_compiling() and ids.device.type != "meta":
        low, high = torch.aminmax(ids)
        if low.item() < 0 or high.item() >= vocab:
            bad = high.item() if high.item() >= vocab else low.item()
            raise ValueError(f"{name} contains id {bad}, outside {table} of {vocab} (valid ids 0..{vocab - 1})")
    return ids


def check_pixels(name: str, pixels, channels: int, image: int, device: torch.device) -> Tensor:
    """Pictures ``(batch, channels, image, image)`` of floating-point pixel values."""
    return _examples(name, pixels, (channels, image, image), "pixel values", "picture", device,
                     f"pictures of {channels} channel{'s' if channels > 1 else ''}, {image} pixels square")


def check_pixels_of_any_size(name: str, pixels, channels: int, patch: int, device: torch.device) -> Tensor:
    """Pictures ``(batch, channels, height, width)`` of floating-point pixel values, each side whole patches."""
    x = _tensor(name, pixels, "pixel values")
    if x.dim() != 4 or x.shape[1] != channels:
        raise ValueError(f"{name} must be shaped (batch, {channels}, height, width): pictures of {channels} "
                         f"channel{'s' if channels > 1 else ''}; got {tuple(x.shape)}")
    if x.shape[2] % patch or x.shape[3] % patch or 0 in x.shape[2:]:
        raise ValueError(f"{name} must be pictures whose sides are whole {patch}-pixel patches; got "
                         f"{x.shape[2]} × {x.shape[3]} pixels")
    return _examples(name, x, tuple(x.shape[1:]), "pixel values", "picture", device, "pictures")


def check_features(name: str, features, mels: int, frames: int, device: torch.device) -> Tensor:
    """Log-mel spectrograms ``(batch, mels, frames)`` of floating-point values."""
    return _examples(name, features, (mels, frames), "log-mel features", "spectrogram", device,
                     f"spectrograms of {mels} mel bins and {frames} frames")


def _examples(name: str, x, shape: tuple[int, ...], what: str, one: str, device: torch.device, shown: str) -> Tensor:
    """A batch of floating-point examples of ``shape`` each (what an input kind reads), ``shown`` in words."""
    x = _tensor(name, x, what)
    if not x.is_floating_point():
        raise ValueError(f"{name} must hold {what} as floating-point numbers, got {x.dtype}")
    if x.dim() != len(shape) + 1 or tuple(x.shape[1:]) != shape:
        raise ValueError(f"{name} must be shaped (batch, {', '.join(map(str, shape))}): {shown}; got {tuple(x.shape)}")
    if x.shape[0] == 0:
        raise ValueError(f"{name} is empty (shape {tuple(x.shape)}); give at least one {one}")
    _same_device(name, x, device)
    return x


def check_padding_mask(name: str, mask, like: Tensor, like_name: str, used: bool, hint: str) -> None:
    if mask is None:
        return
    mask = _tensor(name, mask, "bools")
    if mask.dtype != torch.bool:
        raise ValueError(f"{name} must be a bool tensor (True at padded positions), got {mask.dtype}")
    if mask.shape != like.shape:
        raise ValueError(f"{name} must have the shape of {like_name} {tuple(like.shape)}, got {tuple(mask.shape)}")
    _same_device(name, mask, like.device)
    if not used:
        raise ValueError(f"{name} was given, but no attention here masks padding; {hint}")


def check_memory(memory, batch: int, width: int, device: torch.device, dtype: torch.dtype | None = None) -> None:
    memory = _tensor("memory", memory, "encoder states")
    if memory.dim() != 3 or memory.shape[0] != batch or memory.shape[2] != width:
        raise ValueError(f"memory must be the encoder's output shaped (batch={batch}, src_len, {width}), "
                         f"got {tuple(memory.shape)}")
    if not memory.is_floating_point():
        raise ValueError(f"memory must be floating point, got {memory.dtype}")
    if dtype is not None and memory.dtype != dtype and not torch.is_autocast_enabled(memory.device.type):
        raise ValueError(f"memory is {memory.dtype} but the model computes in {dtype}; pass the encoder's output, "
                         f"or memory.to({dtype})")
    _same_device("memory", memory, device)
    if memory.device.type != "meta" and not torch.compiler.is_compiling() and not torch.isfinite(memory).all():
        raise ValueError("memory holds inf or NaN values: the decoder would give non-finite logits")


def check_runtime_inputs(inputs: dict, declared: dict, ids: Tensor, device: torch.device, max_len: int | None) -> None:
    """Keyword run-time inputs: known names (``position_ids`` and what the spec's variants declare), integer
    tensors shaped per sequence ``(batch,)`` or per position ``(batch or 1, length)``; position ids in range."""
    from ..registry import POSITION_IDS

    known = {POSITION_IDS.name: POSITION_IDS, **declared}
    for name, value in inputs.items():
        spec = known.get(name)
        if spec is None:
            raise ValueError(f"unknown run-time input {name!r}; this model reads {', '.join(sorted(known))}")
        value = _tensor(name, value, "integers")
        if value.dtype not in INTEGER_DTYPES:
            raise ValueError(f"{name} must hold integers (torch.long), got {value.dtype}")
        batch, length = ids.shape
        if spec.per == "sequence" and tuple(value.shape) != (batch,):
            raise ValueError(f"{name} must be shaped (batch,) = ({batch},), got {tuple(value.shape)}")
        if spec.per == "position" and (value.dim() != 2 or value.shape[0] not in (1, batch) or value.shape[1] != length):
            raise ValueError(f"{name} must be shaped (batch, length) = ({batch}, {length}) or (1, {length}), "
                             f"got {tuple(value.shape)}")
        _same_device(name, value, device)
        if not torch.compiler.is_compiling() and value.device.type != "meta" and value.numel():
            low, high = torch.aminmax(value)
            if low.item() < 0:
                raise ValueError(f"{name} contains {low.item()}; it must not be negative")
            if spec.grid and low.item() < 1:  # (a grid's width divides the positions)
                raise ValueError(f"{name} contains 0; a grid of patches is at least 1 wide")
            if name == POSITION_IDS.name and max_len is not None and high.item() >= max_len:
                raise ValueError(f"position_ids contains {high.item()}, but the learned positions cover "
                                 f"0..{max_len - 1} (learned({max_len}))")
