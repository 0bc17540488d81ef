"""The GPU benchmark scripts stay ready: each runs end to end on the CPU at its tiny size (a check of the
scripts, not of any GPU), as ``make test-gpu``'s machine would run them at full size."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("script, arguments, expected", [
    ("bench_gpu_train.py", ["--rounds", "1", "--steps", "1", "--batch", "2", "--seq-len", "32"], "tfspec"),
    ("bench_gpu_generate.py", ["--new", "4", "--batches", "1", "--repeats", "1"], "tfspec / HF"),
])
def test_a_gpu_benchmark_runs_on_the_cpu_at_its_tiny_size(script, arguments, expected):
    done = subprocess.run([sys.executable, f"benchmarks/{script}", "--size", "tiny", "--device", "cpu",
                           "--no-compile", "--dtype", "float32", *arguments], capture_output=True, text=True,
                          cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert expected in done.stdout
