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
