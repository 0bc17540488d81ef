import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).parent))

# Bounded example counts keep the suite within CI's budget on 2 cores.
settings.register_profile("ci", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("thorough", max_examples=1000, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: the GPU tier (make test-gpu); skipped where CUDA is not available")


def pytest_collection_modifyitems(config, items):
    """The GPU tier runs where CUDA is (``TFSPEC_GPU_DEVICE=cpu``: its logic, on the CPU); elsewhere it is
    skipped, so ``make test`` stays green on CPU machines."""
    if os.environ.get("TFSPEC_GPU_DEVICE") == "cpu":
        return
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="the GPU tier needs CUDA (make test-gpu on a GPU machine)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def tfspec_cli():
    """Run the CLI as a user does: a subprocess in the repository root (``env`` replaces the environment).
    ``tfspec_cli.many(args, ...)`` runs independent invocations two at a time (most of each is starting Python
    and importing torch, so the second core halves a test of many), their results in order."""
    def run(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "tfspec.cli", *args], capture_output=True, text=True,
                              cwd=Path(__file__).parent.parent, env=env)

    def many(*invocations) -> list[subprocess.CompletedProcess]:
        from concurrent.futures import ThreadPoolExecutor
        with ThreadPoolExecutor(max_workers=2) as pool:
            return list(pool.map(lambda args: run(*args), invocations))

    run.many = many
    return run
