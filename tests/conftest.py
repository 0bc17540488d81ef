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


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """A CUDA kernel's fault (a misaligned address, an illegal access) poisons the process's CUDA context: every
    later CUDA call fails with it, wherever it was raised. The tier stops there, naming the test that raised it,
    rather than reporting each later test as failed for it (an H200 once showed 56 such failures); with
    ``TFSPEC_REMAINING_TESTS`` set, the node ids of the tests it did not run go to that file, a line each."""
    report = yield
    if call.excinfo is not None and type(call.excinfo.value).__name__ == "AcceleratorError" \
            and not item.session.shouldstop:
        remaining = os.environ.get("TFSPEC_REMAINING_TESTS")
        if remaining:  # the tests not yet run, for a fresh process to go on with (benchmarks/gpu_check.sh)
            items = item.session.items
            Path(remaining).write_text("".join(f"{later.nodeid}\n" for later in items[items.index(item) + 1:]))
        item.session.shouldstop = (f"{item.nodeid} raised a CUDA error ({str(call.excinfo.value).splitlines()[0]}), "
                                   "which leaves this process's CUDA context unusable: later tests would fail for it "
                                   "(it may have been raised by an earlier kernel, reported at this test's sync)")
    return report


@pytest.fixture
def tfspec_cli():
    """Run the CLI as a user does, in the repository root: ``tfspec_cli(*args)`` calls ``tfspec.cli.main`` in this
    process with its standard output and error captured (starting Python and importing torch for each call was
    most of the suite's time), and returns a ``CompletedProcess``; an exception the command does not turn into a
    message and an exit status propagates, failing the test as a traceback would. ``env=`` (a whole environment)
    or ``process=True`` runs a real subprocess instead, for what only a process shows (signals, the environment,
    bytes that are not UTF-8 in argv). ``tfspec_cli.many(args, ...)``: several invocations, their results in
    order."""
    def run(*args: str, env: dict | None = None, process: bool = False) -> subprocess.CompletedProcess:
        if env is not None or process:
            return subprocess.run([sys.executable, "-m", "tfspec.cli", *args], capture_output=True, text=True,
                                  cwd=ROOT, env=env)
        import contextlib
        import io
        import warnings

        from tfspec.cli import main

        out, err = io.StringIO(), io.StringIO()
        with contextlib.chdir(ROOT), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), \
                warnings.catch_warnings():
            try:
                code = main([str(a) for a in args])
            except SystemExit as exit_:  # argparse's usage errors, --help, --version
                code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
        return subprocess.CompletedProcess(list(args), code, out.getvalue(), err.getvalue())

    def many(*invocations) -> list[subprocess.CompletedProcess]:
        return [run(*args) for args in invocations]

    run.many = many
    return run


@pytest.fixture
def no_recompiles():
    """Every compiled step must reuse its first graph: a recompile is an error, and graphs are counted."""
    import torch._dynamo
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    with torch._dynamo.config.patch(error_on_recompile=True):
        yield torch._dynamo.utils.counters
    torch._dynamo.reset()
