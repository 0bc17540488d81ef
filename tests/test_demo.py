"""`tfspec demo` end to end at a tiny step budget (the real budget is measured in the README)."""

from __future__ import annotations

import pytest

import tfspec.run.checkpoint as ckpt
from tfspec.cli.demo import MARKER, run_demo
from tfspec.errors import RunError


def test_demo_writes_diagram_curve_and_checkpoint_and_reports_accuracy(tmp_path, capsys):
    out = tmp_path / "demo"
    status = run_demo(out, steps=20, progress=False)
    text = capsys.readouterr().out
    assert status == 1  # 20 steps cannot reverse sequences: the demo says so through its exit status
    assert "reverse: encoder-decoder, 235,520 parameters" in text
    assert "vaswani_base" in text and "63,082,496" in text  # the summary of the paper's base model
    assert "exact match" in text and "(reference " in text  # decoded examples next to references
    assert ckpt.load(out / "reverse-run").step == 20
    assert (out / "reverse-run" / "loss.png").exists()
    assert any(out.glob("vaswani_base.*"))
    assert f"output directory: {out.resolve()}" in text
    again = run_demo(out, steps=5, progress=False)  # a second demo replaces its own earlier output
    assert again == 1 and ckpt.load(out / "reverse-run").step == 5


def test_demo_never_deletes_a_directory_it_did_not_write(tmp_path):
    precious = tmp_path / "mine"
    precious.mkdir()
    (precious / "notes.txt").write_text("keep me")
    with pytest.raises(RunError, match="not written by tfspec demo"):
        run_demo(precious, steps=1, progress=False)
    assert (precious / "notes.txt").read_text() == "keep me"
    assert not (precious / MARKER).exists()
