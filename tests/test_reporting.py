"""What the trainer tells a person: log lines without a terminal, an estimate before the first step, notes on
paper defaults that do not suit the run, perplexity and bits per byte for language models."""

from __future__ import annotations

import math
import re

import pytest

from tfspec.run.corpus import Source, text_vocabulary
from tfspec.run.data import TokenizerVocabulary, Vocabulary
from tfspec.run.train import Recipe, TrainConfig, paper_defaults, recipe_notes, train

GPT = {"layers": 1, "d_model": 16, "heads": 2, "context": 32, "vocab": 300}
TEXT = "Perplexity per token, bits per byte of text: héllo wörld, ça va. " * 30


@pytest.fixture
def text(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text(TEXT, encoding="utf-8")
    return path


def run_lines(text, **settings) -> tuple[object, list[str]]:
    lines: list[str] = []
    config = TrainConfig(data=[str(text)], seq_len=16, batch=2, eval_size=4, **settings)
    run = train("examples/gpt2_small.tfs", config, None, overrides=GPT, progress=False, log=lines.append)
    return run, lines


def test_without_a_terminal_a_line_every_n_steps_says_loss_lr_speed_and_eta(text):
    run, lines = run_lines(text, steps=6, log_every=4, eval_every=100)
    steps = [line for line in lines if re.match(r"step \d+/6:", line)]
    assert [line.split(":")[0] for line in steps] == ["step 1/6", "step 4/6", "step 6/6"]
    assert re.fullmatch(r"step 4/6: loss \d+\.\d{4}, lr \d\.\d\de[-+]\d\d, [\d,]+ tokens/s, ETA .+ s", steps[1])
    assert f"loss {run.losses[3]:.4f}" in steps[1] and steps[2].endswith("ETA 0 s")


def test_an_estimate_comes_before_the_first_step_and_a_warning_when_it_is_long(text):
    _, lines = run_lines(text, steps=2)
    estimate = next(line for line in lines if line.startswith("estimated"))
    assert re.search(r"estimated .+ a step, .+ for 2 steps \([\d.,]+ GFLOP a step at most, timed on a forward pass "
                     r"of 2 sequences on cpu\)", estimate), estimate
    assert lines.index(estimate) < min(i for i, line in enumerate(lines) if line.startswith("step "))
    assert not any(line.startswith("warning") for line in lines)
    lines = []
    config = TrainConfig(data=[str(text)], seq_len=16, batch=2, eval_size=4, steps=10 ** 9)
    train("examples/gpt2_small.tfs", config, None, overrides=GPT, progress=False, log=lines.append, stop_after=1)
    warning = next(line for line in lines if line.startswith("warning"))
    assert re.search(r"this run would take about [\d,]+ h \d\d min on cpu; use fewer --steps", warning)


def test_paper_defaults_far_from_a_small_short_run_get_a_note_with_the_option():
    short = TrainConfig(steps=2000)
    bert = paper_defaults("encoder-only", 64, short)
    notes = recipe_notes(bert, short, 2_000_000)
    assert notes[0] == "warm-up 500 steps: the paper's 10,000, shortened to a quarter of --steps 2,000; set it with --warmup"
    assert "peak lr 0.0001 is the paper's, chosen for 1,000,000 steps of a 110M-parameter model; this run is 2,000 " \
           "steps of 2.0M" in notes[1] and notes[1].endswith("--lr 0.001")
    chosen = TrainConfig(steps=2000, lr=1e-4, warmup=100)
    assert recipe_notes(paper_defaults("encoder-only", 64, chosen), chosen, 2_000_000) == []  # the user decided
    assert len(recipe_notes(bert, short, 100_000_000)) == 1  # a large model: BERT's rate is for its size
    gpt = paper_defaults("decoder-only", 64, short)
    assert [n.split(":")[0] for n in recipe_notes(gpt, short, 2_000_000)] == ["warm-up 500 steps"]  # 6e-4 is close
    long = TrainConfig(steps=100_000)
    assert recipe_notes(paper_defaults("encoder-only", 64, long), long, 2_000_000) == []  # its warm-up fits
    assert isinstance(bert, Recipe)


def test_a_language_model_reports_perplexity_and_bits_per_byte(text):
    run, _ = run_lines(text, steps=2, eval_every=2)
    metrics = run.evaluations[-1]
    assert metrics["perplexity"] == pytest.approx(math.exp(metrics["eval_loss"]))
    assert metrics["bits_per_byte"] == pytest.approx(metrics["eval_loss"] / math.log(2))  # bytes: a token a byte


@pytest.mark.parametrize("tokenizer", ["bytes", "chars", "bpe:300"])
def test_each_tokens_bytes_add_up_to_the_text(text, tokenizer):
    vocab = text_vocabulary(tokenizer, Source((str(text),)))
    ids = vocab.encode(TEXT)
    assert int(vocab.byte_lengths()[ids].sum()) == len(TEXT.encode("utf-8"))
    assert isinstance(vocab, TokenizerVocabulary if tokenizer.startswith("bpe") else Vocabulary)
