"""`tfspec demo`: the whole pipeline on embedded defaults, in a few minutes on a laptop CPU.

Checks every example, summarises and draws Vaswani et al.'s base model, then
trains ``examples/reverse.tfs`` (a small model of the same shape) to reverse
sequences of 4-24 letters -- variable lengths, so padding masks, causal masks
and cross-attention all matter -- and decodes held-out sequences with it.
"""

from __future__ import annotations

import shutil
import time
from contextlib import nullcontext
from pathlib import Path

# Training budget: the held-out exact match passes TARGET well before STEPS on two
# CPU cores (see the README for measured times); evaluation every EVAL_EVERY steps
# stops the run as soon as it does.
STEPS = 4000
TARGET = 0.995
CONFIG = dict(task="reverse", symbols=26, min_len=4, max_len=24, batch=64, lr=1e-3, warmup=300, grad_clip=1.0,
              eval_every=250, eval_size=500, save_every=1000)
FINAL_EVAL = 2000  # fresh held-out sequences for the reported accuracy
MARKER = ".tfspec-demo"


def examples_dir() -> Path:
    return Path(__file__).resolve().parents[2] / "examples"  # the repository's, beside the package


def heading(text: str) -> None:
    print(f"\n== {text} " + "=" * max(0, 74 - len(text)), flush=True)


def run_demo(out: str | Path, examples: str | Path | None = None, steps: int | None = None,
             progress: bool = True) -> int:
    import torch

    from ..inspect.analysis import analyse, sweep
    from ..ir.api import load
    from ..inspect.summary import summary_line
    from ..run.decoding import Strategy, complete
    from ..inspect.diagram import RenderError, render
    from ..errors import RunError, SpecError
    from ..inspect.summary import format_summary, format_sweep
    from ..run.train import TrainConfig, train

    began = time.perf_counter()
    out = Path(out)
    examples = Path(examples) if examples is not None else examples_dir()
    specs = sorted(examples.glob("*.tfs"))
    if not specs:
        raise RunError(f"{examples}: no .tfs examples there (give --examples DIR)")
    _prepare(out)

    heading(f"1. checking {len(specs)} example specs")
    failed = 0
    for path in specs:
        try:
            print(summary_line(str(path), load(path)))
        except SpecError as exc:
            print(exc.render())
            failed += 1
    if failed:
        raise RunError(f"{failed} example spec(s) failed to check")

    heading("2. Vaswani et al. (2017), base model: cost per component")
    vaswani = load(examples / "vaswani_base.tfs")
    print(format_summary(analyse(vaswani)))
    print()
    print(format_sweep(sweep(vaswani, [128, 512, 2048])))

    heading("3. its diagram")
    try:
        print(f"wrote {render(vaswani, out / 'vaswani_base.svg')}")
    except RenderError as exc:  # no Graphviz: the .dot source still says everything
        dot = render(vaswani, out / "vaswani_base.dot")
        print(f"{exc}\nwrote {dot} instead")

    heading("4. training examples/reverse.tfs to reverse sequences of 4-24 letters")
    config = TrainConfig(**CONFIG, steps=steps or STEPS)
    spec = load(examples / "reverse.tfs")
    print(f"{spec.name}: {spec.kind}, {spec.parameter_count():,} parameters; batches of {config.batch} random "
          f"sequences over {config.symbols} letters; stops once held-out exact match reaches {TARGET:.1%}")
    run_dir = out / "reverse-run"
    run = train(examples / "reverse.tfs", config, run_dir, progress=progress,
                until=lambda m: m["exact_match"] >= TARGET, log=lambda line: print(line, flush=True))

    heading(f"5. decoding {FINAL_EVAL} fresh held-out sequences (never trained on)")
    model = run.model.eval()
    device = torch.device(config.device)
    objective = run.objective
    final = objective.decode_examples(model, device, nullcontext, FINAL_EVAL, draw=1)
    exact = sum(e["prediction"] == e["target"] for e in final) / len(final)
    for e in final[:8]:
        mark = "✓" if e["prediction"] == e["target"] else "✗"
        print(f"  {e['source']:<24} -> {e['prediction']:<24} {mark} (reference {e['target']})")
    beam = complete(model, objective.vocab, [final[0]["source"]], prompted=True, max_new=config.max_len + 1,
                    strategy=Strategy(beam=4, alpha=0.6))[0]
    print(f"  beam search (4, alpha 0.6) on {beam.input!r}: {beam.output!r} (score {beam.score:.4f})")
    misses = [e for e in final if e["prediction"] != e["target"]]
    print(f"\nexact match {exact:.2%} ({len(final) - len(misses)}/{len(final)}) after {run.step} steps; "
          f"training took {run.seconds:.0f} s, the demo so far {time.perf_counter() - began:.0f} s")
    for e in misses[:3]:
        print(f"  missed: {e['source']} -> {e['prediction']} (reference {e['target']})")

    heading("6. what is where")
    diagram = next(out.glob("vaswani_base.*"))
    for what, path in (("diagram", diagram), ("loss curve", run_dir / "loss.png"),
                       ("metrics", run_dir / "metrics.jsonl"), ("checkpoint", run.checkpoint)):
        print(f"  {what:<11} {shown(path)}")
    print(f"\noutput directory: {out.resolve()}")
    print(f"decode more: tfspec generate {shown(run_dir)} --input hello --beam")
    return 0 if exact >= 0.99 else 1


def _prepare(out: Path) -> None:
    """A fresh output directory; an earlier demo's is replaced, anything else is never touched."""
    from ..errors import RunError

    if out.exists() and not out.is_dir():
        raise RunError(f"--out {shown(out)}: a file, not a directory; name a directory for the demo's outputs")
    if out.exists() and any(out.iterdir()):
        if not (out / MARKER).exists():
            raise RunError(f"{shown(out)} exists and was not written by tfspec demo; choose another --out")
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / MARKER).write_text("written by tfspec demo; the next demo replaces this directory\n")


# ---------------------------------------------------------------- the command
from .common import positive
from ..errors import shown


def add(sub) -> None:
    """The `demo` command's arguments."""
    demo = sub.add_parser("demo", help="the tour: check the examples, summarise and draw Vaswani et al.'s model, "
                                       "train a small one to reverse sequences and decode with it")
    demo.add_argument("--out", default="out/demo", metavar="DIR", help="output directory (default out/demo)")
    demo.add_argument("--examples", metavar="DIR", help="the examples directory (default: the repository's)")
    demo.add_argument("--steps", type=positive, help="most training steps (default: the demo's budget)")
    demo.add_argument("--no-progress", action="store_true")
    demo.set_defaults(run=run)


def run(args) -> int:
    from .demo import run_demo

    return run_demo(args.out, args.examples, args.steps, progress=not args.no_progress)
