"""Greedy decoding speed: tfspec's KV cache, eager and compiled, against Hugging Face's generate, same weights.

    python benchmarks/bench_generate.py [--device cuda] [--new 256] [--repeats 5] [--shapes gpt2 llama]
                                        [--recompute]

A GPT-2-shaped decoder (4 layers, d_model 256, 4 heads, vocab 8192, learned positions) and a Llama-shaped one
(the same sizes with 2 key/value heads, rotary positions, RMSNorm and SwiGLU), each built by Hugging Face from
a small config with random weights, saved with ``save_pretrained`` and read back by ``tfspec.from_pretrained``,
continue a 16-token prompt by --new tokens at batch 1 and batch 8. Rows:

- ``tfspec``: ``Continuation`` over its growing KV cache, eager;
- ``tfspec compiled``: ``Continuation(compile=True)``: a static cache and a decode step ``torch.compile`` compiles
  once (inductor);
- ``HF``: ``generate`` with its default dynamic cache;
- ``HF static``: ``generate(cache_implementation="static")``, eager;
- ``HF static compiled``: the same with its forward compiled (inductor, as ``generate`` compiles it on a GPU:
  here by ``CompileConfig`` on every device);
- ``recompute`` (``--recompute``): tfspec recomputing the whole prefix each token, the cache's reference.

Prints tokens/s (the median of --repeats runs, alternating, after a warm-up run of each that compiles) and
the target: compiled tfspec at least 1.2 times Hugging Face's best row, at each shape and batch. Every row
must produce the same tokens, which the script checks.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import torch
import transformers

import tfspec
from tfspec.run.decoding import Continuation, sample

SIZES = dict(layers=4, d_model=256, heads=4, vocab=8192, context=1024)
PROMPT = 16


def reference(shape: str):
    """A Hugging Face causal LM of ``shape`` with random weights."""
    torch.manual_seed(0)
    if shape == "gpt2":
        config = transformers.GPT2Config(vocab_size=SIZES["vocab"], n_embd=SIZES["d_model"], n_layer=SIZES["layers"],
                                         n_head=SIZES["heads"], n_positions=SIZES["context"], bos_token_id=0,
                                         eos_token_id=0)
        return transformers.GPT2LMHeadModel(config)
    config = transformers.LlamaConfig(vocab_size=SIZES["vocab"], hidden_size=SIZES["d_model"],
                                      intermediate_size=4 * SIZES["d_model"], num_hidden_layers=SIZES["layers"],
                                      num_attention_heads=SIZES["heads"], num_key_value_heads=SIZES["heads"] // 2,
                                      max_position_embeddings=SIZES["context"], bos_token_id=0, eos_token_id=0)
    return transformers.LlamaForCausalLM(config)


def timed(fn, device) -> tuple[float, list]:
    start = time.perf_counter()
    out = fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start, out


def hf_runs(model, prompt, new: int) -> dict:
    """Hugging Face's three ways to decode greedily."""
    common = dict(attention_mask=torch.ones_like(prompt), do_sample=False, max_new_tokens=new, min_new_tokens=new,
                  pad_token_id=0)
    compiled = transformers.CompileConfig(fullgraph=False, dynamic=False, mode="default")
    compiled._compile_all_devices = True  # generate compiles its forward on GPUs only unless told otherwise

    def run(**options):
        return lambda: model.generate(prompt, **common, **options)[:, PROMPT:].tolist()

    return {"HF": run(), "HF static": run(cache_implementation="static", disable_compile=True),
            "HF static compiled": run(cache_implementation="static", compile_config=compiled)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--new", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--shapes", nargs="+", choices=("gpt2", "llama"), default=["gpt2", "llama"])
    parser.add_argument("--recompute", action="store_true", help="also time recomputing the prefix (slow)")
    args = parser.parse_args()
    device = torch.device(args.device)
    print(f"greedy decoding, {PROMPT}-token prompt + {args.new} new tokens, {SIZES}, {device}, "
          f"torch {torch.__version__}, transformers {transformers.__version__}, {torch.get_num_threads()} threads")
    verdicts = []
    for shape in args.shapes:
        hf = reference(shape).eval()
        hf.generation_config.eos_token_id = None
        with tempfile.TemporaryDirectory() as directory:
            hf.save_pretrained(directory)
            model = tfspec.from_pretrained(directory).eval().to(device)
        hf = hf.to(device)
        for batch in (1, 8):
            prompt = torch.randint(0, SIZES["vocab"], (batch, PROMPT), device=device)
            runs = {
                "tfspec": lambda: sample(Continuation(model), prompt, args.new),
                "tfspec compiled": lambda: sample(Continuation(model, compile=True, max_len=PROMPT + args.new),
                                                  prompt, args.new),
                **hf_runs(hf, prompt, args.new),
            }
            if args.recompute:
                runs["recompute"] = lambda: sample(Continuation(model, use_cache=False), prompt, args.new)
            times = {name: [] for name in runs}
            outputs = {}
            with torch.no_grad():
                for name, fn in runs.items():  # warm-up: compiles
                    outputs[name] = fn()
                for _ in range(args.repeats):
                    for name, fn in runs.items():
                        times[name].append(timed(fn, device)[0])
            differing = [name for name in runs if outputs[name] != outputs["tfspec"]]
            if differing:
                raise SystemExit(f"{shape}, batch {batch}: {', '.join(differing)} decode other tokens than tfspec")
            speed = {name: batch * args.new / statistics.median(t) for name, t in times.items()}
            print(f"\n{shape}, batch {batch}: tokens/s")
            for name, value in speed.items():
                print(f"  {name:<20} {value:>9,.0f}")
            best = max((name for name in speed if name.startswith("HF")), key=speed.get)
            ratio = speed["tfspec compiled"] / speed[best]
            verdicts.append(f"  {shape}, batch {batch}: compiled tfspec = {ratio:.2f} × {best} "
                            f"(≥ 1.2: {'met' if ratio >= 1.2 else 'NOT met'}); eager tfspec = "
                            f"{speed['tfspec'] / speed[best]:.2f} ×")
    print("\ntargets, against Hugging Face's fastest row:")
    print("\n".join(verdicts))


if __name__ == "__main__":
    main()
