"""The README's library example runs as written."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

from safetensors.torch import load_file

ROOT = Path(__file__).resolve().parents[1]


def test_the_training_loop_example_runs_and_saves_loadable_weights(tmp_path):
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"\*\*Your own training loop\.\*\*.*?```python\n(.*?)```", readme, re.S).group(1)
    (tmp_path / "examples").mkdir()
    shutil.copy(ROOT / "examples" / "gpt2_small.tfs", tmp_path / "examples")
    script = tmp_path / "example.py"
    script.write_text(block + "\nprint(f'final loss {loss.item():.3f}')\n")
    result = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    final = float(result.stdout.split()[-1])
    print(final)
    assert 0 < final < 7.0  # about ln(1000) = 6.91: random ids leave nothing to learn but the loop must run
    import tfspec

    model = tfspec.compile("examples/gpt2_small.tfs", overrides={"layers": 2, "d_model": 128, "heads": 4,
                                                                 "context": 64, "vocab": 1000})
    model.load_state_dict(load_file(tmp_path / "model.safetensors"))  # strict: every name and shape matches


def test_the_reference_names_every_registered_variant():
    """The README's reference is checked against the registry: every attention kind, mask, position scheme,
    norm, activation, feed-forward kind and init is written there in code (`name` or `name(...)`)."""
    import re

    from tfspec.registry import ACTIVATIONS, ATTENTION_KINDS, FEEDFORWARD_KINDS, INITS, MASKS, NORMS, POSITIONS
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```.*?```", readme, re.S)  # fenced examples, then the inline code of the prose
    code = " ".join(blocks + re.findall(r"`([^`\n]+)`", re.sub(r"```.*?```", "", readme, flags=re.S)))
    words = set(re.findall(r"[A-Za-z_][\w]*", code))
    missing = [f"{registry.family} {name}" for registry in (ATTENTION_KINDS, MASKS, POSITIONS, NORMS, ACTIVATIONS,
                                                             FEEDFORWARD_KINDS, INITS)
               for name in registry if name not in words]
    assert not missing, f"not in the README's reference: {missing}"
