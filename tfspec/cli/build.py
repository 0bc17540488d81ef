"""`tfspec build`: compile a spec, print its module tree (and generated forwards), its parameter count, and run a
forward pass on random inputs.
"""

from __future__ import annotations

import sys

from ..ir.api import load
from ..registry import INPUTS
from ..front.schema import Towers
from .common import (DTYPES, UsageError, fits, overrides, positive, print_json, seed_number, torch_device, with_json,
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
    import torch

    from ..backend.compiler import compile as compile_spec

    spec = load(args.file, overrides=overrides(args))
    if isinstance(spec, Towers):
        return _build_towers(args, spec)
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
        out, elapsed = _timed(lambda: model(*inputs), device)
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


def _timed(forward, device):
    """One forward pass without gradients, and the seconds it took (a GPU's work waited for)."""
    import time

    import torch

    start = time.perf_counter()
    with torch.no_grad():
        out = forward()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return out, time.perf_counter() - start


def _tower_inputs(model, batch: int, length: int, device, generator) -> dict:
    """Random inputs of a model of towers, by tower: pictures, or ``length`` token ids; a connector's target holds
    its source's vectors as image tokens after its first token (its length grows to hold them)."""
    import torch

    inputs = {}
    for name, tower in model.towers.items():
        embedding = tower.embeddings[tower.stack_embedding[tower.spec.stacks[0].role]]
        inputs[name] = torch.randn(batch, *embedding.shape, generator=generator).to(device) if embedding.vocab is None \
            else torch.randint(0, embedding.vocab, (batch, length), generator=generator).to(device)
    for source, connector in model.connectors.items():
        with torch.no_grad():
            count = model.features(source, inputs[source]).shape[1]
        ids = inputs[connector.target]
        vocab = model.towers[connector.target].embeddings[model.towers[connector.target].stack_embedding["decoder"]].vocab
        ids = torch.cat([ids[:, :1], ids[:, :1].new_full((batch, count), connector.image_token), ids[:, 1:]], dim=1)
        ids[:, 1 + count:][ids[:, 1 + count:] == connector.image_token] = (connector.image_token + 1) % vocab
        ids[:, :1][ids[:, :1] == connector.image_token] = (connector.image_token + 1) % vocab
        inputs[connector.target] = ids
    return inputs


def _build_towers(args, towers) -> int:
    """``build`` of a model of towers: its module tree, its parameters (the compiler's and the analysis's), one
    forward pass on random inputs of every tower."""
    import torch

    from ..backend.compiler import compile as compile_spec

    if args.code:
        raise UsageError("--code prints a model of one's generated forwards; a model of towers calls each tower's "
                         "(tfspec.compile(...).towers[NAME].program)")
    device = torch_device(args.device)
    model = compile_spec(towers, device=device, dtype=getattr(torch, args.dtype), seed=args.seed).eval()
    total = sum(p.numel() for p in model.parameters())
    if not args.json:
        print(model)
        print(f"\n{towers.name}: {total:,} parameters ({len(towers.towers)} towers; {args.dtype} on {device})")
    if total != towers.parameter_count():  # the compiler and the IR analysis must agree
        print(f"error: the IR analysis counts {towers.parameter_count():,}", file=sys.stderr)
        return 1
    inputs = _tower_inputs(model, args.batch, args.seq_len, device, torch.Generator().manual_seed(args.seed))
    try:
        out, elapsed = _timed(lambda: model(**inputs), device)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    outputs = out._asdict() if hasattr(out, "_asdict") else out if isinstance(out, dict) else {"logits": out}
    outputs = {name: (o[0] if isinstance(o, tuple) else o) for name, o in outputs.items()}
    finite = all(torch.isfinite(o).all().item() for o in outputs.values())
    shapes = {name: list(tensor.shape) for name, tensor in inputs.items()}
    if args.json:
        print_json({"name": towers.name, "kind": "towers", "parameters": total, "dtype": args.dtype,
                     "device": str(device), "inputs": shapes,
                     "outputs": {name: list(o.shape) for name, o in outputs.items()},
                     "milliseconds": round(elapsed * 1000, 3), "finite": finite})
    else:
        given = ", ".join(f"{name} {tuple(shape)}" for name, shape in shapes.items())
        made = ", ".join(f"{name} {tuple(o.shape)}" for name, o in outputs.items())
        print(f"forward pass on random inputs ({given}): {made} in {elapsed * 1000:.1f} ms"
              f"{'' if finite else ' -- NON-FINITE VALUES'}")
    return 0 if finite else 1
