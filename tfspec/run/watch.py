"""Where a run is watched besides ``metrics.jsonl``: ``--log tensorboard`` writes TensorBoard event files into
the run directory's ``tensorboard/`` (``tensorboard --logdir runs/``).

What it writes: at each step ``train/loss``, ``train/lr``, ``train/grad_norm``, ``train/tokens_per_s`` (and the
sublayers' own losses, ``train/moe_balance``); at each evaluation ``eval/…`` (loss, perplexity, accuracy);
once, the spec's text and its diagram (an image, where Graphviz's ``dot`` is installed). A resumed run drops
what the interrupted one wrote after its checkpoint, as ``metrics.jsonl`` does.

Needs the ``tensorboard`` package: ``pip install 'tfspec[tensorboard]'``.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

LOGGERS = ("tensorboard",)


def missing(loggers) -> str | None:
    """Why one of ``loggers`` cannot be used here, or None."""
    if "tensorboard" in loggers and importlib.util.find_spec("tensorboard") is None:
        return "--log tensorboard needs the tensorboard package: pip install 'tfspec[tensorboard]'"
    return None


class TensorBoard:
    """A ``SummaryWriter`` on ``run_dir/tensorboard`` that continues from ``step`` (dropping later events)."""

    def __init__(self, run_dir: Path, step: int, spec, spec_text: str, log):
        from torch.utils.tensorboard import SummaryWriter

        # events from step + 1 on are the lost part of an interrupted run: TensorBoard drops them
        self.writer = SummaryWriter(str(Path(run_dir) / "tensorboard"), purge_step=step + 1 if step else None)
        if step == 0:
            self.introduce(spec, spec_text, log)

    def introduce(self, spec, spec_text: str, log) -> None:
        self.writer.add_text("spec", "```\n" + spec_text.rstrip() + "\n```", 0)
        import io

        import graphviz
        import matplotlib.image

        from ..inspect.diagram import INSTALL_HINT, to_graphviz

        try:
            png = to_graphviz(spec).pipe(format="png")
        except graphviz.ExecutableNotFound:  # the run goes on without the picture
            log(f"tensorboard: the diagram is left out: {INSTALL_HINT}")
            return
        picture = matplotlib.image.imread(io.BytesIO(png), format="png")[..., :3]
        self.writer.add_image("diagram", picture, 0, dataformats="HWC")

    def record(self, step: int, values: dict, prefix: str) -> None:
        for name, value in values.items():
            if name != "step" and isinstance(value, (int, float)):
                self.writer.add_scalar(f"{prefix}/{name}", value, step)

    def close(self) -> None:
        self.writer.close()
