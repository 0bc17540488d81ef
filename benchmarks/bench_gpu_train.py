"""GPT-2 training speed: tfspec against a nanoGPT-style model and Hugging Face's GPT2LMHeadModel, interleaved.

    python benchmarks/bench_gpu_train.py [--size 124m] [--batch 8] [--seq-len 1024] [--rounds 5] [--steps 10]
                                         [--device cuda] [--dtype bfloat16] [--no-compile] [--peak 989e12]
    python benchmarks/bench_gpu_train.py --size tiny --device cpu --no-compile     # the script itself, on a CPU

The three models share one configuration (GPT-2 small: 12 layers, d_model 768, 12 heads, 1024 positions,
vocab 50,257, no dropout) and one set of weights: tfspec's, mapped into Hugging Face's layout and from there
into nanoGPT's (``model.py``'s names and its transposes). Before timing, a float32 forward pass checks that all
three compute the same logits. A step is forward, cross-entropy, backward and an AdamW step, under autocast in
``--dtype``, each model compiled with ``torch.compile`` unless ``--no-compile``. Rounds interleave the models
(``--steps`` timed steps each, after warm-up), so drifts in clock or temperature fall on all alike; the table
gives each model's median step, tokens/s and MFU: model FLOPs per token, 6·N + 12·L·d·T (PaLM, appendix B; N
the parameters less the position table), over the step time and ``--peak`` (default: the H100 SXM's dense
bf16, 989 TFLOP/s). Last, a profile of tfspec's steps: the ten operators that take the most time.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
import transformers

import tfspec
from tfspec.interop import to_hf_gpt2

SIZES = {"124m": {"layers": 12, "d_model": 768, "heads": 12, "context": 1024, "vocab": 50257},
         "tiny": {"layers": 2, "d_model": 64, "heads": 4, "context": 128, "vocab": 512}}
H100_BF16_DENSE = 989e12


# ---------------------------------------------------------------- a nanoGPT-style model (Karpathy's model.py)
class CausalSelfAttention(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.c_attn, self.c_proj, self.heads = nn.Linear(d, 3 * d), nn.Linear(d, d), heads

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in self.c_attn(x).split(d, dim=2))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(b, t, d))


class Block(nn.Module):
    def __init__(self, d: int, heads: int):
        super().__init__()
        self.ln_1, self.attn, self.ln_2 = nn.LayerNorm(d), CausalSelfAttention(d, heads), nn.LayerNorm(d)
        self.mlp = nn.ModuleDict(dict(c_fc=nn.Linear(d, 4 * d), c_proj=nn.Linear(4 * d, d)))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp.c_proj(F.gelu(self.mlp.c_fc(self.ln_2(x)), approximate="tanh"))


class NanoGPT(nn.Module):
    def __init__(self, layers: int, d_model: int, heads: int, context: int, vocab: int):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab, d_model), wpe=nn.Embedding(context, d_model),
            h=nn.ModuleList(Block(d_model, heads) for _ in range(layers)), ln_f=nn.LayerNorm(d_model)))
        self.lm_head = nn.Linear(d_model, vocab, bias=False)
        self.lm_head.weight = self.transformer.wte.weight

    def forward(self, idx):
        x = self.transformer.wte(idx) + self.transformer.wpe(torch.arange(idx.shape[1], device=idx.device))
        for block in self.transformer.h:
            x = block(x)
        return self.lm_head(self.transformer.ln_f(x))

    def load_hugging_face(self, state: dict) -> None:
        """GPT-2's weights as Hugging Face stores them (Conv1D: transposed), as nanoGPT's from_pretrained does."""
        transposed = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")
        own = self.state_dict()
        for name in own:
            value = state[name]
            own[name].copy_(value.t() if name.endswith(transposed) else value)


# ---------------------------------------------------------------- the three, from one set of weights
def models(size: dict) -> dict[str, nn.Module]:
    text = open("examples/gpt2_small.tfs").read().replace("dropout 0.1", "dropout 0").replace("attn_dropout 0.1",
                                                                                             "attn_dropout 0")
    ours = tfspec.compile(text, overrides=size, seed=0)
    state = to_hf_gpt2(ours)
    config = transformers.GPT2Config(vocab_size=size["vocab"], n_embd=size["d_model"], n_layer=size["layers"],
                                     n_head=size["heads"], n_positions=size["context"], resid_pdrop=0.0,
                                     embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0)
    config._attn_implementation = "sdpa"  # the fused kernels, as the other two use
    hf = transformers.GPT2LMHeadModel(config)
    hf.load_state_dict(state, strict=False)  # the causal-mask buffers are HF's own
    nano = NanoGPT(**size)
    nano.load_hugging_face(state)
    return {"tfspec": ours, "nanoGPT-style": nano, "HF GPT2LMHeadModel": hf}


def logits(name: str, model, tokens):
    out = model(tokens)
    return out.logits if name.startswith("HF") else out


def check_equal(all_models: dict, size: dict, device) -> float:
    tokens = torch.randint(0, size["vocab"], (2, min(size["context"], 64)), device=device)
    with torch.no_grad():
        outs = {name: logits(name, m.eval(), tokens).float() for name, m in all_models.items()}
    worst = max((outs[name] - outs["tfspec"]).abs().max().item() for name in outs)
    assert worst <= 1e-3, f"the three models disagree by {worst:.2e}: not the same model, nothing to compare"
    return worst


def model_flops_per_token(model, size: dict, seq_len: int) -> float:
    n = sum(p.numel() for p in model.parameters()) - size["context"] * size["d_model"]
    return 6 * n + 12 * size["layers"] * size["d_model"] * seq_len


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", choices=SIZES, default="124m")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq-len", type=int)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=10, help="timed steps per model per round")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16", "float32"))
    parser.add_argument("--no-compile", action="store_true")
    parser.add_argument("--peak", type=float, default=H100_BF16_DENSE, help="the device's peak FLOP/s for MFU")
    args = parser.parse_args()
    device, size = torch.device(args.device), SIZES[args.size]
    seq_len = args.seq_len or size["context"]
    torch.manual_seed(0)
    all_models = {name: m.to(device) for name, m in models(size).items()}
    worst = check_equal(all_models, size, device)
    autocast = torch.autocast(device.type, dtype=getattr(torch, args.dtype), enabled=args.dtype != "float32")
    steps = {}
    for name, model in all_models.items():
        model.train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device.type == "cuda")
        forward = model if args.no_compile else torch.compile(model)

        def step(name=name, forward=forward, optimizer=optimizer):
            tokens = torch.randint(0, size["vocab"], (args.batch, seq_len + 1), device=device)
            with autocast:
                out = logits(name, forward, tokens[:, :-1])
                loss = F.cross_entropy(out.float().flatten(0, 1), tokens[:, 1:].flatten())
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        steps[name] = step
    for name, step in steps.items():  # compile and warm up; said as it goes, so a run stopped early says where
        began = time.perf_counter()
        for _ in range(3):
            step()
        print(f"{name}: compiled and warm in {time.perf_counter() - began:.0f} s", flush=True)
    times = {name: [] for name in steps}
    for _ in range(args.rounds):
        for name, step in steps.items():
            for _ in range(args.steps):
                times[name].append(timed(step, device))
    tokens = args.batch * seq_len
    flops = model_flops_per_token(all_models["tfspec"], size, seq_len) * tokens
    print(f"GPT-2 {args.size}, batch {args.batch} × {seq_len}, {args.dtype} autocast, "
          f"{'eager' if args.no_compile else 'torch.compile'}, {_device_name(device)}, torch {torch.__version__}; "
          f"logits agree to {worst:.1e} (float32)")
    print(f"{'model':<20} {'ms/step':>9} {'tokens/s':>12} {'MFU':>7}")
    medians = {name: statistics.median(t) for name, t in times.items()}
    for name, seconds in medians.items():
        mfu = f"{flops / seconds / args.peak:>7.1%}" if device.type == "cuda" else f"{'-':>7}"  # a GPU's peak
        print(f"{name:<20} {seconds * 1e3:>9.2f} {tokens / seconds:>12,.0f} {mfu}")
    fastest = min(v for k, v in medians.items() if k != "tfspec")
    print(f"tfspec vs the faster of the two: {fastest / medians['tfspec']:.3f}× (target ≥ 0.95)")
    profile(steps["tfspec"], device)


def timed(step, device) -> float:
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        step()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3
    began = time.perf_counter()
    step()
    return time.perf_counter() - began


def _device_name(device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"


def profile(step, device) -> None:
    """Where tfspec's step time goes: the operators with the most self time over three steps."""
    from torch.profiler import ProfilerActivity, profile as profiler

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profiler(activities=activities) as prof:
        for _ in range(3):
            step()
        if device.type == "cuda":
            torch.cuda.synchronize()
    key = "self_cuda_time_total" if device.type == "cuda" else "self_cpu_time_total"
    print(f"\nwhere tfspec's time goes (three steps, by {key.replace('_', ' ')}):")
    print(prof.key_averages().table(sort_by=key, row_limit=10, max_name_column_width=60))


if __name__ == "__main__":
    main()
