"""Token embedding (optionally scaled) + positional encoding + segments, then norm and dropout."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .checks import check_features, check_pixels, check_pixels_of_any_size


class SinusoidalPositions(nn.Module):
    """PE(p, 2i) = sin(p / 10000^(2i/d)), PE(p, 2i+1) = cos(p / 10000^(2i/d)) (Vaswani et al., 3.5); with
    ``halves`` the sines fill the first half and the cosines the second (Marian, fairseq); with ``endpoint`` too,
    the frequencies are 10000^(-i / (d/2 - 1)), the last exactly 1/10000 (Whisper's ``sinusoids``).

    Computed on the fly in float32 (cheap next to attention), so no table
    limits the length and nothing lands in the state dict.
    """

    def __init__(self, dim: int, halves: bool = False, endpoint: bool = False):
        super().__init__()
        self.dim, self.halves, self.endpoint = dim, halves, endpoint

    def forward(self, positions: Tensor) -> Tensor:
        half = (self.dim + 1) // 2
        if self.endpoint:  # in float32, in Whisper's order of operations: its checkpoints hold this table
            frequencies = torch.exp(-math.log(10000.0) / max(half - 1, 1) * torch.arange(half, device=positions.device))
            angles = positions[..., None] * frequencies
            return torch.cat((angles.sin(), angles[..., : self.dim - half].cos()), dim=-1)
        if self.halves:  # every sine, then every cosine, in float64 as Marian's numpy table is (then float32)
            frequencies = 10000.0 ** (-2.0 * torch.arange(half, device=positions.device, dtype=torch.float64) / self.dim)
            angles = positions.to(torch.float64)[..., None] * frequencies
            return torch.cat((angles.sin(), angles[..., : self.dim - half].cos()), dim=-1).float()
        frequencies = torch.exp(torch.arange(half, device=positions.device, dtype=torch.float32)
                                * (-2.0 * math.log(10000.0) / self.dim))
        angles = positions.to(torch.float32)[..., None] * frequencies  # (..., length, half)
        table = torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(-2)  # interleave sin, cos
        return table[..., : self.dim]

    def extra_repr(self) -> str:
        return f"dim={self.dim}" + (", halves" if self.halves else "") + (", endpoint" if self.endpoint else "")


class OffsetPositions(nn.Embedding):
    """A learned table whose first ``offset`` rows no position reads first: position p reads row p + offset
    (OPT, BART and RoBERTa keep 2 such rows; a pad's position of -1 reads row offset - 1)."""

    def __init__(self, rows: int, dim: int, offset: int):
        super().__init__(rows, dim)
        self.offset = offset

    def forward(self, positions: Tensor) -> Tensor:
        return super().forward(positions + self.offset)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, offset={self.offset}"


def default_positions(ids: Tensor, padding: Tensor | None = None, real_from: int | None = None, start: int = 0
                      ) -> Tensor:
    """Position ids ``(1 or batch, length)`` of token ids ``ids`` when none are given: start, start + 1, ...;
    or, where the embedding counts real tokens only (``real_from``: the id a pad takes, at least -1) and the
    batch is padded, each token's count of the real tokens before it (pads at ``real_from``)."""
    if real_from is None or padding is None:
        return (start + torch.arange(ids.shape[1], device=ids.device))[None]  # (start: an int, or a 0-d tensor)
    real = (~padding).long()
    return (real.cumsum(dim=1) * real - 1).clamp(min=max(real_from, -1)) + start


class Embeddings(nn.Module):
    """Token table (scaled) + positions + segments, then norm and dropout, then ``project`` (a linear map into a
    wider stack). ``shared``: the token table is another embedding's, which the model passes to ``forward`` (BART's
    encoder and decoder read one)."""

    def __init__(self, vocab: int, dim: int, scale: float, positions: nn.Module | None, segments: int,
                 norm: nn.Module, dropout: float, shared: bool = False, project: int | None = None,
                 per_layer: nn.Module | None = None):
        super().__init__()
        self.vocab, self.dim, self.scale = vocab, dim, scale
        self.width = project or dim  # what the stack reads
        self.tokens = None if shared else nn.Embedding(vocab, dim)
        self.positions = positions
        self.segments = nn.Embedding(segments, dim) if segments else None
        self.norm = norm
        self.dropout = nn.Dropout(dropout)
        # a linear map into the stack's width after the norm and dropout (ALBERT's, ELECTRA-small's)
        self.project = nn.Linear(dim, project) if project else None
        # features for each layer of its stack from the ids and the embeddings (``tfspec.nn.per_layer``), which the
        # model computes beside them and hands the layers through the call's context
        self.per_layer = per_layer

    def forward(self, ids: Tensor, positions: Tensor, token_types: Tensor | None = None,
                tokens: nn.Module | None = None, spliced: tuple[Tensor, Tensor] | None = None) -> Tensor:
        """``ids`` (batch, length) at position ids ``positions`` (batch or 1, length) -> (batch, length, dim);
        ``tokens``: the token table, where it is another embedding's; ``spliced``: (where, vectors), the looked-up
        (and scaled) vectors replaced by ``vectors``, in order, where ``where`` is True (a connector's pictures
        among the tokens, before positions and norm, as Hugging Face's vision-language models put them)."""
        x = (tokens if tokens is not None else self.tokens)(ids)
        if self.scale != 1.0:
            x = x * self.scale
        if spliced is not None:
            x = x.masked_scatter(spliced[0][..., None], spliced[1].to(x.dtype))
        if self.positions is not None:
            x = x + self.positions(positions).to(x.dtype)
        if self.segments is not None:
            x = x + (self.segments(token_types) if token_types is not None else self.segments.weight[0])
        x = self.dropout(self.norm(x))
        return x if self.project is None else self.project(x)

    def extra_repr(self) -> str:
        return f"scale={self.scale:g}" if self.scale != 1.0 else ""


class FeatureEmbeddings(nn.Module):
    """What an input kind makes of its tensor (``vectors``, each kind's own), then positions, norm, dropout and
    ``project``, as ``Embeddings`` does for tokens. ``shape``: one example's; ``length``: the sequence it makes;
    ``check``: a tensor of the wrong kind or shape refused, naming its argument."""

    vocab = None  # no token table
    segments = None
    per_layer = None  # (per-layer inputs are of token ids)

    def __init__(self, shape: tuple[int, ...], length: int, dim: int, positions: nn.Module | None, norm: nn.Module,
                 dropout: float, project: int | None = None):
        super().__init__()
        self.shape, self.length, self.dim = shape, length, dim
        self.width = project or dim
        self.positions = positions
        self.norm = norm
        self.dropout = nn.Dropout(dropout)
        self.project = nn.Linear(dim, project) if project else None

    def vectors(self, x: Tensor) -> Tensor:
        """(batch, *shape) -> (batch, length, dim)."""
        raise NotImplementedError

    def grid_of(self, x: Tensor) -> tuple[int, int] | None:
        """The rows and columns of the grid of patches ``x``'s examples make; None: no grid (spectrograms)."""
        return None

    def length_of(self, x: Tensor) -> int:
        """The vectors ``x``'s examples make each (``length`` at the spec's size)."""
        return self.length

    def check(self, name: str, x, device: torch.device, any_size: bool = False) -> None:
        """``x`` refused, naming ``name``, unless a batch of examples of ``shape`` (``any_size``: the kind's
        examples of any size it reads)."""
        raise NotImplementedError

    def forward(self, x: Tensor, positions: Tensor, token_types: Tensor | None = None,
                tokens: nn.Module | None = None) -> Tensor:
        """``x`` (batch, *shape) at position ids ``positions`` -> (batch, length, width)."""
        x = self.vectors(x)
        if self.positions is not None:
            x = x + self.positions(positions).to(x.dtype)
        x = self.dropout(self.norm(x))
        return x if self.project is None else self.project(x)


class PatchEmbeddings(FeatureEmbeddings):
    """Pictures ``(batch, channels, image, image)`` cut into ``patch``-sided squares, each mapped linearly
    (``patches``, over its pixels in (channel, row, column) order: a convolution whose kernel is its stride, as
    ViT's) to a vector, after a learned ``class_token`` (``tfspec.variants.patches``); with ``frames``, over
    (channel, frame, row, column), the picture each frame (a video model's 3-D convolution of a still picture)."""

    def __init__(self, image: int, patch: int, channels: int, dim: int, class_token: bool,
                 positions: nn.Module | None, norm: nn.Module, dropout: float, project: int | None = None,
                 bias: bool = True, frames: int = 1):
        super().__init__((channels, image, image), (image // patch) ** 2 + class_token, dim, positions, norm,
                         dropout, project)
        self.image, self.patch, self.channels, self.frames = image, patch, channels, frames
        self.patches = nn.Linear(channels * frames * patch * patch, dim, bias=bias)
        self.class_token = nn.Parameter(torch.empty(dim)) if class_token else None

    def vectors(self, pixels: Tensor) -> Tensor:
        batch, p = pixels.shape[0], self.patch
        pixels = pixels.to(self.patches.weight.dtype)  # float32 pictures into a bf16 model, as a token id would go
        squares = pixels.unfold(2, p, p).unfold(3, p, p)  # (batch, channels, rows, columns, p, p)
        squares = squares.permute(0, 2, 3, 1, 4, 5)[:, :, :, :, None]  # (batch, rows, columns, channels, 1, p, p)
        squares = squares.expand(-1, -1, -1, -1, self.frames, -1, -1)  # each frame the picture
        x = self.patches(squares.reshape(batch, -1, self.channels * self.frames * p * p))
        if self.class_token is not None:
            x = torch.cat((self.class_token.to(x.dtype).expand(batch, 1, -1), x), dim=1)
        return x

    def grid_of(self, pixels: Tensor) -> tuple[int, int]:
        return pixels.shape[-2] // self.patch, pixels.shape[-1] // self.patch

    def length_of(self, pixels: Tensor) -> int:
        rows, columns = self.grid_of(pixels)
        return rows * columns + (self.class_token is not None)

    def check(self, name: str, pixels, device: torch.device, any_size: bool = False) -> None:
        """Pictures of the spec's size; ``any_size``: of any size whose sides are whole patches (a tower whose
        positions read each patch's row and column in its own picture's grid)."""
        if any_size:
            check_pixels_of_any_size(name, pixels, self.channels, self.patch, device)
        else:
            check_pixels(name, pixels, self.channels, self.image, device)

    def extra_repr(self) -> str:
        return f"image={self.image}, patch={self.patch}, channels={self.channels}" + \
            f", frames={self.frames}" * (self.frames > 1)


class AudioEmbeddings(FeatureEmbeddings):
    """Log-mel spectrograms ``(batch, mels, frames)`` through a 1-D convolution of ``kernel`` taps to ``dim``, GELU,
    a second of stride 2, GELU, each padded by ``kernel // 2`` a side (Whisper's front end,
    ``tfspec.variants.audio``): one vector per pair of frames."""

    def __init__(self, mels: int, frames: int, kernel: int, dim: int, positions: nn.Module | None, norm: nn.Module,
                 dropout: float, project: int | None = None):
        super().__init__((mels, frames), (frames - 1) // 2 + 1, dim, positions, norm, dropout, project)
        self.mels, self.frames = mels, frames
        self.conv1 = nn.Conv1d(mels, dim, kernel, padding=kernel // 2)
        self.conv2 = nn.Conv1d(dim, dim, kernel, stride=2, padding=kernel // 2)

    def vectors(self, features: Tensor) -> Tensor:
        x = F.gelu(self.conv1(features.to(self.conv1.weight.dtype)))
        return F.gelu(self.conv2(x)).transpose(1, 2)

    def check(self, name: str, features, device: torch.device, any_size: bool = False) -> None:
        check_features(name, features, self.mels, self.frames, device)

    def extra_repr(self) -> str:
        return f"mels={self.mels}, frames={self.frames}"


class Sinusoidal2DPositions(nn.Module):
    """Fixed sines and cosines of each position's row and column in a grid ``side`` wide (``tfspec.variants
    .sinusoidal_2d``): position p ≥ ``first`` is the patch ``p - first`` in row-major order, ``[sin(row) | cos(row)
    | sin(col) | cos(col)]`` over ``dim / 4`` frequencies each (the halves swapped where ``columns_first``); the
    first ``first`` positions (a class token) get zeros. Computed in float64, then float32."""

    def __init__(self, dim: int, side: int, first: int = 1, columns_first: bool = False,
                 temperature: float = 10000.0):
        super().__init__()
        self.dim, self.side, self.first = dim, side, first
        self.columns_first, self.temperature = columns_first, temperature

    def forward(self, positions: Tensor) -> Tensor:
        quarter = self.dim // 4
        frequencies = 1.0 / self.temperature ** (torch.arange(quarter, device=positions.device,
                                                              dtype=torch.float64) / quarter)
        patch = positions.to(torch.float64) - self.first
        row, column = torch.div(patch, self.side, rounding_mode="floor"), torch.remainder(patch, self.side)
        rows, columns = row[..., None] * frequencies, column[..., None] * frequencies
        halves = [torch.cat((rows.sin(), rows.cos()), dim=-1), torch.cat((columns.sin(), columns.cos()), dim=-1)]
        table = torch.cat(halves[::-1] if self.columns_first else halves, dim=-1)
        return table.masked_fill(patch[..., None] < 0, 0.0).float()

    def extra_repr(self) -> str:
        return f"dim={self.dim}, side={self.side}, first={self.first}" + (", columns first" if self.columns_first
                                                                          else "")
