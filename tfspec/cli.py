"""The `tfspec` command line. Spec errors print like a compiler and exit 1; usage errors exit 2.

Commands: check, fmt, build, verify. Torch is imported only by the commands that build a model.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from .api import load
from .errors import SpecError


def parse_set(item: str) -> tuple[str, Any]:
    """``--set layers=2`` -> ("layers", 2); a non-number stays text and is parsed as an expression."""
    name, sep, value = item.partition("=")
    name, value = name.strip(), value.strip()
    if not sep or not name or not value:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {item!r}")
    for kind in (int, float):
        try:
            return name, kind(value)
        except ValueError:
            pass
    return name, value


def _overrides(args) -> dict[str, Any]:
    return dict(args.set or [])


def summary_line(path: str, spec) -> str:
    g = spec.graph()
    stacks = g.graph["stacks"]
    layers = "+".join(str(stacks[s.role]["repeat"]) for s in spec.stacks)
    heads = sorted({a["spec"].heads for _, a in g.nodes(data=True) if a["op"] == "attention"})
    widths = sorted({info["width"] for info in stacks.values()})
    head_text = "/".join(map(str, heads)) + " heads" if heads else "no attention"
    return (f"{path}: {spec.name}: {spec.kind}, {layers} layers, d_model {'/'.join(map(str, widths))}, "
            f"{head_text}, {spec.parameter_count():,} parameters")


def cmd_check(args) -> int:
    failed = 0
    for path in args.files:
        try:
            spec = load(path, overrides=_overrides(args))
        except SpecError as exc:
            print(exc.render(), file=sys.stderr)
            failed += 1
            continue
        if args.dump:
            print(_dump(spec, args.dump))
        else:
            print(summary_line(path, spec))
    return 1 if failed else 0


def cmd_fmt(args) -> int:
    from .fmt import format_text

    failed = 0
    for path in args.files:
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
            formatted = format_text(text, path)
        except SpecError as exc:
            print(exc.render(), file=sys.stderr)
            failed += 1
            continue
        except (OSError, UnicodeDecodeError) as exc:
            print(f"{path}: error: cannot read: {getattr(exc, 'strerror', None) or exc}", file=sys.stderr)
            failed += 1
            continue
        if args.check:
            if formatted != text:
                print(f"{path}: not formatted")
                failed += 1
        elif args.write:
            if formatted != text:
                _write_atomically(path, formatted)
                print(f"formatted {path}")
        else:
            sys.stdout.write(formatted)
    return 1 if failed else 0


def _write_atomically(path: str, text: str) -> None:
    import os
    import tempfile

    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tfspec-fmt-")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


DTYPES = ("float32", "bfloat16", "float16")


def _device(name: str):
    import torch

    try:
        device = torch.device(name)
    except RuntimeError:
        raise UsageError(f"--device {name}: not a device name (cpu, cuda, cuda:1, mps)") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UsageError(f"--device {name}: CUDA is not available on this machine")
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise UsageError(f"--device {name}: MPS is not available on this machine")
    return device


class UsageError(Exception):
    """A bad command-line argument: printed, exit status 2."""


def _random_inputs(model, batch: int, length: int, device, generator):
    import torch

    def ids(role):
        v = model.embeddings[model.stack_embedding[role]].vocab
        return torch.randint(0, v, (batch, length), generator=generator).to(device)

    if model.spec.kind == "encoder-decoder":
        return ids("encoder"), ids("decoder")
    return (ids(model.spec.stacks[0].role),)


def cmd_build(args) -> int:
    import time

    import torch

    from .compiler import compile as compile_spec

    try:
        spec = load(args.file, overrides=_overrides(args))
    except SpecError as exc:
        print(exc.render(), file=sys.stderr)
        return 1
    device = _device(args.device)
    dtype = getattr(torch, args.dtype)
    model = compile_spec(spec, device=device, dtype=dtype, seed=args.seed).eval()
    print(model)
    if args.code:
        for role in ("encoder", "decoder"):
            stack = getattr(model, role, None)
            if stack is not None:
                print(f"\n# {role} layer (generated from the graph IR)\n{stack.layers[0].code.strip()}")
    total = sum(p.numel() for p in model.parameters())
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
    print(f"forward pass on random tokens {tuple(inputs[-1].shape)}: {names} {shapes} in {elapsed * 1000:.1f} ms"
          f"{'' if finite else ' -- NON-FINITE VALUES'}")
    return 0 if finite else 1


def cmd_verify(args) -> int:
    from .compiler import compile as compile_spec
    from .verify import small_version, verify

    try:
        spec = load(args.file, overrides=_overrides(args))
        if not args.full_size:
            spec, changes = small_version(spec)
    except SpecError as exc:
        print(exc.render(), file=sys.stderr)
        return 1
    if not args.full_size:
        print(f"{args.file}: checking {spec.name} at test size" + (f" ({', '.join(changes)})" if changes else ""))
    model = compile_spec(spec, seed=args.seed)
    results = verify(model, examples=args.examples, seed=args.seed)
    marks = {"held": "held    ", "violated": "VIOLATED", "not applicable": "n/a     "}
    for r in results:
        print(f"  {marks[r.status]} {r.name}: {r.detail}")
    violated = [r.name for r in results if r.status == "violated"]
    print(f"{len(violated)} of {sum(r.status != 'not applicable' for r in results)} properties violated"
          + (f": {', '.join(violated)}" if violated else ""))
    return 1 if violated else 0


def _dump(spec, what: str) -> str:
    if what == "spec":
        return json.dumps(spec.model_dump(), indent=2)
    from .graph import format_graph

    return format_graph(spec.graph())


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tfspec", description="Define, check and build Transformer architectures.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def with_set(p):
        p.add_argument("--set", action="append", type=parse_set, metavar="NAME=VALUE",
                       help="override a `let` parameter, e.g. --set layers=2 (repeatable)")
        return p

    check = with_set(sub.add_parser("check", help="parse and validate specs; print a summary line for each"))
    check.add_argument("files", nargs="+", metavar="FILE")
    check.add_argument("--dump", choices=["spec", "graph"], help="print the resolved spec (JSON) or the graph IR")
    check.set_defaults(run=cmd_check)

    fmt = sub.add_parser("fmt", help="print specs in canonical form (comments kept)")
    fmt.add_argument("files", nargs="+", metavar="FILE")
    mode = fmt.add_mutually_exclusive_group()
    mode.add_argument("--write", "-w", action="store_true", help="rewrite the files in place")
    mode.add_argument("--check", action="store_true", help="exit 1 if any file is not formatted")
    fmt.set_defaults(run=cmd_fmt)

    build = with_set(sub.add_parser("build", help="compile a spec, print its module tree and parameter count, "
                                                  "and run one forward pass on random tokens"))
    build.add_argument("file", metavar="FILE")
    build.add_argument("--batch", type=_positive, default=2, help="batch size of the test pass (default 2)")
    build.add_argument("--seq-len", type=_positive, default=16, help="sequence length of the test pass (default 16)")
    build.add_argument("--device", default="cpu", help="cpu (default), cuda, cuda:N, mps")
    build.add_argument("--dtype", choices=DTYPES, default="float32")
    build.add_argument("--seed", type=int, default=0, help="seed for initialisation and inputs (default 0)")
    build.add_argument("--code", action="store_true", help="also print each stack's generated layer code")
    build.set_defaults(run=cmd_build)

    verify = with_set(sub.add_parser("verify", help="check causality, permutation equivariance, padding "
                                                    "invariance, window locality and gradients on the compiled spec"))
    verify.add_argument("file", metavar="FILE")
    verify.add_argument("--examples", type=_positive, default=25, help="Hypothesis examples per property (default 25)")
    verify.add_argument("--seed", type=int, default=0)
    verify.add_argument("--full-size", action="store_true", help="check the spec at its own sizes (slow for big "
                                                                 "models); by default widths, vocabularies and "
                                                                 "layer counts are reduced")
    verify.set_defaults(run=cmd_verify)
    return parser


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except UsageError as exc:
        print(f"tfspec {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
