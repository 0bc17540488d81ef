"""Pictures cut into square patches, each mapped linearly to a vector (ViT, Dosovitskiy et al. 2021).

``patches(image, patch, channels=3, class_token=false, bias=true, frames=1)``: square pictures ``(batch, channels,
image, image)`` (``pixel_values``) cut into ``patch``-sided squares, row by row; each square's pixels, in (channel,
row, column) order, through one linear map (ViT's convolution whose kernel is its stride; CLIP's has no bias); a
learned class token before them where ``class_token``, which a classifier reads (``head ... pool=first``).
``frames``: the picture read as that many identical frames by a map over (channel, frame, row, column), a video
model's patches of a still picture (Qwen2-VL's and Qwen2.5-VL's ``temporal_patch_size`` 2: their 3-D convolution).

A tower that numbers its patches by nothing but their row and column in each picture's own grid (``rotary_2d``,
``tiles``, no table of positions: ``ir.queries.reads_any_picture_size``) reads pictures of any size whose sides are
whole patches, square or not (Qwen2.5-VL's, Pixtral's); ``image`` is then the size analyses and training use.

    embedding image { input patches(image=224, patch=16, class_token=true); dim 768; position learned(197) }

``tfspec train`` teaches such a model to tell the generated digits apart (``digit_pictures``, below).
"""

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..errors import DataError, shown
from ..registry import INPUTS, Constructor, InputKind, Param, Problem

MAX_SIDE = 1 << 14


@INPUTS.register
class Patches(InputKind):
    name = "patches"
    positional = ("image", "patch")
    argument = "pixel_values"
    what = "pictures"
    task = "digits"
    classes = 10  # the digits 0-9 (DIGIT_CLASSES)
    doc = ("patches(image, patch, channels=3, class_token=false, bias=true, frames=1): square pictures image pixels "
           "a side cut into patch-sided squares, each mapped linearly to a vector; a learned class token before them "
           "(ViT); frames: the picture as that many identical frames of a video model's patches (Qwen2-VL's 2)")
    examples = ({"image": 8, "patch": 4}, {"image": 12, "patch": 3, "channels": 1, "class_token": True, "bias": False},
                {"image": 8, "patch": 4, "frames": 2, "bias": False})

    class Options(BaseModel):
        model_config = ConfigDict(extra="forbid", frozen=True)
        image: int = Field(gt=0, le=MAX_SIDE)  # the side of the square pictures, in pixels
        patch: int = Field(gt=0, le=MAX_SIDE)  # the side of the square patches they are cut into
        channels: int = Field(3, gt=0, le=1 << 10)  # of each picture (3: RGB)
        class_token: bool = False  # a learned vector before the patches, which a classifier reads
        bias: bool = True  # of the linear map of each patch (CLIP's has none)
        frames: int = Field(1, gt=0, le=64)  # identical frames the map reads (a video model's temporal patches)

        @model_validator(mode="after")
        def _whole(self):
            if self.image % self.patch:
                sides = [p for p in range(1, self.image + 1) if self.image % p == 0]
                nearest = min(sides, key=lambda p: (abs(p - self.patch), p))
                raise ValueError(f"image {self.image} is not a whole number of {self.patch}-pixel patches; "
                                 f"try patch={nearest}")
            return self

    def shape(self, options):
        return (options.channels, options.image, options.image)

    def grid(self, options):
        return options.image // options.patch

    def leading(self, options):
        return int(options.class_token)

    def length(self, options):
        return self.grid(options) ** 2 + options.class_token

    def _features(self, options) -> int:
        return options.channels * options.frames * options.patch ** 2

    def params(self, dim, options):
        return {"patches.weight": Param((dim, self._features(options)), "matrix"),
                **({"patches.bias": Param((dim,), "bias")} if options.bias else {}),
                **({"class_token": Param((dim,), "embedding")} if options.class_token else {})}

    def flops(self, dim, options):
        patches = self.grid(options) ** 2
        return 2 * patches * self._features(options) * dim, patches * dim * options.bias  # the map, and its bias

    def kept(self, dim, options):
        return self.grid(options) ** 2 * self._features(options)  # the map keeps the patches gathered from pixels

    def describe(self, options):
        p = options.patch
        extras = ", class token" * options.class_token + ", no bias" * (not options.bias) + \
            f", {options.frames} frames" * (options.frames > 1)
        return f"Patch Embedding ({p}×{p}×{options.channels}{extras})"

    def module(self, dim, options, positions, norm, dropout, project):
        from ..nn.embedding import PatchEmbeddings
        return Constructor(PatchEmbeddings, (options.image, options.patch, options.channels, dim,
                                             options.class_token, positions, norm, dropout, project, options.bias),
                           {"frames": options.frames})

    def smaller(self, options):
        return options.model_copy(update={"image": min(options.image, 2 * options.patch)})  # 2 × 2 patches

    def task_note(self, options):
        c = options.channels
        return (f"classifying generated digits 0-{self.classes - 1} in {options.image}×{options.image} pictures of "
                f"{c} channel{'s' if c > 1 else ''}, at random places and brightness, over noise")

    def task_problem(self, options):
        if options.image < 8:
            return Problem(f"pictures of {options.image} pixels cannot hold a 5×7 digit: the digits task needs "
                           "image 8 or more")
        return None

    def examples_of(self, options, count, generator):
        return digit_pictures(count, options.image, options.channels, generator)

    def example_from_file(self, options, path):
        return digit_picture_file(path, options.image, options.channels)


# ---------------------------------------------------------------- pictures: generated digits
# 0-9 in a 5×7 bitmap font, a row of five pixels per string
DIGIT_GLYPHS = (
    ("01110", "10001", "10011", "10101", "11001", "10001", "01110"), ("00100", "01100", "00100", "00100", "00100",
                                                                       "00100", "01110"),
    ("01110", "10001", "00001", "00010", "00100", "01000", "11111"), ("11110", "00001", "00001", "01110", "00001",
                                                                       "00001", "11110"),
    ("00010", "00110", "01010", "10010", "11111", "00010", "00010"), ("11111", "10000", "11110", "00001", "00001",
                                                                       "10001", "01110"),
    ("00110", "01000", "10000", "11110", "10001", "10001", "01110"), ("11111", "00001", "00010", "00100", "01000",
                                                                       "01000", "01000"),
    ("01110", "10001", "10001", "01110", "10001", "10001", "01110"), ("01110", "10001", "10001", "01111", "00001",
                                                                       "00010", "01100"),
)
DIGIT_CLASSES = len(DIGIT_GLYPHS)


def digit_pictures(count: int, side: int, channels: int,
                   generator: "torch.Generator") -> "tuple[Tensor, Tensor]":
    """``count`` pictures ``(count, channels, side, side)`` of digits and their labels ``(count,)``: each digit of
    the 5×7 font scaled by the largest whole factor that fits, at a random place, in a random brightness per
    channel, over Gaussian noise (std 0.25); pixels roughly in [-1, 1]. The same generator state draws the same
    pictures. Pictures narrower than 8 pixels cannot hold a digit."""
    import torch

    if side < 8:
        raise DataError(f"pictures of {side} pixels cannot hold a 5×7 digit: the digits task needs image 8 or more")
    glyphs = torch.tensor([[[int(c) for c in row] for row in glyph] for glyph in DIGIT_GLYPHS], dtype=torch.float32)
    labels = torch.randint(0, DIGIT_CLASSES, (count,), generator=generator)
    scale = side // 7
    spots = torch.rand(count, 2, generator=generator)  # where in the room left, as a fraction of it
    brightness = 0.5 + 0.5 * torch.rand(count, channels, generator=generator)
    pixels = 0.25 * torch.randn(count, channels, side, side, generator=generator) - 0.5
    glyphs = glyphs.repeat_interleave(scale, 1).repeat_interleave(scale, 2)
    for i in range(count):
        glyph = glyphs[labels[i]]
        top = int(spots[i, 0] * (side - glyph.shape[0] + 1))
        left = int(spots[i, 1] * (side - glyph.shape[1] + 1))
        window = pixels[i, :, top:top + glyph.shape[0], left:left + glyph.shape[1]]
        window += glyph * (1.0 + brightness[i, :, None, None])
    return pixels, labels


def digit_picture_file(path, side: int, channels: int) -> "Tensor":
    """A picture file (PNG, JPEG, WebP, BMP or GIF, read as untrusted: ``tfspec.media``) as ``digit_pictures`` draws
    pictures: ``(channels, side, side)``, its background (the median of its border) at -0.5 and its strongest ink at 1.25, whichever of the two
    is the brighter (a dark digit on white paper reads as the generated light digit on a dark ground). A picture
    that is not square is first padded to a square with its background, keeping its proportions; then it is
    resized to ``side`` pixels a side (averaging the pixels each one covers where it shrinks).

    >>> digit_picture_file("seven.png", 16, 1).shape  # doctest: +SKIP
    torch.Size([1, 16, 16])
    """
    import torch

    from ..media import PictureError, read_picture

    try:
        picture = read_picture(path, side, "L" if channels != 3 else "RGB")
    except PictureError as exc:
        raise DataError(str(exc)) from None
    import numpy

    values = torch.from_numpy(numpy.array(picture, dtype=numpy.float32)).reshape(
        picture.height, picture.width, -1).permute(2, 0, 1) / 255.0
    border = torch.cat((values[:, 0], values[:, -1], values[:, :, 0], values[:, :, -1]), dim=1)
    background = border.median(dim=1).values  # per channel
    if background.mean() > 0.5:  # dark ink on a light ground: the digits task's pictures are the other way round
        values, background = 1.0 - values, 1.0 - background
    height, width = values.shape[1:]
    if height != width:  # padded to a square with the background, the picture in its middle
        square = background[:, None, None].expand(-1, max(height, width), max(height, width)).clone()
        top, left = (max(height, width) - height) // 2, (max(height, width) - width) // 2
        square[:, top:top + height, left:left + width] = values
        values = square
    if values.shape[1] != side:
        shrinks = values.shape[1] > side
        values = torch.nn.functional.interpolate(values[None], size=(side, side), mode="area" if shrinks else
                                                 "bilinear", align_corners=None if shrinks else False)[0]
    ink = (values - background[:, None, None]).flatten(1).max(dim=1).values
    if float(ink.max()) <= 1 / 255:
        raise DataError(f"{shown(path)}: a picture of one colour: no digit to read")
    strength = (values - background[:, None, None]) / ink.max()
    pixels = -0.5 + 1.75 * strength.clamp(0.0, 1.0)
    return pixels.expand(channels, -1, -1).clone() if pixels.shape[0] != channels else pixels
