"""A mixture of experts' forward and train step against Hugging Face's Mixtral and Qwen3-MoE blocks, same weights.

    python benchmarks/bench_moe.py [--device cpu] [--dtype float32] [--repeats 15] [--tokens 2048]

Prints, per block, the median time of a forward (eval, no grad) and of a train step (forward, backward) for
tfspec's module (``tfspec.nn.moe``, built from a spec) and Hugging Face's, and their ratio (ours / theirs: below
1 is faster). The outputs are checked equal first. Runs alternate (ours, theirs, ours, ...) after warm-up, so
drift in machine load hits both.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import tfspec

# a block the size of a small published mixture (Qwen3-MoE's experts are 768 wide, Mixtral's 14336)
WIDTH, D_FF, EXPERTS, TOP = 512, 1024, 8, 2
SPEC = """embedding tokens {{ vocab 64; dim {width} }}
decoder x 1 {{ residual pre; norm rmsnorm; bias false; attention self heads=8 mask=causal
  feedforward d_ff={d_ff} activation=swiglu kind=moe({experts}, {top}, renormalize={renormalize}) }}"""


def reference_block(family: str):
    import transformers as T
    if family == "Mixtral":
        from transformers.models.mixtral.modeling_mixtral import MixtralSparseMoeBlock
        return MixtralSparseMoeBlock(T.MixtralConfig(hidden_size=WIDTH, intermediate_size=D_FF,
                                                     num_local_experts=EXPERTS, num_experts_per_tok=TOP))
    from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeSparseMoeBlock
    return Qwen3MoeSparseMoeBlock(T.Qwen3MoeConfig(hidden_size=WIDTH, moe_intermediate_size=D_FF, num_experts=EXPERTS,
                                                   num_experts_per_tok=TOP, norm_topk_prob=False))


def ours_like(reference, renormalize: bool):
    text = SPEC.format(width=WIDTH, d_ff=D_FF, experts=EXPERTS, top=TOP, renormalize=str(renormalize).lower())
    block = tfspec.compile(text, seed=0).decoder.layers[0].ffn
    with torch.no_grad():
        block.router.weight.copy_(reference.gate.weight)
        block.experts.up.copy_(reference.experts.gate_up_proj)
        block.experts.down.copy_(reference.experts.down_proj)
    return block


def timed(fn, device) -> float:
    start = time.perf_counter()
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start


def compare(ours, theirs, x, device, repeats: int) -> dict[str, tuple[float, float]]:
    def forward(model):
        with torch.no_grad():
            model(x)

    def step(model):
        model(x).float().square().mean().backward()
        model.zero_grad(set_to_none=True)

    results = {}
    for name, run in (("forward", forward), ("train step", step)):
        mine, theirs_ = [], []
        for i in range(repeats + 3):
            a, b = timed(lambda: run(ours), device), timed(lambda: run(theirs), device)
            if i >= 3:  # after warm-up
                mine.append(a)
                theirs_.append(b)
        results[name] = (statistics.median(mine), statistics.median(theirs_))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--tokens", type=int, default=2048, help="positions per call (batch × length)")
    args = parser.parse_args()
    device, dtype = torch.device(args.device), getattr(torch, args.dtype)
    torch.manual_seed(0)
    print(f"{args.tokens} positions, width {WIDTH}, {EXPERTS} SwiGLU experts of {D_FF}, top {TOP}; {args.device}, "
          f"{args.dtype}, median of {args.repeats}")
    print(f"{'block':<10} {'':<11} {'tfspec ms':>10} {'HF ms':>10} {'ratio':>7}")
    for family, renormalize in (("Mixtral", True), ("Qwen3-MoE", False)):
        theirs = reference_block(family)
        with torch.no_grad():
            for p in theirs.parameters():
                p.normal_(0.0, 0.05)
        ours = ours_like(theirs, renormalize)
        theirs, ours = theirs.to(device, dtype).train(), ours.to(device, dtype).train()
        x = torch.randn(args.tokens // 512, 512, WIDTH, device=device, dtype=dtype)
        with torch.no_grad():
            difference = (ours(x) - theirs(x)).abs().max().item()
        assert difference < (1e-4 if dtype == torch.float32 else 5e-2), f"{family}: outputs differ by {difference}"
        for name, (mine, reference) in compare(ours, theirs, x, device, args.repeats).items():
            print(f"{family:<10} {name:<11} {mine * 1e3:>10.2f} {reference * 1e3:>10.2f} {mine / reference:>7.2f}")


if __name__ == "__main__":
    main()
