"""Training on two processes (torchrun, gloo, CPU) computes what one process computes on their global batch:
DDP and FSDP2 losses and weights equal a single process's, a two-process checkpoint resumes in one process
(and a one-process checkpoint in two), and a worker that dies stops the run with its rank, leaving the last
checkpoint loadable."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import tfspec.run.checkpoint as ckpt
from tfspec.run.train import TrainConfig, read_metrics, resume, train
from numerics import FLOAT32, assert_close

ROOT = Path(__file__).resolve().parents[1]
SMALL = {"layers": 1, "d_model": 32, "heads": 2, "d_ff": 32}
SETS = [a for k, v in SMALL.items() for a in ("--set", f"{k}={v}")]
# the reverse task: padded pairs of varying length, so workers' rows hold different numbers of labelled tokens;
# two micro-batches a step; no dropout (reverse.tfs has none); a warm-up that does not depend on --steps
COMMON = ["--batch", "8", "--accumulate", "2", "--warmup", "3", "--lr", "0.01", "--eval-every", "10", "--eval-size", "16", "--save-every", "10",
          "--no-progress"]
BATCH, WORKERS = 8, 2  # each worker 4 rows of every global batch of 8
TOLERANCE = 1e-5  # relative, per step


def tfspec(*args, timeout=240) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "tfspec", *map(str, args)], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, env=env)


def losses(run_dir: Path) -> list[float]:
    return [r["loss"] for r in read_metrics(run_dir / "metrics.jsonl")[0]]


def weights(run_dir: Path) -> dict:
    return load_file(ckpt.load(run_dir).path / "model.safetensors")


def assert_same_losses(got: list[float], expected: list[float]) -> None:
    assert len(got) == len(expected)
    worst = max(abs(g - e) / abs(e) for g, e in zip(got, expected))
    assert worst <= TOLERANCE, f"largest relative difference {worst:.2e}"


def assert_same_weights(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert_close(a[k], b[k], FLOAT32, msg=k)


@pytest.fixture(scope="module")
def spec(tmp_path_factory) -> Path:
    """reverse.tfs without biases in its linear layers: an attention key's bias gets a gradient that is zero up
    to rounding (a shift shared by every key changes no softmax), and Adam scales that rounding noise up to
    full-size steps, so those biases would differ between any two summation orders, one process or two."""
    path = tmp_path_factory.mktemp("spec") / "reverse.tfs"
    path.write_text((ROOT / "examples" / "reverse.tfs").read_text().replace("defaults {", "defaults {\n  bias false"))
    return path


@pytest.fixture(scope="module")
def reference(spec, tmp_path_factory) -> Path:
    """One process, batch 8, 20 steps: what two workers of 4 rows each must reproduce."""
    run_dir = tmp_path_factory.mktemp("one") / "run"
    train(spec, config(20), run_dir, overrides=SMALL, progress=False, log=lambda line: None)
    return run_dir


def config(steps: int) -> TrainConfig:
    return TrainConfig(task="reverse", steps=steps, batch=BATCH, accumulate=2, warmup=3, lr=0.01, eval_every=10,
                       eval_size=16, save_every=10)


def test_ddp_on_two_processes_equals_one_process_on_the_global_batch(spec, reference, tmp_path):
    result = tfspec("train", spec, *SETS, *COMMON, "--steps", 20, "--nproc", WORKERS,
                    "--out", tmp_path / "ddp")
    assert result.returncode == 0, result.stderr
    assert "2 workers (ddp, gloo), 4 sequences each of every global batch of 8" in result.stdout
    assert result.stdout.count("finished 20 steps") == 1  # rank 0 speaks for the run
    assert_same_losses(losses(tmp_path / "ddp"), losses(reference))
    assert_same_weights(weights(tmp_path / "ddp"), weights(reference))
    evaluations = read_metrics(tmp_path / "ddp" / "metrics.jsonl")[1]
    expected = read_metrics(reference / "metrics.jsonl")[1]
    assert_same_losses([e["eval_loss"] for e in evaluations], [e["eval_loss"] for e in expected])
    meta = json.loads((ckpt.load(tmp_path / "ddp").path / "checkpoint.json").read_text())
    assert (meta["workers"], meta["strategy"], meta["config"]["batch"]) == (2, "ddp", BATCH)


def test_fsdp_on_two_processes_resumes_in_one_and_continues_as_one_would_have(spec, reference, tmp_path):
    """The first ten steps sharded by FSDP2, the next ten in one process from its checkpoint: the losses and the
    final weights of the uninterrupted single-process run."""
    result = tfspec("train", spec, *SETS, *COMMON, "--steps", 10, "--nproc", WORKERS, "--strategy", "fsdp",
                    "--out", tmp_path / "fsdp")
    assert result.returncode == 0, result.stderr
    assert "2 workers (fsdp, gloo)" in result.stdout
    assert_same_losses(losses(tmp_path / "fsdp"), losses(reference)[:10])
    state = torch.load(ckpt.load(tmp_path / "fsdp").path / "state.pt", weights_only=True)
    assert set(state["optimizer"]["state"]) == set(range(len(state["optimizer"]["state"])))  # one process's keys
    resume(tmp_path / "fsdp", steps=20, progress=False, log=lambda line: None)
    assert_same_losses(losses(tmp_path / "fsdp"), losses(reference))
    assert_same_weights(weights(tmp_path / "fsdp"), weights(reference))


def test_a_one_process_checkpoint_resumes_on_two_fsdp_workers(spec, reference, tmp_path):
    train(spec, config(10), tmp_path / "run", overrides=SMALL, progress=False, log=lambda line: None)
    result = tfspec("train", "--resume", tmp_path / "run", "--steps", 20, "--nproc", WORKERS, "--strategy", "fsdp")
    assert result.returncode == 0, result.stderr
    assert_same_losses(losses(tmp_path / "run"), losses(reference))
    assert_same_weights(weights(tmp_path / "run"), weights(reference))


def test_fsdp_trains_in_float16_with_the_gradient_scaler_as_one_process_does(spec, tmp_path):
    """FSDP2 keeps torch.amp.GradScaler: its overflow check is reduced over the shards, so the workers skip
    and scale together, and the losses are one process's (float16 autocast on the CPU; to rounding)."""
    one = train(spec, config(12).model_copy(update={"dtype": "float16"}), tmp_path / "one", overrides=SMALL,
                progress=False, log=lambda line: None)
    result = tfspec("train", spec, *SETS, *COMMON, "--steps", 12, "--dtype", "float16", "--nproc", WORKERS,
                    "--strategy", "fsdp", "--out", tmp_path / "two")
    assert result.returncode == 0, result.stderr
    assert losses(tmp_path / "two") == pytest.approx(one.losses, rel=1e-3)
    scaler = torch.load(ckpt.load(tmp_path / "two").path / "state.pt", weights_only=True)["scaler"]
    assert scaler["scale"] == torch.load(ckpt.load(tmp_path / "one").path / "state.pt", weights_only=True)["scaler"]["scale"]


def _worker(launcher: int, rank: int) -> int | None:
    """The pid of the worker of ``rank`` that ``launcher`` started (its environment says RANK)."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                environment = (entry / "environ").read_bytes().split(b"\0")
            except (OSError, IndexError, ValueError):
                continue
            if parent == launcher and f"RANK={rank}".encode() in environment:
                return int(entry.name)
    return None


def _long_run(run_dir: Path) -> subprocess.Popen:
    """A two-worker run that would go on for a long time, once it has saved a checkpoint."""
    launcher = subprocess.Popen([sys.executable, "-m", "tfspec", "train", "examples/reverse.tfs", *SETS, "--steps",
                                 "100000", "--batch", str(BATCH), "--save-every", "5", "--eval-every", "1000",
                                 "--no-progress", "--nproc", str(WORKERS), "--out", str(run_dir)],
                                cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env={**os.environ, "OMP_NUM_THREADS": "1"})
    deadline = time.time() + 120
    while time.time() < deadline and not (run_dir / "latest").exists() and launcher.poll() is None:
        time.sleep(0.2)
    if not (run_dir / "latest").exists():
        launcher.kill()
        pytest.fail(f"no checkpoint within two minutes: {launcher.communicate()[1]}")
    return launcher


def test_a_worker_that_dies_stops_the_run_with_its_rank_and_the_last_checkpoint_loads(tmp_path):
    run_dir = tmp_path / "run"
    launcher = _long_run(run_dir)
    try:
        victim = _worker(launcher.pid, 1)
        assert victim is not None
        os.kill(victim, signal.SIGKILL)
        out, err = launcher.communicate(timeout=120)
    finally:
        if launcher.poll() is None:
            launcher.kill()
    assert launcher.returncode != 0
    assert "tfspec train: error: worker rank 1 of 2 was killed by SIGKILL; the run stopped" in err, err
    assert "Traceback" not in err
    saved = ckpt.load(run_dir)
    assert saved.step % 5 == 0 and saved.step > 0
    continued = resume(run_dir, steps=saved.step + 2, progress=False, log=lambda line: None)
    assert continued.step == saved.step + 2 and all(math.isfinite(loss) for loss in continued.losses)


def test_a_launcher_told_to_stop_stops_its_workers_in_one_line(tmp_path):
    launcher = _long_run(tmp_path / "run")
    try:
        launcher.send_signal(signal.SIGTERM)
        _, err = launcher.communicate(timeout=120)
    finally:
        if launcher.poll() is None:
            launcher.kill()
    assert launcher.returncode == 128 + signal.SIGTERM
    assert err.strip().splitlines()[-1] == ("tfspec train: stopped by SIGTERM; the workers were stopped with it, "
                                            "and the run resumes from its last checkpoint"), err
    assert "Traceback" not in err
    assert ckpt.load(tmp_path / "run").step % 5 == 0


def test_distributed_options_are_checked_before_any_worker_starts(tmp_path, tfspec_cli):
    for args, message in [(["--strategy", "fsdp"], "give --nproc N as well"),
                          (["--nproc", "2", "--batch", "7"], "make it a multiple of 2"),
                          (["--nproc", str((os.cpu_count() or 1) + 1)], "CPU cores, and each worker takes one")]:
        result = tfspec_cli("train", "examples/reverse.tfs", *SETS, "--steps", 1, *args, "--out", tmp_path / "x")
        assert result.returncode == 2 and message in result.stderr, result.stderr
        assert not (tmp_path / "x").exists()


def test_the_failure_named_is_the_cause_not_its_consequences():
    """A worker killed (SIGKILL) is the cause; a peer that aborted tearing down (SIGABRT) after finding it gone,
    and workers torchrun then stopped (SIGTERM), are consequences -- even when seen at the same poll."""
    from types import SimpleNamespace

    from tfspec.run.distributed import root_failure
    failures = {0: SimpleNamespace(exitcode=-6, timestamp=100), 1: SimpleNamespace(exitcode=-9, timestamp=100),
                2: SimpleNamespace(exitcode=-15, timestamp=99)}
    assert root_failure(failures)[0] == 1
    assert root_failure({0: SimpleNamespace(exitcode=-6, timestamp=100)})[0] == 0  # alone, it is the cause
    assert root_failure({3: SimpleNamespace(exitcode=2, timestamp=101), 1: SimpleNamespace(exitcode=2,
                                                                                           timestamp=100)})[0] == 1
