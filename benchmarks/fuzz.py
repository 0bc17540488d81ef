"""Fuzz the front end: mutated and adversarial spec texts through parse, validation and the formatter.

    python benchmarks/fuzz.py [--n 100000] [--seed 0] [--time-limit 2] [--memory-gb 2] [--show 5]
    python benchmarks/fuzz.py --cost      # the slowest shapes a spec within the token budget can take

Every input must end in a ``SpecError`` (a located diagnostic) or a valid spec; anything else is a *crash*,
and an input that takes more than ``--time-limit`` seconds of CPU, whatever its size (a spec has at most
``tfspec.front.syntax.MAX_TOKENS`` tokens), or ten times that in wall time, is a *hang*: CPU time, so a busy
machine does not turn slow inputs into hangs. Inputs are drawn from one seeded
generator (``inputs``), half mutations of the shipped examples (deleted, duplicated, swapped and spliced
pieces; tokens, numbers and characters put in), half adversarial texts of the families that once broke
the front end: deep nesting, huge and non-finite numbers, fractional powers of negatives, includes of
devices, FIFOs, directories and paths outside the spec's directory, thousands of errors on one line, many
misspelled names, line separators that are not newlines, and specs of many tokens (just under the budget,
and far over it). The campaign runs in this process under a
per-input timer and an address-space cap (``--memory-gb`` above what the process already maps); it prints

    tried N, spec_errors E, ok K, crashes C, hangs H

with the first ``--show`` distinct crashes (exception and place) and hangs, and exits 1 if C or H > 0.
``tests/test_fuzz.py`` runs the same generator under Hypothesis in ``make test``.
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import signal
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.tfs"))

TOKENS = ["model", "let", "include", "defaults", "embedding", "encoder", "decoder", "head", "pooler", "x", "×",
          "attention", "feedforward", "self", "cross", "heads=", "mask=", "causal", "padding", "window(",
          "position", "rotary(", "learned(", "tied(tokens)", "norm", "layernorm(eps=", "dropout", "=", "+", "-",
          "*", "/", "//", "%", "**", "(", ")", "{", "}", ",", ";", "\n", "#", '"', "\\\n", "d_model", "vocab",
          "sqrt(", "min(", "max(", "floor(", "ceil(", "log2(", "true", "false", "none", "x = x +", "0", "1",
          "-1", "0.5", "1e-6", "1e400", "10**400", "9 ** 9 ** 9", "\f", "\u2028", "\x85", "\r", "\t", "\x00",
          "\ud800", "\u00e9", "é", "\uffff", "  ", "layers", "heads", "d_ff"]
NUMBERS = ["0", "-0", "1", "-1", "2", "3", "7", "0.0", "1e-300", "1e308", "1e309", "1e400", "1" + "0" * 40,
           "9" * 400, "2 ** 62", "2 ** 10**400", "0.5 ** -2000", "(-8) ** 0.5", "(-1) ** (1/3)", "sqrt(" + "9" * 400
           + ")", "10**18", "10**18 + 1", "1 / 3", "1e18 * 1e18", "9 ** 9 ** 9", "1e300 * 1e300", "-(2 ** 63)",
           "min()", "max(1e400)", "floor(1e300)", "ceil(-1e300)", "log2(0)", "1_000_000", "0.1 + 0.2",
           "floor((-8) ** 0.5)", "1e-400", "10 // 0.0", "5 % 0", "2 ** -1", "1e18 // 1e-18", "float"]


def mutate(text: str, rng: random.Random, others: list[str]) -> str:
    """``text`` with one to four random edits (pieces deleted, repeated, swapped, spliced; tokens put in)."""
    for _ in range(rng.randint(1, 4)):
        n = len(text)
        i, j = sorted(rng.randrange(n + 1) for _ in range(2))
        op = rng.randrange(8)
        if op == 0:
            text = text[:i] + text[j:]
        elif op == 1:
            text = text[:j] + text[i:j] + text[j:]
        elif op == 2:
            text = text[:i] + rng.choice(TOKENS) + text[i:]
        elif op == 3:
            text = text[:i] + rng.choice(NUMBERS) + text[j:j + rng.randint(0, 3)] + text[j + rng.randint(0, 3):]
        elif op == 4:
            lines = text.split("\n")
            a, b = rng.randrange(len(lines)), rng.randrange(len(lines))
            lines[a], lines[b] = lines[b], lines[a]
            text = "\n".join(lines)
        elif op == 5:
            other = rng.choice(others)
            k, m = sorted(rng.randrange(len(other) + 1) for _ in range(2))
            text = text[:i] + other[k:m] + text[j:]
        elif op == 6:
            text = text[:i] + chr(rng.choice([rng.randrange(32), rng.randrange(32, 0x3000), 0x2028, 0x85, 0xD800,
                                               0x10FFFF])) + text[i:]
        else:
            digits = [k for k, c in enumerate(text) if c.isdigit()]
            if digits:
                k = rng.choice(digits)
                text = text[:k] + rng.choice(NUMBERS) + text[k + 1:]
    return text


def nested(rng: random.Random) -> str:
    depth = rng.choice([50, 300, 1000, 3000, 20000])
    shapes = [lambda d: "-" * d + "1", lambda d: "(" * d + "1" + ")" * d, lambda d: " + ".join(["1"] * d),
              lambda d: " ** ".join(["1"] * d), lambda d: "min(" * d + "1" + ")" * d,
              lambda d: "f(" * d + ")" * d, lambda d: "(" * d, lambda d: " - -" * d + "1",
              lambda d: "layernorm(eps=" * d + "1" + ")" * d]
    expression = rng.choice(shapes)(depth)
    where = rng.choice(["let a = {}", "embedding t {{ vocab 10; dim {} }}", "decoder x 1 {{ dropout {} }}",
                        "decoder x 1 {{ x = {} }}", "head {}"])
    return where.format(expression)


def arithmetic(rng: random.Random) -> str:
    value = rng.choice(NUMBERS) + rng.choice(["", " * 2", " + 1", " // 3", " / 7", " ** 0.5", " ** 2"])
    template = rng.choice(["let a = {v}\nembedding t {{ vocab 10; dim 8 }}\ndecoder x a {{ feedforward d_ff=8 }}",
                           "embedding t {{ vocab {v}; dim 8 }}\ndecoder x 1 {{ feedforward d_ff=8 }}",
                           "embedding t {{ vocab 10; dim 8 }}\ndecoder x 1 {{ dropout {v}; feedforward d_ff=8 }}",
                           "let a = {v}, b = floor(a), c = min(a, 2)\nembedding t {{ vocab 10; dim 8 }}",
                           "embedding t {{ vocab 10; dim 8; position learned({v}) }}\ndecoder x 1 {{ feedforward "
                           "d_ff=8 }}",
                           "embedding t {{ vocab 10; dim 8 }}\ndecoder x 1 {{ attention self heads={v} }}"])
    return template.format(v=value)


def include(rng: random.Random, directory: Path) -> str:
    target = rng.choice(["/dev/zero", "/dev/null", "/etc/passwd", "../secret.tfs", "../../etc/passwd", "sub",
                         "fifo", "big.tfs", "a\x00b.tfs", "\ud800.tfs", "", ".", "/", "missing.tfs", "self.tfs",
                         "sub/../../x.tfs", "/proc/self/mem", "nested.tfs", "binary.tfs"])
    return f'include "{target}"\n' + rng.choice(["", "embedding t { vocab 10; dim 8 }\n"])


def many_errors(rng: random.Random) -> str:
    count = rng.choice([100, 1000, 5000])
    if rng.random() < 0.5:  # one long line of errors
        return "embedding t { " + "; ".join(f"atention{k} self" for k in range(count)) + " }"
    names = " + ".join(f"d_modle{k}" for k in range(count))
    return f"let d_model = 8\nlet a = {names}\n"


def line_separators(rng: random.Random) -> str:
    separator = rng.choice(["\f", "\u2028", "\x85", "\r", "\v", "\x1c", "\u2029"])
    return (f"# a comment{separator}with a separator\nembedding t {{ vocab 10; dim 8 }}\n"
            f"decoder x 1 {{ atention self }}\n")


def long_spec(rng: random.Random, tokens: int | None = None) -> str:
    """A spec of about ``tokens`` tokens (default: drawn around ``MAX_TOKENS``) in one of the shapes that cost
    the front end most per token: empty statements, ``let`` lines, long argument lists, chains of names,
    thousands of sublayers, thousands of unknown names."""
    from tfspec.front.syntax import MAX_TOKENS

    n = tokens or int(MAX_TOKENS * rng.choice([0.5, 0.98, 1.02, 5, 50]))
    base = "model m\nembedding tokens { vocab 10; dim 8; position none }\n"
    model = base + "decoder x 1 { attention self heads=2 mask=causal; feedforward d_ff=8 }\nhead tied(tokens)\n"
    shapes = {
        "semicolons": lambda: ";" * n + "\n" + model,
        "lets": lambda: "".join(f"let x{i} = {i}\n" for i in range(n // 4)) + model,
        "arguments": lambda: "let a = max(" + ", ".join(["1"] * (n // 2)) + ")\n" + model,
        "chain": lambda: "let x0 = 1\n" + "".join(f"let x{i} = x{i - 1} + 1\n" for i in range(1, n // 6)) + model,
        "sublayers": lambda: base + "decoder x 1 {" + "feedforward d_ff=8; " * (n // 5) + "}\nhead tied(tokens)\n",
        "attention": lambda: base + "decoder x 1 {" + "attention self heads=2 mask=causal; " * (n // 9)
                     + "}\nhead tied(tokens)\n",
        "unknown names": lambda: "".join(f"let a{i} = b{i}\n" for i in range(n // 4)) + model,
    }
    return shapes[rng.choice(sorted(shapes))]()


def inputs(rng: random.Random, directory: Path):
    """An endless stream of fuzz inputs (texts) from ``rng``; ``directory`` holds the includable files."""
    examples = [p.read_text(encoding="utf-8") for p in EXAMPLES]
    generators = [nested, arithmetic, many_errors, line_separators, lambda r: include(r, directory)]
    rare = [long_spec]  # slow to make and to check: one input in fifty
    while True:
        if rng.random() < 0.02:
            yield rng.choice(rare)(rng)
        elif rng.random() < 0.5:
            yield mutate(rng.choice(examples), rng, examples)
        else:
            yield rng.choice(generators)(rng)


def include_directory(root: Path) -> Path:
    """A spec directory beside a secret, with a subdirectory, a FIFO, a large file and binary bytes."""
    spec_dir = root / "specs"
    (spec_dir / "sub").mkdir(parents=True, exist_ok=True)
    (root / "secret.tfs").write_text("let secret = 1  # outside the spec's directory\n")
    (spec_dir / "nested.tfs").write_text('include "nested2.tfs"\n')
    (spec_dir / "nested2.tfs").write_text('include "nested.tfs"\n')
    (spec_dir / "self.tfs").write_text('include "self.tfs"\n')
    (spec_dir / "big.tfs").write_text("# " + "x" * (3 << 20) + "\n")
    (spec_dir / "binary.tfs").write_bytes(bytes(range(256)))
    if not (spec_dir / "fifo").exists():
        os.mkfifo(spec_dir / "fifo")
    return spec_dir


class Timeout(BaseException):
    """The per-input time limit (a BaseException, so no ``except Exception`` of the code under test eats it)."""


def _alarm(signum, frame):
    raise Timeout


def check(text: str, file: str) -> str:
    """Run one input through parse, validation and the formatter: 'spec_error' or 'ok'; anything else raises.
    (Everything it uses is imported before any timer is armed: an import interrupted half way cannot be
    redone in the same process.)"""
    import tfspec
    from tfspec.errors import SpecError
    from tfspec.front.fmt import format_text

    try:
        with warnings.catch_warnings(record=True):  # a spec's warnings are rendered (part of the work), not shown
            warnings.simplefilter("always")
            tfspec.parse(text, file=file)
    except SpecError as exc:
        str(exc)  # rendering the diagnostics is part of the work
        return "spec_error"
    format_text(text, file)
    return "ok"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--time-limit", type=float, default=2.0, help="CPU seconds an input may take (default 2)")
    parser.add_argument("--memory-gb", type=float, default=2.0, help="address space above the start (default 2)")
    parser.add_argument("--show", type=int, default=5, help="distinct crashes and hangs to print")
    parser.add_argument("--cost", action="store_true", help="instead: CPU time of each costly shape at the budget")
    args = parser.parse_args(argv)
    if args.cost:
        return measure_cost(args.time_limit)

    import tfspec  # noqa: F401 - imported before the memory cap: torch maps a lot of address space
    from tfspec.errors import SpecError

    import_everything()

    for example in EXAMPLES:  # variants and lazy imports load now, not under the first inputs' timers
        check(example.read_text(encoding="utf-8"), str(example))
    mapped = _mapped_bytes()
    cap = mapped + int(args.memory_gb * 2 ** 30)
    resource.setrlimit(resource.RLIMIT_AS, (cap, resource.getrlimit(resource.RLIMIT_AS)[1]))
    signal.signal(signal.SIGALRM, _alarm)
    signal.signal(signal.SIGPROF, _alarm)
    counts = {"spec_error": 0, "ok": 0, "crash": 0, "hang": 0}
    crashes: dict[str, tuple[str, str]] = {}
    hangs: list[str] = []
    slowest = (0.0, "")
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as root:
        directory = include_directory(Path(root))
        file = str(directory / "fuzz.tfs")
        stream = inputs(random.Random(args.seed), directory)
        for tried in range(1, args.n + 1):
            text = next(stream)
            began = time.perf_counter()
            limit = args.time_limit
            try:
                # CPU time, so a busy machine does not turn slow inputs into hangs; wall time (10×) for inputs
                # that wait without working (a FIFO)
                signal.setitimer(signal.ITIMER_PROF, limit)
                signal.setitimer(signal.ITIMER_REAL, 10 * limit)
                try:
                    outcome = check(text, file)
                finally:
                    signal.setitimer(signal.ITIMER_PROF, 0)
                    signal.setitimer(signal.ITIMER_REAL, 0)
            except Timeout:
                outcome = "hang"
                hangs.append(text)
            except (Exception, RecursionError, MemoryError) as exc:  # noqa: BLE001 - that is what we count
                if isinstance(exc, SpecError):
                    raise AssertionError("SpecError escaped check") from exc
                outcome = "crash"
                frame = traceback.extract_tb(exc.__traceback__)[-1]
                where = f"{type(exc).__name__} at {Path(frame.filename).name}:{frame.lineno} ({frame.name})"
                crashes.setdefault(where, (text, f"{type(exc).__name__}: {str(exc)[:200]}"))
            elapsed = time.perf_counter() - began
            if elapsed > slowest[0]:
                slowest = (elapsed, text)
            counts[outcome] += 1
            if tried % 10_000 == 0:
                print(f"  {tried:,} inputs, {time.perf_counter() - start:.0f} s, crashes {counts['crash']}, "
                      f"hangs {counts['hang']}", flush=True)
    print(f"tried {args.n}, spec_errors {counts['spec_error']}, ok {counts['ok']}, crashes {counts['crash']}, "
          f"hangs {counts['hang']}")
    print(f"{time.perf_counter() - start:.0f} s; slowest input {slowest[0]:.3f} s ({len(slowest[1]):,} characters); "
          f"peak resident memory {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20:.2f} GB")
    for where, (text, message) in list(crashes.items())[:args.show]:
        print(f"\ncrash: {where}\n  {message}\n  input: {text[:300]!r}")
    shown: dict[str, str] = {}
    for text in hangs:  # one of each kind: the first 40 characters
        shown.setdefault(text[:40], text)
    for text in list(shown.values())[:args.show]:
        print(f"\nhang ({len(text):,} characters): {text[:300]!r}")
    return 1 if counts["crash"] or counts["hang"] else 0


def import_everything() -> None:
    """Every module of tfspec, imported before a timer is armed: a timer that fires inside a first import
    leaves the module half made ("cannot load module more than once per process" on the next input)."""
    import importlib
    import pkgutil

    import tfspec

    for module in pkgutil.walk_packages(tfspec.__path__, "tfspec."):
        if not module.name.endswith(".__main__"):  # each runs a command line when imported
            importlib.import_module(module.name)


def measure_cost(limit: float) -> int:
    """Parse and format each ``long_spec`` shape at ``MAX_TOKENS`` - 300 tokens (under the budget): print the
    CPU seconds of each and the worst; exit 1 when the worst is over ``limit``."""
    import tfspec
    from tfspec.errors import SpecError
    from tfspec.front.fmt import format_text
    from tfspec.front.syntax import MAX_TOKENS

    for example in EXAMPLES:
        check(example.read_text(encoding="utf-8"), str(example))
    worst = 0.0
    shapes = sorted({long_spec(random.Random(k), MAX_TOKENS - 300) for k in range(60)}, key=len)
    for text in shapes:
        for what, run in (("check", lambda t: tfspec.parse(t).graph()), ("fmt", format_text)):
            began = time.process_time()
            try:
                run(text)
                outcome = "ok"
            except SpecError as exc:
                outcome = str(exc).splitlines()[0].split("error: ")[-1][:50]
            took = time.process_time() - began
            worst = max(worst, took)
            print(f"  {what:5} {len(text):>9,} characters: {took:5.2f} s CPU  {text[:24]!r}… {outcome}")
    print(f"worst {worst:.2f} s CPU for a spec of {MAX_TOKENS - 300:,} tokens (limit {limit:g} s)")
    return 0 if worst <= limit else 1


def _mapped_bytes() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


if __name__ == "__main__":
    sys.exit(main())
