"""The command line: summaries, exit codes, compiler-style errors without tracebacks."""

import subprocess
import sys
from pathlib import Path

import pytest

from tfspec.cli import main

ROOT = Path(__file__).resolve().parents[1]
CASES = ROOT / "tests" / "cases"


def test_check_examples_prints_parameter_counts(capsys):
    assert main(["check", str(ROOT / "examples/gpt2_small.tfs"), str(ROOT / "examples/bert_base.tfs")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].endswith("gpt2_small: decoder-only, 12 layers, d_model 768, 12 heads, 124,439,808 parameters")
    assert out[1].endswith("bert_base: encoder-only, 12 layers, d_model 768, 12 heads, 109,482,240 parameters")


def test_set_overrides(capsys):
    assert main(["check", str(ROOT / "examples/vaswani_base.tfs"), "--set", "layers=2", "--set", "d_model=64"]) == 0
    assert "encoder-decoder, 2+2 layers, d_model 64, 8 heads" in capsys.readouterr().out


@pytest.mark.parametrize("case, needle", [
    ("misspelled_sublayer", "did you mean 'attention'?"),
    ("heads_not_dividing", "try heads=8"),
    ("cross_in_encoder_only", "cross-attention in an encoder stack has no memory to read"),
])
def test_done_when_errors_print_one_caret_error_and_exit_1(case, needle):
    # as a user runs it: a subprocess, no traceback, one error with a caret, exit status 1
    proc = subprocess.run([sys.executable, "-m", "tfspec.cli", "check", str(CASES / f"{case}.tfs")],
                          capture_output=True, text=True)
    assert proc.returncode == 1
    assert proc.stdout == ""
    assert "Traceback" not in proc.stderr
    assert proc.stderr.count(": error: ") == 1
    assert "^" in proc.stderr and needle in proc.stderr


def test_several_files_one_bad(capsys):
    code = main(["check", str(ROOT / "examples/gpt1.tfs"), str(CASES / "zero_heads.tfs")])
    captured = capsys.readouterr()
    assert code == 1
    assert "gpt1: decoder-only" in captured.out
    assert "heads must be greater than 0" in captured.err


def test_unknown_override_and_bad_set_syntax(capsys):
    assert main(["check", str(ROOT / "examples/gpt1.tfs"), "--set", "layer=2"]) == 1
    assert "did you mean 'layers'?" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        main(["check", str(ROOT / "examples/gpt1.tfs"), "--set", "layers"])
    assert exit_info.value.code == 2
    assert "expected NAME=VALUE" in capsys.readouterr().err


def test_missing_file_is_a_clean_error(capsys):
    assert main(["check", "does/not/exist.tfs"]) == 1
    err = capsys.readouterr().err
    assert "does/not/exist.tfs: no such file" in err and "Traceback" not in err


def test_dump_graph_and_spec(capsys):
    assert main(["check", str(ROOT / "examples/gpt1.tfs"), "--set", "layers=1", "--dump", "graph"]) == 0
    assert "decoder.self_attn = attention(decoder.block_input)" in capsys.readouterr().out
    assert main(["check", str(ROOT / "examples/gpt1.tfs"), "--dump", "spec"]) == 0
    assert '"name": "gpt1"' in capsys.readouterr().out


def test_console_script_installed():
    exe = Path(sys.executable).with_name("tfspec")
    proc = subprocess.run([str(exe), "check", str(ROOT / "examples/gpt1.tfs")], capture_output=True, text=True)
    assert proc.returncode == 0 and "116,534,784 parameters" in proc.stdout
