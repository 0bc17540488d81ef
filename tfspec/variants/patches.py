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

``tfspec train`` teaches such a model to tell the generated digits apart (``run.data.digit_pictures``).
"""

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..registry import INPUTS, Constructor, InputKind, Param, Problem

MAX_SIDE = 1 << 14


@INPUTS.register
class Patches(InputKind):
    name = "patches"
    positional = ("image", "patch")
    argument = "pixel_values"
    what = "pictures"
    task = "digits"
    classes = 10  # the digits 0-9 (run.data.DIGIT_CLASSES)
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
        from ..run.data import digit_pictures
        return digit_pictures(count, options.image, options.channels, generator)

    def example_from_file(self, options, path):
        from ..run.data import digit_picture_file
        return digit_picture_file(path, options.image, options.channels)
