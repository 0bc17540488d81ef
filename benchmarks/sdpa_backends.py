"""Which scaled-dot-product-attention kernel each common attention configuration runs: flash, memory-efficient,
cuDNN, or the materialising math fallback, read from the profiler's operator names; or FlexAttention, which
tfspec runs on CUDA for masks of structure (causal with padding, windows, blocks).

    python benchmarks/sdpa_backends.py [--device cuda] [--dtype bfloat16] [--seq-len 1024]

Each configuration is a shipped example made small (a forward pass and a backward, the way training runs it)
and, for the decoders, one cached decoding step (one query against a longer cache: the bottom-right causal
alignment). On a CPU the names are the CPU kernels' (``flash_attention_for_cpu`` or math); the point of the
script is the GPU, where the common configurations must not take the math fallback.
"""

from __future__ import annotations

import argparse

import torch
from torch.profiler import ProfilerActivity, profile

import tfspec
from tfspec.nn import attention
from tfspec.run.decoding import Continuation

SMALL = {"layers": 1, "d_model": 256, "heads": 4}
CONFIGURATIONS = [  # (what, example, overrides, padded)
    ("causal (GPT-2)", "examples/gpt2_small.tfs", {**SMALL, "vocab": 1000}, False),
    ("causal + padding (Llama, MHA)", "examples/llama2_7b.tfs",
     {**SMALL, "kv_heads": 4, "d_ff": 512, "vocab": 1000}, True),
    ("causal + padding, GQA 4:1 (Llama)", "examples/llama2_7b.tfs",
     {**SMALL, "kv_heads": 1, "d_ff": 512, "vocab": 1000}, True),
    ("causal + padding + window (Mistral)", "examples/mistral_7b.tfs",
     {**SMALL, "kv_heads": 2, "d_ff": 512, "vocab": 1000, "window": 128}, True),
    ("padding, bidirectional (BERT)", "examples/bert_base_mlm.tfs", {**SMALL, "vocab": 1000}, True),
]
KERNELS = {"_scaled_dot_product_flash_attention": "flash", "_scaled_dot_product_efficient_attention": "efficient",
           "_scaled_dot_product_cudnn_attention": "cuDNN", "_scaled_dot_product_flash_attention_for_cpu": "flash (CPU)",
           "_scaled_dot_product_attention_math": "math", "_flash_attention_forward": "flash",
           "_efficient_attention_forward": "efficient"}


def kernels(fn, device) -> list[str]:
    """The attention kernels ``fn`` runs: SDPA's, by the profiler's operator names, and FlexAttention (masks of
    structure on CUDA), whose compiled kernels have no fixed name, by tfspec's calls to it."""
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    flex_calls, flex_mix = [], attention.flex_mix
    attention.flex_mix = lambda *args, **kwargs: flex_calls.append(1) or flex_mix(*args, **kwargs)
    try:
        with profile(activities=activities) as prof:
            fn()
    finally:
        attention.flex_mix = flex_mix
    names = {event.key.removeprefix("aten::") for event in prof.key_averages()}
    found = sorted({label for name, label in KERNELS.items() if name in names} | ({"FlexAttention"} if flex_calls
                                                                                 else set()))
    if not found and any("softmax" in n for n in names):
        found = ["math (materialised softmax)"]
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--seq-len", type=int, default=1024)
    args = parser.parse_args()
    device, dtype = torch.device(args.device), getattr(torch, args.dtype)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"SDPA kernels, {name}, {args.dtype}, torch {torch.__version__}, sequences of {args.seq_len} (or a "
          "model's learned positions, where fewer)")
    print(f"{'configuration':<38} {'training (forward + backward)':<32} {'a cached decoding step'}")
    for what, example, overrides, padded in CONFIGURATIONS:
        model = tfspec.compile(example, overrides=overrides, device=device).to(dtype)
        limit = min((n for n in model.max_len.values() if n), default=None)  # BERT's 512 learned positions
        length = min(args.seq_len, limit) if limit else args.seq_len
        if length != args.seq_len:
            what += f" ({length})"
        tokens = torch.randint(0, 1000, (2, length), device=device)
        padding = torch.zeros_like(tokens, dtype=torch.bool)
        if padded:
            padding[1, length * 3 // 4:] = True
        inputs = {"padding_mask": padding} if padded else {}

        def train_step():
            out = model(tokens, **inputs)
            (out[0] if isinstance(out, tuple) else out).float().sum().backward()

        training = kernels(train_step, device)
        decoding = "-"
        if model.spec.kind == "decoder-only":
            steps = Continuation(model.eval(), use_cache=True)
            with torch.no_grad():
                steps.feed(tokens[:1, :-1])
                decoding = ", ".join(kernels(lambda: steps.feed(tokens[:1, -1:]), device))
        print(f"{what:<38} {', '.join(training):<32} {decoding}")


if __name__ == "__main__":
    main()
