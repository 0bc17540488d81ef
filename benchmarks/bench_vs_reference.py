"""Forward+backward time of compiled specs vs the reference implementations, same weights.

    python benchmarks/bench_vs_reference.py [--device cuda] [--dtype bfloat16] [--repeats 15]

Prints a table; the target is compiled/reference <= 1.05. Runs alternate (ours,
theirs, ours, ...) after warm-up, so drift in machine load hits both; the
figure is the median. Both models are in train mode (dropout 0.1 active).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import tfspec
from tfspec.interop import from_hf_gpt2
from tfspec.interop.torch_transformer import from_torch_transformer

D_MODEL, HEADS, LAYERS, D_FF, BATCH, SEQ = 256, 4, 4, 1024, 8, 128

VASWANI_LIKE = f"""
model torch_transformer_like
embedding tokens {{ vocab 1000; dim {D_MODEL} }}
defaults {{ residual post; norm layernorm(eps=1e-5); dropout 0.1; attn_dropout 0.1; act_dropout 0.1 }}
encoder x {LAYERS} {{ attention self heads={HEADS} mask=padding; feedforward d_ff={D_FF}; final layernorm }}
decoder x {LAYERS} {{
  attention self heads={HEADS} mask=causal + padding
  attention cross heads={HEADS} mask=padding
  feedforward d_ff={D_FF}
  final layernorm
}}
"""


class EmbeddedTransformer(torch.nn.Module):
    """nn.Transformer with the same token embedding in front, so both sides take token ids."""

    def __init__(self, embedding: torch.nn.Embedding, transformer: torch.nn.Transformer):
        super().__init__()
        self.embedding, self.transformer = embedding, transformer

    def forward(self, src, tgt):
        mask = torch.nn.Transformer.generate_square_subsequent_mask(tgt.shape[1], device=tgt.device,
                                                                    dtype=self.embedding.weight.dtype)
        return self.transformer(self.embedding(src), self.embedding(tgt), tgt_mask=mask, tgt_is_causal=True)


def step_time(model, inputs, device) -> float:
    start = time.perf_counter()
    out = model(*inputs)
    out = out.logits if hasattr(out, "logits") else out
    out.float().square().mean().backward()
    if device.type == "cuda":
        torch.cuda.synchronize()
    elapsed = time.perf_counter() - start
    model.zero_grad(set_to_none=True)
    return elapsed


def compare(name, ours, theirs, inputs, device, repeats, dtype) -> tuple[str, float, float]:
    autocast = torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32)
    with autocast:
        for _ in range(3):
            step_time(ours, inputs, device), step_time(theirs, inputs, device)
        ours_times, theirs_times = [], []
        for _ in range(repeats):
            ours_times.append(step_time(ours, inputs, device))
            theirs_times.append(step_time(theirs, inputs, device))
    return name, statistics.median(ours_times), statistics.median(theirs_times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32",
                        help="bfloat16 runs under autocast")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--vocab", type=int, default=8192, help="GPT-2 vocabulary (default 8192, so the layers, "
                                                                "not the LM head, dominate)")
    args = parser.parse_args()
    device, dtype = torch.device(args.device), getattr(torch, args.dtype)
    torch.manual_seed(0)
    rows = []

    reference = torch.nn.Transformer(d_model=D_MODEL, nhead=HEADS, num_encoder_layers=LAYERS,
                                     num_decoder_layers=LAYERS, dim_feedforward=D_FF, dropout=0.1,
                                     batch_first=True)
    ours = tfspec.compile(VASWANI_LIKE)
    from_torch_transformer(ours, reference)
    theirs = EmbeddedTransformer(ours.embeddings.tokens.tokens, reference)
    ours, theirs = ours.to(device).train(), theirs.to(device).train()
    src = torch.randint(0, 1000, (BATCH, SEQ), device=device)
    tgt = torch.randint(0, 1000, (BATCH, SEQ), device=device)
    rows.append(compare("torch.nn.Transformer (4+4 layers)", ours, theirs, (src, tgt), device, args.repeats, dtype))

    import transformers
    transformers.logging.set_verbosity_error()
    config = transformers.GPT2Config(vocab_size=args.vocab, n_embd=D_MODEL, n_layer=LAYERS, n_head=HEADS,
                                     n_positions=SEQ, bos_token_id=0, eos_token_id=0)
    reference = transformers.GPT2LMHeadModel(config)
    ours = tfspec.compile("examples/gpt2_small.tfs", overrides={"d_model": D_MODEL, "heads": HEADS,
                                                                 "layers": LAYERS, "vocab": args.vocab,
                                                                 "context": SEQ})
    from_hf_gpt2(ours, reference)
    ours, reference = ours.to(device).train(), reference.to(device).train()
    tokens = torch.randint(0, args.vocab, (BATCH, SEQ), device=device)
    rows.append(compare(f"HF GPT2LMHeadModel (4 layers, vocab {args.vocab})", ours, reference, (tokens,), device,
                        args.repeats, dtype))

    threads = torch.get_num_threads() if device.type == "cpu" else None
    where = f"{device}" + (f", {threads} threads" if threads else f", {torch.cuda.get_device_name(device)}")
    print(f"forward+backward, d_model {D_MODEL}, batch {BATCH}, seq {SEQ}, {args.dtype}, {where}; "
          f"median of {args.repeats} alternating runs")
    print(f"{'reference':<44} {'compiled ms':>12} {'reference ms':>13} {'ratio':>7}")
    for name, a, b in rows:
        print(f"{name:<44} {a * 1000:>12.1f} {b * 1000:>13.1f} {a / b:>7.3f}")


if __name__ == "__main__":
    main()
