"""A run's metrics.jsonl, read back (a line tfspec did not write is passed over), and its loss curve."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Iterator

from ..errors import RunWarning, shown
from ..files import loads_json, open_regular, save_figure, write_atomically


def truncate_metrics(path: Path, step: int) -> None:
    """Drop records past ``step``: after a resume they belong to a future that was not saved."""
    if not path.exists():
        return
    kept = [json.dumps(record) for record in _records(path) if record["step"] <= step]
    write_atomically(path, "".join(line + "\n" for line in kept).encode())


def read_metrics(path: Path) -> tuple[list[dict], list[dict]]:
    """(training records, evaluation records) of a metrics.jsonl."""
    records = list(_records(path))
    return [r for r in records if "loss" in r], [r for r in records if "eval_loss" in r]


def _records(path: Path) -> Iterator[dict]:
    """metrics.jsonl's records: objects of a whole ``step`` >= 0 and numbers. A line that is not one (cut short by
    a kill, edited by hand: ``"loss": "oops"``) is passed over with a ``RunWarning`` naming the first such line, so
    that one bad line never stops a run from resuming, plotting or being reported."""
    bad: list[int] = []
    with open_regular(path) as handle:  # a FIFO in its place is refused, not waited on
        for number, line in enumerate(handle, 1):
            try:
                record = loads_json(line)
            except ValueError:
                record = None
            if _is_record(record):
                yield record
            elif line.strip():
                bad.append(number)
    if bad:
        warnings.warn(RunWarning(f"{shown(path)}: {len(bad)} line{'s' if len(bad) > 1 else ''} that tfspec did not "
                                 f"write (line {bad[0]}{' first' if len(bad) > 1 else ''}) passed over"))


def _is_record(record) -> bool:
    numbers = all(type(v) in (int, float) for k, v in record.items() if k != "step") if isinstance(record, dict) \
        else False
    return numbers and type(record.get("step")) is int and record["step"] >= 0


def plot_losses(metrics_path: Path, png: Path, label_smoothing: float = 0.0) -> None:
    """Training loss per step (and its running mean) with held-out loss, log scale, written atomically."""

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps, evals = read_metrics(metrics_path)
    if not steps:
        return
    x = [r["step"] for r in steps]
    y = [r["loss"] for r in steps]
    span = max(len(y) // 50, 1)
    smooth = [sum(y[max(0, i - span + 1): i + 1]) / len(y[max(0, i - span + 1): i + 1]) for i in range(len(y))]
    fig, ax = plt.subplots(figsize=(7, 4), dpi=110)
    smoothing = f" (label smoothing {label_smoothing:g})" if label_smoothing else ""
    ax.plot(x, y, color="#9db4d0", linewidth=0.8, label="training loss" + smoothing)
    ax.plot(x, smooth, color="#1f4e79", linewidth=1.6, label=f"training loss, mean of {span}")
    if evals:
        ax.plot([r["step"] for r in evals], [r["eval_loss"] for r in evals], "o-", color="#C0392B",
                label="held-out loss (no smoothing)")
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats per token)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    try:
        save_figure(fig, png)
    finally:
        plt.close(fig)
