"""Tokens per second of one process against several on the same global batch (DDP and FSDP2, torchrun).

    python benchmarks/bench_distributed.py [--nproc 2] [--steps 30] [--batch 16] [--seq-len 128] [--device cpu]

Trains the same small GPT-2 (``--set`` below) on this repository's README as a byte-level language model, in
one process and then in ``--nproc`` workers of each strategy, with the same global batch; each run's speed is
the median of its steps' tokens/s after the first five (``metrics.jsonl``, measured by rank 0 for the whole
global batch). The runs alternate ``--repeats`` times and the best median of each is kept. On a 2-core CPU
expect little gain (two workers share two cores and add the all-reduce); on a machine with several GPUs
(``--device cuda``), the scaling.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODEL = ["--set", "layers=4", "--set", "d_model=256", "--set", "heads=4", "--set", "context=256", "--set", "vocab=261"]


def speed(run_dir: Path) -> float:
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    rates = [r["tokens_per_s"] for r in records if "tokens_per_s" in r][5:]
    return statistics.median(rates)


def run(args, nproc: int, strategy: str | None, out: Path) -> float:
    command = [sys.executable, "-m", "tfspec", "train", "examples/gpt2_small.tfs", *MODEL, "--data", "README.md",
               "--seq-len", str(args.seq_len), "--batch", str(args.batch), "--steps", str(args.steps),
               "--eval-every", str(10 ** 6), "--eval-size", str(args.batch), "--save-every", str(10 ** 6),
               "--device", args.device, "--no-progress", "--out", str(out)]
    if nproc > 1:
        command += ["--nproc", str(nproc), "--strategy", strategy]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"{' '.join(command[2:])} failed:\n{result.stderr}")
    return speed(out)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--batch", type=int, default=16, help="the global batch (default 16)")
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args(argv)
    configurations = [(1, None), (args.nproc, "ddp"), (args.nproc, "fsdp")]
    best = {c: 0.0 for c in configurations}
    with tempfile.TemporaryDirectory() as root:
        for repeat in range(args.repeats):
            for nproc, strategy in configurations:
                out = Path(root) / f"{nproc}-{strategy}-{repeat}"
                best[(nproc, strategy)] = max(best[(nproc, strategy)], run(args, nproc, strategy, out))
    one = best[(1, None)]
    print(f"global batch {args.batch} × {args.seq_len} tokens, {args.steps} steps, {args.device}; tokens/s (best "
          f"median of {args.repeats})")
    for (nproc, strategy), rate in best.items():
        label = "1 process" if nproc == 1 else f"{nproc} processes, {strategy}"
        print(f"  {label:<22} {rate:>12,.0f}   {rate / one:.2f}× one process")
    return 0


if __name__ == "__main__":
    sys.exit(main())
