"""The GPU benchmark scripts stay ready: the prepared call (``benchmarks/gpu_check.sh``) runs each end to end on the
CPU at its tiny size (a check of the scripts, not of any GPU), as the GPU machine runs them at full size."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_prepared_gpu_call_dry_runs_on_the_cpu(tmp_path):
    """benchmarks/gpu_check.sh, the one call a lent GPU machine runs: every step, at tiny sizes on the CPU, each with
    its status and output in the folder that comes back."""
    done = subprocess.run(["bash", "benchmarks/gpu_check.sh"], capture_output=True, text=True, cwd=ROOT, timeout=600,
                          env={**os.environ, "GPU_CHECK_DRY_RUN": "1", "OUT": str(tmp_path),
                               "GPU_PYTHON": sys.executable})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    statuses = dict(line.split()[:2] for line in (tmp_path / "status.txt").read_text().splitlines())
    assert {k: v for k, v in statuses.items() if k != "install"} == {"tier": "0", "train": "0", "generate": "0",
                                                                      "sdpa": "0"}
    assert "torch" in (tmp_path / "versions.txt").read_text() and "passed" in (tmp_path / "tier.txt").read_text()
    assert "tfspec" in (tmp_path / "train.txt").read_text() and "tfspec / HF" in (tmp_path / "generate.txt").read_text()
    assert "padding, bidirectional (BERT) (512)" in (tmp_path / "sdpa.txt").read_text()  # its positions bound it


def test_the_second_gpu_call_benchmarks_the_hybrids(tmp_path):
    """``gpu_check.sh hybrid``: bench_hybrid.py against Hugging Face's implementation, here on the CPU at tiny lengths
    (its logits checked equal to Hugging Face's, its rows and targets printed)."""
    done = subprocess.run(["bash", "benchmarks/gpu_check.sh", "hybrid"], capture_output=True, text=True, cwd=ROOT,
                          timeout=600, env={**os.environ, "GPU_CHECK_DRY_RUN": "1", "OUT": str(tmp_path),
                                            "GPU_PYTHON": sys.executable})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    out = (tmp_path / "hybrid.txt").read_text()
    assert "granite" in out and "targets:" in out


def test_the_gpu_tier_stops_at_a_cuda_fault_and_names_the_test_that_raised_it(tmp_path):
    """A CUDA fault poisons the process's context, so the tier stops there (``conftest.py``) instead of reporting
    every later test as failed for it."""
    (tmp_path / "conftest.py").write_text((ROOT / "tests" / "conftest.py").read_text())
    (tmp_path / "test_fault.py").write_text(
        "class AcceleratorError(RuntimeError):  # torch.AcceleratorError, as CUDA's faults raise it\n"
        "    pass\n\n\n"
        "def test_faulting():\n"
        "    raise AcceleratorError('CUDA error: misaligned address')\n\n\n"
        "def test_after():\n"
        "    pass\n\n\n"
        "def test_failing_otherwise():\n"
        "    assert False\n")
    remaining = tmp_path / "remaining.txt"
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_fault.py"],
                          capture_output=True, text=True, cwd=tmp_path, timeout=120,
                          env={**os.environ, "TFSPEC_GPU_DEVICE": "cpu", "TFSPEC_REMAINING_TESTS": str(remaining)})
    assert done.returncode == 2 and "1 failed" in done.stdout and "passed" not in done.stdout, done.stdout  # interrupted
    assert "test_fault.py::test_faulting raised a CUDA error (CUDA error: misaligned address)" in done.stdout
    # what it did not run, for a fresh process (gpu_check.sh goes on with them)
    assert remaining.read_text().splitlines() == ["test_fault.py::test_after", "test_fault.py::test_failing_otherwise"]
