"""Log-mel spectrograms through two convolutions, the second halving the frames (Whisper, Radford et al. 2022).

``audio(mels, frames, kernel=3)``: ``input_features`` ``(batch, mels, frames)`` through a 1-D convolution of
``kernel`` taps from the ``mels`` bins to the embedding's width, GELU, a second convolution of the width with
stride 2, GELU, each padded by ``kernel // 2`` on both sides: ``(frames - 1) // 2 + 1`` vectors, one per pair of
frames. Whisper's encoder reads 3,000 frames of 80 (or 128) bins, 30 seconds, as 1,500 vectors.

    embedding audio { input audio(mels=80, frames=3000); dim 768; position sinusoidal(halves=true, endpoint=true) }

``tfspec train`` teaches such an encoder to tell ten generated tones apart (``tone_spectrograms``, below).
"""

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..errors import DataError
from ..registry import INPUTS, Constructor, InputKind, Param, Problem

TONES = 10  # the generated task's classes (its generator below imports torch when it draws)


@INPUTS.register
class Audio(InputKind):
    name = "audio"
    positional = ("mels", "frames")
    argument = "input_features"
    what = "log-mel spectrograms"
    task = "tones"
    classes = TONES
    doc = ("audio(mels, frames, kernel=3): log-mel spectrograms of mels bins and frames frames through two 1-D "
           "convolutions with GELU, the second of stride 2 (Whisper's front end)")
    examples = ({"mels": 10, "frames": 12}, {"mels": 12, "frames": 9, "kernel": 5})

    class Options(BaseModel):
        model_config = ConfigDict(extra="forbid", frozen=True)
        mels: int = Field(gt=0, le=1 << 12)  # the bins of each frame (Whisper: 80, or 128 from large-v3)
        frames: int = Field(gt=0, le=1 << 20)  # the frames a spectrogram holds (Whisper: 3000, 30 seconds)
        kernel: int = Field(3, gt=0, le=63)  # the taps of each convolution, odd (padded by kernel // 2 a side)

        @model_validator(mode="after")
        def _odd(self):
            if self.kernel % 2 == 0:
                raise ValueError(f"kernel={self.kernel}: the convolutions are padded by kernel // 2 a side, which "
                                 f"keeps the frames only for an odd kernel; try kernel={self.kernel + 1}")
            return self

    def shape(self, options):
        return (options.mels, options.frames)

    def length(self, options):
        return (options.frames - 1) // 2 + 1

    def params(self, dim, options):
        k = options.kernel
        return {"conv1.weight": Param((dim, options.mels, k), "matrix"), "conv1.bias": Param((dim,), "bias"),
                "conv2.weight": Param((dim, dim, k), "matrix"), "conv2.bias": Param((dim,), "bias")}

    def flops(self, dim, options):
        frames, vectors, k = options.frames, self.length(options), options.kernel
        matmul = 2 * frames * options.mels * k * dim + 2 * vectors * dim * k * dim
        return matmul, 2 * (frames + vectors) * dim  # each convolution's bias, and its GELU

    def kept(self, dim, options):
        # the first convolution keeps the spectrogram, the first GELU its input, the second convolution its input
        # (the first GELU's output), the second GELU its input
        return options.mels * options.frames + 2 * dim * options.frames + dim * self.length(options)

    def describe(self, options):
        return f"Audio Convolutions ({options.mels} mels × {options.frames} frames, k{options.kernel})"

    def module(self, dim, options, positions, norm, dropout, project):
        from ..nn.embedding import AudioEmbeddings
        return Constructor(AudioEmbeddings, (options.mels, options.frames, options.kernel, dim, positions, norm,
                                             dropout, project))

    def smaller(self, options):
        return options.model_copy(update={"frames": min(options.frames, 8)})

    def task_note(self, options):
        return (f"classifying generated tones 0-{self.classes - 1} (a band of the {options.mels} mel bins, over "
                f"{options.frames} frames of noise)")

    def task_problem(self, options):
        if options.mels < TONES:
            return Problem(f"spectrograms of {options.mels} mel bins cannot hold {TONES} tones apart: the tones "
                           f"task needs mels={TONES} or more")
        return None

    def examples_of(self, options, count, generator):
        return tone_spectrograms(count, options.mels, options.frames, generator)


# ---------------------------------------------------------------- spectrograms: generated tones
TONE_CLASSES = TONES


def tone_spectrograms(count: int, mels: int, frames: int,
                      generator: "torch.Generator") -> "tuple[Tensor, Tensor]":
    """``count`` log-mel spectrograms ``(count, mels, frames)`` of tones and their labels ``(count,)``: tone k
    lights the k-th tenth of the mel bins, louder by a random amount, over a random stretch of at least half the
    frames, over Gaussian noise (std 0.25); values roughly in [-1, 1.5]. The same generator state draws the same
    spectrograms. Fewer than ten bins cannot hold ten tones apart."""
    import torch

    if mels < TONE_CLASSES:
        raise DataError(f"spectrograms of {mels} mel bins cannot hold {TONE_CLASSES} tones apart: the tones task "
                        f"needs mels={TONE_CLASSES} or more")
    labels = torch.randint(0, TONE_CLASSES, (count,), generator=generator)
    loudness = 0.75 + 0.75 * torch.rand(count, generator=generator)
    lengths = frames - (frames // 2) * torch.rand(count, generator=generator)  # at least half the frames
    starts = torch.rand(count, generator=generator) * (frames - lengths + 1)
    features = 0.25 * torch.randn(count, mels, frames, generator=generator) - 0.5
    for i in range(count):
        low, high = labels[i] * mels // TONE_CLASSES, (labels[i] + 1) * mels // TONE_CLASSES
        start = int(starts[i])
        features[i, low:high, start:start + int(lengths[i])] += loudness[i]
    return features, labels
