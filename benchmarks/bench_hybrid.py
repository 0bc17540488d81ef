"""Hybrids against Hugging Face's own implementation of the same model, same weights: a training step and a prefill at
long lengths, the memory a training step keeps, and decoding speed.

    python benchmarks/bench_hybrid.py [--device cuda] [--models qwen3_5 granite] [--lengths 1024 4096 16384]
                                      [--repeats 2] [--new 64] [--no-decode]

Two hybrids, each built by Hugging Face from a small configuration with random weights (every one perturbed), saved
with ``save_pretrained`` and read back by ``tfspec.from_pretrained``: 4 layers of d_model 256 and a vocabulary of
8192, three of them a token mixer and the last attention (4 heads, 2 key/value heads):

- ``qwen3_5``: Qwen3.5's text model, Gated DeltaNet (4 value heads over 2 key heads of 64, chunks of 64) beside
  gated attention; SwiGLUs of 768;
- ``granite``: Granite 4.0-H (dense), Mamba-2 (8 heads of 64, state 64, chunks of 256) beside attention without
  positions; SwiGLUs of 768.

Rows, batch 1, at each length n (median of --repeats after a warm-up each):

- ``train``: forward, the next-token loss and backward (no optimizer step), seconds;
- ``prefill``: the prompt's forward as decoding starts it, without gradients: every layer's cache or state made
  and the last position's logits (Hugging Face's ``use_cache=True, logits_to_keep=1``; tfspec's
  ``Continuation.feed``), seconds;
- ``kept``: the bytes autograd keeps for backward during the training forward (each storage once, parameters
  excluded), per token, and its growth from the previous length (1.00: linear);
- decoding (``--new`` tokens after a 16-token prompt, batch 1 and 8): tokens/s of tfspec eager, tfspec compiled
  (``Continuation(compile=True)``: recurrent states and the KV cache in static buffers, one compiled step) and
  Hugging Face's ``generate``, which must all produce the same tokens.

Each model runs in a process of its own. Hugging Face runs its torch path (the fla and mamba_ssm kernels are CUDA-only and absent here). The targets,
checked at the end: at n ≥ 4096, tfspec's training step and prefill at most 0.8 × Hugging Face's time; tfspec's
kept bytes per token growing at most 1.1× from 4096 to 16384; decoding at least 1.5 × Hugging Face's tokens/s at
batch 1 and 8, compiled.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

import torch
import torch.nn.functional as F
import transformers

import tfspec
from tfspec.inspect.measure import saved_bytes
from tfspec.run.decoding import Continuation, sample

VOCAB, WIDTH, PROMPT = 8192, 256, 16


def reference(name: str):
    """A Hugging Face hybrid causal LM with random, perturbed weights."""
    torch.manual_seed(0)
    common = dict(vocab_size=VOCAB, hidden_size=WIDTH, intermediate_size=768, num_hidden_layers=4,
                  num_attention_heads=4, num_key_value_heads=2, bos_token_id=0, eos_token_id=0, pad_token_id=0,
                  max_position_embeddings=1 << 16)
    if name == "qwen3_5":
        config = transformers.Qwen3_5TextConfig(
            **common, head_dim=64, linear_num_value_heads=4, linear_num_key_heads=2, linear_key_head_dim=64,
            linear_value_head_dim=64, layer_types=["linear_attention"] * 3 + ["full_attention"])
        model = transformers.Qwen3_5ForCausalLM(config)
    else:
        config = transformers.GraniteMoeHybridConfig(
            **{k: v for k, v in common.items() if k != "intermediate_size"}, shared_intermediate_size=768,
            num_local_experts=0, num_experts_per_tok=0, mamba_n_heads=8, mamba_d_head=64, mamba_d_state=64,
            mamba_n_groups=1, mamba_chunk_size=256, position_embedding_type="nope",
            layer_types=["mamba"] * 3 + ["attention"])
        model = transformers.GraniteMoeHybridForCausalLM(config)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(1 + 0.1 * torch.randn_like(p)).add_(0.01 * torch.randn_like(p))
    model.generation_config.eos_token_id = None
    return model.eval()


def logits_of(out):
    return out.logits if hasattr(out, "logits") else out


def timed(fn, device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start


def train_step(model, ids):
    def step():
        model.zero_grad(set_to_none=True)
        logits = logits_of(model(ids))
        F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), ids[:, 1:].flatten()).backward()
    return step


def prefill(model, ids):
    """A prompt's forward as decoding starts it: the caches and states made, the last position's logits."""
    def run():
        with torch.no_grad():
            if isinstance(model, transformers.PreTrainedModel):
                return model(ids, use_cache=True, logits_to_keep=1).logits[:, -1]
            return Continuation(model).feed(ids)
    return run


def kept_bytes(model, ids) -> int:
    """Bytes autograd keeps for backward in one training forward, each storage once, parameters excluded."""
    return saved_bytes(model, lambda: logits_of(model(ids)))[0]


def median_time(fn, device, repeats: int) -> float:
    fn()  # warm-up
    return statistics.median(timed(fn, device) for _ in range(repeats))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--models", nargs="+", choices=("qwen3_5", "granite"), default=["qwen3_5", "granite"])
    parser.add_argument("--lengths", nargs="+", type=int, default=[1024, 4096, 16384])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--new", type=int, default=64)
    parser.add_argument("--no-decode", action="store_true")
    args = parser.parse_args()
    if len(args.models) > 1:  # each model in a process of its own: what one leaves allocated does not crowd the next
        for name in args.models:
            done = subprocess.run([sys.executable, __file__, *sys.argv[1:], "--models", name])
            if done.returncode:
                raise SystemExit(done.returncode)
        return
    device = torch.device(args.device)
    warnings.filterwarnings("ignore")  # Hugging Face's note that its torch path is slower than the CUDA kernels
    transformers.logging.set_verbosity_error()
    print(f"hybrids, batch 1, {device}, torch {torch.__version__}, transformers {transformers.__version__}, "
          f"{torch.get_num_threads()} threads")
    verdicts = []
    for name in args.models:
        hf = reference(name)
        with tempfile.TemporaryDirectory() as directory:
            hf.save_pretrained(directory)
            ours = tfspec.from_pretrained(directory).eval().to(device)
        hf = hf.to(device)
        print(f"\n{name}: {sum(p.numel() for p in ours.parameters()):,} parameters")
        print(f"  {'n':>6}  {'train tfspec':>12} {'HF':>8} {'ratio':>6}  {'prefill tfspec':>14} {'HF':>8} "
              f"{'ratio':>6}  {'kept/token tfspec':>17} {'growth':>6} {'HF':>9}")
        previous = None
        for n in args.lengths:
            ids = torch.randint(1, VOCAB, (1, n), generator=torch.Generator().manual_seed(n)).to(device)
            with torch.no_grad():
                theirs, mine = logits_of(hf(ids)), logits_of(ours(ids))
            scale = theirs.abs().max().item()
            if (mine - theirs).abs().max().item() > 1e-3 * scale:
                raise SystemExit(f"{name}, n={n}: tfspec's logits differ from Hugging Face's")
            row = {}
            for who, model in (("tfspec", ours), ("HF", hf)):
                model.train()  # (dropout is 0: the same computation, with the training paths)
                row[who, "train"] = median_time(train_step(model, ids), device, args.repeats)
                row[who, "kept"] = kept_bytes(model, ids) / n
                model.eval()
                row[who, "prefill"] = median_time(prefill(model, ids), device, args.repeats)
            growth = row["tfspec", "kept"] / previous if previous else float("nan")
            previous = row["tfspec", "kept"]
            train, fill = (row["tfspec", k] / row["HF", k] for k in ("train", "prefill"))
            print(f"  {n:>6}  {row['tfspec', 'train']:>11.2f}s {row['HF', 'train']:>7.2f}s {train:>6.2f}  "
                  f"{row['tfspec', 'prefill']:>13.2f}s {row['HF', 'prefill']:>7.2f}s {fill:>6.2f}  "
                  f"{row['tfspec', 'kept'] / 1024:>14.1f} KiB {growth:>6.2f} {row['HF', 'kept'] / 1024:>5.1f} KiB")
            if n >= 4096:
                verdicts.append(f"  {name}, n={n}: train {train:.2f} × HF, prefill {fill:.2f} × HF "
                                f"(≤ 0.8: {'met' if max(train, fill) <= 0.8 else 'NOT met'})")
                if n > 4096 and growth == growth:  # (a previous length measured: not NaN)
                    verdicts.append(f"  {name}, n={n}: kept bytes per token {growth:.2f} × the previous length's "
                                    f"(≤ 1.1: {'met' if growth <= 1.1 else 'NOT met'})")
        if not args.no_decode:
            decode(name, ours, hf, args.new, device, args.repeats, verdicts)
    print("\ntargets:")
    print("\n".join(verdicts))


def decode(name, ours, hf, new: int, device, repeats: int, verdicts: list) -> None:
    """Greedy decoding by tfspec (eager and compiled) and by Hugging Face's generate: tokens/s, the same tokens."""
    for batch in (1, 8):
        prompt = torch.randint(1, VOCAB, (batch, PROMPT), generator=torch.Generator().manual_seed(batch)).to(device)
        runs = {
            "tfspec": lambda: sample(Continuation(ours), prompt, new),
            "tfspec compiled": lambda: sample(Continuation(ours, compile=True, max_len=PROMPT + new), prompt, new),
            "HF": lambda: hf.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=False,
                                      max_new_tokens=new, min_new_tokens=new, pad_token_id=0)[:, PROMPT:].tolist(),
        }
        outputs, times = {}, {k: [] for k in runs}
        with torch.no_grad():
            for key, fn in runs.items():  # warm-up: compiles
                outputs[key] = fn()
            for _ in range(repeats):
                for key, fn in runs.items():
                    times[key].append(timed(fn, device))
        differing = [key for key in runs if outputs[key] != outputs["tfspec"]]
        if differing:
            raise SystemExit(f"{name}, batch {batch}: {', '.join(differing)} decode other tokens than tfspec")
        speed = {key: batch * new / statistics.median(t) for key, t in times.items()}
        print(f"  decoding, batch {batch}: " + ", ".join(f"{k} {v:,.0f} tokens/s" for k, v in speed.items()))
        ratio = speed["tfspec compiled"] / speed["HF"]
        verdicts.append(f"  {name}, decoding batch {batch}: compiled tfspec {ratio:.2f} × HF, eager "
                        f"{speed['tfspec'] / speed['HF']:.2f} × (≥ 1.5: {'met' if ratio >= 1.5 else 'NOT met'})")


if __name__ == "__main__":
    main()
