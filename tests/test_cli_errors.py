"""Hostile command lines: every one a one-line error and exit 1 (the input is wrong) or 2 (the invocation is
wrong), never a traceback, an allocation that exhausts memory, or a read that never ends."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tfspec.cli import main

REVERSE = "examples/reverse.tfs"
GPT2 = "examples/gpt2_small.tfs"
SMALL = ["--set", "layers=1", "--set", "d_model=32", "--set", "heads=2", "--set", "d_ff=32"]
SHORT_GPT2 = ["--set", "layers=1", "--set", "d_model=32", "--set", "heads=2", "--set", "context=16"]
HUGE_SEED = str(2 ** 70)


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli")
    os.mkfifo(root / "fifo")
    (root / "nothing").mkdir()
    (root / "afile").write_text("x")
    run = root / "run"
    assert main(["train", REVERSE, *SMALL, "--steps", "1", "--batch", "4", "--eval-size", "4", "--no-progress",
                 "--out", str(run)]) == 0
    (root / "text.txt").write_text("hello world " * 20)
    assert main(["train", GPT2, *SHORT_GPT2, "--text", str(root / "text.txt"), "--seq-len", "8",
                 "--steps", "1", "--batch", "2", "--eval-size", "2", "--no-progress", "--out", str(root / "lm")]) == 0
    return root


CASES = [  # (arguments, exit status, what the message says)
    (["render", REVERSE, "-o", "/proc/x.svg"], 2, "-o /proc/x.svg: cannot write in /proc"),
    (["render", REVERSE, "-o", "{root}/missing/x.svg"], 2, "does not exist"),
    (["render", REVERSE, "-o", "{root}/x.unknown"], 2, "cannot tell the format"),
    (["mask", REVERSE, "-o", "/proc/x.png"], 2, "cannot write in /proc"),
    (["emit", REVERSE, "-o", "{root}"], 2, "is a directory; name the .py file to write"),
    (["emit", REVERSE, "-o", "/dev/null"], 2, "-o /dev/null: not a regular file"),  # as root it was replaced
    (["render", REVERSE, "-o", "{root}/fifo"], 2, "not a regular file"),
    (["summary", REVERSE, "--plot", "/dev/zero"], 2, "not a regular file"),
    (["fmt", "--write", "{root}/fifo"], 1, "not a regular file"),
    (["summary", REVERSE, "--plot", "{root}/x.unknown"], 2, "cannot tell the picture's format"),
    (["summary", REVERSE, "--plot", "/proc/x.png"], 2, "cannot write in /proc"),
    (["export", "{root}/run", "--to", "torch", "-o", "/proc/x"], 2, "cannot write in /proc"),
    (["train", REVERSE, "--steps", "1", "--out", "{root}/afile"], 2, "a file, not a run directory"),
    (["train", REVERSE, "--seq-len", str(10 ** 12), "--steps", "1"], 2, "--seq-len: Input should be less than"),
    (["train", REVERSE, "--seq-len", str(10 ** 8), "--steps", "1"], 2, "GiB is available"),
    (["train", REVERSE, "--batch", str(10 ** 9), "--steps", "1"], 2, "GiB is available"),
    (["train", REVERSE, "--eval-size", str(10 ** 9), "--steps", "1"], 2, "the held-out set alone would take"),
    (["train", REVERSE, "--seed", HUGE_SEED], 2, "expected a seed from 0 to 2**63 - 1"),
    (["train", REVERSE, "--device", "meta"], 2, "meta tensors hold no values"),
    (["train", GPT2, "--text", "/dev/zero"], 1, "--data /dev/zero: not a regular file"),
    (["train", GPT2, "--text", "{root}/fifo"], 1, "not a regular file"),
    (["train", GPT2, "--data", "{root}/nothing"], 1, "no file under it matches --glob '*.txt'"),
    (["train", GPT2, "--data", "{root}/text.txt", "{root}/text.txt"], 1, "two aligned files are sentence pairs"),
    (["train", GPT2, "--data", "a", "b", "c"], 2, "--data takes one path, or two aligned files"),
    (["train", GPT2, "--glob", "*.md"], 2, "--glob says how to read --data"),
    (["train", GPT2, "--data", ""], 2, "not a path"),
    (["prepare", "{root}/fifo", "-o", "{root}/prepared"], 1, "not a regular file"),
    (["prepare", "{root}/text.txt", "-o", "{root}/afile"], 2, "a file; name a directory"),
    (["check", REVERSE, "--set", "layers=1e400"], 1, "number '1e400' is too large"),
    (["generate", "{root}/run", "--count", str(10 ** 7)], 2, "at most 10,000 held-out examples"),
    (["generate", "{root}/run", "--seed", HUGE_SEED], 2, "expected a seed"),
    (["generate", "{root}/run", "--temperature", "1e308"], 2, "a temperature from 0 (greedy) to 10000"),
    (["generate", "{root}/run", "--device", "meta"], 2, "meta tensors hold no values"),
    (["generate", "{root}/run", "--max-new", str(10 ** 9)], 2, "GiB is available"),
    # a length past the learned positions is the invocation's, whichever command is asked
    (["build", GPT2, *SHORT_GPT2, "--seq-len", "17"], 2, "its learned positions cover 16"),
    (["summary", GPT2, *SHORT_GPT2, "--seq-len", "17"], 2, "its learned positions cover 16"),
    (["train", GPT2, *SHORT_GPT2, "--text", "{root}/text.txt", "--seq-len", "17", "--steps", "1"], 2,
     "beyond its learned positions (learned(16))"),
    (["generate", "{root}/lm", "--input", "x" * 20], 2, "the learned positions (16) leave no room to generate"),
    (["build", REVERSE, "--seq-len", "100000"], 2, "a batch of 2 × 100,000 tokens needs about"),
    (["build", REVERSE, "--batch", str(10 ** 9)], 2, "GiB is available"),
    (["build", REVERSE, "--seed", HUGE_SEED], 2, "expected a seed"),
    (["build", REVERSE, "--device", "meta"], 2, "meta tensors hold no values"),
    (["summary", REVERSE, "--measure", "--seq-len", str(10 ** 9)], 2, "GiB is available"),
    (["verify", REVERSE, "--examples", str(10 ** 8)], 2, "at most 10000 examples"),
    (["check", "/dev/zero"], 1, "/dev/zero: not a regular file"),
    (["check", "{root}/fifo"], 1, "not a regular file"),
    (["fmt", "/dev/zero"], 1, "not a regular file"),
    (["diff", REVERSE, "{root}/fifo"], 1, "not a regular file"),
    (["import", "/dev/zero"], 1, "not a regular file"),
    # every number has a range, checked before any work (Hardening II)
    (["train", REVERSE, "--lr", "1e308"], 2, "expected a number in (0, 10], got 1e308"),
    (["train", REVERSE, "--lr", "1e39"], 2, "expected a number in (0, 10], got 1e39"),
    (["train", REVERSE, "--weight-decay", "1e9"], 2, "expected a number in [0, 10]"),
    (["train", REVERSE, "--label-smoothing", "1"], 2, "expected a number in [0, 1)"),
    (["train", REVERSE, "--steps", str(10 ** 12)], 2, "--steps: Input should be less than or equal to 1000000000"),
    (["train", GPT2, "--text", "{root}/text.txt", "--tokenizer", "bpe:1000000000"], 2, "at most bpe:1048576"),
    (["prepare", "{root}/text.txt", "-o", "{root}/p2", "--tokenizer", "bpe:1000000000"], 1,
     "at most 1,048,576 tokens"),
    (["generate", "{root}/run", "--beam", "1000000"], 2, "expected a beam width from 1 to 100"),
    (["generate", "{root}/run", "--beam", "--alpha", "1e308"], 2, "expected a number in [0, 10]"),
    (["demo", "--out", "{root}/afile"], 1, "a file, not a directory"),
    (["generate", "{root}/lm", "--input", "a\udcff"], 2, "--input: not UTF-8 text (byte 0xff at character 1)"),
    (["render", REVERSE, "-o", "\x00"], 2, "--output: '\\x00' holds a NUL byte"),
    (["check", "a\x00b"], 2, "files: 'a\\x00b' holds a NUL byte"),
    # --max-new asked for more than the positions leave: refused before anything is generated
    (["generate", "{root}/lm", "--input", "hello", "--max-new", "50"], 2,
     "the prompt has 5 tokens; the learned positions (16) leave room for 12 new tokens, not 50"),
]


@pytest.mark.parametrize("args, code, message", CASES, ids=[" ".join(c[0])[:60] for c in CASES])
def test_a_bad_command_line_is_one_clear_error(paths, capsys, args, code, message):
    argv = [a.format(root=paths) for a in args]
    try:
        status = main(argv)
    except SystemExit as exc:  # argparse: a bad option value
        status = exc.code
    err = capsys.readouterr().err
    assert status == code, err
    assert message.format(root=paths) in err and "Traceback" not in err


def test_a_prompt_past_the_positions_without_max_new_is_cut_and_says_so(paths, capsys):
    """The README's rule: --max-new asked for is all generated or refused up front (exit 2); the default length
    stops where the learned positions end, with a note on standard error."""
    assert main(["generate", str(paths / "lm"), "--input", "hello"]) == 0
    captured = capsys.readouterr()
    continuation = captured.out.splitlines()[-1]
    assert continuation.startswith("hello") and len(continuation) - 5 <= 12  # bytes: one character each, or U+FFFD
    assert "note: stopped after" in captured.err and "learned positions (16) end" in captured.err, captured.err
    assert main(["generate", str(paths / "lm"), "--input", "hello", "--max-new", "12"]) == 0  # fits exactly
    assert "note:" not in capsys.readouterr().err


def test_a_tiny_temperature_samples_the_most_likely_tokens_not_nan(paths, capsys):
    assert main(["generate", str(paths / "lm"), "--input", "hello", "--max-new", "8", "--temperature", "1e-300"]) == 0
    sampled = capsys.readouterr().out.splitlines()[-1]
    assert main(["generate", str(paths / "lm"), "--input", "hello", "--max-new", "8"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == sampled  # greedy: nothing else keeps any probability


def test_summary_prints_sane_units_at_absurd_sizes(capsys):
    assert main(["summary", REVERSE, "--batch", str(10 ** 9), "--sweep", "64,100000000000"]) == 0
    out = capsys.readouterr().out
    figures = [cell for line in out.splitlines() for cell in line.split("  ") if cell.strip()]
    assert "ZiB" in out or "YiB" in out or "e+" in out
    assert all(len(cell.strip().split(" ")[0]) <= 12 for cell in figures if cell.strip()[:1].isdigit())


OPTION_VALUES = st.sampled_from(["0", "-1", "1", "3", "1e400", "nan", "inf", "-inf", "", "abc", str(2 ** 70),
                                 "99999999999", "1.5", "/dev/zero", "/dev/null", "/proc/x.svg", "meta", "cuda:7", "\x00", "é"])


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(command=st.sampled_from(["check", "summary", "mask", "render", "emit", "diff", "build"]),
       options=st.lists(st.tuples(st.sampled_from(["--seq-len", "--batch", "--seed", "--device", "--set",
                                                   "--src-len", "--dtype", "-o", "--output", "--sweep",
                                                   "--head"]),
                                  OPTION_VALUES), max_size=3))
def test_any_option_value_ends_in_a_status_not_a_traceback(tmp_path_factory, capsys, command, options):
    scratch = tmp_path_factory.getbasetemp() / "scratch"
    scratch.mkdir(exist_ok=True)
    out = scratch / "out.svg"
    here = os.getcwd()
    argv = [command, os.path.abspath(REVERSE)] + (
        [os.path.abspath("examples/vaswani_base.tfs")] if command == "diff" else []) + SMALL
    if command in ("mask", "render"):
        argv += ["-o", str(out)]
    for option, value in options:
        argv += [option, value if option != "--set" else f"layers={value}"]
    os.chdir(scratch)  # a relative -o lands here, not in the repository
    try:
        status = main(argv)
    except SystemExit as exc:
        status = exc.code
    finally:
        os.chdir(here)
    assert status in (0, 1, 2)
    assert "Traceback" not in capsys.readouterr().err
    assert all(os.path.exists(d) and not os.path.isfile(d) for d in ("/dev/zero", "/dev/null"))  # never replaced
