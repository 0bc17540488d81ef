"""Spectrograms as an input kind (``input audio(mels, frames)``, Whisper's front end): two convolutions with GELU,
the second halving the frames, as a formula written here says; Whisper's sinusoids bit for bit; an encoder of
them classifying the generated tones from the command line; an encoder-decoder reading them, decoding cached as it
recomputes."""

from __future__ import annotations

import json
import math

import pytest
import torch
import torch.nn.functional as F

import tfspec
from tfspec.run.decoding import Continuation
from numerics import FLOAT32, assert_close

TONES = """embedding audio {{ input audio(mels=12, frames={frames}{kernel}); dim 16; norm layernorm;
                   position sinusoidal(halves=true, endpoint=true) }}
encoder x 2 {{ residual pre; attention self heads=2; feedforward d_ff=32 activation=gelu; final layernorm }}
head linear(10) pool=mean"""


@pytest.mark.parametrize("frames, kernel", [(9, 3), (16, 3), (7, 5), (1, 3)])
def test_the_front_end_is_two_convolutions_the_second_halving_the_frames(frames, kernel):
    model = tfspec.compile(TONES.format(frames=frames, kernel=f", kernel={kernel}"), seed=0)
    embedding = model.embeddings["audio"]
    features = torch.randn(3, 12, frames, generator=torch.Generator().manual_seed(0))
    length = math.ceil(frames / 2)
    assert embedding.length == length
    with torch.no_grad():
        x = F.gelu(F.conv1d(features, embedding.conv1.weight, embedding.conv1.bias, padding=kernel // 2))
        x = F.gelu(F.conv1d(x, embedding.conv2.weight, embedding.conv2.bias, stride=2, padding=kernel // 2))
        positions = torch.arange(length)
        half = 8  # Whisper's ladder: the frequencies from 1 to 1/10000, the sines then the cosines
        angles = positions[:, None].double() * 10000.0 ** (-torch.arange(half).double() / (half - 1))
        x = x.transpose(1, 2) + torch.cat((angles.sin(), angles.cos()), dim=1).float()
        expected = F.layer_norm(x, (16,), embedding.norm.weight, embedding.norm.bias)
        assert_close(embedding(features, positions[None]), expected, FLOAT32)


@pytest.mark.parametrize("dim", [384, 64, 10])
def test_the_endpoint_sinusoids_are_whispers_bit_for_bit(dim):
    whisper = pytest.importorskip("transformers.models.whisper.modeling_whisper")
    from tfspec.nn.embedding import SinusoidalPositions
    table = SinusoidalPositions(dim, halves=True, endpoint=True)(torch.arange(1500)[None])[0]
    assert torch.equal(table, whisper.sinusoids(1500, dim))


@pytest.mark.parametrize("text, message", [
    (TONES.format(frames=9, kernel=", kernel=4"), "kernel=4: the convolutions are padded by kernel // 2 a side"),
    (TONES.format(frames=9, kernel="").replace("halves=true, endpoint=true", "endpoint=true"),
     "endpoint=true is Whisper's ladder of frequencies"),
    (TONES.format(frames=9, kernel="").replace("frames=9", "frames=9, channels=1"), "channels"),
    (TONES.format(frames=9, kernel="").replace("encoder x 2", "decoder x 2"), "here the decoder reads it"),
])
def test_what_an_audio_model_cannot_be_is_a_located_error(text, message):
    with pytest.raises(tfspec.SpecError) as info:
        tfspec.parse(text)
    assert message in info.value.message and info.value.line >= 1, info.value.message


def test_wrong_spectrograms_are_refused_naming_the_argument():
    model = tfspec.compile(TONES.format(frames=9, kernel=""), seed=0)
    for given, message in [(torch.randn(2, 12, 8), r"input_features must be shaped \(batch, 12, 9\)"),
                           (torch.randn(2, 9, 12), r"input_features must be shaped \(batch, 12, 9\)"),
                           (torch.zeros(2, 12, 9, dtype=torch.long), "as floating-point numbers"),
                           (torch.zeros(0, 12, 9), "is empty"), ([[0.0]], "must be a torch.Tensor")]:
        with pytest.raises(ValueError, match=message):
            model(given)


def test_an_encoder_of_spectrograms_learns_the_generated_tones_from_the_cli(tmp_path, tfspec_cli):
    out = tmp_path / "run"
    done = tfspec_cli("train", "examples/audio_tones.tfs", "--steps", "60", "--batch", "32", "--lr", "2e-3",
                      "--warmup", "10", "--eval-size", "128", "--eval-every", "60", "--no-progress", "--out", out)
    assert done.returncode == 0, done.stderr
    assert "classifying generated tones 0-9" in done.stdout + done.stderr
    last = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()][-1]
    assert last["accuracy"] >= 0.9, last  # chance is 0.1
    resumed = tfspec_cli("train", "--resume", out, "--steps", "62", "--no-progress")
    assert resumed.returncode == 0, resumed.stderr


def test_an_encoder_decoder_reads_spectrograms_and_decodes_cached_as_it_recomputes():
    """Whisper's shape: an audio encoder, a decoder of tokens cross-attending to it."""
    text = ("embedding audio { input audio(mels=12, frames=10); dim 16; position sinusoidal(halves=true, "
            "endpoint=true) }\nembedding tokens { vocab 30; dim 16; position learned(20) }\n"
            "encoder x 2 { embedding audio; residual pre; attention self heads=2; feedforward d_ff=32; "
            "final layernorm }\n"
            "decoder x 2 { embedding tokens; residual pre; attention self heads=2 mask=causal + padding; "
            "attention cross heads=2 memory=encoder; feedforward d_ff=32; final layernorm }\nhead tied(tokens)")
    model = tfspec.compile(text, seed=0).eval()
    features = torch.randn(2, 12, 10, generator=torch.Generator().manual_seed(1))
    start = torch.tensor([[1, 4], [2, 3]])
    steps = Continuation(model, features)
    last = [steps.feed(start)]  # each call: the logits of its last position
    tokens = start
    for _ in range(4):
        following = last[-1].argmax(-1, keepdim=True)
        tokens = torch.cat((tokens, following), dim=1)
        last.append(steps.feed(following))
    with torch.no_grad():
        whole = model(features, tokens)
    assert_close(torch.stack(last, dim=1), whole[:, start.shape[1] - 1:], FLOAT32)


def test_summary_holds_an_encoder_of_spectrograms_at_its_length_and_sweeps_the_decoder(tfspec_cli):
    """Whisper's encoder reads 1,500 vectors whatever the decoder's length: ``summary`` costs it there, and its
    sweep lengthens the decoder alone, within its 448 learned positions."""
    from tfspec.inspect.analysis import analyse, sweep
    spec = tfspec.load("examples/whisper_small.tfs")
    assert analyse(spec).lengths == {"encoder": 1500, "decoder": 448}
    assert analyse(spec, seq_len=64).lengths == {"encoder": 1500, "decoder": 64}
    assert [a.lengths for a in sweep(spec)] == [{"encoder": 1500, "decoder": n} for n in (64, 128, 256)]
    done = tfspec_cli("summary", "examples/whisper_small.tfs")
    assert done.returncode == 0, done.stderr
    assert "(the decoder at that length, the encoder at its 1500)" in done.stdout


def test_the_cli_refuses_what_it_cannot_do_with_spectrograms_in_one_line(tmp_path, tfspec_cli):
    """An imported Whisper run (its tokenizer beside it) is written; ``generate``, which encodes text as the source,
    refuses it in one line naming the Python way; ``train`` refuses an encoder-decoder of spectrograms before any run
    directory is made."""
    T = pytest.importorskip("transformers")
    tokenizers = pytest.importorskip("tokenizers")
    config = T.WhisperConfig(vocab_size=40, num_mel_bins=12, encoder_layers=1, decoder_layers=1, d_model=16,
                             encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=24,
                             decoder_ffn_dim=24, max_source_positions=5, max_target_positions=16, pad_token_id=0,
                             bos_token_id=1, eos_token_id=2, decoder_start_token_id=1, begin_suppress_tokens=[])
    directory = tmp_path / "whisper"
    T.WhisperForConditionalGeneration(config).save_pretrained(directory)
    words = {w: i for i, w in enumerate(["<pad>", "<s>", "</s>", "[UNK]", *(f"w{i}" for i in range(30))])}
    tokenizer = tokenizers.Tokenizer(tokenizers.models.WordLevel(words, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tokenizer.save(str(directory / "tokenizer.json"))
    imported = tfspec_cli("import", directory, "--run", tmp_path / "run")
    assert imported.returncode == 0 and "and its tokenizer.json" in imported.stdout, imported.stderr
    refused = tfspec_cli("generate", tmp_path / "run", "--input", "w1 w2")
    lines = refused.stderr.strip().splitlines()
    assert refused.returncode == 1 and len(lines) == 1, refused.stderr
    assert "its encoder reads log-mel spectrograms, not text" in lines[0] and "Continuation(model, input_features)" \
        in lines[0]
    trained = tfspec_cli("train", "examples/whisper_small.tfs", "--set", "layers=1", "--set", "decoder_layers=1",
                         "--steps", "1", "--out", tmp_path / "tuned")
    assert trained.returncode == 2 and "has no generated task with targets" in trained.stderr, trained.stderr
    assert not (tmp_path / "tuned").exists()


def test_every_command_reads_an_encoder_decoder_of_spectrograms(tmp_path, tfspec_cli):
    """Whisper's shape through verify (its sources drawn as spectrograms), mask and report (the encoder at its
    length), build, and ONNX (onnxruntime computing what PyTorch does)."""
    small = ["--set", "layers=1", "--set", "decoder_layers=1", "--set", "d_model=32", "--set", "heads=2",
             "--set", "decoder_heads=2", "--set", "d_ff=32", "--set", "decoder_d_ff=32", "--set", "vocab=64",
             "--set", "mels=12", "--set", "source_positions=6", "--set", "target_positions=16"]
    spec = tmp_path / "whisper.tfs"
    spec.write_text(open("examples/whisper_small.tfs").read())
    verified = tfspec_cli("verify", spec, *small, "--examples", "5")
    assert verified.returncode == 0 and "held     causality" in verified.stdout, verified.stdout + verified.stderr
    assert "held     padding invariance" in verified.stdout
    masked = tfspec_cli("mask", spec, *small, "-o", tmp_path / "mask.svg")
    assert masked.returncode == 0 and "decoder.cross_attn: 16 queries × 6 keys" in masked.stdout, masked.stderr
    reported = tfspec_cli("report", spec, *small, "-o", tmp_path / "page.html")
    assert reported.returncode == 0 and "note:" not in reported.stderr, reported.stderr
    built = tfspec_cli("build", "examples/audio_tones.tfs")
    assert built.returncode == 0 and "forward pass on random log-mel spectrograms (2, 20, 32)" in built.stdout
    pytest.importorskip("onnxruntime")
    from tfspec.interop.onnx import export_onnx
    sizes = dict(setting.split("=") for setting in small[1::2])
    model = tfspec.compile(tfspec.load(spec, overrides={k: int(v) for k, v in sizes.items()}), seed=0)
    exported = export_onnx(model, tmp_path / "whisper.onnx")
    assert exported.inputs[0] == "input_features" and exported.max_difference < 1e-5
