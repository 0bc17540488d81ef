"""What a user meets first: --version, "did you mean" for a mistyped command or option, colour on a terminal
(and none under NO_COLOR), --json on every command that prints results, warnings for what a spec likely did not
mean, tfspec.export, and how a Spec and a compiled model show in a notebook and print."""

from __future__ import annotations

import io
import json
import re
import shutil
import warnings

import pytest
import torch

import tfspec
from tfspec.cli import main
from tfspec.errors import SpecError, SpecWarning, colour_wanted

TINY = """model tiny
let d_model = 32, heads = 2
embedding tokens { vocab 40; dim d_model; position learned(32) }
decoder x 1 { residual pre; attention self heads=heads mask=causal + padding; feedforward d_ff=64; final layernorm }
head tied(tokens)
"""


def _json(capsys) -> object:
    return json.loads(capsys.readouterr().out)


def test_version_and_did_you_mean(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0 and capsys.readouterr().out.strip() == f"tfspec {tfspec.__version__}"
    with pytest.raises(SystemExit) as exit_:
        main(["chekc", "examples/gpt1.tfs"])
    assert exit_.value.code == 2 and "did you mean 'check'?" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["summary", "examples/gpt1.tfs", "--seqlen", "64"])
    err = capsys.readouterr().err
    assert "tfspec summary: error: unrecognized arguments: --seqlen 64; did you mean '--seq-len'" in err
    assert "usage: tfspec summary" in err  # the command's own usage, not the top level's


def test_colour_on_a_terminal_and_never_under_no_color(monkeypatch):
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    assert colour_wanted(Terminal()) and not colour_wanted(io.StringIO())
    monkeypatch.setenv("NO_COLOR", "1")
    assert not colour_wanted(Terminal())
    with pytest.raises(SpecError) as exc:
        tfspec.parse(TINY.replace("attention self", "atention self"))
    plain, coloured = exc.value.render(), exc.value.render(colour=True)
    assert "\x1b[" not in plain and "\x1b[1m\x1b[31merror:\x1b[0m" in coloured
    assert re.sub(r"\x1b\[[0-9;]*m", "", coloured) == plain  # the same text, only painted


def test_a_let_nothing_reads_is_a_located_warning():
    with pytest.warns(SpecWarning) as caught:
        tfspec.parse(TINY.replace("heads = 2", "heads = 2, hedas = 4"))
    (warning,) = [w.message for w in caught if isinstance(w.message, SpecWarning) and w.message.diagnostic.code ==
                  "unused"]
    assert warning.diagnostic.message == "parameter 'hedas' is never used"
    assert (warning.diagnostic.span.line, warning.diagnostic.span.column) == (2, 30)
    with warnings.catch_warnings():
        warnings.simplefilter("error", SpecWarning)
        tfspec.parse(TINY)  # every let read: no warning
    with pytest.warns(SpecWarning) as caught:  # thousands of unused lets: ten shown, then how many more
        tfspec.parse(TINY.replace("heads = 2", "heads = 2, " + ", ".join(f"u{i} = {i}" for i in range(1000))))
    # (a ResourceWarning the garbage collector raises for an earlier test's file may land here too)
    messages = [w.message.diagnostic.message for w in caught if isinstance(w.message, SpecWarning)]
    assert len(messages) == 11 and messages[-1] == "990 more parameters are never used, from 'u10' on"


def test_json_on_every_command_that_prints_results(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tiny.tfs").write_text(TINY)
    (tmp_path / "bad.tfs").write_text(TINY.replace("heads=heads", "heads=3"))

    assert main(["check", "tiny.tfs", "bad.tfs", "--json"]) == 1
    ok, bad = _json(capsys)
    assert ok["ok"] and ok["parameters"] == tfspec.load("tiny.tfs").parameter_count()
    assert not bad["ok"] and bad["diagnostics"][0]["code"] == "shape" and bad["diagnostics"][0]["line"] == 4
    assert main(["fmt", "tiny.tfs", "--check", "--json"]) == 1
    assert _json(capsys) == [{"file": "tiny.tfs", "formatted": False}]
    assert main(["build", "tiny.tfs", "--json"]) == 0
    built = _json(capsys)
    assert built["outputs"]["logits"][-1] == 40 and built["finite"]
    assert main(["verify", "tiny.tfs", "--examples", "2", "--json"]) == 0
    verified = _json(capsys)
    assert verified["violated"] == [] and {p["name"] for p in verified["properties"]} >= {"causality"}
    assert main(["mask", "tiny.tfs", "-o", "mask.png", "--json"]) == 0
    (pattern,) = _json(capsys)["patterns"]
    assert pattern["pairs_seen"] == pattern["queries"] * (pattern["queries"] + 1) // 2  # causal
    assert main(["emit", "tiny.tfs", "-o", "model.py", "--json"]) == 0
    assert _json(capsys)["parameters"] == ok["parameters"]
    if shutil.which("dot"):
        assert main(["render", "tiny.tfs", "-o", "tiny.svg", "--json"]) == 0
        assert _json(capsys)["output"] == "tiny.svg"
    assert main(["import", "--list", "--json"]) == 0
    assert "GPT-2" in {f["name"] for f in _json(capsys)["families"]}

    (tmp_path / "text.txt").write_text("a spec says what a model is. " * 40)
    assert main(["prepare", "text.txt", "-o", "prepared", "--tokenizer", "chars", "--json"]) == 0
    prepared = _json(capsys)
    assert prepared["tokens"] == len("a spec says what a model is. " * 40) and prepared["documents"] == 1
    assert main(["train", "tiny.tfs", "--task", "copy", "--steps", "2", "--batch", "4", "--eval-every", "2",
                 "--eval-size", "4", "--max-len", "6", "--no-progress", "--out", "run", "--json"]) == 0
    trained = _json(capsys)
    assert trained["finished"] and trained["step"] == 2 and "eval_loss" in trained["evaluation"]
    assert main(["generate", "run", "--input", "abc", "--max-new", "3", "--json"]) == 0
    (generated,) = _json(capsys)["results"]
    assert generated["input"] == "abc" and len(generated["output"]) <= 3
    assert main(["export", "run", "--to", "torch", "-o", "exported", "--json"]) == 0
    assert _json(capsys)["files"] == ["model.py", "model.safetensors"]
    assert main(["report", "tiny.tfs", "-o", "tiny.html", "--no-verify", "--json"]) == 0
    assert _json(capsys)["specs"] == ["tiny"]
    assert main(["summary", "tiny.tfs", "--json"]) == 0 and "components" in _json(capsys)


def test_export_from_python_a_model_or_a_run(tmp_path):
    from safetensors.torch import load_file

    model = tfspec.compile(TINY, seed=0).eval()
    written = tfspec.export(model, tmp_path / "torch", to="torch")
    assert "model.py" in written
    weights = load_file(tmp_path / "torch" / "model.safetensors")
    assert all(torch.equal(weights[k], v) for k, v in model.state_dict().items())
    with pytest.raises(tfspec.interop.export.ExportError, match="already exists"):
        tfspec.export(model, tmp_path / "torch", to="torch")
    with pytest.raises(ValueError, match="export writes one of hf, onnx, torch"):
        tfspec.export(model, tmp_path / "other", to="tflite")
    assert not (tmp_path / "other").exists()


def test_a_roberta_shaped_run_with_another_pad_says_why_it_does_not_export(tmp_path, capsys):
    assert main(["train", "examples/roberta_base.tfs", "--set", "layers=1", "--set", "d_model=32", "--set", "heads=2",
                 "--set", "d_ff=32", "--steps", "1", "--batch", "2", "--eval-size", "2", "--no-progress", "--out",
                 str(tmp_path / "run")]) == 0
    capsys.readouterr()
    assert main(["export", str(tmp_path / "run"), "--to", "hf", "-o", str(tmp_path / "hf")]) == 1
    err = capsys.readouterr().err
    assert "the closest family, RoBERTa, differs" in err
    assert "its configuration needs pad_token_id = 1" in err and "the run's vocabulary has pad_token_id = 0" in err


def test_a_spec_and_a_model_in_a_notebook_and_in_print():
    spec = tfspec.parse(TINY)
    assert repr(spec) == str(spec) == f"<Spec tiny: decoder-only, {spec.parameter_count():,} parameters>"
    html = spec._repr_html_()
    assert "tiny: decoder-only, 1 layer, d_model 32, 2 heads" in html and "parameters by block" in html
    if shutil.which("dot"):
        assert "<svg" in html
    model = tfspec.compile(spec)
    assert model._repr_html_() == html
    assert str(model).splitlines()[1].strip() == f"tiny: decoder-only, {spec.parameter_count():,} parameters"
    assert model.training  # compile gives a model in training mode, as a new nn.Module is (the README says so)
