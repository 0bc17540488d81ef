"""The grammar ships inside the built wheel (as tfspec.grammars), not only in the repository."""

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_wheel_contains_grammar_and_variants(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                           "-w", str(tmp_path), str(ROOT)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    (wheel,) = tmp_path.glob("tfspec-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "tfspec/grammars/tfspec.lark" in names
    assert "tfspec/variants/layernorm.py" in names
    assert "tfspec/nn/attention.py" in names and "tfspec/interop/hf_gpt2.py" in names
    # every module of the source tree, in whatever subpackage: none silently drops out of the wheel
    sources = {p.relative_to(ROOT).as_posix() for p in (ROOT / "tfspec").rglob("*.py")}
    assert sources - set(names) == set()
    shipped = zipfile.ZipFile(wheel).read("tfspec/grammars/tfspec.lark").decode()
    assert shipped == (ROOT / "grammars" / "tfspec.lark").read_text()
