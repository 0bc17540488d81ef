"""The README and the reference in docs/ as a reader runs them: the README's tour (every command of it, as
written), its Python, the reference's training loop and every complete spec written in any page; the
reference names every registered variant; the pages build as a site with `mkdocs build --strict`."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import tfspec
from tfspec.cli import main

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted((ROOT / "docs").glob("*.md"))
README = (ROOT / "README.md").read_text()


def _blocks(text: str, language: str = "") -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, re.S)


def _commands(block: str) -> list[list[str]]:
    return [shlex.split(line[2:]) for line in block.splitlines() if line.startswith("$ ")]


def test_the_readme_tour_runs_as_written(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    shutil.copy(ROOT / "README.md", tmp_path)
    spec = next(b for b in _blocks(README) if b.startswith("model tiny"))
    (tmp_path / "tiny.tfs").write_text(spec)
    tour, imports = [b for b in _blocks(README, "console")]
    for command in _commands(tour):
        assert command[0] == "tfspec"
        assert main(command[1:]) == 0, command
    out = capsys.readouterr().out
    count = tfspec.load("tiny.tfs").parameter_count()
    assert f"tiny.tfs: tiny: decoder-only, 2 layers, d_model 64, 4 heads, {count:,} parameters" in out
    assert f"4 heads, {count:,}" in README  # the figure the README quotes is this one
    for written in ("tiny.svg", "tiny.html", "runs/tiny/metrics.jsonl"):
        assert (tmp_path / written).is_file()

    _hugging_face_directory(tmp_path / "hf-model")
    for command in _commands(imports):
        assert main(command[1:]) == 0, command
    assert (tmp_path / "exported" / "config.json").is_file()

    python = _blocks(README, "python")[0]
    result = subprocess.run([sys.executable, "-c", python], cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [str(count), "(2,", "16,", "261)"]


def _hugging_face_directory(directory: Path) -> None:
    """A tiny GPT-2 as save_pretrained writes it, with a word-level tokenizer."""
    transformers = pytest.importorskip("transformers")
    from tokenizers import Tokenizer, models, pre_tokenizers

    words = ["<pad>", "<unk>", "hello", "world", "a", "spec"]
    tokenizer = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=len(words), n_embd=16, n_layer=1, n_head=2, n_positions=32,
                                     bos_token_id=2, eos_token_id=3, pad_token_id=0)
    transformers.GPT2LMHeadModel(config).save_pretrained(directory)
    tokenizer.save(str(directory / "tokenizer.json"))


def test_the_reference_training_loop_runs_and_saves_loadable_weights(tmp_path):
    from safetensors.torch import load_file

    python = (ROOT / "docs" / "python.md").read_text()
    block = re.search(r"\*\*Your own training loop\.\*\*.*?```python\n(.*?)```", python, re.S).group(1)
    (tmp_path / "examples").mkdir()
    shutil.copy(ROOT / "examples" / "gpt2_small.tfs", tmp_path / "examples")
    script = tmp_path / "example.py"
    script.write_text(block + "\nprint(f'final loss {loss.item():.3f}')\n")
    result = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert 0 < float(result.stdout.split()[-1]) < 7.0  # about ln(1000): random ids leave nothing to learn
    model = tfspec.compile("examples/gpt2_small.tfs", overrides={"layers": 2, "d_model": 128, "heads": 4,
                                                                 "context": 64, "vocab": 1000})
    model.load_state_dict(load_file(tmp_path / "model.safetensors"))  # strict: every name and shape matches


def test_every_complete_spec_in_the_pages_checks():
    """A fenced block that declares an embedding and a stack is a whole spec: it must parse and validate."""
    found = 0
    for page in [ROOT / "README.md", *PAGES]:
        for block in _blocks(page.read_text()):
            if re.search(r"^\s*embedding \w+", block, re.M) and re.search(r"^\s*(encoder|decoder) (x|×) ", block, re.M) \
                    and "$ " not in block and "..." not in block and "…" not in block:
                try:
                    tfspec.parse(block)
                except tfspec.SpecError as exc:
                    raise AssertionError(f"{page.name}: a spec that does not check:\n{block}\n{exc}") from None
                found += 1
    assert found >= 3  # the README's two, the language reference's Vaswani


def test_the_reference_names_every_registered_variant():
    """Every attention kind, mask, position scheme, norm, activation, feed-forward kind, mixer, init and input kind
    is written in the language reference, in code (`name` or `name(...)`)."""
    from tfspec.registry import (ACTIVATIONS, ATTENTION_KINDS, ATTENTION_STEPS, FEEDFORWARD_KINDS, INITS, INPUTS,
                                 MASKS, MIXERS, NORMS, POSITIONS, ROUTER_PARTS)

    reference = (ROOT / "docs" / "language.md").read_text()
    code = " ".join(_blocks(reference) + re.findall(r"`([^`\n]+)`", re.sub(r"```.*?```", "", reference, flags=re.S)))
    words = set(re.findall(r"[A-Za-z_]\w*", code))
    missing = [f"{registry.family} {name}" for registry in (ATTENTION_KINDS, MASKS, POSITIONS, NORMS, ACTIVATIONS,
                                                             FEEDFORWARD_KINDS, MIXERS, ATTENTION_STEPS, INITS, INPUTS,
                                                             ROUTER_PARTS)
               for name in registry if name not in words]
    assert not missing, f"not in docs/language.md: {missing}"


def test_every_command_is_documented():
    from tfspec.cli import build_parser

    commands = build_parser()._subparsers._group_actions[0].choices
    reference = (ROOT / "docs" / "cli.md").read_text() + (ROOT / "docs" / "training.md").read_text() + \
        (ROOT / "docs" / "interop.md").read_text() + (ROOT / "docs" / "editors.md").read_text()
    assert [c for c in commands if f"tfspec {c}" not in reference] == []


def test_the_readme_stays_a_first_visit():
    assert len(README.splitlines()) <= 250
    for link in re.findall(r"\]\((docs/[^)#]+)", README) + re.findall(r'src="(docs/[^"]+)"', README):
        assert (ROOT / link).is_file(), link


def test_the_pages_build_as_a_site_with_strict_checks(tmp_path):
    pytest.importorskip("mkdocs")
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path / "site")],
                            cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "site" / "language" / "index.html").is_file()
    assert "Reliability" in (tmp_path / "site" / "reliability" / "index.html").read_text()
