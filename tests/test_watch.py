"""`--log tensorboard`: the event files TensorBoard reads hold what metrics.jsonl holds, the spec and its diagram;
a resumed run continues them without the steps the interrupted one logged after its checkpoint."""

from __future__ import annotations

import math
import shutil

import pytest

pytest.importorskip("tensorboard")

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402

from tfspec.run.train import TrainConfig, read_metrics, resume, train  # noqa: E402

SPEC = "examples/gpt2_small.tfs"
OVERRIDES = {"layers": 1, "d_model": 16, "heads": 2, "context": 32}


def _config(**changes) -> TrainConfig:
    settings = dict(task="reverse", steps=8, save_every=4, eval_every=4, eval_size=4, batch=4, max_len=6, min_len=2,
                    log=("tensorboard",))
    return TrainConfig(**{**settings, **changes})


def _events(run_dir) -> EventAccumulator:
    events = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"scalars": 0, "images": 0, "tensors": 0})
    events.Reload()
    return events


def test_the_event_files_hold_the_metrics_the_spec_and_its_diagram(tmp_path):
    logged = []
    train(SPEC, _config(), tmp_path / "run", overrides=OVERRIDES, progress=False, log=logged.append)
    steps, evaluations = read_metrics(tmp_path / "run" / "metrics.jsonl")
    events = _events(tmp_path / "run")
    tags = events.Tags()
    for name in ("loss", "lr", "grad_norm", "tokens_per_s"):
        scalars = events.Scalars(f"train/{name}")
        assert [s.step for s in scalars] == [r["step"] for r in steps] == list(range(1, 9))
        assert [s.value for s in scalars] == pytest.approx([r[name] for r in steps], rel=1e-6)  # float32 in the file
    assert all(math.isfinite(r["grad_norm"]) and r["grad_norm"] > 0 for r in steps)
    evaluated = events.Scalars("eval/eval_loss")
    assert [s.step for s in evaluated] == [4, 8]
    assert [s.value for s in evaluated] == pytest.approx([e["eval_loss"] for e in evaluations], rel=1e-6)
    (text,) = events.Tensors("spec/text_summary")
    assert "decoder x layers" in text.tensor_proto.string_val[0].decode()
    if shutil.which("dot"):
        (picture,) = events.Images("diagram")
        assert picture.height > 200 and picture.width > 100
    else:
        assert "diagram" not in tags["images"] and any("the diagram is left out" in line for line in logged)


def test_a_resumed_run_continues_the_events_without_the_lost_steps(tmp_path):
    run = tmp_path / "run"
    train(SPEC, _config(save_every=3), run, overrides=OVERRIDES, progress=False, log=lambda _: None, stop_after=5)
    # as if killed after step 5, before its checkpoint: the run goes on from step 3
    shutil.rmtree(run / "checkpoints" / "step-0000005")
    (run / "latest").write_text("step-0000003\n")
    before = [s.value for s in _events(run).Scalars("train/loss")]
    assert len(before) == 5
    resume(run, progress=False, log=lambda _: None)
    losses = _events(run).Scalars("train/loss")
    assert [s.step for s in losses] == list(range(1, 9))  # each step once: steps 4 and 5 of the lost part dropped
    steps, _ = read_metrics(run / "metrics.jsonl")
    assert [s.value for s in losses] == pytest.approx([r["loss"] for r in steps], rel=1e-6)
    assert [s.value for s in losses][:5] == pytest.approx(before, rel=1e-6)  # exact resume: the same losses


def test_the_command_line_option(tmp_path, capsys, monkeypatch):
    from tfspec.cli import main

    out = tmp_path / "cli"
    assert main(["train", SPEC, "--steps", "2", "--batch", "4", "--eval-every", "2", "--eval-size", "4", "--max-len", "6",
                 "--no-progress", "--log", "tensorboard", "--out", str(out), *sum((["--set", f"{k}={v}"]
                                                                                   for k, v in OVERRIDES.items()), [])]) == 0
    assert [s.step for s in _events(out).Scalars("train/loss")] == [1, 2]
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "tensorboard" else real(name, *a))
    capsys.readouterr()
    assert main(["train", SPEC, "--steps", "2", "--log", "tensorboard", "--out", str(tmp_path / "no")]) == 2
    assert "pip install 'tfspec[tensorboard]'" in capsys.readouterr().err
    assert not (tmp_path / "no").exists()
