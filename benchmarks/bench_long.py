"""Training-step time and peak memory of sparse attention against dense, at long sequence lengths (CPU).

    python benchmarks/bench_long.py [--lengths 1024 4096 16384] [--repeats 2] [--no-materialised] [--cases ...]
                                    [--small]

A 2-layer, d_model 256, 4-head pre-norm encoder with a tied LM head (vocab 256, sinusoidal positions,
dropout off) trains on one random sequence of n tokens; every attention is one of:

- ``dense``: full attention as tfspec compiles it, through SDPA's default CPU kernel (a flash kernel
  in torch 2.13: scores are computed block by block and never kept, so memory is linear, time n²);
- ``dense, materialised``: the same model with SDPA held to its math kernel, which keeps the n²
  probabilities for backward, as attention written out in PyTorch, or any kernel without a fused path
  for its mask, does;
- ``window(256)``: |i - j| < 256, run in bands (tfspec's banded path), recomputed in backward;
- ``bigbird(64, random=3)``: blocks of 64, window + 2 global + 3 random blocks (512 keys a query), its
  gathered blocks recomputed in backward;
- ``linformer(256)``: keys and values projected along the sequence to 256 rows;
- ``causal``: a causal mask without dropout (SDPA's fused causal kernel), what dropout's cost is measured against;
- ``causal, dropout 0.1``: a causal mask with attention dropout, as every shipped example trains: on the CPU
  tfspec runs it in blocks of 4 · head_dim queries, recomputed in backward (``MultiHeadAttention.attend_in_blocks``);
- ``causal, dropout 0.1, SDPA``: the same through SDPA with ``dropout_p`` (``dropout_block = None``), whose
  CPU kernels with dropout are the math kernel's, keeping the n² probabilities, as Hugging Face models and
  ``torch.nn.Transformer`` do.

Each case runs in two processes of its own, each with one warm-up step (forward, backward, AdamW) first: one
times ``repeats`` steps as a user runs them, and goes on to 8 steps in all: *held* is that process's peak resident
memory (VmHWM) over them, with the default allocator, above what it held before its first step: what a user's
process holds; in the other, *peak* (the live figure) is the largest resident memory during one
step above the resident memory before it (the model, its gradients' buffers and AdamW's state excluded),
read from the kernel's VmHWM after resetting it, with glibc told to map and return large blocks at once so
freed memory does not linger (which slows allocation: hence the timing apart). The kernel column names the
SDPA kernels the step ran. Ratios are to ``dense`` (and to the materialised dense) at the same n, measured in
the same run. The targets, checked at the end: at the
longest length, window and BigBird peak at most dense flash attention's and run at least 3 times as fast;
window, BigBird and Linformer peak ≤ 1/8 of materialised dense, growing linearly from the previous length
(the ratio of lengths, within 20%); at each length from 4096, attention with dropout in blocks at most 1/8
of SDPA's peak and 0.5 of its step time; at every length, at most 2 times the peak, 2 times what the process
holds, and 3 times the step time of the same model without dropout. ``--small``: the model the attention-dropout targets were set on instead, a
1-layer, d_model 64, 4-head decoder on one thread (``--cases causal "causal, dropout 0.1"``).

The two cases that keep n² probabilities need about 17 GB (materialised) and 30 GB (SDPA with dropout) at
n = 16384: a case whose estimate exceeds the memory available is not run (and said so), and
``--no-materialised`` leaves both out.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time

CASES = {  # name -> (attention options, SDPA held to its math kernel, attention dropout, in blocks)
    "dense": ("mask=padding", False, 0, True),
    "dense, materialised": ("mask=padding", True, 0, True),
    "window(256)": ("mask=padding + window(256)", False, 0, True),
    "bigbird(64, random=3)": ("kind=bigbird(64, random=3) mask=padding", False, 0, True),
    "linformer(256)": ("kind=linformer(256, max_len={n}) mask=padding", False, 0, True),
    "causal": ("mask=causal", False, 0, True),
    "causal, dropout 0.1": ("mask=causal", False, 0.1, True),
    "causal, dropout 0.1, SDPA": ("mask=causal", False, 0.1, False),
}
SPARSE = ("window(256)", "bigbird(64, random=3)", "linformer(256)")  # the cases the targets are checked for
N2_BYTES = {"dense, materialised": 66, "causal, dropout 0.1, SDPA": 120}  # the n² cases: peak ≈ this × n² bytes
VOCAB = 256


HELD_STEPS = 8  # steps (the warm-up among them) over which the timed process's peak resident memory is read
SMALL = os.environ.get("BENCH_LONG_SMALL") == "1"  # --small: the attention-dropout issue's model, on one thread


def spec_text(attention: str, attn_dropout: float = 0) -> str:
    # --small: 1 layer, d_model 64, 4 heads, where attention is most of the step
    name, dim, position, stack, d_ff = (("long_sequences_small", 64, "none", "decoder x 1", "d_ff=256") if SMALL else
                                        ("long_sequences", 256, "sinusoidal", "encoder x 2", "d_ff=1024 activation=gelu"))
    return f"""
model {name}
defaults {{ residual pre; norm layernorm; dropout 0; attn_dropout {attn_dropout} }}
embedding tokens {{ vocab {VOCAB}; dim {dim}; position {position} }}
{stack} {{
  attention self heads=4 {attention}
  feedforward {d_ff}
  final layernorm
}}
head tied(tokens)
"""


def status_mb(field: str) -> float:
    """A field of /proc/self/status (or, for MemAvailable, /proc/meminfo) in MB."""
    with open("/proc/meminfo" if field == "MemAvailable" else "/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"/proc/self/status has no {field}")


def worker(case: str, length: int, repeats: int) -> dict:
    """Run one case in this process; returns its median step seconds over ``repeats`` steps (or, with
    ``repeats`` 0, the peak MB of one step) and the SDPA kernels it ran."""
    import types

    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils._python_dispatch import TorchDispatchMode

    import tfspec

    class Kernels(TorchDispatchMode):  # which SDPA kernels a step runs (the math one decomposes to softmax)
        def __init__(self):
            super().__init__()
            self.seen = set()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = func.__name__
            if "scaled_dot_product" in name:
                self.seen.add(name.split(".")[0].removeprefix("_scaled_dot_product_"))
            elif name.startswith(("_softmax.", "_safe_softmax.")):
                self.seen.add("math (softmax)")
            return func(*args, **(kwargs or {}))

    attention, materialised, attn_dropout, in_blocks = CASES[case]
    if SMALL:
        torch.set_num_threads(1)
    torch.manual_seed(0)
    model = tfspec.compile(spec_text(attention.format(n=length), attn_dropout)).train()
    if not in_blocks:  # SDPA with dropout_p over whole sequences, as Hugging Face models call it
        def sdpa(self, q, k, v, mask, is_causal):
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=is_causal, scale=self.scale,
                                                  dropout_p=self.dropout, enable_gqa=self.kv_heads != self.heads)

        for module in model.modules():
            if isinstance(module, tfspec.nn.attention.MultiHeadAttention):
                module.dropout_block, module.mix = None, types.MethodType(sdpa, module)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    tokens, targets = torch.randint(0, VOCAB, (2, 1, length))

    def step() -> None:
        logits = model(tokens)
        F.cross_entropy(logits.view(-1, VOCAB), targets.view(-1)).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    with sdpa_kernel(SDPBackend.MATH) if materialised else contextlib.nullcontext():
        kernels = Kernels()
        start_mb = status_mb("VmRSS")  # the model and its inputs, before any step
        with kernels:
            step()  # warm-up: allocates AdamW's state and shows the kernels
        if not repeats:
            before = status_mb("VmRSS")
            with open("/proc/self/clear_refs", "w") as refs:
                refs.write("5")  # resets VmHWM, the peak resident memory, to the current one
            step()
            return dict(peak_mb=status_mb("VmHWM") - before, kernels=sorted(kernels.seen))
        seconds = []
        for _ in range(repeats):
            start = time.perf_counter()
            step()
            seconds.append(time.perf_counter() - start)
        for _ in range(HELD_STEPS - 1 - repeats):  # what a user's process holds over several steps
            step()
    # the process's peak resident memory over its steps, default allocator, above what it held before the first
    return dict(seconds=statistics.median(seconds), kernels=sorted(kernels.seen),
                held_mb=status_mb("VmHWM") - start_mb)


def run_case(case: str, length: int, repeats: int) -> dict:
    """``worker`` in fresh processes, so no case inherits another's peak or allocator state: one timed as a user
    runs it, one for the peak with glibc returning freed blocks at once (which would slow the timed steps,
    each allocation then faulting its pages in anew)."""
    result = {}
    for steps, environment in ((repeats, os.environ),
                               (0, dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536", MALLOC_TRIM_THRESHOLD_="0"))):
        done = subprocess.run([sys.executable, __file__, "--worker", case, str(length), str(steps)],
                              capture_output=True, text=True, env=environment)
        if done.returncode != 0:
            reason = "killed (out of memory?)" if done.returncode in (-9, 137) else \
                (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
            return dict(error=reason)
        result.update(json.loads(done.stdout.strip().splitlines()[-1]))
    return result


def ratio(value: float | None, reference: dict | None, key: str) -> str:
    if value is None or reference is None or "error" in reference:
        return "-"
    return f"{value / reference[key]:.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024, 4096, 16384])
    parser.add_argument("--repeats", type=int, default=2, help="timed steps per case (after one warm-up)")
    parser.add_argument("--no-materialised", action="store_true",
                        help="leave out the cases that keep n² probabilities (17 and 30 GB at n = 16384)")
    parser.add_argument("--cases", nargs="+", choices=list(CASES), metavar="CASE", default=list(CASES),
                        help="the cases to run (default: all)")
    parser.add_argument("--small", action="store_true",
                        help="a 1-layer, d_model 64, 4-head decoder on one thread (where attention dropout costs most)")
    parser.add_argument("--worker", nargs=3, metavar=("CASE", "LENGTH", "REPEATS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.small:  # (the workers read it from their environment)
        os.environ["BENCH_LONG_SMALL"] = "1"
        global SMALL
        SMALL = True
    if args.worker:
        case, length, repeats = args.worker
        print(json.dumps(worker(case, int(length), int(repeats))))
        return
    if not os.path.exists("/proc/self/clear_refs"):
        sys.exit("bench_long.py: measures peak memory through Linux's /proc/self/clear_refs; this is not Linux")

    import torch
    cases = [c for c in args.cases if not (args.no_materialised and c in N2_BYTES)]
    shape = "1 layer, d_model 64, 4 heads (decoder)" if SMALL else "2 layers, d_model 256, 4 heads"
    threads = 1 if SMALL else torch.get_num_threads()
    print(f"{shape}, batch 1, float32, CPU ({threads} threads), "
          f"torch {torch.__version__}; training step = forward + backward + AdamW, median of {args.repeats}")
    results: dict[tuple[str, int], dict] = {}
    for length in args.lengths:
        print(f"\nn = {length}")
        print(f"{'attention':<27} {'step s':>8} {'× dense':>8} {'peak MB':>9} {'× dense':>8} "
              f"{'× materialised':>15} {'held MB':>8}  kernels", flush=True)
        for case in cases:
            need, available = N2_BYTES.get(case, 0) * length ** 2, status_mb("MemAvailable") * 2 ** 20
            if need > 0.9 * available:
                results[case, length] = dict(error=f"not run: needs about {need / 2 ** 30:.0f} GiB, "
                                                   f"{available / 2 ** 30:.0f} GiB available")
                continue
            results[case, length] = run_case(case, length, args.repeats)
        dense, materialised = results.get(("dense", length)), results.get(("dense, materialised", length))
        for case in cases:
            result = results[case, length]
            if "error" in result:
                print(f"{case:<27} {result['error']}")
                continue
            print(f"{case:<27} {result['seconds']:>8.2f} {ratio(result['seconds'], dense, 'seconds'):>8} "
                  f"{result['peak_mb']:>9.0f} {ratio(result['peak_mb'], dense, 'peak_mb'):>8} "
                  f"{ratio(result['peak_mb'], materialised, 'peak_mb'):>15} {result['held_mb']:>8.0f}  "
                  f"{', '.join(result['kernels'])}")
    report_targets(results, args.lengths, cases)


def report_targets(results: dict, lengths: list[int], cases: list[str]) -> None:
    """The issues' targets at the longest length: window and BigBird at most dense flash attention's peak and
    at least 3 times as fast; sparse attention ≤ 1/8 of materialised dense attention's peak; linear growth."""
    longest = max(lengths)
    shorter = [n for n in lengths if n < longest]
    print(f"\ntargets at n = {longest}:")
    for case in SPARSE:
        result = results.get((case, longest), {})
        if "error" in result or not result:
            print(f"  {case}: not measured")
            continue
        if "dense" in cases and "error" not in results["dense", longest] and case != "linformer(256)":
            dense = results["dense", longest]
            share, speed = result["peak_mb"] / dense["peak_mb"], dense["seconds"] / result["seconds"]
            print(f"  {case}: peak = {share:.3f} × dense flash (≤ 1.0: {'met' if share <= 1 else 'NOT met'}), "
                  f"{speed:.1f}× as fast (≥ 3: {'met' if speed >= 3 else 'NOT met'})")
        if "dense, materialised" in cases and "error" not in results["dense, materialised", longest]:
            share = result["peak_mb"] / results["dense, materialised", longest]["peak_mb"]
            verdict = "met" if share <= 1 / 8 else "NOT met"
            print(f"  {case}: peak = {share:.3f} × dense, materialised (≤ 0.125: {verdict})")
        if shorter and "error" not in results[case, max(shorter)]:
            previous = max(shorter)
            growth = result["peak_mb"] / results[case, previous]["peak_mb"]
            expected = longest / previous
            verdict = "met" if abs(growth / expected - 1) <= 0.2 else "NOT met"
            print(f"  {case}: peak grows ×{growth:.2f} from n = {previous} (linear: ×{expected:.0f} ± 20%: {verdict})")
    report_dropout_targets(results, lengths)


def report_dropout_targets(results: dict, lengths: list[int]) -> None:
    """The issues' targets for attention with dropout: in blocks, ≤ 2× the peak and ≤ 3× the step time of the
    same model without dropout at every length; ≤ 1/8 of SDPA's peak and ≤ 0.5 of its step time from 4096."""
    blocked, sdpa, plain = "causal, dropout 0.1", "causal, dropout 0.1, SDPA", "causal"
    against = [n for n in lengths if "error" not in results.get((blocked, n), {"error": ""})
               and "error" not in results.get((plain, n), {"error": ""})]
    if against:
        print("\ntargets for attention with dropout, in blocks against the same model without dropout:")
    for n in against:
        ours, theirs = results[blocked, n], results[plain, n]
        memory, time = ours["peak_mb"] / theirs["peak_mb"], ours["seconds"] / theirs["seconds"]
        held = ours["held_mb"] / theirs["held_mb"]
        print(f"  n = {n}: peak = {memory:.2f} × (≤ 2: {'met' if memory <= 2 else 'NOT met'}), "
              f"held over {HELD_STEPS} steps (the process, default allocator) = {held:.2f} × "
              f"(≤ 2: {'met' if held <= 2 else 'NOT met'}), "
              f"step = {time:.2f} × (≤ 3: {'met' if time <= 3 else 'NOT met'})")
    measured = [n for n in lengths if n >= 4096 and "error" not in results.get((blocked, n), {"error": ""})]
    if not measured:
        return
    print("\ntargets for attention with dropout, in blocks against SDPA's kernel with dropout:")
    for n in measured:
        ours, theirs = results[blocked, n], results.get((sdpa, n), {"error": "not run"})
        if "error" in theirs:
            print(f"  n = {n}: SDPA {theirs['error']}; in blocks {ours['seconds']:.2f} s, {ours['peak_mb']:.0f} MB")
            continue
        memory, time = ours["peak_mb"] / theirs["peak_mb"], ours["seconds"] / theirs["seconds"]
        print(f"  n = {n}: peak = {memory:.3f} × SDPA (≤ 0.125: {'met' if memory <= 1 / 8 else 'NOT met'}), "
              f"step = {time:.3f} × SDPA (≤ 0.5: {'met' if time <= 0.5 else 'NOT met'})")


if __name__ == "__main__":
    main()
