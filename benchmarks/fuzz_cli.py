"""Fuzz the command line, and inject the faults of an unlucky user: hostile option values for every subcommand,
a full disk under every writer, writers killed mid-run, two trainers on one run directory.

    python benchmarks/fuzz_cli.py [--n 2000] [--seed 0] [--cpu-limit 30] [--faults 20] [--show 5]

CLI mode: each invocation is a subcommand with one to three options drawn from that command's own, given
hostile values (zero, negatives, 1e400, NaN, 2**70, NUL bytes, undecodable bytes, devices, FIFOs, /proc
paths, existing files and directories), on small models so that a valid invocation finishes quickly. It runs
as ``tfspec.cli.main(argv)`` in a forked child (tfspec and torch are imported once, before any child: an
import cut short by a timer cannot be redone), with its CPU time capped (``RLIMIT_CPU``; ten times that in wall
time for a read that blocks). An invocation must exit 0, 1, 2 or 130 with no traceback; otherwise it is a
*traceback*, an *abort* (a signal, exit 134) or a *hang* (over its CPU time). /dev/null and /dev/zero must stay
devices.

Fault mode (``--faults`` rounds of each):
- *full disk*: every writer (render, emit, summary --plot, mask, export --to hf/torch, import --run, train,
  prepare) aimed at a full tmpfs (root only; skipped otherwise) must exit 1 in one line naming the file, and
  leave nothing behind;
- *killed writer*: a trainer saving every step is SIGKILLed at a random moment; its run must then load (or
  hold no checkpoint yet) and resume to the end;
- *two trainers*: a second ``train`` on a run being written must be refused (exit 1, naming the holder's
  PID) and the first must finish.

It prints ``invocations N, ok K, tracebacks T, aborts A, hangs H`` and one line per fault, and exits 1 if
anything failed.
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REVERSE = str(ROOT / "examples" / "reverse.tfs")
GPT2 = str(ROOT / "examples" / "gpt2_small.tfs")
SMALL = ["--set", "layers=1", "--set", "d_model=32", "--set", "heads=2", "--set", "d_ff=32"]
SMALL_GPT2 = ["--set", "layers=1", "--set", "d_model=32", "--set", "heads=2", "--set", "context=16"]
TINY_TRAIN = ["--batch", "4", "--eval-size", "4", "--no-progress"]

NUMBERS = ["0", "-1", "1", "2", "3", "1e400", "1e308", "1e39", "1e-300", "nan", "inf", "-inf", "", "abc",
           str(2 ** 70), "99999999999", "1.5", "0.5", "-0", "1e9", "\x00", "é"]


def paths(root: Path) -> list[str]:
    return ["/dev/zero", "/dev/null", "/proc/x.svg", str(root / "fifo"), str(root / "afile"), str(root / "adir"),
            str(root / "missing" / "x"), str(root / "new"), str(root / "out.svg"), str(root / "out.png"),
            str(root / "out.py"), "\x00", "a\udcff.tfs", "", str(root / "run"), str(root / "lm"),
            str(root / "text.txt"), str(root / "prepared"), str(root / "hf"), "-"]


def commands(root: Path) -> dict[str, tuple[list[str], dict[str, list[str]]]]:
    """Each subcommand: a valid base command line (small models), and its options with the values to draw."""
    p = paths(root)
    run, lm, hf, text = str(root / "run"), str(root / "lm"), str(root / "hf"), str(root / "text.txt")
    shared = {"--set": [f"layers={v}" for v in NUMBERS] + ["heads=3", "d_model=1e9", "nope=1", "=", "layers"]}
    return {
        "check": (["check", REVERSE, *SMALL], {**shared, "--dump": ["spec", "graph", "x"]}),
        "fmt": (["fmt", REVERSE], {"--check": [], "FILE": p}),
        "build": (["build", REVERSE, *SMALL], {**shared, "--batch": NUMBERS, "--seq-len": NUMBERS,
                                               "--seed": NUMBERS, "--device": ["meta", "cuda:7", "bogus", "cpu"],
                                               "--dtype": ["float8", "bfloat16", "float16"]}),
        "summary": (["summary", REVERSE, *SMALL], {**shared, "--seq-len": NUMBERS, "--batch": NUMBERS,
                                                   "--sweep": NUMBERS + ["1,2,0", "64,1e9", ","],
                                                   "--plot": p, "--src-len": NUMBERS, "--json": []}),
        "mask": (["mask", REVERSE, *SMALL, "-o", str(root / "m.png")], {"--seq-len": NUMBERS, "--head": NUMBERS,
                                                                       "-o": p, "--tgt-len": NUMBERS}),
        "render": (["render", REVERSE, "-o", str(root / "r.svg")], {"-o": p, "--expand": [], "--detail": []}),
        "emit": (["emit", REVERSE], {"-o": p, **shared}),
        "diff": (["diff", REVERSE, GPT2], {"--seq-len": NUMBERS, "--json": [], "A": p}),
        "import": (["import", hf], {"-o": p, "--run": p, "--name": ["", "\x00", "a b", "é"], "DIR": p}),
        "export": (["export", run, "--to", "torch", "-o", str(root / "exported")],
                   {"--to": ["hf", "torch", "onnx", "x"], "-o": p, "RUN": p}),
        "train": (["train", REVERSE, *SMALL, *TINY_TRAIN, "--steps", "1", "--out", str(root / "t")],
                  {"--steps": [v for v in NUMBERS if v not in ("99999999999", "1e9")], "--batch": NUMBERS,
                   "--lr": NUMBERS, "--warmup": NUMBERS, "--grad-clip": NUMBERS, "--label-smoothing": NUMBERS,
                   "--weight-decay": NUMBERS, "--seed": NUMBERS, "--eval-size": NUMBERS, "--save-every": NUMBERS,
                   "--max-len": ["0", "-1", "1e400", "nan", "3", "99999999999"], "--symbols": NUMBERS,
                   "--tokenizer": ["bpe:1000000000", "bpe:x", "bytes", "chars", "", "\x00", "/dev/zero", "bpe:300"],
                   "--out": p, "--device": ["meta", "cuda:7", "bogus"], "--dtype": ["float16", "x"],
                   "--data": [text, "/dev/zero", str(root / "fifo"), str(root / "adir"), "\x00", "a\udcff"],
                   "--resume": p, "--init": p, "--nproc": ["0", "-1", "1000"], "--accumulate": NUMBERS}),
        "generate": (["generate", lm, "--input", "hello", "--max-new", "4"],
                     {"--temperature": NUMBERS, "--top-k": NUMBERS, "--top-p": NUMBERS, "--beam": NUMBERS,
                      "--alpha": NUMBERS, "--max-new": ["0", "-1", "1e400", "nan", "3", "50", str(2 ** 70)],
                      "--count": NUMBERS, "--seed": NUMBERS, "--input": ["", "a\udcff", "\x00", "x" * 40, "é"],
                      "--device": ["meta", "cuda:7", "bogus"], "CHECKPOINT": p}),
        "prepare": (["prepare", text, "-o", str(root / "p")],
                    {"--tokenizer": ["bpe:1000000000", "bpe:x", "chars", "", "/dev/zero"], "-o": p,
                     "--glob": ["*", "../*", "/etc/*", ""], "PATH": p}),
        "demo": (["demo", "--out", str(root / "afile")], {"--out": [str(root / "afile"), "/proc/x", "\x00"]}),
    }


def draw(rng: random.Random, base: list[str], options: dict[str, list[str]]) -> list[str]:
    argv = list(base)
    for _ in range(rng.randint(1, 3)):
        option = rng.choice(sorted(options))
        values = options[option]
        if option.isupper():  # a positional: replace the command's first one
            argv[1] = rng.choice(values)
        elif not values:
            argv.append(option)
        else:
            argv += [option, rng.choice(values)]
    return argv


def run_child(argv: list[str], cwd: Path, cpu_limit: float, memory: int | None = None) -> tuple[str, int, str]:
    """(outcome, status, stderr) of ``tfspec.cli.main(argv)`` in a forked child (``memory``: a cap on its address
    space, in bytes)."""
    from tfspec.cli import main

    err_path = cwd / ".stderr"
    pid = os.fork()
    if pid == 0:  # the child: never returns
        status = 99
        try:
            os.chdir(cwd)
            fd = os.open(err_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, 1)
            os.dup2(fd, 2)
            sys.stdout = open(1, "w", closefd=False)  # the descriptors, whatever the parent had put there
            sys.stderr = open(2, "w", closefd=False)
            resource.setrlimit(resource.RLIMIT_CPU, (int(cpu_limit), int(cpu_limit) + 5))
            if memory is not None:
                resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
            try:
                status = main(argv)
            except SystemExit as exc:
                status = exc.code if isinstance(exc.code, int) else 2
            except BaseException:  # noqa: BLE001 - what the harness counts
                import traceback
                traceback.print_exc()
                status = 99
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(status if isinstance(status, int) else 99)
    deadline = time.monotonic() + 10 * cpu_limit
    while True:
        done, wait_status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return "hang", -9, err_path.read_text(errors="replace")
        time.sleep(0.01)
    err = err_path.read_text(errors="replace")
    if os.WIFSIGNALED(wait_status):
        sig = os.WTERMSIG(wait_status)
        return ("hang" if sig == signal.SIGXCPU else "abort"), -sig, err
    status = os.WEXITSTATUS(wait_status)
    if "Traceback" in err or status == 99:
        return "traceback", status, err
    if status == 134:
        return "abort", status, err
    return ("ok" if status in (0, 1, 2, 130) else "traceback"), status, err


def setup(root: Path) -> None:
    """The runs, files and oddities the invocations name (made in subprocesses: the harness itself runs no torch
    work before it forks)."""
    os.mkfifo(root / "fifo")
    (root / "afile").write_text("x")
    (root / "adir").mkdir()
    (root / "text.txt").write_text("hello world, a small text to learn from\n" * 40)
    tfspec = [sys.executable, "-m", "tfspec"]
    steps = [*TINY_TRAIN, "--steps", "1"]
    subprocess.run([*tfspec, "train", REVERSE, *SMALL, *steps, "--out", str(root / "run")], check=True,
                   stdout=subprocess.DEVNULL)
    subprocess.run([*tfspec, "train", GPT2, *SMALL_GPT2, *steps, "--data", str(root / "text.txt"), "--seq-len", "8",
                    "--out", str(root / "lm")], check=True, stdout=subprocess.DEVNULL)
    subprocess.run([*tfspec, "prepare", str(root / "text.txt"), "-o", str(root / "prepared")], check=True,
                   stdout=subprocess.DEVNULL)
    subprocess.run([sys.executable, "-c", "import sys, transformers as T; T.GPT2LMHeadModel(T.GPT2Config(n_layer=1, "
                    "n_embd=16, n_head=2, n_positions=16, vocab_size=300, bos_token_id=0, eos_token_id=0))"
                    ".save_pretrained(sys.argv[1])", str(root / "hf")], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)


def cli_campaign(args, root: Path) -> dict:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from fuzz import import_everything

    import_everything()  # once, before any child is forked

    table = commands(root)
    rng = random.Random(args.seed)
    counts = {"ok": 0, "traceback": 0, "abort": 0, "hang": 0}
    statuses: dict[int, int] = {}
    shown: dict[str, tuple[list[str], str]] = {}
    scratch = root / "scratch"
    started = time.perf_counter()
    for k in range(1, args.n + 1):
        name = rng.choice(sorted(table))
        base, options = table[name]
        argv = draw(rng, base, options)
        if scratch.exists():
            shutil.rmtree(scratch, ignore_errors=True)
        scratch.mkdir()
        for leftover in ("t", "new", "exported", "p"):  # a previous invocation's outputs
            shutil.rmtree(root / leftover, ignore_errors=True)
        outcome, status, err = run_child(argv, scratch, args.cpu_limit)
        counts[outcome] += 1
        statuses[status] = statuses.get(status, 0) + 1
        if outcome != "ok":
            last = err.strip().splitlines()[-1] if err.strip() else f"status {status}"
            shown.setdefault(f"{outcome} {name}: {last[:100]}", (argv, err))
        for device in ("/dev/null", "/dev/zero"):
            if not stat.S_ISCHR(os.stat(device).st_mode):
                raise SystemExit(f"{device} is no longer a device after {argv!r}")
        if k % 250 == 0:
            print(f"  {k:,} invocations, {time.perf_counter() - started:.0f} s, {counts}", flush=True)
    print(f"invocations {args.n}, ok {counts['ok']}, tracebacks {counts['traceback']}, aborts {counts['abort']}, "
          f"hangs {counts['hang']} ({time.perf_counter() - started:.0f} s; exit statuses "
          + ", ".join(f"{k}: {v}" for k, v in sorted(statuses.items())) + ")")
    for what, (argv, err) in list(shown.items())[:args.show]:
        print(f"\n{what}\n  argv: {argv!r}\n  {err.strip()[-600:]}")
    return counts


def full_disk_faults(root: Path) -> tuple[int, int]:
    """(passed, tried) writers on a full tmpfs; (0, 0) where no tmpfs can be mounted."""
    mount = root / "full"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount)],
                      capture_output=True).returncode != 0:
        return 0, 0
    passed = tried = 0
    try:
        fd = os.open(mount / "filler", os.O_WRONLY | os.O_CREAT)
        try:
            while os.write(fd, b"\0" * 4096):
                pass
        except OSError:
            pass
        os.close(fd)
        full = str(mount)
        writers = [["render", REVERSE, "-o", f"{full}/x.svg"], ["emit", REVERSE, "-o", f"{full}/x.py"],
                   ["summary", REVERSE, "--plot", f"{full}/x.png"], ["mask", REVERSE, "-o", f"{full}/x.png"],
                   ["export", str(root / "run"), "--to", "torch", "-o", f"{full}/e"],
                   ["import", str(root / "hf"), "--run", f"{full}/i"],
                   ["train", REVERSE, *SMALL, *TINY_TRAIN, "--steps", "1", "--out", f"{full}/t"],
                   ["prepare", str(root / "text.txt"), "-o", f"{full}/p"]]
        for argv in writers:
            tried += 1
            outcome, status, err = run_child(argv, root, 60)
            lines = [line for line in err.splitlines() if line.strip()]
            clean = sorted(p.name for p in mount.iterdir()) == ["filler"]
            named = len(lines) == 1 and "No space left" in lines[0] and full in lines[0]
            if outcome == "ok" and status == 1 and named and clean:
                passed += 1
            else:
                print(f"  full disk: {argv[0]} gave {outcome} {status}, left {sorted(p.name for p in mount.iterdir())}:"
                      f" {err.strip()[-300:]}")
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)
    return passed, tried


def killed_writer_faults(root: Path, rounds: int, rng: random.Random) -> tuple[int, int]:
    """(runs that loaded and resumed after a SIGKILL, rounds)."""
    from tfspec.run import checkpoint as ckpt

    passed = before_first = 0
    for k in range(rounds):
        out = root / f"killed{k}"
        trainer = subprocess.Popen([sys.executable, "-m", "tfspec", "train", REVERSE, *SMALL, *TINY_TRAIN,
                                    "--steps", "1000", "--save-every", "1", "--eval-every", "1000", "--out", str(out)],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(2.5, 6.0))
        trainer.kill()
        trainer.wait()
        try:
            saved = ckpt.load(out) if ckpt.latest(out) is not None else None
            if saved is not None:
                saved.training_state()
                end = saved.step + 3  # a few steps more than it saved, not the whole run
                resumed = subprocess.run([sys.executable, "-m", "tfspec", "train", "--resume", str(out),
                                          "--steps", str(end), "--no-progress"], capture_output=True, text=True)
                ok = resumed.returncode == 0 and ckpt.load(out).step == end
                if not ok:
                    print(f"  killed writer: resume failed: {resumed.stderr.strip()[-300:]}")
            else:  # killed before its first checkpoint: the next run may use the directory
                before_first += 1
                ok = not out.exists() or not any(p.name == "checkpoints" and any(p.iterdir()) for p in out.iterdir())
            passed += ok
        except ckpt.CheckpointError as exc:
            print(f"  killed writer: the run does not load: {exc}")
    print(f"  killed writer: {rounds - before_first} killed after a checkpoint (loaded, resumed), {before_first} "
          "before the first")
    return passed, rounds


def concurrent_faults(root: Path, rounds: int) -> tuple[int, int]:
    """(rounds where a second trainer was refused and the first finished, rounds)."""
    passed = 0
    for k in range(rounds):
        out = root / f"shared{k}"
        first = subprocess.Popen([sys.executable, "-m", "tfspec", "train", REVERSE, *SMALL, *TINY_TRAIN,
                                  "--steps", "800", "--eval-every", "800", "--out", str(out)], stdout=subprocess.DEVNULL,
                                 stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while not (out / "metrics.jsonl").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        second = subprocess.run([sys.executable, "-m", "tfspec", "train", REVERSE, *SMALL, *TINY_TRAIN,
                                 "--steps", "800", "--out", str(out)], capture_output=True, text=True)
        refused = second.returncode == 1 and f"process {first.pid} is writing this run" in second.stderr
        finished = first.wait() == 0
        passed += refused and finished
        if not (refused and finished):
            print(f"  two trainers: second exit {second.returncode} ({second.stderr.strip()[-200:]}), first "
                  f"{'finished' if finished else 'failed'}")
    return passed, rounds


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=2000, help="CLI invocations (default 2000)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cpu-limit", type=float, default=30, help="CPU seconds an invocation may take")
    parser.add_argument("--faults", type=int, default=20, help="rounds of each fault (default 20)")
    parser.add_argument("--show", type=int, default=5)
    args = parser.parse_args(argv)
    failed = False
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        setup(root)
        if args.n:
            counts = cli_campaign(args, root)
            failed |= any(counts[k] for k in ("traceback", "abort", "hang"))
        if args.faults:
            rng = random.Random(args.seed)
            for name, (passed, tried) in (("full disk", full_disk_faults(root)),
                                          ("killed writer", killed_writer_faults(root, args.faults, rng)),
                                          ("two trainers", concurrent_faults(root, args.faults))):
                print(f"{name}: {passed} of {tried} as they should" + (" (no tmpfs here)" if not tried else ""))
                failed |= passed != tried
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
