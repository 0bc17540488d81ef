"""Training: tasks and masking, learning, checkpoints that survive interruption, exact resume, the CLI."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import tfspec.run.checkpoint as ckpt
from tfspec.run.data import (EOS, EVAL, IGNORE, MASK, PAD, SEP, TRAIN, DataError, TaskData, Vocabulary, generator_for,
                         held_out, mask_tokens, prompted_batch, seq2seq_batch)
from tfspec.run.train import TrainConfig, paper_defaults, read_metrics, resume, train
from numerics import FLOAT32, assert_close, close

ROOT = Path(__file__).resolve().parents[1]
TINY_ENCDEC = {"layers": 1, "d_model": 32, "heads": 2, "d_ff": 64, "vocab": 16}
TINY = dict(symbols=6, min_len=2, max_len=6, batch=16, eval_size=32, eval_every=1000)


def quiet(*_):
    pass


# ---------------------------------------------------------------- data
@given(st.sampled_from(["copy", "reverse", "sort"]), st.integers(0, 10_000), st.booleans())
@settings(max_examples=30)
def test_task_targets_are_what_the_task_says(task, seed, evaluation):
    vocab = Vocabulary.letters(8)
    src, tgt, lengths = TaskData(task, vocab, 1, 9).pairs(20, generator_for(seed, EVAL, 0), evaluation)
    for s, t, n in zip(src.tolist(), tgt.tolist(), lengths.tolist()):
        expected = {"copy": s[:n], "reverse": s[:n][::-1], "sort": sorted(s[:n])}[task]
        assert t[:n] == expected and set(t[n:]) <= {PAD} and set(s[n:]) <= {PAD}
        assert all(x >= vocab.first_symbol for x in s[:n])
    assert bool((held_out(src) == evaluation).all())  # held-out rows only in evaluation, never in training


def test_the_command_line_offers_exactly_the_registered_tasks():
    from tfspec.cli import train as command
    from tfspec.run.data import TASKS

    assert set(command.TASKS) == set(command.TASK_HELP) == set(TASKS)  # cli names them without importing torch
    with pytest.raises(ValueError, match="unknown task 'rotate'"):
        TrainConfig(task="rotate")


def test_held_out_sequences_are_about_one_in_ten_and_deterministic():
    vocab = Vocabulary.letters(26)
    src, _, _ = TaskData("copy", vocab, 4, 24).pairs(4000, generator_for(0, TRAIN, 0), False)
    tokens = torch.randint(5, 31, (20000, 10), generator=torch.Generator().manual_seed(0))
    share = held_out(tokens).float().mean().item()
    assert 0.09 < share < 0.11
    again, _, _ = TaskData("copy", vocab, 4, 24).pairs(4000, generator_for(0, TRAIN, 0), False)
    assert torch.equal(src, again)


def test_seq2seq_batch_shifts_the_target_and_masks_padding():
    src = torch.tensor([[5, 6, 7], [8, 9, PAD]])
    tgt = torch.tensor([[7, 6, 5], [9, 8, PAD]])
    batch = seq2seq_batch(src, tgt, torch.tensor([3, 2]), {"src": True, "tgt": True})
    assert batch.inputs["tgt"].tolist() == [[1, 7, 6, 5], [1, 9, 8, PAD]]
    assert batch.labels.tolist() == [[7, 6, 5, EOS], [9, 8, EOS, IGNORE]]
    assert batch.inputs["src_padding_mask"].tolist() == [[False, False, False], [False, False, True]]
    assert batch.inputs["tgt_padding_mask"].tolist() == [[False] * 4, [False, False, False, True]]


def test_prompted_batch_has_loss_only_on_the_answer():
    src = torch.tensor([[5, 6, 7], [8, 9, PAD]])
    batch = prompted_batch(src, torch.tensor([[7, 6, 5], [9, 8, PAD]]), torch.tensor([3, 2]))
    assert batch.inputs["tokens"].tolist() == [[5, 6, 7, SEP, 7, 6, 5], [8, 9, SEP, 9, 8, EOS, PAD]]
    assert batch.labels.tolist() == [[IGNORE, IGNORE, IGNORE, 7, 6, 5, EOS], [IGNORE, IGNORE, 9, 8, EOS, IGNORE, IGNORE]]


def test_mlm_masking_proportions():
    vocab = Vocabulary("bytes")
    tokens = torch.randint(vocab.first_symbol, vocab.size, (400, 500), generator=torch.Generator().manual_seed(0))
    tokens[:, -50:] = PAD  # padding and specials are never chosen
    tokens[:, 0] = SEP
    inputs, labels = mask_tokens(tokens, torch.Generator().manual_seed(1), vocab)
    chosen = labels != IGNORE
    symbols = tokens >= vocab.first_symbol
    assert not chosen[~symbols].any()
    assert torch.equal(labels[chosen], tokens[chosen])  # the label is the original token
    assert torch.equal(inputs[~chosen], tokens[~chosen])  # nothing else changes
    n = chosen.sum().item()
    assert abs(n / symbols.sum().item() - 0.15) < 0.005
    masked = (inputs[chosen] == MASK).float().mean().item()
    kept = (inputs[chosen] == tokens[chosen]).float().mean().item()
    replaced = 1 - masked - kept
    assert abs(masked - 0.8) < 0.01 and abs(kept - 0.1 - 0.1 / 256) < 0.01 and abs(replaced - 0.1) < 0.01
    assert (inputs[chosen] >= vocab.first_symbol).logical_or(inputs[chosen] == MASK).all()


# ---------------------------------------------------------------- recipes
def test_paper_defaults():
    config = TrainConfig(steps=100_000)
    vaswani = paper_defaults("encoder-decoder", 512, config)
    assert (vaswani.optimizer, vaswani.betas, vaswani.eps, vaswani.warmup, vaswani.label_smoothing) == \
           ("adam", (0.9, 0.98), 1e-9, 4000, 0.1)
    # lrate = d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)
    for step in (1, 100, 4000, 10_000, 90_000):
        expected = 512 ** -0.5 * min(step ** -0.5, step * 4000 ** -1.5)
        assert abs(vaswani.learning_rate(step, 100_000) - expected) < 1e-12
    gpt = paper_defaults("decoder-only", 768, config)
    assert gpt.optimizer == "adamw" and gpt.schedule == "cosine" and gpt.lr == 6e-4
    assert gpt.learning_rate(gpt.warmup, 100_000) == pytest.approx(6e-4)
    assert gpt.learning_rate(100_000, 100_000) == pytest.approx(6e-5)
    bert = paper_defaults("encoder-only", 768, config)
    assert (bert.lr, bert.warmup, bert.weight_decay) == (1e-4, 10_000, 0.01)
    short = paper_defaults("encoder-decoder", 512, TrainConfig(steps=400, lr=1e-3))
    assert short.warmup == 100 and short.learning_rate(100, 400) == pytest.approx(1e-3)  # peak = --lr


# ---------------------------------------------------------------- learning
def test_loss_falls_below_threshold_on_a_tiny_copy_task():
    config = TrainConfig(task="copy", steps=300, lr=3e-3, warmup=30, label_smoothing=0.0, **TINY)
    run = train("examples/reverse.tfs", config, None, overrides={"layers": 1, "d_model": 32}, progress=False,
                log=quiet)
    assert run.losses[0] > 1.9  # about ln(7) or worse: chance over 6 symbols and the end token
    assert sum(run.losses[-10:]) / 10 < 0.3
    assert run.evaluations[-1]["token_accuracy"] > 0.9


def test_decoder_only_learns_the_prompted_task():
    config = TrainConfig(task="copy", steps=200, lr=3e-3, warmup=20, **TINY)
    run = train("examples/gpt2_small.tfs", config, None, progress=False, log=quiet,
                overrides={"layers": 2, "d_model": 32, "heads": 2, "vocab": 12, "context": 16})
    assert run.losses[0] > 2.0
    assert run.evaluations[-1]["eval_loss"] < 1.2  # chance is ln 7 = 1.95 nats
    assert run.evaluations[-1]["exact_match"] > 0.1  # chance is about 0
    from tfspec.run.decoding import Strategy, complete

    for strategy in (Strategy(), Strategy(beam=3)):  # "abcd SEP" -> letters until the end token
        out = complete(run.model.eval(), run.objective.vocab, ["abcd"], prompted=True, max_new=7, strategy=strategy)
        assert len(out[0].output) <= 7 and set(out[0].output) <= set("abcdef")  # only ids the data defines


def test_masked_language_model_trains_an_encoder_only_spec(tmp_path):
    text = tmp_path / "t.txt"
    text.write_text("the quick brown fox jumps over the lazy dog. " * 40)
    config = TrainConfig(data=[str(text)], tokenizer="chars", seq_len=16, steps=80, batch=16, lr=3e-3, warmup=10,
                         eval_size=32, eval_every=80)
    spec = """model mlm
        embedding tokens { vocab 40; dim 32; position learned(32) }
        encoder x 1 { attention self heads=2 mask=padding; feedforward d_ff=64 }
        head tied(tokens)
        pooler tanh"""
    run = train(spec, config, None, progress=False, log=quiet)
    assert sum(run.losses[-20:]) / 20 < sum(run.losses[:10]) / 10 - 0.4
    assert set(run.evaluations[-1]) == {"step", "eval_loss", "token_accuracy"}


def test_bfloat16_autocast_trains(tmp_path):
    config = TrainConfig(task="copy", steps=20, dtype="bfloat16", lr=3e-3, warmup=5, **TINY)
    run = train("examples/vaswani_base.tfs", config, None, overrides=TINY_ENCDEC, progress=False, log=quiet)
    assert all(torch.isfinite(torch.tensor(run.losses)))
    assert run.losses[-1] < run.losses[0]
    assert next(run.model.parameters()).dtype == torch.float32  # weights stay fp32 under autocast


# ---------------------------------------------------------------- checkpoints
def small_run(tmp_path, steps=6):
    return TrainConfig(task="reverse", steps=steps, save_every=3, **{**TINY, "eval_every": 3})


def test_checkpoint_round_trip_is_bit_exact(tmp_path):
    run = train("examples/vaswani_base.tfs", small_run(tmp_path), tmp_path / "run", overrides=TINY_ENCDEC,
                progress=False, log=quiet)
    loaded = ckpt.load(tmp_path / "run")
    assert loaded.step == 6 and loaded.path.name == "step-0000006"
    model = loaded.model()
    src = torch.randint(5, 11, (3, 6), generator=torch.Generator().manual_seed(0))
    tgt = torch.randint(5, 11, (3, 5), generator=torch.Generator().manual_seed(1))
    run.model.eval()
    with torch.no_grad():
        assert torch.equal(model(src, tgt), run.model(src, tgt))
    for name, tensor in run.model.state_dict().items():
        assert torch.equal(tensor, model.state_dict()[name]), name
    assert "vaswani_base" in loaded.spec_text and loaded.meta["overrides"] == TINY_ENCDEC
    assert loaded.meta["vocab"] == {"kind": "letters", "symbols": "abcdef"}


def test_resumed_run_reproduces_the_uninterrupted_losses_exactly(tmp_path):
    spec = "examples/vaswani_base.tfs"
    overrides = TINY_ENCDEC
    whole = train(spec, small_run(tmp_path, steps=8), tmp_path / "whole", overrides=overrides, progress=False,
                  log=quiet)
    first = train(spec, small_run(tmp_path, steps=8), tmp_path / "split", overrides=overrides, progress=False,
                  log=quiet, stop_after=5)  # stops between checkpoints: saves step 5
    assert first.step == 5 and ckpt.load(tmp_path / "split").step == 5
    second = resume(tmp_path / "split", progress=False, log=quiet)
    assert first.losses + second.losses == whole.losses  # exact float equality
    assert [e["eval_loss"] for e in whole.evaluations] == \
           [e["eval_loss"] for e in first.evaluations + second.evaluations]
    steps, _ = read_metrics(tmp_path / "split" / "metrics.jsonl")
    assert [r["step"] for r in steps] == list(range(1, 9))
    for a, b in zip(whole.model.state_dict().values(), second.model.state_dict().values()):
        assert torch.equal(a, b)


@pytest.mark.parametrize("stop", [6, 2])  # stopped while decaying, and while still warming up
def test_resuming_with_more_steps_continues_the_schedule(tmp_path, stop):
    """--steps on resume moves the end: the warm-up stays, and the decay goes on from the learning rate the run
    had reached down to its floor at the new end (it used to restart the warm-up)."""
    spec, overrides = "examples/gpt2_small.tfs", {"layers": 1, "d_model": 16, "heads": 2, "context": 32}
    config = TrainConfig(task="reverse", steps=12, save_every=100, eval_every=100, eval_size=4, batch=4,
                         max_len=6, min_len=2)  # the warm-up comes from the paper's 2000, cut to steps // 4 = 3
    whole = train(spec, config, tmp_path / "whole", overrides=overrides, progress=False, log=quiet)
    train(spec, config, tmp_path / "split", overrides=overrides, progress=False, log=quiet, stop_after=stop)
    resume(tmp_path / "split", steps=40, progress=False, log=quiet)
    lrs = [r["lr"] for r in read_metrics(tmp_path / "split" / "metrics.jsonl")[0]]
    planned = [r["lr"] for r in read_metrics(tmp_path / "whole" / "metrics.jsonl")[0]]
    assert lrs[:stop] == planned[:stop] and len(lrs) == 40
    peak = max(planned)
    assert lrs.index(peak) == planned.index(peak) == 2  # the warm-up the run started with: 3 steps
    decaying = lrs[2:]  # from the peak on
    assert all(later <= earlier for earlier, later in zip(decaying, decaying[1:]))
    assert abs(lrs[stop] - planned[stop]) <= 1e-12  # the first resumed step keeps the planned rate
    assert lrs[-1] == pytest.approx(0.1 * peak)  # and the decay ends at its floor at the new end


def test_resume_with_dropout_is_exact_too(tmp_path):
    """Dropout draws from torch's global generator, whose state the checkpoint carries."""
    spec = """model drop
        defaults { dropout 0.3; attn_dropout 0.2 }
        embedding tokens { vocab 16; dim 32; position sinusoidal }
        encoder x 1 { attention self heads=2 mask=padding; feedforward d_ff=32 }
        decoder x 1 { attention self heads=2 mask=causal; attention cross heads=2 memory=encoder mask=padding
                      feedforward d_ff=32 }
        head tied(tokens)"""
    whole = train(spec, small_run(tmp_path, steps=6), tmp_path / "a", progress=False, log=quiet)
    train(spec, small_run(tmp_path, steps=6), tmp_path / "b", progress=False, log=quiet, stop_after=2)
    rest = resume(tmp_path / "b", progress=False, log=quiet)
    assert whole.losses[2:] == rest.losses


@pytest.mark.parametrize("failing_write", range(6))  # weights, spec, state, json, rename, 'latest'
def test_a_save_that_fails_midway_leaves_the_previous_checkpoint_loadable(tmp_path, monkeypatch, failing_write):
    run = train("examples/vaswani_base.tfs", small_run(tmp_path, steps=3), tmp_path / "run", overrides=TINY_ENCDEC,
                progress=False, log=quiet)
    before = ckpt.load(tmp_path / "run")
    calls = []
    real = {"save_file": ckpt.save_file, "_write": ckpt._write, "save": ckpt.torch.save, "rename": ckpt.os.rename,
            "write_atomically": ckpt.write_atomically}

    def failing(name):
        def f(*args, **kwargs):
            calls.append(name)
            if len(calls) == failing_write + 1:
                raise OSError(28, "No space left on device (injected)")
            return real[name](*args, **kwargs)
        return f

    monkeypatch.setattr(ckpt, "save_file", failing("save_file"))
    monkeypatch.setattr(ckpt, "_write", failing("_write"))
    monkeypatch.setattr(ckpt.torch, "save", failing("save"))
    monkeypatch.setattr(ckpt.os, "rename", failing("rename"))
    monkeypatch.setattr(ckpt, "write_atomically", failing("write_atomically"))
    with pytest.raises((OSError, ckpt.CheckpointError), match="injected"):
        ckpt.save(tmp_path / "run", 4, run.model, "broken", {"config": {}}, {})
    monkeypatch.undo()
    after = ckpt.load(tmp_path / "run")
    assert after.step == before.step == 3  # 'latest' still names the complete checkpoint
    assert after.model()  # and it loads
    leftovers = [p.name for p in (tmp_path / "run" / "checkpoints").iterdir()]
    assert all(not name.startswith(".") for name in leftovers), leftovers  # the temporary was cleaned up
    assert sorted(leftovers) in (["step-0000003"], ["step-0000003", "step-0000004"])  # 4 only if fully written


def test_a_killed_save_leaves_the_previous_checkpoint_loadable(tmp_path):
    """SIGKILL a process in the middle of writing a big checkpoint (no cleanup can run)."""
    run_dir = tmp_path / "run"
    train("examples/vaswani_base.tfs", small_run(tmp_path, steps=3), run_dir, overrides=TINY_ENCDEC,
          progress=False, log=quiet)
    script = f"""
import torch, tfspec.run.checkpoint as ckpt
model = torch.nn.Linear(4000, 4000)
print("saving", flush=True)
ckpt.save({str(run_dir)!r}, 99, model, "x", {{"config": {{}}}}, {{"big": torch.zeros(20_000_000)}})
"""
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "saving"
    time.sleep(0.3)
    proc.kill()
    proc.wait()
    loaded = ckpt.load(run_dir)
    assert loaded.step in (3, 99)
    if loaded.step == 3:
        assert loaded.model()


# ---------------------------------------------------------------- command line
def test_train_then_generate_on_a_text_file(tmp_path, tfspec_cli, monkeypatch):
    text = tmp_path / "corpus.txt"
    text.write_text("to be or not to be, that is the question. " * 30)
    out = tmp_path / "run"
    trained = tfspec_cli("train", "examples/gpt2_small.tfs", "--set", "layers=1", "--set", "d_model=32",
                         "--set", "heads=2", "--set", "context=64", "--set", "vocab=300", "--data", str(text),
                         "--seq-len", "32", "--steps", "30", "--batch", "8", "--eval-every", "15", "--eval-size", "16",
                         "--out", str(out), "--no-progress")
    assert trained.returncode == 0, trained.stderr
    assert "finished 30 steps" in trained.stdout and "recipe (GPT-3" in trained.stdout
    assert (out / "loss.png").read_bytes()[:4] == b"\x89PNG"
    steps, evals = read_metrics(out / "metrics.jsonl")
    assert len(steps) == 30 and [e["step"] for e in evals] == [15, 30]
    assert {"loss", "lr", "tokens_per_s"} <= set(steps[0])
    generated = tfspec_cli("generate", str(out), "--input", "to be", "--max-new", "20", "--temperature", "0.8",
                           "--top-k", "20")
    assert generated.returncode == 0, generated.stderr
    assert generated.stdout.splitlines()[-1].startswith("to be")
    assert len(generated.stdout.splitlines()[-1].encode()) >= len("to be") + 1
    # --compile: the same greedy output through the compiled step (dynamo's eager backend here: inductor's C++
    # takes seconds, and is tested in test_decoding)
    compiled = torch.compile
    monkeypatch.setattr(torch, "compile", lambda fn, **options: compiled(fn, dynamic=False, backend="eager"))
    greedy = [tfspec_cli("generate", str(out), "--input", "to be", "--max-new", "30", *extra).stdout.splitlines()[-1]
              for extra in ((), ("--compile",))]
    assert greedy[0] == greedy[1] and len(greedy[0]) > len("to be")
    refused = tfspec_cli("generate", str(out), "--input", "to be", "--compile", "--no-cache")
    assert refused.returncode == 2 and "does not combine with --no-cache" in refused.stderr


def test_train_and_generate_with_a_task_checkpoint(tmp_path, tfspec_cli):
    out = tmp_path / "run"
    trained = tfspec_cli("train", "examples/reverse.tfs", "--set", "layers=1", "--set", "d_model=32",
                         "--steps", "12", "--symbols", "6", "--seq-len", "6", "--batch", "8", "--eval-size", "8",
                         "--out", str(out), "--no-progress")
    assert trained.returncode == 0, trained.stderr
    assert "Vaswani et al. 2017" in trained.stdout and "exact_match" in trained.stdout
    beam = tfspec_cli("generate", str(out), "--input", "abcf", "--beam")
    assert beam.returncode == 0, beam.stderr
    assert "beam search (beam 4, alpha 0.6)" in beam.stdout and "score" in beam.stdout
    held = tfspec_cli("generate", str(out / "checkpoints" / "step-0000012"), "--count", "3")
    assert held.returncode == 0 and held.stdout.count("->") == 3
    bad = tfspec_cli("generate", str(out), "--input", "xyz")
    assert bad.returncode == 1 and "not in this model's vocabulary" in bad.stderr


def test_ctrl_c_saves_a_checkpoint_and_exits_cleanly(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "tfspec.cli", "train", "examples/reverse.tfs", "--set", "layers=1",
                             "--set", "d_model=32", "--steps", "100000", "--batch", "8", "--eval-size", "8",
                             "--out", str(out), "--no-progress"], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    metrics = out / "metrics.jsonl"
    deadline = time.time() + 60
    while time.time() < deadline and (not metrics.exists() or len(metrics.read_text().splitlines()) < 3):
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    assert f"tfspec train --resume {out}" in stdout
    saved = ckpt.load(out)
    assert saved.step >= 3
    steps, _ = read_metrics(metrics)
    assert steps[-1]["step"] == saved.step  # nothing after the checkpoint


def test_bad_arguments_exit_with_the_reason(tmp_path, tfspec_cli):
    headless = tmp_path / "headless.tfs"
    headless.write_text("embedding tokens { vocab 40; dim 16 }\n"
                        "decoder x 1 { attention self heads=2 mask=causal; feedforward d_ff=16 }\n")
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    text = tmp_path / "t.txt"
    text.write_text("hello " * 100)
    headless_run, empty_run, task_run, text_run, nowhere, pairs = tfspec_cli.many(
        ("train", str(headless), "--steps", "1", "--out", str(tmp_path / "a")),
        ("train", "examples/gpt2_small.tfs", "--data", str(empty), "--out", str(tmp_path / "b")),
        # a task: "src SEP tgt EOS" needs 25 positions
        ("train", "examples/gpt2_small.tfs", "--set", "context=16", "--set", "layers=1", "--seq-len", "12", "--out",
         str(tmp_path / "c")),
        ("train", "examples/gpt2_small.tfs", "--set", "context=16", "--set", "layers=1", "--data", str(text),
         "--seq-len", "64", "--out", str(tmp_path / "d")),
        ("generate", str(tmp_path / "nowhere")),
        ("train", "examples/vaswani_base.tfs", "--data", str(text), "--out", str(tmp_path / "e")))
    assert headless_run.returncode == 1 and "has no head" in headless_run.stderr
    assert "Traceback" not in headless_run.stderr
    assert empty_run.returncode == 1 and "is empty" in empty_run.stderr
    assert task_run.returncode == 2 and "beyond its learned positions" in task_run.stderr
    assert "learned(16)" in task_run.stderr
    assert text_run.returncode == 2 and "beyond its learned positions" in text_run.stderr  # as build --seq-len says
    assert nowhere.returncode == 1 and "no such checkpoint" in nowhere.stderr
    assert pairs.returncode == 1 and "lines of 'source<TAB>target'" in pairs.stderr
    assert not (tmp_path / "e" / "latest").exists()


def test_usage_errors_exit_2_before_anything_is_written(tmp_path, tfspec_cli):
    out = tmp_path / "run"
    cases = [(("--symbols", "60"), "--symbols: Input should be less than or equal to 52"),
             (("--min-len", "30"), "min_len 30 is above max_len 24"),
             (("--data", "README.md", "--task", "copy"), "--data and --task are alternatives"),
             (("--resume", str(out)), "not both"),
             (("--top-p", "0.5"), "unrecognized arguments")]
    results = tfspec_cli.many(*[("train", "examples/reverse.tfs", "--out", str(out), *args) for args, _ in cases])
    for (args, message), result in zip(cases, results):
        assert result.returncode == 2 and message in result.stderr, (args, result.stderr)
        assert "Traceback" not in result.stderr
    assert not out.exists()


def test_a_run_directory_is_never_overwritten(tmp_path):
    config = small_run(tmp_path, steps=3)
    train("examples/vaswani_base.tfs", config, tmp_path / "run", overrides=TINY_ENCDEC, progress=False, log=quiet)
    with pytest.raises(DataError, match="already holds a run"):
        train("examples/vaswani_base.tfs", config, tmp_path / "run", overrides=TINY_ENCDEC, progress=False, log=quiet)
    with pytest.raises(DataError, match="already finished"):
        resume(tmp_path / "run", progress=False, log=quiet)


def test_accumulated_micro_batches_are_distinct_deterministic_and_one_step(tmp_path):
    from tfspec.backend.compiler import compile as compile_spec
    from tfspec.run.train import Objective

    config = TrainConfig(task="reverse", steps=4, accumulate=3, **TINY)
    objective = Objective(compile_spec("examples/reverse.tfs", overrides={"layers": 1, "d_model": 32}), config)
    batches = [objective.batch(TRAIN, 0, micro).inputs["src"] for micro in range(3)]
    assert not torch.equal(batches[0], batches[1]) and not torch.equal(batches[1], batches[2])
    assert torch.equal(objective.batch(TRAIN, 0, 1).inputs["src"], batches[1])
    assert not torch.equal(objective.batch(TRAIN, 1, 0).inputs["src"], batches[0])
    run = train("examples/reverse.tfs", config, tmp_path / "run", overrides={"layers": 1, "d_model": 32},
                progress=False, log=quiet)
    steps, _ = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert len(run.losses) == len(steps) == 4  # an optimizer step, not a micro-batch, is a step


def test_the_optimiser_is_one_fused_kernel_and_steps_as_the_per_list_one():
    """Fused AdamW where every parameter is a plain tensor: the same updates as torch's default kernels."""
    import tfspec
    from tfspec.run.recipe import Recipe
    from tfspec.run.trainer import _optimizer
    recipe = Recipe("adamw", (0.9, 0.95), 1e-8, 0.1, "cosine", 1e-2, 0, 0.0, None, "test")
    models = [tfspec.compile("examples/gpt2_small.tfs", overrides={"layers": 1, "d_model": 32, "heads": 2,
                                                                   "vocab": 50, "context": 16}, seed=0).eval()
              for _ in range(2)]  # (eval: no dropout draws to tell the two apart)
    fused = _optimizer(models[0], recipe)
    assert all(group["fused"] for group in fused.param_groups)
    plain = torch.optim.AdamW([{"params": g["params"], "weight_decay": g["weight_decay"]}
                               for g in _optimizer(models[1], recipe).param_groups], lr=1e-2, betas=(0.9, 0.95),
                              eps=1e-8)
    tokens = torch.randint(0, 50, (2, 16), generator=torch.Generator().manual_seed(0))
    for _ in range(3):
        for model, optimizer in zip(models, (fused, plain)):
            model(tokens).square().mean().backward()
            optimizer.step()
            optimizer.zero_grad()
    for a, b in zip(models[0].parameters(), models[1].parameters()):
        assert_close(a, b, FLOAT32)
    fresh = tfspec.compile("examples/gpt2_small.tfs", overrides={"layers": 1, "d_model": 32, "heads": 2, "vocab": 50,
                                                                 "context": 16}, seed=0)
    assert not close(next(models[0].parameters()), next(fresh.parameters()), FLOAT32)  # they did step
