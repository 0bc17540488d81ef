"""Faults a user does not cause: a full disk, a second process on the same run. Every writer says which file
and why in one line (exit 1), keeps what was there before, and leaves nothing half-written behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from tfspec.run import checkpoint as ckpt
from tfspec.cli import main

REVERSE = "examples/reverse.tfs"
GPT2 = "examples/gpt2_small.tfs"
SMALL = ["--set", "layers=1", "--set", "d_model=32", "--set", "heads=2", "--set", "d_ff=32"]
TRAIN = ["train", REVERSE, *SMALL, "--batch", "4", "--eval-size", "4", "--no-progress"]
NO_SPACE = "No space left on device"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("faults") / "run"
    assert main([*TRAIN, "--steps", "2", "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def hf_directory(tmp_path_factory):
    import transformers as T

    directory = tmp_path_factory.mktemp("hf") / "gpt2"
    config = T.GPT2Config(n_layer=1, n_embd=16, n_head=2, n_positions=16, vocab_size=50)
    T.GPT2LMHeadModel(config).save_pretrained(directory)
    return directory


@pytest.fixture()
def full_disk(tmp_path):
    """A 256 KiB tmpfs filled to the last byte (root only: skipped where mounting is refused)."""
    mount = tmp_path / "full"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount)], capture_output=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.decode(errors='replace').strip()}")
    try:
        fd = os.open(mount / "filler", os.O_WRONLY | os.O_CREAT)
        try:
            while os.write(fd, b"\0" * 4096):
                pass
        except OSError:  # the disk is full
            pass
        os.close(fd)
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


FULL_DISK_CASES = [  # the command, the file the message must name (relative to the full disk)
    (["render", REVERSE, "-o", "{full}/x.svg"], "x.svg"),
    (["emit", REVERSE, "-o", "{full}/x.py"], "x.py"),
    (["summary", REVERSE, "--plot", "{full}/x.png"], "x.png"),
    (["mask", REVERSE, "--seq-len", "6", "-o", "{full}/x.png"], "x.png"),
    (["export", "{hf_run}", "--to", "hf", "-o", "{full}/exported"], "exported"),
    (["export", "{run}", "--to", "torch", "-o", "{full}/exported"], "exported/model.py"),
    (["import", "{hf}", "--run", "{full}/imported"], "imported/checkpoints/step-0000000"),
    ([*TRAIN, "--steps", "1", "--out", "{full}/run"], "run/metrics.jsonl"),
    (["prepare", "{text}", "-o", "{full}/prepared"], "prepared/tokens.bin"),
]


@pytest.mark.parametrize("args, named", FULL_DISK_CASES, ids=[" ".join(c[0][:2]) for c in FULL_DISK_CASES])
def test_a_full_disk_is_one_line_naming_the_file_and_leaves_nothing_behind(full_disk, run, hf_directory, tmp_path,
                                                                          capfd, args, named):
    text = tmp_path / "text.txt"
    text.write_text("hello world\n" * 50)
    values = {"full": full_disk, "run": run, "hf": hf_directory, "text": text, "hf_run": tmp_path / "hf_run"}
    if "{hf_run}" in args:
        assert main(["import", str(hf_directory), "--run", str(values["hf_run"])]) == 0
        capfd.readouterr()
    argv = [a.format(**values) for a in args]
    assert main(argv) == 1
    err = capfd.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert NO_SPACE in lines[0] and f"{full_disk}/{named}" in lines[0], lines[0]
    assert sorted(p.name for p in full_disk.iterdir()) == ["filler"]  # no partial file or directory


def test_a_checkpoint_that_cannot_be_saved_keeps_the_previous_one(tmp_path, monkeypatch, capsys):
    """The disk fills between two checkpoints: safetensors' own error becomes one sentence, exit 1, and the
    previous checkpoint is still the run's latest, whole, and resumable."""
    from safetensors import SafetensorError

    real, calls = ckpt.save_file, []

    def second_save_fails(*args, **kwargs):
        calls.append(args[1])
        if len(calls) == 2:
            raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")
        return real(*args, **kwargs)

    monkeypatch.setattr(ckpt, "save_file", second_save_fails)
    out = tmp_path / "run"
    assert main([*TRAIN, "--steps", "4", "--save-every", "2", "--eval-every", "2", "--out", str(out)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "Traceback" not in err, err
    assert f"cannot save checkpoint {out}/checkpoints/step-0000004" in err
    assert f"step-0000004 (model.safetensors: {NO_SPACE})" in err and "the previous one, step-0000002, is intact" in err
    assert ckpt.latest(out).name == "step-0000002"
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step-0000002"]  # no temporary left
    ckpt.load(out).training_state()
    monkeypatch.setattr(ckpt, "save_file", real)
    assert main(["train", "--resume", str(out), "--no-progress"]) == 0


def test_the_loss_plot_and_metrics_name_their_file_when_writing_fails(tmp_path, monkeypatch, capsys):
    real = os.replace

    def no_space_for_png(source, target):
        if str(target).endswith(".png"):
            raise OSError(28, NO_SPACE)  # as write() reports it: no file name
        return real(source, target)

    monkeypatch.setattr(os, "replace", no_space_for_png)
    out = tmp_path / "run"
    assert main([*TRAIN, "--steps", "1", "--out", str(out)]) == 1
    err = capsys.readouterr().err.strip()
    assert err == f"tfspec train: error: {out}/loss.png: {NO_SPACE}", err
    assert not out.exists()  # a new run that failed before its first checkpoint leaves no directory


def test_a_run_directory_has_one_writer_and_a_dead_ones_lock_never_blocks(tmp_path):
    out = tmp_path / "run"
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time\nfrom tfspec.run import checkpoint as c\n"
                               "with c.sole_writer(sys.argv[1]):\n    print('held', flush=True)\n    time.sleep(60)",
                               str(out)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        second = subprocess.run([sys.executable, "-m", "tfspec", *TRAIN, "--steps", "1", "--out", str(out)],
                                capture_output=True, text=True, timeout=120)
        assert second.returncode == 1, second.stderr
        assert second.stderr.strip() == (f"tfspec train: error: {out}: process {holder.pid} is writing this run "
                                         "(tfspec train); wait for it to end, or choose another --out")
        assert sorted(p.name for p in out.iterdir()) == [".lock"]  # the refused process wrote nothing
    finally:
        holder.kill()
        holder.wait()
    assert main([*TRAIN, "--steps", "1", "--out", str(out)]) == 0  # the killed holder's lock is gone with it


def test_a_second_trainer_on_a_live_run_is_refused_and_the_first_finishes_alone(tmp_path, tfspec_cli):
    out = tmp_path / "run"
    first = subprocess.Popen([sys.executable, "-m", "tfspec", *TRAIN, "--steps", "400", "--save-every", "100",
                              "--eval-every", "100", "--out", str(out)], stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not (out / "metrics.jsonl").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        for args in ([*TRAIN, "--steps", "400", "--out", str(out)], ["train", "--resume", str(out), "--no-progress"]):
            second = tfspec_cli(*args)  # in this process: another pid than the first's
            assert second.returncode == 1 and f"process {first.pid} is writing this run" in second.stderr, \
                second.stderr
    finally:
        assert first.wait(timeout=300) == 0, first.stderr.read()
    steps = [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()
             if "loss" in json.loads(line)]
    assert steps == sorted(steps) and len(steps) == len(set(steps))  # one writer: no interleaved records


def test_training_into_a_directory_of_other_files_is_refused(tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "thesis.tex").write_text("precious")
    assert main([*TRAIN, "--steps", "1", "--out", str(mine)]) == 1
    assert sorted(p.name for p in mine.iterdir()) == ["thesis.tex"]
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main([*TRAIN, "--steps", "1", "--out", str(empty)]) == 0  # an empty directory is a fine new run


def test_an_error_in_a_temporary_directory_names_where_the_file_was_going(tmp_path):
    from tfspec.files import moved_error

    tmp, final = tmp_path / ".out.x1", tmp_path / "out"
    error = moved_error(OSError(28, NO_SPACE, str(tmp / "model.safetensors")), tmp, final)
    assert (error.errno, error.filename) == (28, str(final / "model.safetensors"))
    assert moved_error(ValueError("not I/O"), tmp, final) is None


def test_a_run_on_relative_paths_resumes_from_another_directory(tmp_path, monkeypatch):
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "text.txt").write_text("the quick brown fox jumps over the lazy dog\n" * 40)
    spec = os.path.abspath(GPT2)
    monkeypatch.chdir(tmp_path / "corpus")
    assert main(["train", spec, "--set", "layers=1", "--set", "d_model=32", "--set", "heads=2", "--set",
                 "context=16", "--data", "text.txt", "--seq-len", "8", "--steps", "4", "--save-every", "2",
                 "--batch", "2", "--eval-size", "2", "--no-progress", "--out", str(tmp_path / "run")]) == 0
    monkeypatch.chdir(tmp_path)
    assert main(["train", "--resume", "run", "--steps", "6", "--no-progress"]) == 0
    assert ckpt.load(tmp_path / "run").step == 6
    assert ckpt.load(tmp_path / "run").config().data == (str(tmp_path / "corpus" / "text.txt"),)


@pytest.mark.parametrize("dtype, advice", [("float32", "lower --lr"), ("bfloat16", "lower --lr or use --dtype float32")])
def test_a_diverged_run_suggests_float32_only_when_it_is_not(tmp_path, capsys, monkeypatch, dtype, advice):
    import math
    import types

    import tfspec.run.trainer as training

    diverged = types.SimpleNamespace(**{k: getattr(math, k) for k in dir(math) if not k.startswith("_")})
    diverged.isfinite = lambda value: False  # every loss is taken for NaN
    monkeypatch.setattr(training, "math", diverged)
    assert main([*TRAIN, "--steps", "3", "--dtype", dtype, "--out", str(tmp_path / "run")]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("tfspec train: error: the loss became") and err.endswith(f"at step 1; {advice}"), err


def test_export_prints_no_warning_about_token_ids_the_model_does_not_have(tmp_path, capfd):
    """GPT-2's configuration defaults bos/eos to 50256; a 40-id model exported has its own ids or none."""
    assert main(["train", GPT2, "--set", "layers=1", "--set", "d_model=32", "--set", "heads=2", "--set", "context=64",
                 "--set", "vocab=40", "--steps", "1", "--batch", "2", "--eval-size", "2", "--no-progress",
                 "--out", str(tmp_path / "run")]) == 0
    capfd.readouterr()
    assert main(["export", str(tmp_path / "run"), "--to", "hf", "-o", str(tmp_path / "hf")]) == 0
    assert capfd.readouterr().err == ""
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert all(value is None or value < 40 for key, value in config.items() if key.endswith("_token_id"))


def test_a_metrics_line_cut_short_is_passed_over_when_the_run_resumes(tmp_path):
    """A trainer killed, or a disk filled, in the middle of a line: the run resumes, plots and reads its metrics."""
    from tfspec.run.train import read_metrics

    out = tmp_path / "run"
    assert main([*TRAIN, "--steps", "4", "--save-every", "2", "--eval-every", "2", "--out", str(out)]) == 0
    with open(out / "metrics.jsonl", "a") as f:
        f.write('{"step": 5, "loss": 1.2, "l')  # cut short
    assert main(["train", "--resume", str(out), "--steps", "6", "--no-progress"]) == 0
    lines = (out / "metrics.jsonl").read_text().splitlines()
    assert all(json.loads(line)["step"] <= 6 for line in lines)
    losses, _ = read_metrics(out / "metrics.jsonl")
    assert [r["step"] for r in losses] == [1, 2, 3, 4, 5, 6]


def test_an_appended_line_that_does_not_fit_is_cut_back_off(tmp_path, monkeypatch):
    from tfspec.files import append_line

    path = tmp_path / "metrics.jsonl"
    append_line(path, '{"step": 1}')
    real, calls = os.write, []

    def half_then_full(fd, data):
        calls.append(len(data))
        if len(calls) == 1:
            return real(fd, data[: len(data) // 2])
        raise OSError(28, NO_SPACE)

    monkeypatch.setattr(os, "write", half_then_full)
    with pytest.raises(OSError) as info:
        append_line(path, '{"step": 2, "loss": 0.5}')
    monkeypatch.undo()
    assert (info.value.errno, info.value.filename) == (28, str(path))
    assert path.read_text() == '{"step": 1}\n'  # the half line is gone


def test_a_disk_that_fills_while_the_training_state_is_written_is_one_line(tmp_path, capsys):
    """torch's zip writer reports a full disk as a RuntimeError ("[enforce fail at inline_container.cc] unexpected
    pos"): it is the same one line naming state.pt as any other write's, and nothing is left behind."""
    args = [*TRAIN, "--steps", "2", "--save-every", "2", "--eval-every", "2"]
    assert main([*args, "--out", str(tmp_path / "measured")]) == 0
    capsys.readouterr()
    measured = tmp_path / "measured"
    state = (ckpt.latest(measured) / "state.pt").stat().st_size
    before = sum(p.stat().st_size for p in measured.rglob("*") if p.is_file() and p.name not in (
        "state.pt", "checkpoint.json", "latest", "loss.png", ".lock"))
    room = before + (measured / "loss.png").stat().st_size + state // 2  # all but the second half of state.pt
    mount = tmp_path / "tight"
    mount.mkdir()
    size = (room // 4096 + 8) * 4096  # tmpfs counts whole pages: a few for the directories
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)], capture_output=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.decode(errors='replace').strip()}")
    try:
        assert main([*args, "--out", str(mount / "run")]) == 1
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and "Traceback" not in err and "inline_container" not in err, err
        assert f"cannot save checkpoint {mount}/run/checkpoints/step-0000002 (state.pt: {NO_SPACE})" in err, err
        assert list(mount.iterdir()) == []  # a new run that could not save leaves nothing
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)
