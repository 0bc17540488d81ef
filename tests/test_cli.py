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


def test_done_when_errors_print_one_caret_error_and_exit_1(tfspec_cli):
    # as a user runs it: a subprocess, no traceback, one error with a caret, exit status 1
    cases = {"misspelled_sublayer": "did you mean 'attention'?", "heads_not_dividing": "try heads=8",
             "cross_in_encoder_only": "cross-attention in an encoder stack has no memory to read"}
    for (case, needle), proc in zip(cases.items(), tfspec_cli.many(*[("check", str(CASES / f"{case}.tfs"))
                                                                     for case in cases])):
        assert proc.returncode == 1, case
        assert proc.stdout == ""
        assert "Traceback" not in proc.stderr
        assert proc.stderr.count(": error: ") == 1
        assert "^" in proc.stderr and needle in proc.stderr, case


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


# ---------------------------------------------------------------- build and verify
def test_build_gpt2_small_prints_the_parameter_count_and_runs(tfspec_cli):
    result = tfspec_cli("build", "examples/gpt2_small.tfs", "--seq-len", "64")
    assert result.returncode == 0, result.stderr
    assert "gpt2_small: 124,439,808 parameters" in result.stdout
    assert "(0-11): 12 x DecoderLayer" in result.stdout
    assert "forward pass on random tokens (2, 64): logits (2, 64, 50257)" in result.stdout


def test_build_errors(tfspec_cli):
    too_long = tfspec_cli("build", "examples/gpt2_small.tfs", "--seq-len", "2000", "--set", "layers=1")
    assert too_long.returncode == 2  # an option value the spec cannot serve: refused before building
    assert "the decoder sees 2000 positions, but its learned positions cover 1024" in too_long.stderr
    assert "Traceback" not in too_long.stderr
    bad_device = tfspec_cli("build", "examples/gpt2_small.tfs", "--device", "tpu9")
    assert bad_device.returncode == 2 and "--device tpu9" in bad_device.stderr
    bad_len = tfspec_cli("build", "examples/gpt2_small.tfs", "--seq-len", "0")
    assert bad_len.returncode == 2 and "expected a positive integer" in bad_len.stderr


def test_build_prints_generated_code_and_bfloat16(tfspec_cli):
    result = tfspec_cli("build", "examples/vaswani_base.tfs", "--set", "layers=1", "--dtype", "bfloat16", "--code")
    assert result.returncode == 0, result.stderr
    assert "# decoder layer, DecoderLayer (generated from the graph IR)" in result.stdout
    assert "decoder = self.run_stack('decoder', 'tgt', tgt, tgt_padding_mask, tgt_inputs, memory = encoder" \
        in result.stdout  # the model's own forward, generated too
    assert "self.cross_attn(self_attn_norm, ctx, cache = cache_slot_1)" in result.stdout
    assert "bfloat16 on cpu" in result.stdout


def test_verify_examples_hold(tfspec_cli):
    result = tfspec_cli("verify", "examples/vaswani_base.tfs", "--examples", "10")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "held     causality" in result.stdout and "held     padding invariance" in result.stdout
    assert "0 of 6 properties violated" in result.stdout


def test_verify_reports_a_leak_with_a_minimal_counterexample(tmp_path, tfspec_cli):
    spec = tmp_path / "leaky.tfs"
    spec.write_text("embedding tokens { vocab 20; dim 16; position learned(16) }\n"
                    "decoder x 2 { h = norm(x); x = x + attention(h, heads=2, mask=window(3)) + feedforward(h, d_ff=32) }\n"
                    "head tied(tokens)\n")
    result = tfspec_cli("verify", str(spec), "--examples", "20")
    assert result.returncode == 1
    line = next(l for l in result.stdout.splitlines() if "causality" in l)
    assert "VIOLATED causality: changing the tokens after position 0 ([[0, 0]] -> [[0, " in line
    assert "the decoder sees the future" in line
    assert "held     window locality" in result.stdout


def test_verify_permutation_equivariance_of_a_position_free_encoder(tmp_path, tfspec_cli):
    spec = tmp_path / "set.tfs"
    spec.write_text("embedding tokens { vocab 20; dim 16 }\nencoder x 2 { attention self heads=4 mask=padding; feedforward d_ff=32 }\n")
    result = tfspec_cli("verify", str(spec), "--examples", "10")
    assert result.returncode == 0, result.stdout
    assert "held     permutation equivariance" in result.stdout
