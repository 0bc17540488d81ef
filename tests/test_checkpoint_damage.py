"""Damaged, edited and hostile checkpoints: every load path (generate, train --resume, --init) refuses them
with one sentence naming the file and the problem; nothing is unpickled beyond tensors, and an edited spec or
swapped weights are used only when the user says so (``--accept-edits``)."""

from __future__ import annotations

import json
import os
import pickle
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from tfspec import ir
from tfspec.run import checkpoint as ckpt
from tfspec.cli import main
from tfspec.run.train import TrainConfig, resume, train

SPEC = """model tiny
embedding tokens { vocab 12; dim 16; position learned(32) }
decoder x 1 { attention self heads=2 mask=causal + padding; feedforward d_ff=16 }
head tied(tokens)
"""


def quiet(line):
    pass


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    config = TrainConfig(task="reverse", steps=4, batch=4, eval_size=4, eval_every=100, save_every=100,
                         symbols=4, min_len=2, max_len=4)
    train(SPEC, config, root / "run", progress=False, log=quiet, stop_after=2)
    train(SPEC, config.model_copy(update={"seed": 1}), root / "other", progress=False, log=quiet, stop_after=2)
    return root


@pytest.fixture()
def run(pristine, tmp_path):
    shutil.copytree(pristine / "run", tmp_path / "run")
    return tmp_path / "run"


def current(run):
    return ckpt.latest(run)


def refused(run, message, accept_edits=False):
    with pytest.raises(ckpt.CheckpointError) as info:
        resume(run, progress=False, log=quiet, accept_edits=accept_edits)
    assert message in str(info.value), str(info.value)
    return str(info.value)


class Evil:
    def __reduce__(self):
        return (os.system, ("echo pwned > /tmp/tfspec-pwned",))


@pytest.mark.parametrize("damage, message", [
    (lambda p: p.write_bytes(p.read_bytes()[:100]), "not a training state tfspec wrote"),
    (lambda p: p.write_bytes(os.urandom(4000)), "not a training state tfspec wrote"),
    (lambda p: p.write_bytes(pickle.dumps(Evil())), "not a training state tfspec wrote"),
    (lambda p: torch.save({"weights": torch.zeros(2)}, p), "no optimizer and RNG states"),
    (lambda p: p.unlink(), "missing; the run cannot resume from it"),
])
def test_a_damaged_training_state_is_one_sentence(run, damage, message):
    """Its digest refuses it first; taken as it is (--accept-edits), reading it is refused too."""
    damage(current(run) / "state.pt")
    digest = refused(run, "state.pt: ")
    assert "is damaged or was replaced since the checkpoint was saved" in digest or "incomplete" in digest
    text = refused(run, message, accept_edits=True)
    assert "state.pt" in text and not os.path.exists("/tmp/tfspec-pwned")


@pytest.mark.parametrize("edit, message", [
    (lambda m: m.update(step=-1), "step -1 is not a whole number >= 0"),
    (lambda m: m.update(step="abc"), "step 'abc' is not a whole number >= 0"),
    (lambda m: m["config"].update(lr="fast"), "its training configuration is not valid: lr"),
    (lambda m: m["config"].update(device="quantum"), "'quantum' is not a device name"),
    (lambda m: m.update(config=[1, 2]), "config is list, not an object"),
])
def test_a_malformed_checkpoint_json_is_refused(run, edit, message):
    path = current(run) / "checkpoint.json"
    meta = json.loads(path.read_text())
    edit(meta)
    path.write_text(json.dumps(meta))
    if "step" in message or "not an object" in message:  # its shape is read before the digests are checked
        refused(run, message)
        return
    refused(run, "checkpoint.json: damaged or edited since the checkpoint was saved")
    refused(run, message, accept_edits=True)


@pytest.mark.parametrize("vocab, message", [
    ({"kind": "florp"}, "vocabulary kind 'florp' is none of letters, bytes, chars, tokenizer"),
    ({"kind": "chars"}, "the vocabulary's symbols '' are not a string of distinct characters"),
    ({"kind": "chars", "symbols": ["a", "b"]}, "are not a string of distinct characters"),
    ({"kind": "tokenizer", "file": "../../etc/passwd"}, "is not a file name"),
    ({"kind": "tokenizer", "file": "tokenizer.json", "specials": {"pad": "x"}}, "are not role: id pairs"),
    ({"kind": "tokenizer", "file": "tokenizer.json"}, "no such tokenizer file"),
    ([1, 2], "vocab is list, not an object"),
])
def test_a_vocabulary_tfspec_did_not_write_is_one_sentence(run, capsys, vocab, message):
    path = current(run) / "checkpoint.json"
    meta = json.loads(path.read_text())
    meta["vocab"] = vocab
    path.write_text(json.dumps(meta))
    refused(run, message, accept_edits=True)
    assert main(["generate", str(run), "--accept-edits", "--count", "1"]) == 1
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err, err


def test_an_invalid_configuration_is_one_sentence_on_generate(run, capsys):
    path = current(run) / "checkpoint.json"
    meta = json.loads(path.read_text())
    meta["config"]["batch"] = -3
    path.write_text(json.dumps(meta))
    assert main(["generate", str(run), "--accept-edits", "--count", "1"]) == 1
    err = capsys.readouterr().err
    assert "checkpoint.json: its training configuration is not valid: batch" in err and err.count("\n") == 1, err


def test_a_flipped_byte_anywhere_in_a_checkpoint_is_refused(run):
    """Every file a checkpoint holds, at offsets spread over it (its first and last byte among them): the load
    is refused, or (checkpoint.json) the flip did not change what it says ('e' to 'E' in 1e-05)."""
    import random

    folder = current(run)
    chance = random.Random(0)
    for file in sorted(folder.iterdir()):
        original = file.read_bytes()
        offsets = {0, len(original) - 1, *chance.sample(range(len(original)), min(24, len(original)))}
        for offset in sorted(offsets):
            damaged = bytearray(original)
            damaged[offset] ^= 1 << chance.randrange(8)
            file.write_bytes(bytes(damaged))
            try:
                ckpt.load(run).training_state()
            except ckpt.CheckpointError:
                pass
            else:
                assert file.name == "checkpoint.json" and json.loads(damaged) == json.loads(original), \
                    (file.name, offset)
        file.write_bytes(original)
    ckpt.load(run).training_state()  # restored: loads again


@pytest.mark.parametrize("pointer, message", [
    (b"\xff\xfe", "not UTF-8"),
    (b"/etc", "not a checkpoint of this run"),
    (b"../../elsewhere", "not a checkpoint of this run"),
    (b"step-0000002/../../x", "not a checkpoint of this run"),
])
def test_latest_names_a_checkpoint_of_the_run_or_is_refused(run, pointer, message):
    (run / "latest").write_bytes(pointer)
    refused(run, message)


def test_an_edited_spec_is_refused_unless_accepted(run, capsys):
    """Deleting `causal` from a decoder's spec.tfs used to keep training a model that sees the future."""
    path = current(run) / "spec.tfs"
    path.write_text(path.read_text().replace("mask=causal + padding", "mask=padding"))
    refused(run, "spec.tfs: was edited since the checkpoint was saved")
    assert main(["generate", str(run), "--count", "1"]) == 1
    assert "pass --accept-edits" in capsys.readouterr().err
    resumed = resume(run, progress=False, log=quiet, accept_edits=True)
    g = resumed.model.spec.graph()
    masks = [m.name for a in g.of(ir.Attention) for m in a.spec.mask]
    assert resumed.step == 4 and masks == ["padding"]  # what the user accepted: the edited spec


def test_swapped_weights_are_refused(run, pristine):
    shutil.copy(ckpt.latest(pristine / "other") / "model.safetensors", current(run) / "model.safetensors")
    refused(run, "model.safetensors: are not the weights it was saved with")


def test_renamed_or_extra_tensors_are_named_even_when_accepted(run):
    path = current(run) / "model.safetensors"
    weights = load_file(str(path))
    weights["decoder.layers.0.surprise"] = torch.zeros(3)
    weights["renamed"] = weights.pop("decoder.final_norm.weight", torch.zeros(1))
    save_file(weights, str(path))
    with pytest.raises(ckpt.CheckpointError, match="the weights do not fit spec.tfs"):
        ckpt.load(run, accept_edits=True).model()


def test_non_finite_weights_are_refused(run):
    path = current(run) / "model.safetensors"
    weights = load_file(str(path))
    name = next(iter(weights))
    weights[name][0] = float("nan")
    save_file(weights, str(path))
    refused(run, f"non-finite values (inf or NaN) in {name}", accept_edits=True)


def test_the_cli_says_one_line_for_a_damaged_checkpoint(run, capsys):
    (current(run) / "state.pt").write_bytes(b"garbage")
    assert main(["train", "--resume", str(run), "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert "state.pt: is damaged or was replaced" in err and err.count("\n") == 1 and "Traceback" not in err
    assert main(["train", "--resume", str(run), "--no-progress", "--accept-edits"]) == 1
    err = capsys.readouterr().err
    assert "state.pt: not a training state tfspec wrote" in err and "Traceback" not in err
    assert main(["train", "--init", str(run), "--out", str(run.parent / "tuned"), "--steps", "1", "--batch", "4",
                 "--eval-size", "4", "--no-progress", "--task", "reverse", "--symbols", "4", "--max-len", "4",
                 "--min-len", "2"]) == 0  # --init reads the weights only: a damaged state.pt does not matter
