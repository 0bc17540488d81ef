"""Pictures in: the patch embedding against a convolution written here, its cost against what PyTorch does, the
spec's and the input's refusals, the generated digits, and a Vision Transformer trained from the command line.
Equality with Hugging Face's ViT is in ``test_import.py``."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

import tfspec
from tfspec.inspect.analysis import AnalysisError, analyse
from tfspec.inspect.measure import measure
from numerics import FLOAT32, assert_close

SPEC = """embedding image {{ input patches(image=12, patch=4, channels=2, class_token={cls}); dim 24; position learned(10) }}
encoder x 2 {{ residual pre; attention self heads=3; feedforward d_ff=32 activation=gelu; final layernorm }}
head linear(7) pool={pool}"""


def test_the_patch_embedding_is_a_convolution_whose_kernel_is_its_stride():
    model = tfspec.compile(SPEC.format(cls="true", pool="first"), seed=0)
    embedding = model.embeddings["image"]
    pixels = torch.randn(3, 2, 12, 12, generator=torch.Generator().manual_seed(0))
    positions = torch.arange(10)[None]
    with torch.no_grad():
        kernel = embedding.patches.weight.view(24, 2, 4, 4)
        patches = F.conv2d(pixels, kernel, embedding.patches.bias, stride=4).flatten(2).transpose(1, 2)  # row-major
        expected = torch.cat((embedding.class_token.expand(3, 1, 24), patches), dim=1) \
            + embedding.positions(positions)
        assert_close(embedding(pixels, positions), expected, FLOAT32)
        # the classifier reads the class token's final state
        hidden = model.encoder(embedding(pixels, positions), model.context("encoder", "pixel_values", pixels, {}))
        assert_close(model(pixels), hidden[:, 0] @ model.head.weight.T + model.head.bias, FLOAT32)


@pytest.mark.parametrize("cls", ["true", "false"])
@pytest.mark.parametrize("pool", ["first", "mean"])
def test_the_cost_is_what_the_flop_counter_and_autograd_see(cls, pool):
    spec = tfspec.parse(SPEC.format(cls=cls, pool=pool))
    length = 9 + (cls == "true")
    for batch in (1, 3):
        analysed, measured = analyse(spec, batch=batch), measure(spec, {"encoder": length}, batch=batch)
        assert analysed.lengths == {"encoder": length}
        assert (measured.flops, measured.saved_bytes) == (analysed.total.matmul, analysed.total.memory)
    with pytest.raises(AnalysisError, match=f"make {length} positions"):
        analyse(spec, seq_len=64)


@pytest.mark.parametrize("text, message", [
    ("embedding image { input patches(image=12); dim 24 }\nencoder x 1 { attention self heads=3 }", "patch"),
    ("embedding image { input patches(12, 5); dim 24 }\nencoder x 1 { attention self heads=3 }",
     "image 12 is not a whole number of 5-pixel patches; try patch=4"),
    ("embedding image { input patches(12, 4); vocab 30; dim 24 }\nencoder x 1 { attention self heads=3 }",
     "`vocab` does not apply"),
    ("embedding image { input patches(12, 4) }\nencoder x 1 { attention self heads=3 }", "needs 'dim'"),
    ("embedding t { vocab 30; patch 4; dim 24 }\nencoder x 1 { attention self heads=3 }", "patch"),
    ("embedding image { input patches(12, 4); dim 24 }\ndecoder x 1 { attention self heads=3 mask=causal }",
     "which feed an encoder (ViT's, Whisper's); here the decoder reads it"),
    ("embedding image { input patches(12, 4, class_token=true); dim 24; position learned(8) }\n"
     "encoder x 1 { attention self heads=3 }",
     "learned positions cover 8 positions, but embedding 'image' makes 10 (9 from its pictures and 1 learned "
     "vector before them)"),
    ("embedding image { input patches(12, 4); dim 24 }\nencoder x 1 { attention self heads=3 }\nhead linear(5)",
     "a head over pictures needs a vector for each"),
    ("embedding image { input patches(12, 4); dim 24 }\nencoder x 1 { attention self heads=3 }\nhead tied(image)",
     "cannot be tied to embedding 'image'"),
    ("embedding image { input patches(12, 4); dim 24 }\nencoder x 1 { attention self heads=3 }\n"
     "head linear pool=first", "needs its number of outputs"),
    ("embedding image { input pixels(12, 4); dim 24 }\nencoder x 1 { attention self heads=3 }", "unknown input 'pixels'"),
])
def test_what_a_model_of_pictures_cannot_be_is_a_located_error(text, message):
    with pytest.raises(tfspec.SpecError) as info:
        tfspec.parse(text)
    assert message in info.value.message and info.value.line >= 1, info.value.message


@pytest.mark.parametrize("pixels, message", [
    (torch.zeros(2, 3, 12, 12), "must be shaped (batch, 2, 12, 12)"),
    (torch.zeros(2, 2, 12, 12, dtype=torch.long), "floating-point"),
    (torch.zeros(0, 2, 12, 12), "is empty"),
])
def test_wrong_pictures_are_refused_by_name(pixels, message):
    model = tfspec.compile(SPEC.format(cls="true", pool="first"), seed=0)
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        model(pixels)


def test_the_generated_digits_are_drawn_from_the_generator_and_hold_their_digit():
    from tfspec.run.data import DIGIT_GLYPHS, DataError, digit_pictures
    a = digit_pictures(64, 16, 3, torch.Generator().manual_seed(1))
    b = digit_pictures(64, 16, 3, torch.Generator().manual_seed(1))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    pixels, labels = a
    assert pixels.shape == (64, 3, 16, 16) and set(labels.tolist()) <= set(range(10)) and len(set(labels.tolist())) > 5
    # each picture's bright pixels are its digit's glyph (scaled twice) at one place
    for picture, label in zip(pixels[:8], labels[:8]):
        glyph = torch.tensor([[int(c) for c in row] for row in DIGIT_GLYPHS[label]], dtype=torch.float32)
        glyph = glyph.repeat_interleave(2, 0).repeat_interleave(2, 1)
        bright = (picture.mean(0) > 0.3).float()  # noise (std 0.25 about -0.5) stays below; strokes above
        matches = [torch.equal(bright[r:r + 14, c:c + 10], glyph) and bright.sum() == glyph.sum()
                   for r in range(3) for c in range(7)]
        assert any(matches), label
    with pytest.raises(DataError, match="cannot hold a 5×7 digit"):
        digit_pictures(1, 6, 1, torch.Generator())


def _png(path, values, mode: str = "L"):
    """``values`` (height, width[, 3]) in [0, 1] written as an 8-bit PNG; returns them as the file holds them."""
    from PIL import Image
    levels = (values * 255).round().to(torch.uint8)
    Image.fromarray(levels.numpy(), mode=mode).save(path)
    return levels.float() / 255


def test_a_picture_file_reads_as_the_generated_digits_are_drawn(tmp_path):
    """Its background (the border's median) at -0.5 and its strongest ink at 1.25, light ink on a dark ground or
    dark ink on a light one alike; resized by area, and padded to a square first, as the formula here says."""
    from tfspec.run.data import DIGIT_GLYPHS, digit_picture_file
    glyph = torch.tensor([[int(c) for c in row] for row in DIGIT_GLYPHS[7]], dtype=torch.float32)
    values = torch.full((16, 16), 0.1)
    values[4:11, 5:10] += 0.7 * glyph
    values[12, 2] = 0.5  # a fainter mark
    held = _png(tmp_path / "light.png", values)
    expected = (-0.5 + 1.75 * ((held - held[0, 0]) / (held.max() - held[0, 0])).clamp(0, 1))[None]
    assert_close(digit_picture_file(tmp_path / "light.png", 16, 1), expected, FLOAT32)
    _png(tmp_path / "dark.png", 1 - held)  # dark ink on white paper
    assert_close(digit_picture_file(tmp_path / "dark.png", 16, 1), expected, FLOAT32)
    _png(tmp_path / "large.png", held.repeat_interleave(3, 0).repeat_interleave(3, 1))  # three times as large
    assert_close(digit_picture_file(tmp_path / "large.png", 16, 1), expected, FLOAT32)
    wide = torch.full((16, 24), float(held[0, 0]))
    wide[:, 4:20] = held
    _png(tmp_path / "wide.png", wide)  # padded to 24 × 24 with its background, then shrunk to 16
    square = torch.full((24, 24), float(held[0, 0]))
    square[4:20] = wide
    shrunk = F.interpolate(square[None, None], size=(16, 16), mode="area")[0]
    assert_close(digit_picture_file(tmp_path / "wide.png", 16, 1),
                 -0.5 + 1.75 * ((shrunk - held[0, 0]) / (shrunk.max() - held[0, 0])).clamp(0, 1), FLOAT32)
    colour = _png(tmp_path / "colour.png", torch.stack((values, values * 0.5, values * 0.25), -1), "RGB")
    read = digit_picture_file(tmp_path / "colour.png", 16, 3)
    assert read.shape == (3, 16, 16) and read[0].max() == 1.25 and read[2].max() < read[1].max() < 1.25
    assert_close(read, -0.5 + 1.75 * ((colour - colour[0, 0]) / (colour - colour[0, 0]).max()).clamp(0, 1)
                 .permute(2, 0, 1), FLOAT32)


def test_a_picture_file_that_cannot_be_read_is_refused_naming_it(tmp_path):
    from tfspec.run.data import DataError, digit_picture_file
    (tmp_path / "notes.png").write_text("not a picture")
    _png(tmp_path / "blank.png", torch.full((8, 8), 0.3))
    _png(tmp_path / "noise.png", torch.rand(64, 64, generator=torch.Generator().manual_seed(0)))
    whole = (tmp_path / "noise.png").read_bytes()
    (tmp_path / "cut.png").write_bytes(whole[:len(whole) // 2])  # its header whole, half its pixels
    for name, message in (("missing.png", "no such picture file"), ("notes.png", "not a picture file tfspec reads"),
                          ("blank.png", "a picture of one colour: no digit to read"),
                          ("cut.png", "a damaged picture file")):
        with pytest.raises(DataError, match=message) as info:
            digit_picture_file(tmp_path / name, 16, 1)
        assert name in str(info.value)


def test_a_vision_transformer_learns_the_digits_from_the_command_line(tmp_path, capsys):
    """The example at its size, briefly: the held-out accuracy is far above chance (a tenth)."""
    from tfspec.cli import main
    assert main(["train", "examples/vit_digits.tfs", "--steps", "120", "--batch", "32", "--lr", "2e-3", "--warmup",
                 "10", "--eval-every", "120", "--eval-size", "128", "--no-progress", "--out", str(tmp_path / "run")]) == 0
    out = capsys.readouterr().out
    assert "on the generated digits" in out and "pictures/s" in out
    assert "classifying generated digits 0-9 in 16×16 pictures of 1 channel" in out
    evaluation = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
                  if "accuracy" in line][-1]
    assert evaluation["accuracy"] > 0.3, evaluation
    assert main(["train", "examples/vit_digits.tfs", "--data", str(tmp_path / "x.txt")]) == 2
    assert "trains on the generated digits; --data describes token sequences" in capsys.readouterr().err
    # exported, Hugging Face's ViT computes what the trained run does
    transformers = pytest.importorskip("transformers")
    from tfspec.run import checkpoint
    from tfspec.run.data import digit_pictures
    assert main(["export", str(tmp_path / "run"), "--to", "hf", "-o", str(tmp_path / "hf")]) == 0
    reference = transformers.ViTForImageClassification.from_pretrained(tmp_path / "hf").eval()
    pixels, _ = digit_pictures(16, 16, 1, torch.Generator().manual_seed(9))
    with torch.no_grad():
        ours, theirs = checkpoint.load(tmp_path / "run").model().eval()(pixels), reference(pixel_values=pixels).logits
    assert_close(ours, theirs, FLOAT32)


@pytest.mark.parametrize("columns_first", [False, True])
def test_2d_sinusoidal_positions_are_hugging_faces_and_maes(columns_first):
    """Hugging Face's ``build_2d_sinusoidal_position_embedding`` ([sin h | cos h | sin w | cos w], the class token's
    zeros first); MAE's released weights swap the halves (``columns_first``)."""
    vit_mae = pytest.importorskip("transformers.models.vit_mae.modeling_vit_mae")
    table = vit_mae.build_2d_sinusoidal_position_embedding(5, 5, 24, cls_token=True)
    if columns_first:
        table = torch.cat((table[:, 12:], table[:, :12]), dim=1)
    text = SPEC.format(cls="true", pool="first").replace("image=12, patch=4", "image=20, patch=4").replace(
        "learned(10)", f"sinusoidal_2d(5, columns_first={str(columns_first).lower()})")
    model = tfspec.compile(text, seed=0)
    assert not any(name.startswith("embeddings.image.positions") for name in model.state_dict())  # nothing learned
    assert torch.equal(model.embeddings["image"].positions(torch.arange(26)[None])[0], table.float())
    with pytest.raises(tfspec.SpecError, match="the pictures make a grid 5 patches a side"):
        tfspec.parse(text.replace("sinusoidal_2d(5", "sinusoidal_2d(6"))
    with pytest.raises(tfspec.SpecError, match="not a multiple of 4"):
        tfspec.parse(text.replace("dim 24", "dim 18").replace("heads=3", "heads=2"))
    from tfspec.inspect.verify import small_version
    assert tfspec.compile(small_version(tfspec.parse(text))[0])(torch.randn(1, 2, 8, 8)).shape == (1, 7)


def test_an_imported_vit_fine_tunes_on_the_digits(tmp_path, capsys):
    """Hugging Face's weights, which come with no tokenizer (pictures need none), fine-tune from the command line."""
    transformers = pytest.importorskip("transformers")
    from tfspec.cli import main
    from tfspec.run import checkpoint
    config = transformers.ViTConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=48,
                                    image_size=16, patch_size=4, num_channels=1, num_labels=10)
    transformers.ViTForImageClassification(config).save_pretrained(tmp_path / "vit")
    assert main(["train", "--init", str(tmp_path / "vit"), "--steps", "3", "--batch", "8", "--eval-size", "8",
                 "--no-progress", "--out", str(tmp_path / "tuned")]) == 0
    assert "on the generated digits, from the weights of" in capsys.readouterr().out
    before = transformers.ViTForImageClassification.from_pretrained(tmp_path / "vit").classifier.weight
    after = checkpoint.load(tmp_path / "tuned").weights["head.weight"]
    assert not torch.equal(before, after) and (before - after).abs().max() < 0.05


def test_two_models_of_pictures_of_different_sizes_diff_each_at_its_own_length(tmp_path, tfspec_cli):
    """A model of pictures runs at the length its pictures make: ``diff`` costs each at its own (pictures of 12 and
    of 16 pixels), and names the input's change."""
    small, large = tmp_path / "small.tfs", tmp_path / "large.tfs"
    small.write_text(SPEC.format(cls="true", pool="first"))
    large.write_text(SPEC.format(cls="true", pool="first").replace("image=12", "image=16").replace("learned(10)",
                                                                                               "learned(17)"))
    done = tfspec_cli("diff", small, large)
    assert done.returncode == 0, done.stderr
    assert "input patches(12, 4, channels=2, class_token=true) → patches(16, 4, channels=2, class_token=true)" \
        in done.stdout, done.stdout
    assert "seq_len 10 and 17" in done.stdout, done.stdout
    from tfspec.inspect.diff import diff
    result = diff(tfspec.load(small), tfspec.load(large))
    assert result.seq_len == (10, 17)
    flops = next((a, b) for what, a, b in result.totals if what == "forward FLOPs")
    assert flops[1] > flops[0]  # the larger pictures cost more


# ---------------------------------------------------------------- pictures are untrusted input
def _chunk(kind: bytes, data: bytes) -> bytes:
    import struct
    import zlib
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def _png_claiming(width: int, height: int) -> bytes:
    """A PNG whose header claims ``width`` × ``height`` pixels, with one compressed row of zeros as its data."""
    import struct
    import zlib
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)  # 8-bit grey
    return (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", header) + _chunk(b"IDAT", zlib.compress(bytes(width + 1)))
            + _chunk(b"IEND", b""))


def _gif_screen(width: int, height: int) -> bytes:
    """A GIF whose logical screen is ``width`` × ``height`` pixels, holding one 1×1 frame."""
    import struct
    return (b"GIF89a" + struct.pack("<HHBBB", width, height, 0, 0, 0) + b"\x2c" + struct.pack("<HHHHB", 0, 0, 1, 1, 0)
            + b"\x02\x02\x44\x01\x00\x3b")


def _bmp_claiming(width: int, height: int) -> bytes:
    """A BMP whose header claims ``width`` × ``height`` pixels of 24 bits, and holds 12 bytes of them."""
    import struct
    info = struct.pack("<IiiHHIIiiII", 40, width, height, 1, 24, 0, 0, 2835, 2835, 0, 0)
    return b"BM" + struct.pack("<IHHI", 14 + 40 + 12, 0, 0, 14 + 40) + info + bytes(12)


@pytest.mark.parametrize("name, content, message", [
    ("bomb.png", _png_claiming(30000, 30000), "of 900,000,000 pixels, larger than tfspec reads"),
    ("screen.gif", _gif_screen(65535, 65535), "larger than tfspec reads for this model"),
    ("claim.bmp", _bmp_claiming(30000, 30000), "larger than tfspec reads for this model"),
    ("strip.png", _png_claiming(1, 60000), "1×60000 pixels, larger than tfspec reads"),
    ("empty.png", b"", "not a picture file tfspec reads"),
], ids=["bomb.png", "screen.gif", "claim.bmp", "strip.png", "empty.png"])
def test_a_picture_past_the_budget_is_refused_from_its_header_before_decoding(tmp_path, name, content, message):
    """Decompression bombs (a small file claiming 900 million pixels: Pillow's DecompressionBombError) and a
    1×60000 strip (140 bytes that became a 60000×60000 square of 14 GB once padded) are refused from the header,
    naming the budget: at most 4096 pixels a side for a model of 16-pixel pictures."""
    from tfspec.run.data import DataError, digit_picture_file
    from tfspec.media import picture_side
    (tmp_path / name).write_bytes(content)
    assert len(content) < 200_000
    with pytest.raises(DataError, match=message) as info:
        digit_picture_file(tmp_path / name, 16, 1)
    assert str(info.value).startswith(str(tmp_path / name)) and "\n" not in str(info.value)
    assert picture_side(16) == 4096 and picture_side(2048) == 8192


def test_a_picture_at_the_budget_is_read_and_its_first_frame_taken(tmp_path):
    """The budget's edge is read (a 4096 × 8 strip pads to 4096 × 4096); an animated GIF gives its first frame."""
    from PIL import Image

    from tfspec.run.data import DIGIT_GLYPHS, digit_picture_file
    strip = Image.new("L", (4096, 8), 20)
    strip.paste(255, (1800, 0, 2300, 8))
    strip.save(tmp_path / "edge.png")
    assert digit_picture_file(tmp_path / "edge.png", 16, 1).shape == (1, 16, 16)
    glyph = torch.tensor([[int(c) for c in row] for row in DIGIT_GLYPHS[1]], dtype=torch.uint8)
    frames = []
    for digit in (1, 4):
        frame = torch.full((16, 16), 10, dtype=torch.uint8)
        shape = torch.tensor([[int(c) for c in row] for row in DIGIT_GLYPHS[digit]], dtype=torch.bool)
        frame[4:11, 5:10][shape] = 250
        frames.append(Image.fromarray(frame.numpy(), mode="L"))
    frames[0].save(tmp_path / "moving.gif", save_all=True, append_images=frames[1:], duration=100)
    first = digit_picture_file(tmp_path / "moving.gif", 16, 1)
    bright = (first[0, 4:11, 5:10] > 0.5).to(torch.uint8)
    assert torch.equal(bright, glyph)


def test_a_picture_in_a_format_no_processor_reads_never_starts_an_external_program(tmp_path):
    """An EPS file is PostScript, which Pillow hands to Ghostscript: a program of its own, run on the file. It is
    not among the formats read, so the ``gs`` planted first on PATH here never runs (the control shows that plain
    Pillow runs it)."""
    import subprocess
    import sys

    marker = tmp_path / "gs-ran"
    gs = tmp_path / "bin" / "gs"
    gs.parent.mkdir()
    gs.write_text(f"#!/bin/sh\ntouch {marker}\nexit 1\n")
    gs.chmod(0o755)
    (tmp_path / "page.eps").write_text("%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 16 16\nshowpage\n%%EOF\n")
    env = {**__import__("os").environ, "PATH": f"{gs.parent}:{__import__('os').environ['PATH']}"}
    read = subprocess.run([sys.executable, "-c", "import sys\nfrom tfspec.run.data import DataError, "
                           "digit_picture_file\ntry:\n    digit_picture_file(sys.argv[1], 16, 1)\nexcept DataError as e:"
                           "\n    print(e)", str(tmp_path / "page.eps")], capture_output=True, text=True, env=env,
                          timeout=120)
    assert "page.eps: not a picture file tfspec reads (it reads PNG, JPEG, WEBP, BMP and GIF)" in read.stdout, read
    assert not marker.exists()
    control = subprocess.run([sys.executable, "-c", "import sys\nfrom PIL import Image\ntry:\n    "
                              "Image.open(sys.argv[1]).load()\nexcept Exception:\n    pass", str(tmp_path / "page.eps")],
                             capture_output=True, env=env, timeout=120)
    assert control.returncode == 0 and marker.exists()


def test_a_fifo_directory_or_device_named_like_a_picture_is_refused_at_once(tmp_path):
    """A FIFO named ``.png`` blocked for ever (Pillow waited for a writer); a device never ends; a directory is no
    file. Each is one line, at once (in a child process, so that a wait fails this test instead of the suite)."""
    import os
    import subprocess
    import sys

    os.mkfifo(tmp_path / "pipe.png")
    (tmp_path / "folder.png").mkdir()
    script = ("import sys\nfrom tfspec.run.data import DataError, digit_picture_file\nfor path in sys.argv[1:]:\n"
              "    try:\n        digit_picture_file(path, 16, 1)\n    except DataError as e:\n        print(e)")
    read = subprocess.run([sys.executable, "-c", script, str(tmp_path / "pipe.png"), str(tmp_path / "folder.png"),
                           "/dev/zero"], capture_output=True, text=True, timeout=120)
    assert read.stdout.splitlines() == [
        f"{tmp_path / 'pipe.png'}: not a regular file (a device, a FIFO or a socket)",
        f"{tmp_path / 'folder.png'}: a directory, not a file",
        "/dev/zero: not a regular file (a device, a FIFO or a socket)"], read
