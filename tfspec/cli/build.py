"""`tfspec build`: compile a spec, print its module tree (and generated forwards), its parameter count, and run a
forward pass on random inputs.
"""

from __future__ import annotations

import sys

from ..front.api import load
from ..registry import INPUTS
from .common import (DTYPES, fits, one_model, overrides, positive, print_json, seed_number, torch_device, with_json,
                     with_set)


def _random_inputs(model, batch: int, length: int, device, generator):
    import torch

    def ids(role):
        embedding = model.embeddings[model.stack_embedding[role]]
        if embedding.vocab is None:  # an input kind's tensor (pictures)
            return torch.randn(batch, *embedding.shape, generator=generator).to(device)
        return torch.randint(0, embedding.vocab, (batch, length), generator=generator).to(device)

    if model.spec.kind == "encoder-decoder":
        return ids("encoder"), ids("decoder")
    return (ids(model.spec.stacks[0].role),)


def add(sub) -> None:
    """The `build` command's arguments."""
    build = with_json(with_set(sub.add_parser("build", help="compile a spec, print its module tree and parameter "
                                                            "count, and run one forward pass on random tokens")))
    build.add_argument("file", metavar="FILE")
    build.add_argument("--batch", type=positive, default=2, help="batch size of the test pass (default 2)")
    build.add_argument("--seq-len", type=positive, default=16, help="sequence length of the test pass (default 16)")
    build.add_argument("--device", default="cpu", help="cpu (default), cuda, cuda:N, mps")
    build.add_argument("--dtype", choices=DTYPES, default="float32")
    build.add_argument("--seed", type=seed_number, default=0, help="seed for initialisation and inputs (default 0)")
    build.add_argument("--code", action="store_true",
                       help="also print the generated forward code of the model and of each kind of layer")
    build.set_defaults(run=run)


def run(args) -> int:
    import time

    import torch

    from ..backend.compiler import compile as compile_spec

    spec = one_model(load(args.file, overrides=overrides(args)), "build")
    device = torch_device(args.device)
    from ..ir.queries import fixed_length
    fixed = [n for role in spec.graph().stacks if (n := fixed_length(spec.graph(), role)) is not None]
    args.seq_len = fixed[0] if fixed else args.seq_len  # pictures make their own length
    fits(spec, args.batch, args.seq_len, "--batch × --seq-len", device)
    dtype = getattr(torch, args.dtype)
    model = compile_spec(spec, device=device, dtype=dtype, seed=args.seed).eval()
    if not args.json:
        print(model)
    if args.code and not args.json:
        print(f"\n# the model's forward (generated from the graph IR)\n{model.program.code.strip()}")
        for role in ("encoder", "decoder"):
            stack = getattr(model, role, None)
            kinds = {type(layer).__name__: layer for layer in stack.layers} if stack is not None else {}
            for name, layer in kinds.items():  # one of each kind of layer (a schedule's differ)
                print(f"\n# {role} layer, {name} (generated from the graph IR)\n{layer.code.strip()}")
    total = sum(p.numel() for p in model.parameters())
    if not args.json:
        print(f"\n{spec.name}: {total:,} parameters ({spec.kind}; {args.dtype} on {device})")
    if total != spec.parameter_count():  # the compiler and the IR analysis must agree
        print(f"error: the IR analysis counts {spec.parameter_count():,}", file=sys.stderr)
        return 1
    inputs = _random_inputs(model, args.batch, args.seq_len, device, torch.Generator().manual_seed(args.seed))
    try:
        start = time.perf_counter()
        with torch.no_grad():
            out = model(*inputs)
        if device.type == "cuda":
            torch.cuda.synchronize()
        elapsed = time.perf_counter() - start
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    outputs = out if isinstance(out, tuple) else (out,)
    shapes = ", ".join(str(tuple(o.shape)) for o in outputs)
    names = " and ".join(["logits" if spec.head else "hidden states"] + (["pooled"] if spec.pooler else []))
    finite = all(torch.isfinite(o).all().item() for o in outputs)
    given = spec.embedding(spec.stacks[-1].embedding).input  # what the last input is: tokens, or an input kind's
    what = INPUTS[given.name].what if given is not None else "tokens"
    if args.json:
        print_json({"name": spec.name, "kind": spec.kind, "parameters": total, "dtype": args.dtype,
                     "device": str(device), "input": {what: list(inputs[-1].shape)},
                     "outputs": {n: list(o.shape) for n, o in zip(names.split(" and "), outputs)},
                     "milliseconds": round(elapsed * 1000, 3), "finite": finite})
    else:
        print(f"forward pass on random {what} {tuple(inputs[-1].shape)}: {names} {shapes} in {elapsed * 1000:.1f} ms"
              f"{'' if finite else ' -- NON-FINITE VALUES'}")
    return 0 if finite else 1
