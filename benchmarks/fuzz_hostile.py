"""The standing campaign of untrusted inputs: what the foundations issue's campaign found, drawn anew each run, so
the next campaign starts where that one ended. Sibling of ``fuzz_cli.py`` (whose forked-child harness it uses).

    python benchmarks/fuzz_hostile.py [--n 40] [--seed 0] [--cpu-limit 30] [--lsp 40] [--signals 6] [--show 5]

Classes, each drawn ``--n`` times (the language server's ``--lsp`` times, signals ``--signals`` times):

- *hostile model directories*: a small GPT-2 saved by transformers, then one or two damages drawn from: pickled
  code or a damaged zip as ``pytorch_model.bin``, a safetensors header that lies about its length or its offsets,
  a weight index naming files outside the directory or missing ones, a FIFO in place of any file transformers
  reads, NaN or Inf weights, integers stored where floats are meant, loader-steering configuration fields
  (kernels from a hub, quantization, dtype, weights file, device map, remote code), a 300 MB sparse
  ``tokenizer.json``. ``import``, ``import --run`` and ``train --init`` must exit 0, 1 or 2 in one line, never
  run planted code, and a steering field that is dropped must give the same spec as the directory without it.
- *hostile configurations*: the default configuration of a family's class (every family ``tfspec import --list``
  names), one or two of its fields (nested ``*_config`` ones too) made hostile: a size of 0, -1, 10**12 or 2**63,
  a value of the wrong type, a ``model_type`` that is a list or names an encoder, a tower's configuration that is a
  number or another family's, JSON nested 100,000 deep, a ``layer_types`` of 100,000 entries. ``import`` must
  write a spec or refuse in one line, within the CPU and memory limits.
- *tampered runs*: a trained run with garbage, mistyped or cut ``metrics.jsonl`` lines, a FIFO or a directory as
  ``metrics.jsonl`` or ``latest``, a checkpoint directory holding another step's files, a pickle as
  ``state.pt``; ``train --resume`` and ``generate`` must answer in one line (or succeed) and never hang.
- *names*: spec files (and files they include) whose names hold control characters, line breaks, bidi overrides
  or bytes that are not UTF-8, given to check, fmt, summary, render, mask, emit, verify and report: no control
  character may reach standard output or error raw (but line breaks and tabs of tfspec's own text), and every
  ``--json`` must parse.
- *the language server's protocol*: a session of framed messages drawn from valid requests, positions out of
  range, malformed framing (no or non-numeric Content-Length, 10**18 bytes, a body that is not JSON or not an
  object), unknown methods, requests after ``shutdown``, ``exit`` with or without it: every request with an id
  must be answered (a result or a JSON-RPC error), the process must end in time with the protocol's status
  (0 after shutdown and exit, 1 otherwise), and print no traceback.
- *signals*: SIGTERM to a one-process ``train`` at a random moment (exit 143 in one line and resumable, or
  finished), and SIGINT to a random command while it starts (exit 130, "interrupted", or done): never a
  traceback.

It prints one line a class (``cases N, ok K, tracebacks T, hangs H, wrong W``), the first few failures, and exits
1 if anything failed.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fuzz_cli import GPT2, REVERSE, SMALL, SMALL_GPT2, TINY_TRAIN, run_child  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PLANTED = Path(tempfile.gettempdir()) / "tfspec-fuzz-planted"  # what planted code would create
CONTROL = ["\x1b]0;PWNED\x07", "\x1b[2J", "\r", "\n", "\x07", "\u202e", "\x7f", "\x9b", "\t", "\udcff", "\udce9"]
STEERING = {"_attn_implementation": ["kernels-community/flash-attn", "flash_attention_2", "nope"],
            "attn_implementation": ["sdpa", "kernels-community/x"], "_experts_implementation": ["grouped_mm"],
            "dtype": ["float8_e4m3fn", "bogus", "bfloat16"], "torch_dtype": ["int8", "float16"],
            "transformers_weights": ["../../etc/passwd", "x.bin"], "device_map": ["auto", {"": "cuda:9"}],
            "auto_map": [{"AutoModel": "evil.Model"}], "trust_remote_code": [True], "use_kernels": [True],
            "fusion_config": [{"x": True}]}


def python(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], capture_output=True, **kwargs)


class Tally:
    """Outcomes of one class, and the first failures to show."""

    def __init__(self, name: str):
        self.name, self.counts, self.failures = name, {"ok": 0, "traceback": 0, "hang": 0, "wrong": 0}, []

    def add(self, outcome: str, what: str = "") -> None:
        self.counts[outcome] += 1
        if outcome != "ok":
            self.failures.append(f"{outcome} {self.name}: {what[-500:]}")

    @property
    def failed(self) -> int:
        return self.counts["traceback"] + self.counts["hang"] + self.counts["wrong"]

    def line(self) -> str:
        c = self.counts
        return (f"{self.name}: cases {sum(c.values())}, ok {c['ok']}, tracebacks {c['traceback']}, hangs {c['hang']}, "
                f"wrong {c['wrong']}")


def judged(argv: list[str], cwd: Path, cpu_limit: float, allowed=(0, 1, 2), memory: int | None = None
           ) -> tuple[str, str, int]:
    """(outcome, stderr, status) of a forked ``tfspec`` invocation: a refusal must be one line."""
    outcome, status, err = run_child(argv, cwd, cpu_limit, memory)
    if outcome in ("hang", "traceback"):
        return outcome, err, status
    if outcome == "abort":
        return "traceback", err, status
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith(("[transformers]", "warning:"))]
    if status not in allowed or (status != 0 and len(lines) != 1):
        return "wrong", f"status {status}: {err.strip()}", status
    return "ok", err, status


# ---------------------------------------------------------------- hostile model directories
def base_directory(root: Path) -> Path:
    directory = root / "hf-base"
    python("-c", "import sys, torch, transformers as T\ntorch.manual_seed(0)\n"
                 "T.GPT2LMHeadModel(T.GPT2Config(n_layer=1, n_embd=16, n_head=2, n_positions=16, vocab_size=300, "
                 "bos_token_id=0, eos_token_id=0)).save_pretrained(sys.argv[1])", str(directory), check=True)
    return directory


def _tensors(directory: Path, edit) -> None:
    from safetensors.torch import load_file, save_file

    tensors = load_file(directory / "model.safetensors")
    edit(tensors)
    save_file(tensors, directory / "model.safetensors", metadata={"format": "pt"})


REPLACING = {"pickle bin", "damaged bin", "index outside", "fifo", "huge tokenizer"}  # damages that swap files


def damages(rng: random.Random):
    """(name, function of a directory) pairs: the damages a hostile directory may carry."""
    import torch

    def pickle_bin(d):
        (d / "model.safetensors").unlink(missing_ok=True)
        code = (f"import os, torch\nclass P:\n    def __reduce__(self):\n        return (os.system, ('touch {PLANTED}',))\n"
                f"torch.save({{'transformer.wte.weight': P()}}, {str(d / 'pytorch_model.bin')!r})")
        python("-c", code, check=True)

    def damaged_bin(d):
        (d / "model.safetensors").unlink(missing_ok=True)
        (d / "pytorch_model.bin").write_bytes(b"PK\x03\x04" + rng.randbytes(rng.randint(0, 4000)))

    def lying_length(d):
        data = (d / "model.safetensors").read_bytes()
        (d / "model.safetensors").write_bytes(rng.choice([10 ** 12, 2 ** 63, 7, 0]).to_bytes(8, "little") + data[8:])

    def lying_offsets(d):
        data = (d / "model.safetensors").read_bytes()
        size = int.from_bytes(data[:8], "little")
        header = json.loads(data[8:8 + size])
        name = rng.choice([k for k in header if k != "__metadata__"])
        header[name]["data_offsets"] = [0, 10 ** 9]
        text = json.dumps(header).encode()
        (d / "model.safetensors").write_bytes(len(text).to_bytes(8, "little") + text + data[8 + size:])

    def truncated(d):
        data = (d / "model.safetensors").read_bytes()
        (d / "model.safetensors").write_bytes(data[:rng.randint(0, len(data) - 1)])

    def index_outside(d):
        (d / "model.safetensors").rename(d / "part.safetensors")
        target = rng.choice(["../../etc/passwd", "/etc/passwd", "missing.safetensors", "part.safetensors"])
        (d / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"transformer.wte.weight": target}}))

    def fifo(d):
        name = rng.choice(["model.safetensors", "config.json", "generation_config.json",
                           "model.safetensors.index.json", "tokenizer.json", "tokenizer_config.json"])
        if (d / name).exists():
            (d / name).unlink()
        os.mkfifo(d / name)

    def non_finite(d):
        value = rng.choice([float("nan"), float("inf"), float("-inf")])
        _tensors(d, lambda t: t["transformer.h.0.mlp.c_fc.weight"].view(-1).__setitem__(rng.randint(0, 100), value))

    def mistyped(d):
        dtype = rng.choice([torch.int32, torch.int16, torch.uint8, torch.bool])

        def edit(t):
            w = t["transformer.h.0.attn.c_attn.weight"]
            t["transformer.h.0.attn.c_attn.weight"] = w.view(torch.int32) if dtype == torch.int32 else w.to(dtype)
        _tensors(d, edit)

    def steering(d):
        values = json.loads((d / "config.json").read_text())
        field = rng.choice(sorted(STEERING))
        values[field] = rng.choice(STEERING[field])
        (d / "config.json").write_text(json.dumps(values))

    def quantized(d):
        values = json.loads((d / "config.json").read_text())
        values["quantization_config"] = {"quant_method": rng.choice(["bitsandbytes", "gptq", "fp8"]), "bits": 4}
        (d / "config.json").write_text(json.dumps(values))

    def huge_tokenizer(d):
        with open(d / "tokenizer.json", "wb") as handle:
            handle.truncate(300 << 20)  # sparse: 300 MB read as zeros

    def bad_config(d):
        (d / "config.json").write_text(rng.choice(['{"model_type": "gpt2", "n_embd": "sixteen"}', "[1, 2]", "",
                                                   '{"model_type": "gpt2", "n_layer": 1e400}', "\xff\xfe",
                                                   '{"model_type": "mamba2"}', '{"model_type": "../../x"}']))

    return [("pickle bin", pickle_bin), ("damaged bin", damaged_bin), ("lying length", lying_length),
            ("lying offsets", lying_offsets), ("truncated", truncated), ("index outside", index_outside),
            ("fifo", fifo), ("non-finite", non_finite), ("mistyped", mistyped), ("steering", steering),
            ("quantized", quantized), ("huge tokenizer", huge_tokenizer), ("bad config", bad_config)]


def model_directories(args, root: Path, rng: random.Random) -> Tally:
    tally = Tally("hostile model directories")
    base = base_directory(root)
    expected = run_child(["import", str(base), "--name", "m", "-o", str(root / "base.tfs")], root, args.cpu_limit)
    assert expected[:2] == ("ok", 0), expected
    table = damages(rng)
    for k in range(args.n):
        directory = root / f"hostile{k}"
        shutil.copytree(base, directory)
        chosen = sorted(rng.sample(table, rng.choice([1, 1, 2])), key=lambda item: item[0] in REPLACING)
        for _, damage in chosen:  # edits of the weights first, then what replaces or removes files
            try:
                damage(directory)
            except Exception:  # noqa: BLE001 - one damage undid what the other edits (safetensors errors too): skip it
                pass
        what = "+".join(name for name, _ in chosen)
        command = rng.choice([["import", str(directory), "--name", "m", "-o", str(root / f"h{k}.tfs")],
                              ["import", str(directory), "--run", str(root / f"hrun{k}")],
                              ["train", "--init", str(directory), "--steps", "1", *TINY_TRAIN, "--out",
                               str(root / f"htune{k}")]])
        outcome, err, status = judged(command, root, args.cpu_limit)
        if PLANTED.exists():
            outcome, err = "wrong", f"planted code ran: {err}"
            PLANTED.unlink()
        if outcome == "ok" and status == 0 and what == "steering" and command[2] == "--name":
            if (root / f"h{k}.tfs").read_text() != (root / "base.tfs").read_text():
                outcome, err = "wrong", "a dropped loader field changed the spec"
        if outcome == "ok" and status == 0 and any(d in what for d in ("non-finite", "mistyped", "pickle",
                                                                        "quantized")) and command[2] != "--name":
            outcome, err = "wrong", "weights that must be refused were taken"
        tally.add(outcome, f"{what}: {' '.join(command[:3])}: {err}")
        shutil.rmtree(directory, ignore_errors=True)
    return tally


# ---------------------------------------------------------------- hostile configurations of every family
MEMORY_CAP = 8 << 30  # an import of a configuration alone needs far less; 10**12 layers listed one by one far more
HOSTILE_VALUES = [0, -1, -7, 10 ** 12, 2 ** 63, "x", "", 2.5, True, None, [], [0], {}, [10 ** 12], "auto"]


def _configuration_base(model_type: str, cls: str) -> dict:
    """A family's default configuration as transformers writes it (a configuration alone: nothing is allocated)."""
    import transformers

    values = transformers.AutoConfig.for_model(model_type).to_dict()
    return {**values, "model_type": model_type, "architectures": [cls]}


def _places(values: dict, where: tuple = ()):
    """Every (path, value) of a configuration, nested ``*_config`` dicts included."""
    for key, value in values.items():
        yield where + (key,), value
        if isinstance(value, dict) and key.endswith("_config"):
            yield from _places(value, where + (key,))


def _put_at(values: dict, path: tuple, value) -> None:
    for key in path[:-1]:
        values = values[key]
    values[path[-1]] = value


def configuration_damages(rng: random.Random):
    def size(values):  # a whole-number field, anywhere, set to a hostile value
        places = [p for p, v in _places(values) if isinstance(v, int) and not isinstance(v, bool)]
        if places:
            _put_at(values, rng.choice(places), rng.choice(HOSTILE_VALUES))

    def any_field(values):
        places = [p for p, _ in _places(values)]
        _put_at(values, rng.choice(places), rng.choice(HOSTILE_VALUES))

    def model_type(values):
        nested = [p for p, v in _places(values) if isinstance(v, dict) and p[-1].endswith("_config")]
        target = values if not nested or rng.random() < 0.5 else _at(values, rng.choice(nested))
        target["model_type"] = rng.choice([["llama"], 7, None, "", "../../x", {"a": 1}, "bert", "whisper"])

    def nested_config(values):
        places = [p for p, v in _places(values) if p[-1].endswith("_config") and not p[-1].startswith("quant")]
        if places:
            _put_at(values, rng.choice(places), rng.choice([7, "siglip", [], [1, 2], {"model_type": "bert"},
                                                            {"model_type": "t5"}, {}]))

    def deep(values):
        places = [p for p, _ in _places(values)]
        _put_at(values, rng.choice(places), "DEEP")  # replaced by 100,000 brackets in the text

    def layer_types(values):
        count = rng.choice([0, 1, 10 ** 5])
        values["layer_types"] = rng.choice([["full_attention"] * count, ["bogus"] * 3, "full", [None, 3]])

    return [("size", size), ("any field", any_field), ("model_type", model_type), ("nested config", nested_config),
            ("deep", deep), ("layer types", layer_types)]


def _at(values: dict, path: tuple) -> dict:
    for key in path:
        values = values[key]
    return values


def hostile_configurations(args, root: Path, rng: random.Random) -> Tally:
    """``import`` of a family's configuration with one or two fields made hostile (every family of ``tfspec import
    --list``, drawn): it must write a spec or refuse in one line, in time, within the memory cap."""
    from tfspec.interop.families import FAMILIES

    tally = Tally("hostile configurations")
    classes = [(t, cls) for family in FAMILIES for t in family.model_types for cls in family.classes]
    table = configuration_damages(rng)
    for k in range(args.n):
        model_type, cls = rng.choice(classes)
        try:
            values = _configuration_base(model_type, cls)
        except Exception:  # noqa: BLE001 - a type this transformers names otherwise: nothing to damage
            continue
        chosen = rng.sample(table, rng.choice([1, 1, 2]))
        for _, damage in chosen:
            damage(values)
        text = json.dumps(values).replace('"DEEP"', "[" * 100_000 + "]" * 100_000)
        directory = root / f"config{k}"
        directory.mkdir()
        (directory / "config.json").write_text(text)
        what = "+".join(name for name, _ in chosen)
        outcome, err, _ = judged(["import", str(directory), "--name", "m", "-o", str(root / f"c{k}.tfs")], root,
                                 args.cpu_limit, memory=MEMORY_CAP)
        tally.add(outcome, f"{model_type} {what}: {err}")
        shutil.rmtree(directory, ignore_errors=True)
    return tally


# ---------------------------------------------------------------- tampered runs
def tamperings(rng: random.Random):
    def garbage_metrics(run):
        lines = ['{"step": 3, "loss": "oops"}', '{"step": "4", "loss": 1.0}', "[1, 2]", '{"step": -1}', "null",
                 '{"step": 2, "loss": NaN}', '{"step": 1e400}', "\x00\xff", '{"step": 2, "lr": {"x": 1}}', "{"]
        with open(run / "metrics.jsonl", "a", encoding="utf-8", errors="surrogateescape") as handle:
            for _ in range(rng.randint(1, 6)):
                handle.write(rng.choice(lines) + "\n")

    def fifo_metrics(run):
        (run / "metrics.jsonl").unlink()
        os.mkfifo(run / "metrics.jsonl")

    def directory_metrics(run):
        (run / "metrics.jsonl").unlink()
        (run / "metrics.jsonl").mkdir()

    def fifo_latest(run):
        (run / "latest").unlink()
        os.mkfifo(run / "latest")

    def huge_latest(run):
        (run / "latest").write_text("step-" + "0" * rng.randint(300, 100000))

    def other_step(run):
        checkpoints = sorted((run / "checkpoints").iterdir())
        newest, older = checkpoints[-1], checkpoints[0]
        shutil.rmtree(newest)
        shutil.copytree(older, newest)

    def pickled_state(run):
        from tfspec.layout import latest

        state = latest(run) / "state.pt"
        code = (f"import os, pickle\nclass P:\n    def __reduce__(self):\n        return (os.system, ('touch {PLANTED}',))\n"
                f"open({str(state)!r}, 'wb').write(pickle.dumps(P()))")
        python("-c", code, check=True)

    return [("garbage metrics", garbage_metrics), ("fifo metrics", fifo_metrics),
            ("directory metrics", directory_metrics), ("fifo latest", fifo_latest), ("huge latest", huge_latest),
            ("other step", other_step), ("pickled state", pickled_state)]


def tampered_runs(args, root: Path, rng: random.Random) -> Tally:
    tally = Tally("tampered runs")
    base = root / "run-base"
    done = python("-m", "tfspec", "train", REVERSE, *SMALL, *TINY_TRAIN, "--steps", "4", "--save-every", "2",
                  "--eval-every", "2", "--out", str(base))
    assert done.returncode == 0, done.stderr
    table = tamperings(rng)
    for k in range(args.n):
        run = root / f"tampered{k}"
        shutil.copytree(base, run)
        name, tamper = rng.choice(table)
        tamper(run)
        command = rng.choice([["train", "--resume", str(run), "--steps", "6", "--no-progress"],
                              ["train", "--resume", str(run), "--steps", "6", "--no-progress", "--accept-edits"],
                              ["generate", str(run), "--input", "abc", "--max-new", "3"]])
        outcome, err, status = judged(command, root, args.cpu_limit)
        if PLANTED.exists():
            outcome, err = "wrong", f"planted code ran: {err}"
            PLANTED.unlink()
        if outcome == "ok" and name == "garbage metrics" and command[1] == "--resume" and status != 0:
            outcome, err = "wrong", f"a bad metrics line stopped the run: {err}"
        tally.add(outcome, f"{name}: {' '.join(command[:2])}: {err}")
        shutil.rmtree(run, ignore_errors=True)
    return tally


# ---------------------------------------------------------------- names that are not text
def hostile_name(rng: random.Random) -> str:
    return "".join(rng.choice(CONTROL) if rng.random() < 0.4 else rng.choice("abé_ ") for _ in range(rng.randint(2, 9)))


def raw_controls(text: str) -> list[str]:
    """Control and format characters in ``text`` but tfspec's own line breaks and tabs."""
    return sorted({repr(c) for c in text if (not c.isprintable() and c not in "\n\t") or "\udc80" <= c <= "\udcff"})


def names(args, root: Path, rng: random.Random) -> Tally:
    tally = Tally("names")
    folder = root / "names"
    folder.mkdir()
    for k in range(args.n):
        stem = hostile_name(rng)
        spec = folder / f"{k}{stem}.tfs"
        try:
            if rng.random() < 0.5:
                part = folder / f"{k}part{hostile_name(rng)}.tfs"
                part.write_text("let width = 16\n")
                escaped = part.name.encode("unicode_escape", errors="backslashreplace").decode("ascii")
                spec.write_text(f'include "{escaped}"\n' + Path(REVERSE).read_text() + rng.choice(["", "\nbogus\n"]))
            else:
                shutil.copy(REVERSE, spec)
                if rng.random() < 0.3:
                    spec.write_text(spec.read_text() + "\n  atention\n")
        except (OSError, UnicodeError):  # a name this file system cannot hold
            continue
        out = folder / f"{k}out{hostile_name(rng)}"
        command = rng.choice([["check", str(spec)], ["check", str(spec), "--json"], ["fmt", str(spec)],
                              ["fmt", str(spec), "--json", "--check"], ["summary", str(spec), "--seq-len", "8"],
                              ["render", str(spec), "-o", f"{out}.svg"],
                              ["mask", str(spec), "--seq-len", "6", "-o", f"{out}.png"],
                              ["emit", str(spec), "-o", f"{out}.py"], ["verify", str(spec), "--examples", "2"],
                              ["verify", str(spec), "--examples", "2", "--json"],
                              ["report", str(spec), "--seq-len", "8", "-o", f"{out}.html"],
                              ["summary", str(spec), str(spec), "--seq-len", "8", "--plot", f"{out}.png"]])
        try:
            done = subprocess.run([sys.executable, "-m", "tfspec", *map(os.fsencode, command)], capture_output=True,
                                  cwd=root, timeout=10 * args.cpu_limit)
        except subprocess.TimeoutExpired:
            tally.add("hang", repr(command))
            continue
        out_text, err_text = (done.stdout.decode("utf-8", "surrogateescape"),
                              done.stderr.decode("utf-8", "surrogateescape"))
        if "Traceback" in err_text:
            tally.add("traceback", f"{command!r}: {err_text}")
            continue
        bad = raw_controls(err_text) + (raw_controls(out_text) if command[0] not in ("fmt", "emit") else [])
        if "--json" in command and (done.returncode == 0 or command[0] in ("check", "fmt")):  # a result to print
            try:
                json.loads(done.stdout.decode("utf-8"))
            except ValueError as exc:
                bad.append(f"--json is not JSON: {exc}")
        if done.returncode not in (0, 1, 2):
            bad.append(f"status {done.returncode}")
        tally.add("wrong" if bad else "ok", f"{command!r}: {bad}: {err_text[-300:]}")
    return tally


# ---------------------------------------------------------------- the language server
def frame(message) -> bytes:
    body = message if isinstance(message, bytes) else json.dumps(message).encode()
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


def replies(stdout: bytes) -> list[dict]:
    out, rest = [], stdout
    while rest:
        head, _, rest = rest.partition(b"\r\n\r\n")
        length = int(next(line for line in head.split(b"\r\n") if line.startswith(b"Content-Length:")).split(b":")[1])
        out.append(json.loads(rest[:length]))
        rest = rest[length:]
    return out


def lsp_session(rng: random.Random, uri: str) -> tuple[list[bytes], set, int | None, bool]:
    """(framed messages, ids that must be answered, the exit status the protocol asks for, whether the session ends
    by a refusal of the framing)."""
    messages = [frame({"jsonrpc": "2.0", "id": 0, "method": "initialize",
                       "params": {"processId": None, "rootUri": None, "capabilities": {}}}),
                frame({"jsonrpc": "2.0", "method": "initialized", "params": {}}),
                frame({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": {
                    "uri": uri, "languageId": "tfspec", "version": 1, "text": Path(REVERSE).read_text()}}})]
    expected, shut, next_id = {0}, False, 1
    for _ in range(rng.randint(1, 12)):
        roll = rng.random()
        if roll < 0.5:  # a request, its position in or out of the protocol's range
            position = {"line": rng.choice([0, 3, -1, 2 ** 31, 10 ** 6]),
                        "character": rng.choice([0, 5, -7, 2 ** 31, 10 ** 6])}
            method = rng.choice(["textDocument/hover", "textDocument/completion", "textDocument/definition",
                                 "textDocument/prepareRename", "textDocument/documentSymbol",
                                 "textDocument/formatting", "tfspec/unknown", "textDocument/rename"])
            params = {"textDocument": {"uri": rng.choice([uri, "file:///missing.tfs"])}, "position": position}
            if method == "textDocument/rename":
                params["newName"] = "d2"
            if method == "textDocument/formatting":
                params = {"textDocument": {"uri": uri}, "options": {"tabSize": 2, "insertSpaces": True}}
            messages.append(frame({"jsonrpc": "2.0", "id": next_id, "method": method, "params": params}))
            expected.add(next_id)
            next_id += 1
        elif roll < 0.6 and not shut:
            messages.append(frame({"jsonrpc": "2.0", "id": next_id, "method": "shutdown"}))
            expected.add(next_id)
            next_id += 1
            shut = True
        elif roll < 0.75:  # a body that is not a message
            messages.append(frame(rng.choice([b"not json", b"[1, 2]", b"3", b'{"jsonrpc": "2.0"}', b"\xff\xfe",
                                              b'{"jsonrpc": "1.0", "id": 99, "method": "x"}',
                                              b"[" * 100_000 + b"]" * 100_000,
                                              b'{"jsonrpc": "2.0", "id": 98, "method": "x", "params": '
                                              + b"{\"a\": " * 50_000 + b"1" + b"}" * 50_001])))
        elif roll < 0.8:  # framing that cannot be read: the session ends there
            messages.append(rng.choice([b"Content-Length: 1000000000000000000\r\n\r\n{}",
                                        b"Content-Length: -5\r\n\r\n{}", b"Content-Length: abc\r\n\r\n{}",
                                        b"X-Nothing: 1\r\n\r\n{}"]))
            return messages, expected, None, True
    if rng.random() < 0.8:
        messages.append(frame({"jsonrpc": "2.0", "method": "exit"}))
        return messages, expected, 0 if shut else 1, False
    return messages, expected, None, False  # the input just ends


def language_server(args, root: Path, rng: random.Random) -> Tally:
    tally = Tally("language server")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    uri = (root / "spec.tfs").as_uri()
    for _ in range(args.lsp):
        messages, expected, status, refused = lsp_session(rng, uri)
        try:
            done = subprocess.run([sys.executable, "-m", "tfspec", "lsp"], input=b"".join(messages),
                                  capture_output=True, env=env, cwd=root, timeout=60)
        except subprocess.TimeoutExpired:
            tally.add("hang", f"{len(messages)} messages")
            continue
        err = done.stderr.decode(errors="replace")
        if "Traceback" in err:
            tally.add("traceback", err)
            continue
        try:
            answered = {r.get("id") for r in replies(done.stdout) if "method" not in r}
        except (ValueError, StopIteration) as exc:
            tally.add("wrong", f"unreadable output ({exc}): {done.stdout[:300]!r}")
            continue
        missing = expected - answered if not refused else set()
        wrong_status = status is not None and done.returncode != status
        tally.add("wrong" if missing or wrong_status else "ok",
                  f"unanswered {sorted(missing)}, status {done.returncode} (expected {status}): {err[-300:]}")
    return tally


# ---------------------------------------------------------------- signals
def signals(args, root: Path, rng: random.Random) -> Tally:
    from tfspec.run import checkpoint as ckpt

    tally = Tally("signals")
    for k in range(args.signals):
        out = root / f"signalled{k}"
        trainer = subprocess.Popen([sys.executable, "-m", "tfspec", "train", REVERSE, *SMALL, *TINY_TRAIN,
                                    "--steps", "100000", "--save-every", "50", "--eval-every", "100000", "--out",
                                    str(out)],  # still running when the signal comes (not ending, handlers undone)
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=root)
        time.sleep(rng.uniform(1.0, 8.0))
        trainer.send_signal(signal.SIGTERM)
        try:
            _, err = trainer.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            trainer.kill()
            tally.add("hang", "SIGTERM to train")
            continue
        lines = [line for line in err.splitlines() if line.strip()]
        if "Traceback" in err:
            tally.add("traceback", err)
        elif trainer.returncode != 143 or len(lines) != 1 or "stopped by SIGTERM" not in lines[0]:
            tally.add("wrong", f"SIGTERM to train: status {trainer.returncode}: {err}")
        elif ckpt.latest(out) is not None and ckpt.load(out).step > 0:
            step = ckpt.load(out).step
            resumed = python("-m", "tfspec", "train", "--resume", str(out), "--steps", str(step + 1),
                             "--no-progress", cwd=root)
            tally.add("ok" if resumed.returncode == 0 else "wrong", f"resume after SIGTERM: {resumed.stderr[-300:]}")
        else:
            tally.add("ok")  # stopped before anything was saved
    for k in range(args.signals):
        command = rng.choice([["check", REVERSE], ["summary", REVERSE, *SMALL], ["build", GPT2, *SMALL_GPT2],
                              ["lsp"], ["fmt", REVERSE]])
        process = subprocess.Popen([sys.executable, "-m", "tfspec", *command], stdin=subprocess.PIPE,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=root)
        time.sleep(rng.uniform(0.15, 2.5))  # past the interpreter's own start, into tfspec's
        process.send_signal(signal.SIGINT)
        try:
            _, err = process.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            tally.add("hang", f"SIGINT to {command[0]}")
            continue
        if "Traceback" in err:
            tally.add("traceback", f"SIGINT to {command[0]}: {err}")
        elif process.returncode in (130, -signal.SIGINT) and err.strip() in ("interrupted", "") \
                or process.returncode == 0:  # (-2: the signal came as the interpreter was ending, the command done)
            tally.add("ok")
        else:
            tally.add("wrong", f"SIGINT to {command[0]}: status {process.returncode}: {err[-300:]}")
    return tally


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=40, help="cases of each file class (default 40)")
    parser.add_argument("--lsp", type=int, default=40, help="language-server sessions (default 40)")
    parser.add_argument("--signals", type=int, default=6, help="signal rounds of each kind (default 6)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cpu-limit", type=float, default=30, help="CPU seconds an invocation may take")
    parser.add_argument("--show", type=int, default=5)
    parser.add_argument("--only", choices=("directories", "configurations", "runs", "names", "lsp", "signals"),
                        action="append")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from fuzz import import_everything

    import_everything()  # once, before any child is forked
    PLANTED.unlink(missing_ok=True)
    rng = random.Random(args.seed)
    classes = {"directories": model_directories, "configurations": hostile_configurations, "runs": tampered_runs,
               "names": names, "lsp": language_server, "signals": signals}
    failed, started = 0, time.perf_counter()
    with tempfile.TemporaryDirectory() as directory:
        for key, campaign in classes.items():
            if args.only and key not in args.only:
                continue
            tally = campaign(args, Path(directory), rng)
            print(tally.line(), flush=True)
            for failure in tally.failures[:args.show]:
                print(f"  {failure}")
            failed += tally.failed
    print(f"{time.perf_counter() - started:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
