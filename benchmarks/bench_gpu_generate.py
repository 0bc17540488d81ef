"""GPT-2 generation speed on a GPU: tfspec's cached decoding, eager and compiled, against Hugging Face
``generate`` with its static cache and ``torch.compile``, as transformers' docs recommend, on the same weights.

    python benchmarks/bench_gpu_generate.py [--size 124m] [--new 256] [--batches 1 32] [--dtype bfloat16]
                                            [--device cuda] [--no-compile] [--repeats 5] [--profile]
    python benchmarks/bench_gpu_generate.py --size tiny --device cpu --no-compile     # the script, on a CPU

Greedy decoding of ``--new`` tokens after a 16-token prompt, at each batch size; tokens/s is batch × new
tokens over the median of ``--repeats`` alternating runs after a warm-up (which also compiles). Hugging Face
runs with ``cache_implementation="static"``, with which ``generate`` compiles its decoding steps itself on a GPU
("reduce-overhead" mode: CUDA graphs; a forward compiled by hand as well has its graphs' outputs overwritten
between the prompt and the first step), unless ``--no-compile`` (then its dynamic cache, uncompiled); tfspec runs
eager and, unless ``--no-compile``, through ``Continuation(compile=True)`` (a static cache, a step compiled
once). In float32 the two must produce the same tokens,
which the script checks; in bf16 they may part where two logits round alike, so only the speed is compared.
Ratios above 1 mean tfspec is faster (target ≥ 1.0).
"""

from __future__ import annotations

import argparse
import statistics

import torch

from bench_generate import PROMPT, timed
from bench_gpu_train import SIZES, _device_name, models
from tfspec.run.decoding import Continuation, sample


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", choices=SIZES, default="124m")
    parser.add_argument("--new", type=int, default=256)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16", "float32"))
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--no-compile", action="store_true")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--profile", action="store_true",
                        help="then where 16 of tfspec's decoding steps at batch 1 spend the host's and the GPU's time")
    args = parser.parse_args()
    device, size, dtype = torch.device(args.device), SIZES[args.size], getattr(torch, args.dtype)
    torch.manual_seed(0)
    built = models(size)
    ours = built["tfspec"].to(device=device, dtype=dtype).eval()
    reference = built["HF GPT2LMHeadModel"].to(device=device, dtype=dtype).eval()
    reference.generation_config.eos_token_id = None
    reference.generation_config.pad_token_id = 0
    if not args.no_compile:  # generate compiles the steps over a static cache itself (its CompileConfig)
        reference.generation_config.cache_implementation = "static"
    print(f"greedy decoding, GPT-2 {args.size}, {PROMPT}-token prompt + {args.new} new tokens, {args.dtype}, "
          f"{_device_name(device)}, torch {torch.__version__}; Hugging Face: "
          f"{'dynamic cache, eager' if args.no_compile else 'static cache, torch.compile (reduce-overhead)'}")
    print(f"{'batch':>5}  {'tfspec tok/s':>12}  {'compiled':>9}  {'HF tok/s':>10}  {'tfspec / HF':>11}  "
          f"{'compiled / HF':>13}")
    for batch in args.batches:
        prompt = torch.randint(0, size["vocab"], (batch, PROMPT), device=device)
        runs = {
            "tfspec": lambda: sample(Continuation(ours, use_cache=True), prompt, args.new),
            **({} if args.no_compile else {"compiled": lambda: sample(
                Continuation(ours, compile=True, max_len=PROMPT + args.new), prompt, args.new)}),
            "hf": lambda: reference.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=False,
                                             max_new_tokens=args.new, min_new_tokens=args.new)[:, PROMPT:].tolist(),
        }
        times, outputs = {name: [] for name in runs}, {}
        with torch.no_grad():
            for name, fn in runs.items():  # warm-up, and the compile
                outputs[name] = fn()
            for _ in range(args.repeats):
                for name, fn in runs.items():
                    times[name].append(timed(fn, device)[0])
        if dtype == torch.float32 and any(outputs[name] != outputs["hf"] for name in runs):
            raise SystemExit("tfspec and Hugging Face decode different tokens in float32")
        speed = {name: batch * args.new / statistics.median(t) for name, t in times.items()}
        compiled = speed.get("compiled")
        print(f"{batch:>5}  {speed['tfspec']:>12,.0f}  {compiled or 0:>9,.0f}  {speed['hf']:>10,.0f}  "
              f"{speed['tfspec'] / speed['hf']:>10.2f}×  {(compiled or 0) / speed['hf']:>12.2f}×")
    if args.profile:
        profile_steps(ours, size, device, compiled=not args.no_compile)


def profile_steps(model, size: dict, device: torch.device, compiled: bool, count: int = 16) -> None:
    """The operators that take the most time over ``count`` greedy decoding steps at batch 1, eager and compiled:
    by the host's own time (launches, and waits such as ``cudaStreamSynchronize``) and, on a GPU, by the GPU's."""
    from torch.profiler import ProfilerActivity, profile

    cuda = device.type == "cuda"
    prompt = torch.randint(0, size["vocab"], (1, PROMPT), device=device)
    ways = {"eager": dict(use_cache=True), **({"compiled": dict(compile=True, max_len=PROMPT + count + 2)}
                                                if compiled else {})}
    for name, options in ways.items():
        steps = Continuation(model, **options)
        with torch.no_grad():
            token = steps.feed(prompt).argmax(-1, keepdim=True)
            token = steps.feed(token).argmax(-1, keepdim=True)  # (a compiled step compiles here)
            with profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])) as prof:
                for _ in range(count):
                    token = steps.feed(token).argmax(-1, keepdim=True)
                if cuda:
                    torch.cuda.synchronize()
        for sort in ("self_cpu_time_total", "self_cuda_time_total") if cuda else ("self_cpu_time_total",):
            print(f"\ntfspec's {name} decoding, {count} steps at batch 1, by {sort}:")
            print(prof.key_averages().table(sort_by=sort, row_limit=10, max_name_column_width=60))


if __name__ == "__main__":
    main()
