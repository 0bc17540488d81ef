"""Greedy decoding speed: our KV cache vs recomputing the prefix vs Hugging Face's generate, same weights.

    python benchmarks/bench_generate.py [--device cuda] [--new 256] [--repeats 5]

A GPT-2-shaped decoder (4 layers, d_model 256, vocab 8192) continues a 16-token
prompt by --new tokens at batch 1 and batch 8. Prints tokens/s and ratios
(ours / theirs: above 1 is faster); the outputs must be the same tokens, which
the script checks. Medians of alternating runs.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import transformers

import tfspec
from tfspec.run.decoding import Continuation, sample
from tfspec.interop.hf_gpt2 import from_hf_gpt2

SIZES = {"layers": 4, "d_model": 256, "heads": 4, "vocab": 8192, "context": 1024}
PROMPT = 16


def timed(fn, device) -> tuple[float, list]:
    start = time.perf_counter()
    out = fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--new", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    device = torch.device(args.device)
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=SIZES["vocab"], n_embd=SIZES["d_model"], n_layer=SIZES["layers"],
                                     n_head=SIZES["heads"], n_positions=SIZES["context"], bos_token_id=0, eos_token_id=0)
    reference = transformers.GPT2LMHeadModel(config).eval().to(device)
    reference.generation_config.eos_token_id = None
    model = tfspec.compile("examples/gpt2_small.tfs", overrides=SIZES).eval()
    from_hf_gpt2(model, reference.cpu())
    model, reference = model.to(device), reference.to(device)
    print(f"greedy decoding, {PROMPT}-token prompt + {args.new} new tokens, GPT-2 shape {SIZES}, {device}")
    print(f"{'batch':>5}  {'cached tok/s':>12}  {'recompute':>10}  {'HF generate':>11}  {'vs recompute':>12}  "
          f"{'vs HF':>6}")
    for batch in (1, 8):
        prompt = torch.randint(0, SIZES["vocab"], (batch, PROMPT), device=device)
        runs = {
            "cached": lambda: sample(Continuation(model, use_cache=True), prompt, args.new),
            "recompute": lambda: sample(Continuation(model, use_cache=False), prompt, args.new),
            "hf": lambda: reference.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=False,
                                             max_new_tokens=args.new, min_new_tokens=args.new,
                                             pad_token_id=0)[:, PROMPT:].tolist(),
        }
        times = {name: [] for name in runs}
        outputs = {}
        with torch.no_grad():
            for name, fn in runs.items():  # warm-up
                outputs[name] = fn()
            for _ in range(args.repeats):
                for name, fn in runs.items():
                    times[name].append(timed(fn, device)[0])
        if not outputs["cached"] == outputs["recompute"] == outputs["hf"]:
            raise SystemExit("the three decoders disagree on the tokens")
        speed = {name: batch * args.new / statistics.median(t) for name, t in times.items()}
        print(f"{batch:>5}  {speed['cached']:>12,.0f}  {speed['recompute']:>10,.0f}  {speed['hf']:>11,.0f}  "
              f"{speed['cached'] / speed['recompute']:>11.2f}×  {speed['cached'] / speed['hf']:>5.2f}×")


if __name__ == "__main__":
    main()
