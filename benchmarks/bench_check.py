"""How light checking is: `tfspec check examples/llama2_7b.tfs` against a bare `import torch`, each in a fresh
process, alternating, median of --runs; the ratio's target is ≤ 0.3 (checking never imports torch). Also
timed, without a target: `tfspec import` of a Llama-2-7B config.json (transformers, loaded without torch). Both run as
installed packages do, from compiled bytecode: the warm-up runs write tfspec's ``__pycache__`` (torch's was
written when it was installed), whatever PYTHONDONTWRITEBYTECODE says.

    python benchmarks/bench_check.py [--runs 7] [--spec examples/llama2_7b.tfs]
"""

from __future__ import annotations

import argparse
import os
import statistics
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


LLAMA2_7B = dict(model_type="llama", vocab_size=32000, hidden_size=4096, intermediate_size=11008,
                 num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=32, max_position_embeddings=4096,
                 rms_norm_eps=1e-5, torch_dtype="float16")
ENVIRONMENT = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def timed(command: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, check=True, cwd=ROOT, capture_output=True, env=ENVIRONMENT)
    return time.perf_counter() - start


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--spec", default="examples/llama2_7b.tfs")
    args = parser.parse_args(argv)
    directory = tempfile.TemporaryDirectory()
    config = Path(directory.name) / "config.json"
    config.write_text(json.dumps(LLAMA2_7B))
    commands = {"check": [sys.executable, "-m", "tfspec", "check", args.spec],
                "torch": [sys.executable, "-c", "import torch"],
                "import": [sys.executable, "-m", "tfspec", "import", str(config),
                           "-o", str(config.with_suffix(".tfs"))]}
    for command in commands.values():
        timed(command)  # the files in the page cache for all, and tfspec's bytecode written
    times = {name: [] for name in commands}
    for _ in range(args.runs):
        for name, command in commands.items():
            times[name].append(timed(command))
    medians = {k: statistics.median(v) for k, v in times.items()}
    ratio = medians["check"] / medians["torch"]
    print(f"tfspec check {args.spec}: {medians['check']:.3f} s; python -c 'import torch': {medians['torch']:.3f} s "
          f"(medians of {args.runs}, fresh processes, alternating)")
    print(f"tfspec import of a Llama-2-7B config.json: {medians['import']:.3f} s "
          f"= {medians['import'] / medians['torch']:.2f} x import torch (no target: transformers' own import)")
    print(f"ratio check / import torch = {ratio:.2f} (target <= 0.30: {'met' if ratio <= 0.3 else 'NOT met'})")
    return 0 if ratio <= 0.3 else 1


if __name__ == "__main__":
    sys.exit(main())
