"""Untrusted inputs cannot steer or stall tfspec: a model directory's config.json does not choose transformers'
loader, kernels or precision; damaged, hostile or non-finite weights are refused by name; no file it reads can
block it (a FIFO) or exhaust it (its size); a file name cannot drive the terminal or break JSON or a plot; a
damaged metrics line or a checkpoint of another step cannot derail a run; signals end a command in one line."""

from __future__ import annotations

import json
import os
import pickle
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

import tfspec
from tfspec.cli import main
from tfspec.run import checkpoint as ckpt

ROOT = Path(__file__).resolve().parents[1]
REVERSE = "examples/reverse.tfs"
SMALL = ["--set", "layers=1", "--set", "d_model=32", "--set", "heads=2", "--set", "d_ff=32"]
TRAIN = ["train", REVERSE, *SMALL, "--batch", "4", "--eval-size", "4", "--no-progress"]
ESCAPES = "\x1b]0;PWNED\x07\x1b[2J\r\nerror: forged"


class Evil:
    def __reduce__(self):
        return (os.system, ("echo pwned > /tmp/tfspec-hostile-pwned",))


def cli(*args, timeout: float = 120, env: dict | None = None) -> subprocess.CompletedProcess:
    """The command line in its own process, bounded in time: a hang fails the test instead of the suite."""
    return subprocess.run([sys.executable, "-m", "tfspec.cli", *map(str, args)], capture_output=True, timeout=timeout,
                          cwd=ROOT, env=env)


def one_line(result) -> str:
    """The one line a refusal prints on standard error (Hugging Face's own notes aside)."""
    err = result.stderr.decode(errors="replace") if isinstance(result.stderr, bytes) else result.stderr
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("[transformers]")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


# ---------------------------------------------------------------- hostile model directories
@pytest.fixture(scope="module")
def gpt2_directory(tmp_path_factory):
    import transformers as T

    directory = tmp_path_factory.mktemp("hf") / "gpt2"
    config = T.GPT2Config(n_layer=1, n_embd=16, n_head=2, n_positions=16, vocab_size=50, bos_token_id=0,
                          eos_token_id=0)
    T.GPT2LMHeadModel(config).save_pretrained(directory)
    return directory


def variant(base: Path, where: Path, config: dict | None = None, weights=None, files=None) -> Path:
    """A copy of the model directory ``base`` with config.json fields set, its tensors edited, or its files
    changed."""
    from safetensors.torch import load_file, save_file

    shutil.copytree(base, where)
    if config is not None:
        values = json.loads((where / "config.json").read_text())
        (where / "config.json").write_text(json.dumps({**values, **config}))
    if weights is not None:
        tensors = load_file(where / "model.safetensors")
        weights(tensors)
        save_file(tensors, where / "model.safetensors", metadata={"format": "pt"})
    if files is not None:
        files(where)
    return where


def logits(model):
    with torch.no_grad():
        return model(torch.tensor([[1, 2, 3, 4]]))


@pytest.mark.parametrize("field, value", [
    ("_attn_implementation", "kernels-community/flash-attn"),  # a hub repository of native code
    ("attn_implementation", "flash_attention_2"),
    ("_experts_implementation", "grouped_mm"),
    ("dtype", "float8_e4m3fn_but_not_really"),
    ("torch_dtype", "bfloat16"),
    ("transformers_weights", "../../elsewhere.safetensors"),
    ("device_map", "auto"),
])
def test_loader_fields_of_a_configuration_are_ignored_and_the_eager_local_path_loads(gpt2_directory, tmp_path,
                                                                                    monkeypatch, field, value):
    import transformers

    asked = []
    real = transformers.GPT2LMHeadModel.from_pretrained.__func__

    def spy(cls, *args, **kwargs):
        asked.append(kwargs)
        return real(cls, *args, **kwargs)

    monkeypatch.setattr(transformers.GPT2LMHeadModel, "from_pretrained", classmethod(spy))
    steered = variant(gpt2_directory, tmp_path / "steered", config={field: value})
    model = tfspec.from_pretrained(steered)
    assert torch.equal(logits(model), logits(tfspec.from_pretrained(gpt2_directory)))
    assert tfspec.import_config(steered, name="m") == tfspec.import_config(gpt2_directory, name="m")
    given = asked[0]
    assert given["attn_implementation"] == "eager" and given["dtype"] == torch.float32 and given["local_files_only"]
    assert getattr(given["config"], "_attn_implementation", None) in (None, "eager")


def test_a_quantization_config_is_refused_by_name(gpt2_directory, tmp_path, tfspec_cli):
    quantized = variant(gpt2_directory, tmp_path / "q", config={"quantization_config": {"quant_method": "bitsandbytes",
                                                                                          "load_in_8bit": True}})
    for args in (["import", quantized, "-o", tmp_path / "x.tfs"], ["import", quantized, "--run", tmp_path / "run"]):
        result = tfspec_cli(*args)
        assert result.returncode == 1 and "quantization_config: quantized weights" in result.stderr
    assert not (tmp_path / "run").exists()


def _nan(tensors):
    tensors["transformer.h.0.mlp.c_fc.weight"][0, 0] = float("nan")


def _inf(tensors):
    tensors["lm_head.weight" if "lm_head.weight" in tensors else "transformer.wte.weight"][3, 1] = float("-inf")


def _integers(tensors):  # F32 bits declared as I32: the loader would read them as large whole numbers
    tensors["transformer.h.0.attn.c_attn.weight"] = tensors["transformer.h.0.attn.c_attn.weight"].view(torch.int32)


@pytest.mark.parametrize("damage, message", [
    (_nan, "non-finite weights (inf or NaN) in transformer.h.0.mlp.c_fc.weight"),
    (_inf, "non-finite weights (inf or NaN) in transformer.wte.weight"),
    (_integers, "weights stored as integers, not floating point: transformer.h.0.attn.c_attn.weight (I32)"),
], ids=["nan", "inf", "i32-as-f32"])
def test_non_finite_or_mistyped_weights_are_refused_with_the_tensors_name(gpt2_directory, tmp_path, damage, message,
                                                                         tfspec_cli):
    damaged = variant(gpt2_directory, tmp_path / "damaged", weights=damage)
    line = one_line(tfspec_cli("import", damaged, "--run", tmp_path / "run"))
    assert message in line, line
    assert not (tmp_path / "run").exists()
    line = one_line(tfspec_cli("train", "--init", damaged, "--steps", "1", "--no-progress", "--out", tmp_path / "tuned"))
    assert message in line, line


def _pickle_weights(directory: Path) -> None:
    (directory / "model.safetensors").unlink()
    torch.save({"transformer.wte.weight": Evil()}, directory / "pytorch_model.bin")


def _damaged_bin(directory: Path) -> None:
    (directory / "model.safetensors").unlink()
    (directory / "pytorch_model.bin").write_bytes(b"PK\x03\x04" + os.urandom(300))


def _lying_header(directory: Path) -> None:
    data = (directory / "model.safetensors").read_bytes()
    (directory / "model.safetensors").write_bytes((10 ** 12).to_bytes(8, "little") + data[8:])


def _index_outside(directory: Path) -> None:
    (directory / "model.safetensors").rename(directory / "weights.safetensors")
    (directory / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {"transformer.wte.weight": "../../etc/passwd"}}))


@pytest.mark.parametrize("damage, message", [
    (_pickle_weights, "a pickle that holds more than tensors (posix.system); tfspec loads only plain tensors and never "
                      "runs code from a file"),
    (_damaged_bin, "transformers cannot load it"),
    (_lying_header, "not a safetensors file (its header's length is not possible)"),
    (_index_outside, "its weight index names '../../etc/passwd', not a file of the directory"),
], ids=["pickle", "damaged-bin", "lying-header", "index-outside"])
def test_hostile_weight_files_are_one_line_without_unsafe_advice(gpt2_directory, tmp_path, damage, message,
                                                                tfspec_cli):
    hostile = variant(gpt2_directory, tmp_path / "hostile", files=damage)
    line = one_line(tfspec_cli("import", hostile, "--run", tmp_path / "run"))
    assert message in line, line
    assert "weights_only" not in line and "Re-running" not in line and not os.path.exists("/tmp/tfspec-hostile-pwned")


@pytest.mark.parametrize("fifo", ["model.safetensors", "model.safetensors.index.json", "generation_config.json",
                                  "config.json"])
def test_a_fifo_in_a_model_directory_is_refused_not_waited_on(gpt2_directory, tmp_path, fifo, tfspec_cli):
    def make(directory: Path) -> None:
        if (directory / fifo).exists():
            (directory / fifo).unlink()
        os.mkfifo(directory / fifo)

    hostile = variant(gpt2_directory, tmp_path / "fifo", files=make)
    started = time.monotonic()
    # import in this process, on a thread bounded in time: a read blocked on the FIFO fails the test, which then
    # opens the FIFO's other end so that the read ends
    done = []
    reader = threading.Thread(target=lambda: done.append(tfspec_cli("import", hostile, "--run", tmp_path / "run")),
                              daemon=True)
    reader.start()
    reader.join(60)
    if reader.is_alive():
        with open(hostile / fifo, "wb"):
            pass
        reader.join(10)
        pytest.fail(f"import waited on the FIFO {fifo}")
    lines = [one_line(done[0])]
    if fifo == "model.safetensors":  # the same reads: fine-tuning from the directory (in a process of its own,
        # bounded in time: training answers signals, which only a process's main thread may)
        lines.append(one_line(cli("train", "--init", hostile, "--steps", "1", "--no-progress", "--out",
                                  tmp_path / "tuned", timeout=60)))
    for line in lines:
        assert f"/{fifo}: " in line and "not a regular file (a device, a FIFO or a socket)" in line, line
    assert time.monotonic() - started < 60


def test_a_tokenizer_json_past_its_bound_is_refused_unread(tmp_path, monkeypatch):
    from tfspec.run import data

    monkeypatch.setattr(data, "TOKENIZER_BYTES", 1000)
    (tmp_path / "tokenizer.json").write_bytes(b" " * 5000)
    with pytest.raises(data.DataError, match="5,000 bytes, more than the 1,000 tfspec reads from such a file"):
        data.TokenizerVocabulary.load(tmp_path / "tokenizer.json")


# ---------------------------------------------------------------- names that are not text
def test_terminal_escapes_in_a_file_name_are_printed_as_escapes(tmp_path, tfspec_cli):
    named = tmp_path / f"evil{ESCAPES}.tfs"
    shutil.copy(ROOT / REVERSE, named)
    result = tfspec_cli("check", named)
    assert result.returncode == 0
    assert "\x1b" not in result.stdout and "\x07" not in result.stdout and "\r" not in result.stdout
    assert result.stdout.count("\n") == 1 and "evil\\x1b]0;PWNED\\x07\\x1b[2J\\r\\nerror: forged.tfs: reverse" \
        in result.stdout
    broken = tmp_path / f"bad{ESCAPES}.tfs"
    broken.write_text("model x\nembedding tokens { vocab 10; dim 8 }\nencoder x 1 { atention self heads=2 }\n")
    result = tfspec_cli("check", broken)
    assert result.returncode == 1 and "\x1b" not in result.stderr and "\r" not in result.stderr
    assert "bad\\x1b]0;PWNED\\x07\\x1b[2J\\r\\nerror: forged.tfs:3:" in result.stderr
    assert not any(line.startswith("error: forged") for line in result.stderr.splitlines())


def test_an_included_file_so_named_is_printed_as_escapes(tmp_path, tfspec_cli):
    named = "\x1b]0;PWNED\x07\x1b[2J\rerror: forged"  # a string literal holds no line break; all else, raw
    part = tmp_path / f"part{named}.tfs"
    part.write_text("let d = 16\nlet bad = undefined_name\n")
    main_spec = tmp_path / "main.tfs"
    main_spec.write_text(f'model m\ninclude "{part.name}"\n'
                         "embedding tokens { vocab 10; dim d }\nencoder x 1 { attention self heads=2 }\n")
    result = tfspec_cli("check", main_spec)
    assert result.returncode == 1 and "\x1b" not in result.stderr and "\x07" not in result.stderr, result.stderr
    assert "\r" not in result.stderr
    assert f"{tmp_path}/part\\x1b]0;PWNED\\x07\\x1b[2J\\rerror: forged.tfs:2:11: error: unknown parameter" \
        in result.stderr, result.stderr  # the error inside the included file, at its escaped name


def test_a_path_label_with_dollars_draws_plots_and_reports(tmp_path, tfspec_cli):
    for name in ("$a$b$", "$x_{1"):  # mathtext that fails to parse, were it read as mathtext
        (tmp_path / name).mkdir()
        shutil.copy(ROOT / REVERSE, tmp_path / name / "spec.tfs")
    first, second = (tmp_path / "$a$b$" / "spec.tfs"), (tmp_path / "$x_{1" / "spec.tfs")
    result = tfspec_cli("summary", first, second, "--seq-len", "8", "--plot", tmp_path / "cost.png")
    assert result.returncode == 0 and (tmp_path / "cost.png").stat().st_size > 1000, result.stderr
    result = tfspec_cli("report", first, second, "--seq-len", "8", "-o", tmp_path / "page.html")
    assert result.returncode == 0 and "$a$b$" in (tmp_path / "page.html").read_text(), result.stderr


@pytest.mark.parametrize("command", [["check"], ["fmt"], ["verify", "--examples", "2"]])
def test_json_of_a_file_name_that_is_not_utf8_is_valid_json(tmp_path, command):
    name = os.fsencode(tmp_path) + b"/caf\xe9\x1b.tfs"
    shutil.copy(ROOT / REVERSE, name)
    result = subprocess.run([sys.executable, "-m", "tfspec.cli", *command[:1], name, *command[1:], "--json"],
                            capture_output=True, cwd=ROOT, timeout=300)
    data = json.loads(result.stdout.decode("utf-8"))  # UTF-8, and JSON
    text = json.dumps(data)
    assert "caf" in text and b"\x1b" not in result.stdout


# ---------------------------------------------------------------- runs tampered with
@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "run"
    assert main([*TRAIN, "--steps", "4", "--save-every", "2", "--eval-every", "2", "--out", str(out)]) == 0
    return out


def test_a_bad_metrics_record_is_passed_over_with_a_warning_on_every_later_resume(trained, tmp_path, tfspec_cli):
    from tfspec.errors import RunWarning
    from tfspec.run.train import read_metrics

    run = tmp_path / "run"
    shutil.copytree(trained, run)
    with open(run / "metrics.jsonl", "a") as handle:
        handle.write('{"step": 3, "loss": "oops"}\n{"step": "4", "loss": 1.0}\n[1, 2]\n')
    with pytest.warns(RunWarning, match="3 lines that tfspec did not write"):
        losses, _ = read_metrics(run / "metrics.jsonl")
    assert [r["step"] for r in losses] == [1, 2, 3, 4]
    for steps in (6, 8):  # the command line: one line of warning, and the run goes on
        done = tfspec_cli("train", "--resume", run, "--steps", steps, "--no-progress")
        err = done.stderr
        assert done.returncode == 0 and "Traceback" not in err, err
        if steps == 6:
            assert [line for line in err.splitlines() if line.startswith("warning:")] == [
                f"warning: {run}/metrics.jsonl: 3 lines that tfspec did not write (line 7 first) passed over"], err
        with open(run / "metrics.jsonl", "a") as handle:
            handle.write('{"step": 7, "loss": "again"}\n')
    losses, _ = read_metrics(run / "metrics.jsonl")
    assert [r["step"] for r in losses] == list(range(1, 9))


def test_a_fifo_as_metrics_jsonl_is_refused_on_resume(trained, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    (run / "metrics.jsonl").unlink()
    os.mkfifo(run / "metrics.jsonl")
    line = one_line(cli("train", "--resume", run, "--steps", "6", "--no-progress", timeout=120))
    assert "metrics.jsonl: not a regular file" in line, line


@pytest.mark.parametrize("name", ["model.safetensors", "state.pt"])
def test_a_fifo_in_a_checkpoint_taken_as_edited_is_refused_not_waited_on(trained, tmp_path, name):
    """--accept-edits skips the digests, which would have refused it: the read itself still refuses a FIFO."""
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    (ckpt.latest(run) / name).unlink()
    os.mkfifo(ckpt.latest(run) / name)
    line = one_line(cli("train", "--resume", run, "--steps", "6", "--no-progress", "--accept-edits", timeout=120))
    assert f"{name}" in line and "not a regular file" in line, line


def test_a_checkpoint_directory_holding_another_steps_files_is_refused(trained, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    four = run / "checkpoints" / "step-0000004"
    shutil.rmtree(four)
    shutil.copytree(run / "checkpoints" / "step-0000002", four)  # latest still names step 4
    assert main(["train", "--resume", str(run), "--steps", "6", "--no-progress"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "step-0000004: holds the checkpoint of step 2, not of step 4" in err, err
    with pytest.raises(ckpt.CheckpointError, match="holds the checkpoint of step 2, not of step 4"):
        ckpt.load(four)


def test_a_save_over_a_directory_of_another_step_replaces_it(trained, tmp_path):
    """Resumed from step 2, a run saves step 4 again: a step-4 directory holding step 2's files is not kept."""
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    four = run / "checkpoints" / "step-0000004"
    shutil.rmtree(four)
    shutil.copytree(run / "checkpoints" / "step-0000002", four)
    (run / "latest").write_text("step-0000002\n")
    assert main(["train", "--resume", str(run), "--steps", "6", "--no-progress"]) == 0
    assert ckpt.load(four).step == 4 and ckpt.load(run).step == 6


def test_a_refused_training_state_does_not_advise_loading_it_unsafely(trained, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    (ckpt.latest(run) / "state.pt").write_bytes(pickle.dumps(Evil()))
    with pytest.raises(ckpt.CheckpointError) as info:
        ckpt.load(run, accept_edits=True).training_state()
    message = str(info.value)
    assert "a pickle that holds more than tensors" in message and "never runs code from a file" in message
    assert "weights_only" not in message and "Re-running" not in message and "False" not in message


# ---------------------------------------------------------------- signals
def test_sigterm_saves_a_single_process_run_and_exits_143_in_one_line(tmp_path):
    out = tmp_path / "run"
    process = subprocess.Popen([sys.executable, "-m", "tfspec.cli", *TRAIN, "--steps", "100000", "--log-every", "1",
                                "--save-every", "100000", "--eval-every", "100000", "--out", str(out)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT, text=True)
    for line in process.stdout:  # the loop has begun
        if line.startswith("step 3/"):
            break
    process.send_signal(signal.SIGTERM)
    out_text, err = process.communicate(timeout=120)
    assert process.returncode == 143, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("tfspec train: stopped by SIGTERM at step "), err
    saved = ckpt.load(out)
    assert saved.step >= 3 and f"saved {ckpt.latest(out)}" in lines[0] and f"--resume {out}" in lines[0]
    assert main(["train", "--resume", str(out), "--steps", str(saved.step + 1), "--no-progress"]) == 0


def test_sigterm_outside_a_training_loop_is_one_line_and_143():
    process = subprocess.Popen([sys.executable, "-c", "import signal, sys, time\nfrom tfspec.cli import main\n"
                                "import tfspec.cli.app\n"
                                "tfspec.cli.app.check.run = lambda args: (print('ready', flush=True), time.sleep(60))\n"
                                "sys.exit(main(['check', 'examples/reverse.tfs']))"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT, text=True)
    assert process.stdout.readline().strip() == "ready"
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 143 and err.strip() == "tfspec check: stopped by SIGTERM", err


def test_ctrl_c_while_the_command_line_loads_is_one_line_and_130(monkeypatch, capsys):
    import builtins

    real = builtins.__import__

    def interrupted(name, globals=None, locals=None, fromlist=(), level=0):
        if name == "app" and level == 1 or name == "tfspec.cli.app":
            raise KeyboardInterrupt
        return real(name, globals, locals, fromlist, level)

    monkeypatch.delitem(sys.modules, "tfspec.cli.app", raising=False)
    monkeypatch.setattr(builtins, "__import__", interrupted)
    assert main(["check", REVERSE]) == 130
    assert capsys.readouterr().err == "interrupted\n"


def test_the_console_script_loads_nothing_heavy_before_its_handler():
    code = "import sys, tfspec.cli; print(sorted(m for m in ('lark', 'pydantic', 'torch', 'tfspec.front') " \
           "if m in sys.modules))"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert loaded.stdout.strip() == "[]", loaded.stdout + loaded.stderr


# ---------------------------------------------------------------- the Python API
@pytest.mark.parametrize("spec", ["examples/reverse.tfs", "examples/unilm.tfs", "examples/gpt2_small.tfs",
                                  "examples/t5_small.tfs"])
def test_a_compiled_model_pickles_and_saves_whole(spec, tmp_path):
    import io

    model = tfspec.compile(spec, overrides=None if "reverse" in spec else {"layers": 1}, seed=0).eval()  # (whole, small)
    tokens = torch.randint(5, 30, (2, 9))
    buffer = io.BytesIO()
    torch.save(model, buffer)
    buffer.seek(0)
    copies = [pickle.loads(pickle.dumps(model)), torch.load(buffer, weights_only=False)]
    inputs = (tokens, tokens[:, :5]) if model.spec.kind == "encoder-decoder" else (tokens,)
    expected = model(*inputs)
    for copy in copies:
        assert type(copy.program).__name__ == type(model.program).__name__
        assert torch.equal(copy(*inputs), expected)
        assert copy.training == model.training and all(not m.training for m in copy.modules())


def test_seeded_compiles_in_several_threads_give_the_same_weights():
    def weights(model):
        return torch.cat([p.detach().flatten() for p in model.parameters()])

    expected = weights(tfspec.compile(REVERSE, seed=7))
    got, errors = [], []

    def work():
        try:
            for _ in range(3):
                got.append(weights(tfspec.compile(REVERSE, seed=7)))
                torch.randn(1000)  # another draw from torch's global generator meanwhile
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors and len(got) == 18
    assert all(torch.equal(w, expected) for w in got)


@pytest.mark.parametrize("body", [
    "attention self heads=2 mask=causal; feedforward d_ff=8",
    "attention self heads=2 mask=causal steps=value_residual(0.5); feedforward d_ff=8",  # the first layer hands on
    "mixer shortconv(3); feedforward d_ff=8; layers 1 { conv = attention(self, heads=2, mask=causal) }",
])
def test_an_absurd_number_of_layers_is_refused_before_a_layer_is_listed(body):
    """``x 99999999999`` is a located error at once, in a process that may use 1 GiB: nothing is made per layer
    before the count is checked (a list of the layers' kinds took every byte of the machine)."""
    code = ("import resource, sys, tfspec\n"
            "resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))\n"
            "try:\n"
            f"    tfspec.parse('embedding tokens {{ vocab 9; dim 8 }}\\ndecoder x 99999999999 {{ {body} }}')\n"
            "except tfspec.SpecError as exc:\n"
            "    print(exc.message)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "repeat must be at most 4,096, got 99999999999" in done.stdout


# ---------------------------------------------------------------- hostile configurations of the new families
def _configuration(cls: str, edit) -> dict:
    import copy

    from test_import import CONFIGS
    values = {**copy.deepcopy(CONFIGS[cls]), "architectures": [cls]}
    edit(values)
    return values


def _set(path: str, value):
    def edit(values):
        *outer, last = path.split(".")
        for part in outer:
            values = values[part]
        values[last] = value
    return edit


@pytest.mark.parametrize("cls, edit, message", [
    ("BambaForCausalLM", _set("mamba_n_heads", 0), "field mamba_n_heads is 0; tfspec reads a whole number from 1"),
    ("JambaForCausalLM", _set("attn_layer_period", 0), "field attn_layer_period is 0;"),
    ("LlavaForConditionalGeneration", _set("vision_config.patch_size", 0), "field vision_config.patch_size is 0;"),
    ("Gemma3ForConditionalGeneration", _set("mm_tokens_per_image", 0), "field mm_tokens_per_image is 0;"),
    ("Mistral3ForConditionalGeneration", _set("spatial_merge_size", 0), "field spatial_merge_size is 0;"),
    ("Qwen2_5_VLForConditionalGeneration", _set("vision_config.spatial_merge_size", 0),
     "field vision_config.spatial_merge_size is 0;"),
    ("Idefics3ForConditionalGeneration", _set("scale_factor", 0), "field scale_factor is 0;"),
    ("LlamaForCausalLM", _set("num_attention_heads", -2), "field num_attention_heads is -2;"),
    ("MambaForCausalLM", _set("num_hidden_layers", 10 ** 12), "num_hidden_layers is 1000000000000; tfspec reads a "
                                                              "whole number from 1 to 4,096 there"),
    ("Qwen2MoeForCausalLM", _set("num_hidden_layers", 10 ** 12), "num_hidden_layers is 1000000000000;"),
    ("ViTForImageClassification", _set("num_labels", 10 ** 12), "num_labels is 1000000000000;"),
    ("LlavaForConditionalGeneration", _set("model_type", ["llava"]), 'field model_type is ["llava"]; a family\'s name'),
    ("LlavaForConditionalGeneration", _set("text_config.model_type", ["llama"]), "field text_config.model_type is"),
    ("Gemma3ForConditionalGeneration", _set("vision_config", 7), "field vision_config is 7; a nested configuration"),
    ("Idefics3ForConditionalGeneration", _set("vision_config", "siglip"), 'field vision_config is "siglip"; a nested'),
    ("LlavaForConditionalGeneration", _set("text_config", dict(model_type="bert", hidden_size=32, vocab_size=90,
                                                               num_hidden_layers=1, num_attention_heads=4)),
     "text_config: model_type 'bert' (BERT) is not a language model the text tower can be (its classes: "
     "BertForMaskedLM, BertModel)"),
    ("LlavaForConditionalGeneration", _set("vision_config", {"model_type": "t5"}),
     "this LLaVA configuration has no image_size in its T5Config (model_type 't5'), where LLaVA reads one"),
    ("MambaForCausalLM", _set("layer_types", ["full_attention"] * 3), "property 'layer_types' of 'MambaConfig'"),
    ("GPT2LMHeadModel", _set("n_embd", "32"), 'field n_embd is "32"; tfspec reads a whole number from 1 to'),
    ("Qwen2MoeForCausalLM", _set("num_experts", {}), "field num_experts is {}; tfspec reads a whole number"),
    ("LlamaForCausalLM", _set("architectures", [1]), "field architectures is [1]; a list of class names"),
    ("LlamaForCausalLM", _set("rms_norm_eps", -1.0), "field rms_norm_eps is -1.0: rmsnorm: eps must be greater"),
    ("LlamaForCausalLM", _set("hidden_size", 10 ** 7), "field hidden_size is 10000000; tfspec reads a whole number "
                                                      "from 1 to 1,048,576"),
], ids=lambda value: "" if callable(value) else str(value)[:48])
def test_a_hostile_configuration_is_one_line_naming_its_field(tmp_path, capsys, cls, edit, message):
    """Zero sizes divided by zero (in transformers or a family), 10**12 layers or labels were listed one by one
    (MemoryError, or no answer), a list for a name, a number for a tower's configuration and an encoder for a
    language model's tower were TypeErrors and AttributeErrors, and a value the language refuses was shown at the
    imported spec's line: each is now one line naming config.json's field."""
    (tmp_path / "config.json").write_text(json.dumps(_configuration(cls, edit)))
    if "MambaConfig" in message:  # transformers logs the whole configuration: in a process of its own, whose
        result = cli("import", tmp_path)  # stderr its log handler writes to
    else:
        result = subprocess.CompletedProcess([], main(["import", str(tmp_path)]), "", capsys.readouterr().err)
    assert result.returncode == 1
    assert message in one_line(result)


@pytest.mark.parametrize("where", ["config", "layer_types", "safetensors"])
def test_json_nested_past_the_bound_is_one_line(gpt2_directory, tmp_path, capsys, where):
    """JSON nested 100,000 deep (the whole config.json, its layer_types, a safetensors header) was a RecursionError
    of the parser; it is refused from one pass over its brackets, before parsing."""
    deep = "[" * 100_000 + "]" * 100_000
    directory = tmp_path / "model"
    shutil.copytree(gpt2_directory, directory)
    if where == "config":
        (directory / "config.json").write_text(deep)
    elif where == "layer_types":
        values = json.loads((directory / "config.json").read_text())
        (directory / "config.json").write_text(json.dumps(values)[:-1] + f', "layer_types": {deep}}}')
    else:
        header = ('{"a": ' + deep + "}").encode()
        (directory / "model.safetensors").write_bytes(len(header).to_bytes(8, "little") + header)
    assert main(["import", str(directory), "--run", str(tmp_path / "run")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    expected = "not a safetensors file" if where == "safetensors" else "JSON nested 10000[01] deep, deeper than the 64"
    assert re.search(expected, err) and not (tmp_path / "run").exists(), err


# ---------------------------------------------------------------- a resumed run that no longer fits
HYBRID = """model tiny_hybrid
let d_model = 32, vocab = 64
embedding tokens { vocab vocab; dim d_model; position none }
decoder x 2 {
  residual pre
  norm rmsnorm
  mixer mamba2(4, head_dim=16, state=8)
  feedforward d_ff=64 activation=swiglu
  final rmsnorm
  layers 1 { mamba = attention(self, heads=2, mask=causal + padding) }
}
head tied(tokens)
"""


@pytest.fixture(scope="module")
def hybrid_run(tmp_path_factory):
    """A hybrid (a Mamba-2 layer, then an attention layer) trained 2 steps."""
    root = tmp_path_factory.mktemp("hybrid")
    (root / "hybrid.tfs").write_text(HYBRID)
    out = root / "run"
    assert main(["train", str(root / "hybrid.tfs"), "--steps", "2", "--batch", "4", "--eval-size", "4",
                 "--no-progress", "--out", str(out)]) == 0
    return out


def _edit_state(edit):
    def edited(checkpoint: Path):
        state = torch.load(checkpoint / "state.pt", weights_only=True)
        edit(state)
        torch.save(state, checkpoint / "state.pt")
    return edited


def _moments(state):
    for moments in state["optimizer"]["state"].values():
        moments["exp_avg"], moments["exp_avg_sq"] = torch.zeros(3), torch.zeros(7, 7)


def _spec(old: str, new: str):
    def edited(checkpoint: Path):
        (checkpoint / "spec.tfs").write_text((checkpoint / "spec.tfs").read_text().replace(old, new))
    return edited


def _weights(edit):
    def edited(checkpoint: Path):
        from safetensors.torch import load_file, save_file
        tensors = load_file(checkpoint / "model.safetensors")
        edit(tensors)
        save_file(tensors, checkpoint / "model.safetensors")
    return edited


MISFITS = {  # name: (edit of the latest checkpoint, what the one line says)
    "moments": (_edit_state(_moments), "state.pt: it does not fit this run: its optimizer's exp_avg of parameter 0 is "
                                       "torch.float32 (3,), the parameter torch.float32 (64, 32)"),
    "groups": (_edit_state(lambda s: s["optimizer"]["param_groups"][0].update(
        params=s["optimizer"]["param_groups"][0]["params"][:-2])), "its optimizer's group 0 holds"),
    "learning rate": (_edit_state(lambda s: s["optimizer"]["param_groups"][0].update(lr="fast")),
                      'its optimizer\'s group 0 has lr "fast", not a number'),
    "step": (_edit_state(lambda s: [m.update(step=torch.zeros(4)) for m in s["optimizer"]["state"].values()]),
             "its optimizer's step of parameter 0 holds 4 numbers, not one"),
    "integer moments": (_edit_state(lambda s: [m.update(exp_avg=m["exp_avg"].long())
                                               for m in s["optimizer"]["state"].values()]),
                        "its optimizer's exp_avg of parameter 0 is torch.int64"),
    "stranger": (_edit_state(lambda s: s["optimizer"]["state"].update({99: {}})),
                 "its optimizer holds a state for parameter 99, which this run does not have"),
    "random state": (_edit_state(lambda s: s.update(rng=torch.zeros(5, dtype=torch.uint8))),
                     "its random state is not one torch.get_rng_state gives"),
    "random text": (_edit_state(lambda s: s.update(rng="x")), "its random state is not one"),
    "spec width": (_spec("d_model = 32", "d_model = 48"), "the weights do not fit spec.tfs: shapes differ: "
                                                          "embeddings.tokens.tokens.weight (64, 32) vs (64, 48)"),
    "mixer state": (_spec("state=8", "state=16"), "the weights do not fit spec.tfs: shapes differ: "
                                                  "decoder.layers.0.mamba.in_proj.weight"),
    "weights missing": (_weights(lambda t: t.pop("decoder.final_norm.weight")),
                        "the weights do not fit spec.tfs: missing: decoder.final_norm.weight"),
}


@pytest.mark.parametrize("name", sorted(MISFITS))
def test_a_resumed_run_that_no_longer_fits_is_refused_naming_what_differs(hybrid_run, tmp_path, capsys, name):
    """A checkpoint edited by hand and taken as it is (``--accept-edits``): its spec, weights or training state no
    longer fit the run. Each was a ``load_state_dict`` or ``set_rng_state`` traceback, and optimiser moments of
    another shape crashed the interpreter in the optimiser's step (SIGSEGV: so this runs in a process of its own);
    each is now one line naming what differs, before the run changes anything."""
    run = tmp_path / "run"
    shutil.copytree(hybrid_run, run)
    edit, message = MISFITS[name]
    edit(ckpt.latest(run))
    before = (run / "metrics.jsonl").read_bytes()
    command = ["train", "--resume", str(run), "--steps", "4", "--no-progress", "--accept-edits"]
    if name == "moments":
        result = cli(*command)
    else:
        result = subprocess.CompletedProcess(command, main(command), "", capsys.readouterr().err)
    assert result.returncode == 1, result
    assert message in one_line(result)
    assert (run / "metrics.jsonl").read_bytes() == before and ckpt.latest(run).name == "step-0000002"


# ---------------------------------------------------------------- export of every kind of trained run
@pytest.mark.parametrize("example, exported", [
    ("vlm_digits", None), ("clip_digits", None), ("audio_tones", None), ("vit_digits", "ViTForImageClassification"),
])
def test_export_to_hugging_face_of_each_kind_of_trained_run_works_or_is_one_line(tmp_path, capsys, example, exported):
    """Towers joined by a connector (a TypeError before: Gemma 3's reading of a connector that does not pool),
    towers compared by a contrastive head, an encoder of audio and a vision classifier, each trained from a shipped
    example: the export is written and loads in transformers, or is refused in one line naming the closest family's
    differences."""
    run = tmp_path / "run"
    assert main(["train", f"examples/{example}.tfs", "--steps", "1", "--batch", "4", "--eval-size", "4",
                 "--no-progress", "--out", str(run)]) == 0
    capsys.readouterr()
    status = main(["export", str(run), "--to", "hf", "--out", str(tmp_path / "hf")])
    result = subprocess.CompletedProcess([], status, "", capsys.readouterr().err)
    if exported is None:
        assert status == 1 and "has no Hugging Face equivalent; the closest family" in one_line(result)
        assert not (tmp_path / "hf").exists()
    else:
        import transformers as T
        assert status == 0, result.stderr
        assert type(getattr(T, exported).from_pretrained(tmp_path / "hf")).__name__ == exported


def test_two_imports_into_one_run_directory_leave_one_whole_model_and_refuse_the_other(gpt2_directory, tmp_path):
    """Both used to report success while one model was silently lost (written over the other, file by file): the
    run is now built whole beside its place and renamed into it, so the second finds the first's there."""
    import transformers as T

    other = tmp_path / "other"
    config = T.GPT2Config.from_pretrained(gpt2_directory)
    torch.manual_seed(5)
    T.GPT2LMHeadModel(config).save_pretrained(other)
    run = tmp_path / "run"
    processes = [subprocess.Popen([sys.executable, "-m", "tfspec.cli", "import", str(source), "--run", str(run)],
                                  cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                 for source in (gpt2_directory, other)]
    results = [subprocess.CompletedProcess(p.args, p.wait(timeout=120), p.stdout.read(), p.stderr.read())
               for p in processes]
    assert sorted(r.returncode for r in results) == [0, 2], results
    loser = next(r for r in results if r.returncode == 2)
    assert "already exists" in one_line(loser)
    winner = gpt2_directory if results[0].returncode == 0 else other
    saved = ckpt.load(run)
    theirs = T.GPT2LMHeadModel.from_pretrained(winner).state_dict()
    assert torch.equal(saved.weights["embeddings.tokens.tokens.weight"], theirs["transformer.wte.weight"])
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".run")) == []  # no temporary left


# ---------------------------------------------------------------- resources bounded by design
def test_a_name_of_three_megabytes_is_quoted_as_an_excerpt(tmp_path, tfspec_cli):
    """A misspelt identifier of 3 MB made 6.4 MB of error output (the name in the message and again in the
    source line); messages and hints quote long names by their ends and length."""
    path = tmp_path / "long.tfs"
    path.write_text("model m\nembedding tokens { vocab 10; dim 8; position none }\n"
                    f"decoder x 1 {{ attention self heads={'h' * 3_000_000}; feedforward d_ff=8 }}\nhead tied(tokens)\n")
    result = tfspec_cli("check", path)
    assert result.returncode == 1 and len(result.stderr) < 2000, len(result.stderr)
    assert f"unknown parameter '{'h' * 40}…(3,000,000 characters)…{'h' * 20}'" in result.stderr


def test_checking_many_layer_kinds_compares_each_layer_once(tmp_path):
    """1,200 layer kinds took 20 s to check (each layer's block compared with every kind found so far, and the IR's
    lint searched the whole model below each kind): both are linear now. Counted, not timed: the blocks compared
    by equality stay a few per layer, and the lint searches each kind's own nodes."""
    import networkx as nx
    from unittest import mock

    from tfspec.front import schema as S
    from tfspec.ir.api import parse

    lines = ["model m", "embedding tokens { vocab 10; dim 8; position none }", "decoder x 400 {",
             "  attention self heads=2 mask=causal", "  feedforward d_ff=8"]
    lines += [f"  layers {i} {{ ffn = feedforward(d_ff={8 + i}) }}" for i in range(400)] + ["}", "head tied(tokens)"]
    compared, searched = [0], []
    equal, descendants = S.Node.__eq__, nx.descendants

    def counted(self, other):
        compared[0] += 1
        return equal(self, other)

    def measured(graph, source):
        searched.append(graph.number_of_nodes())
        return descendants(graph, source)

    with mock.patch.object(S.Node, "__eq__", counted), mock.patch.object(nx, "descendants", measured):
        spec = parse("\n".join(lines))
    assert len(spec.stacks[0].kinds) == 399 and compared[0] < 10 * 400, compared
    assert len(searched) >= 400 and max(searched) < 20, max(searched)  # (each kind: its 8 nodes)


def test_a_picture_tower_of_65537_patches_is_refused_by_mask_and_noted_by_report(tmp_path, tfspec_cli):
    """Its patterns would be a 65,537² matrix: ``mask`` held 21 GB for 52 s, ``report`` asked 16 GiB. The length its
    input fixes is checked against the drawing budget (16,384 a side) before any matrix is made."""
    spec = tmp_path / "big.tfs"
    spec.write_text((ROOT / "examples" / "vit_digits.tfs").read_text())
    refused = tfspec_cli("mask", spec, "--set", "side=1024", "-o", tmp_path / "m.png")
    assert refused.returncode == 2 and not (tmp_path / "m.png").exists()
    assert "stack encoder reads 65,537 positions, whose picture would hold 4,295,098,369 pairs; tfspec draws at " \
           "most 16,384 positions a side" in one_line(refused)
    noted = tfspec_cli("report", spec, "--set", "side=1024", "-o", tmp_path / "r.html")
    assert noted.returncode == 0, noted.stderr
    assert "reads 65,537 positions" in (tmp_path / "r.html").read_text()


@pytest.mark.parametrize("when", ["as the command returns", "while the process exits"])
def test_ctrl_c_at_a_commands_end_is_one_line_or_nothing(when):
    """A SIGINT landing as ``report`` ended exited by the signal with no line (Python kills itself with SIGINT
    when a KeyboardInterrupt escapes): after the command returns it is answered as any other Ctrl-C, and while the
    process exits (its libraries' exit handlers) it is ignored, the command being done."""
    if when == "as the command returns":
        script = ("import os, signal, sys\nimport tfspec.cli.app as app\nrun = app.main\n"
                  "def main(argv):\n    status = run(argv)\n    os.kill(os.getpid(), signal.SIGINT)\n"
                  "    for _ in range(10 ** 6):\n        pass\n    return status\n"
                  "app.main = main\nfrom tfspec.cli import main as cli\nsys.exit(cli())")
    else:
        script = ("import atexit, os, signal, sys\n"
                  "atexit.register(lambda: (os.kill(os.getpid(), signal.SIGINT), [0 for _ in range(10 ** 6)]))\n"
                  "from tfspec.cli import main as cli\nsys.exit(cli())")
    done = subprocess.run([sys.executable, "-c", script, "check", REVERSE], capture_output=True, text=True, cwd=ROOT,
                          timeout=120)
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr, done.stderr
    if when == "as the command returns":
        assert done.returncode == 130 and done.stderr.strip() == "interrupted", done
    else:
        assert done.returncode == 0 and "reverse: encoder-decoder" in done.stdout, done


def test_render_expand_past_its_budget_is_refused_before_graphviz_runs(tmp_path, tfspec_cli):
    """4,096 layers drawn one by one ran Graphviz out of memory after a while; past 256 layers ``--expand`` is refused
    at once, naming the drawing without it (which draws them, a box a layer kind)."""
    spec = tmp_path / "deep.tfs"
    spec.write_text("model m\nembedding tokens { vocab 10; dim 8; position none }\n"
                    "decoder x 4096 { attention self heads=2 mask=causal; feedforward d_ff=8 }\nhead tied(tokens)\n")
    refused = tfspec_cli("render", spec, "--expand", "-o", tmp_path / "deep.dot")
    assert refused.returncode == 2 and not (tmp_path / "deep.dot").exists()
    assert "--expand draws every layer: 4,096 layers, more than the 256 tfspec draws one by one" in one_line(refused)
    drawn = tfspec_cli("render", spec, "-o", tmp_path / "deep.dot")
    assert drawn.returncode == 0 and "4096" in (tmp_path / "deep.dot").read_text()
