"""Peak memory and time of a training step: tfspec against a nanoGPT-style model and HF GPT-2, same weights (CPU).

    python benchmarks/bench_train_memory.py [--repeats 3] [--batch 4] [--seq 512]

The three GPT-2-shaped models of ``bench_gpu_train.py`` (4 layers, d_model 256, 4 heads, context 512,
vocab 8192; dropout off, as nanoGPT trains by default), built from one set of weights and checked equal first,
each take training steps: forward, cross-entropy, backward, and AdamW (``fused=True``, torch's fastest on the
CPU, for all three), in float32 and under bfloat16 autocast. As in ``bench_long.py``, each model runs in
processes of its own: one times ``repeats`` steps after a warm-up and goes on to 8 steps in all, reading the
process's peak resident memory over them with the default allocator above what it held before (*held*: what a
user's process holds); the other reads the peak resident memory of one step above the resident memory before it
(the weights, gradients and AdamW's state excluded) from the kernel's VmHWM, with glibc returning freed blocks at
once (the live figure). Targets: tfspec's peak and held memory at most the nanoGPT-style model's (float32), and its
bfloat16 step at most Hugging Face's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

SIZE = {"layers": 4, "d_model": 256, "heads": 4, "context": 512, "vocab": 8192}
NAMES = ("tfspec", "nanoGPT-style", "HF GPT2LMHeadModel")
HELD_STEPS = 8  # steps (the warm-up among them) over which the timed process's peak resident memory is read


def status_mb(field: str) -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"/proc/self/status has no {field}")


def worker(name: str, dtype: str, batch: int, seq: int, repeats: int) -> dict:
    """One model's training steps in this process: the median step seconds, or (``repeats`` 0) one step's peak."""
    import torch
    import torch.nn.functional as F

    sys.path.insert(0, os.path.dirname(__file__))
    from bench_gpu_train import check_equal, logits, models

    torch.manual_seed(0)
    every = models(SIZE)
    check_equal(every, SIZE, torch.device("cpu"))
    model = every[name].train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    tokens, targets = torch.randint(0, SIZE["vocab"], (2, batch, seq), generator=torch.Generator().manual_seed(1))
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == "bfloat16")

    def step() -> None:
        with autocast:
            out = logits(name, model, tokens)
            loss = F.cross_entropy(out.reshape(-1, SIZE["vocab"]).float(), targets.reshape(-1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    start_mb = status_mb("VmRSS")  # the model and its inputs, before any step
    step()  # warm-up: AdamW's state
    if not repeats:
        before = status_mb("VmRSS")
        with open("/proc/self/clear_refs", "w") as refs:
            refs.write("5")  # resets VmHWM to the current resident memory
        step()
        return dict(peak_mb=status_mb("VmHWM") - before)
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        seconds.append(time.perf_counter() - start)
    for _ in range(HELD_STEPS - 1 - repeats):  # what a user's process holds over several steps
        step()
    # the process's peak resident memory over its steps, default allocator, above what it held before the first
    # (AdamW's state included: the same for the three models)
    return dict(seconds=statistics.median(seconds), held_mb=status_mb("VmHWM") - start_mb)


def run(name: str, dtype: str, batch: int, seq: int, repeats: int) -> dict:
    result = {}
    for steps, environment in ((repeats, os.environ),
                               (0, dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536", MALLOC_TRIM_THRESHOLD_="0"))):
        done = subprocess.run([sys.executable, __file__, "--worker", name, dtype, str(batch), str(seq), str(steps)],
                              capture_output=True, text=True, env=environment)
        if done.returncode != 0:
            raise SystemExit(f"{name}, {dtype}: {(done.stderr.strip().splitlines() or ['failed'])[-1]}")
        result.update(json.loads(done.stdout.strip().splitlines()[-1]))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq", type=int, default=512)
    parser.add_argument("--worker", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        name, dtype, batch, seq, repeats = args.worker
        print(json.dumps(worker(name, dtype, int(batch), int(seq), int(repeats))))
        return
    if not os.path.exists("/proc/self/clear_refs"):
        sys.exit("bench_train_memory.py: measures peak memory through Linux's /proc/self/clear_refs")
    import torch
    print(f"GPT-2 shape {SIZE}, batch {args.batch} × {args.seq} tokens, CPU ({torch.get_num_threads()} threads), "
          f"torch {torch.__version__}; step = forward + backward + fused AdamW, median of {args.repeats}")
    results = {}
    for dtype in ("float32", "bfloat16"):
        print(f"\n{dtype}{' autocast' if dtype == 'bfloat16' else ''}")
        print(f"  {'model':<20} {'step s':>8} {'× tfspec':>9} {'peak MB':>9} {'× tfspec':>9} {'held MB':>9} "
              f"{'× tfspec':>9}")
        for name in NAMES:
            results[dtype, name] = run(name, dtype, args.batch, args.seq, args.repeats)
        ours = results[dtype, "tfspec"]
        for name in NAMES:
            r = results[dtype, name]
            print(f"  {name:<20} {r['seconds']:>8.3f} {r['seconds'] / ours['seconds']:>9.2f} {r['peak_mb']:>9.0f} "
                  f"{r['peak_mb'] / ours['peak_mb']:>9.2f} {r['held_mb']:>9.0f} {r['held_mb'] / ours['held_mb']:>9.2f}")
    memory = results["float32", "tfspec"]["peak_mb"] / results["float32", "nanoGPT-style"]["peak_mb"]
    speed = results["bfloat16", "tfspec"]["seconds"] / results["bfloat16", "HF GPT2LMHeadModel"]["seconds"]
    print("\ntargets:")
    ours, theirs = results["float32", "tfspec"]["peak_mb"], results["float32", "nanoGPT-style"]["peak_mb"]
    print(f"  peak, float32: tfspec = {memory:.4f} × nanoGPT-style ({ours:.1f} MB against {theirs:.1f}; ≤ 1.0: "
          f"{'met' if memory <= 1 else 'NOT met'})")
    held = results["float32", "tfspec"]["held_mb"] / results["float32", "nanoGPT-style"]["held_mb"]
    print(f"  held over {HELD_STEPS} steps (the process, default allocator), float32: tfspec = {held:.3f} × "
          f"nanoGPT-style (≤ 1.0: {'met' if held <= 1 else 'NOT met'})")
    print(f"  step, bfloat16 autocast: tfspec = {speed:.3f} × HF (≤ 1.0: {'met' if speed <= 1 else 'NOT met'})")


if __name__ == "__main__":
    main()
