"""Checking stays light: the commands that read specs without running a model never import torch (in a fresh
process, as a user runs them, the modules checked after each command; `python benchmarks/bench_check.py` times
`check` against `import torch`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
PROBE = """
import json, sys
from tfspec.cli import main
import contextlib, io
for command in json.loads(sys.argv[1]):  # one after another: a module once imported stays in sys.modules
    sys.argv = ["tfspec", *command]
    with contextlib.redirect_stdout(io.StringIO()):
        code = main()  # the process's command line, as the tfspec command runs it
    loaded = sorted(m for m in ("torch", "transformers", "onnx") if sys.modules.get(m) is not None)
    print(json.dumps([command, code, loaded]), flush=True)
"""


def test_reading_commands_never_import_torch(tmp_path):
    commands = [["check", "examples/llama2_7b.tfs", "examples/deepseek_v3.tfs", "examples/vit_base.tfs"],
                ["check", "examples/gpt2_small.tfs", "--json"],
                ["fmt", "--check", "examples/mixtral_8x7b.tfs"],
                ["render", "examples/vaswani_base.tfs", "-o", str(tmp_path / "v.dot")],
                ["summary", "examples/llama2_7b.tfs", "examples/mistral_7b.tfs"],
                ["diff", "examples/gpt1.tfs", "examples/gpt2_small.tfs"],
                # every mask of structure: causal, prefix, document, window, block, sink
                ["mask", "examples/unilm.tfs", "-o", str(tmp_path / "u.svg"), "--seq-len", "32"],
                ["mask", "examples/mistral_7b.tfs", "-o", str(tmp_path / "m.svg"), "--seq-len", "64"],
                ["mask", str(tmp_path / "every_mask.tfs"), "-o", str(tmp_path / "s.svg"), "--seq-len", "32"],
                # an attention kind's own pattern, drawn (BigBird's random blocks) and costed
                ["check", "examples/bigbird_base.tfs"],
                ["mask", "examples/bigbird_base.tfs", "-o", str(tmp_path / "b.svg"), "--seq-len", "1024"],
                # a configuration, and one beside weights (whose names import reads)
                ["import", str(tmp_path / "llama"), "-o", str(tmp_path / "llama.tfs")],
                ["import", str(tmp_path / "gpt2" / "config.json"), "--json", "-o", str(tmp_path / "gpt2.tfs")]]
    for name, config in {"llama": dict(model_type="llama", vocab_size=50, hidden_size=32, num_hidden_layers=2,
                                       num_attention_heads=4, intermediate_size=64),
                         "gpt2": dict(model_type="gpt2", vocab_size=50, n_embd=32, n_layer=2, n_head=4)}.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps(config))
    safetensors_numpy = pytest.importorskip("safetensors.numpy")
    safetensors_numpy.save_file({"lm_head.weight": np.zeros((50, 32), np.float32)},
                                str(tmp_path / "llama" / "model.safetensors"))
    (tmp_path / "every_mask.tfs").write_text("embedding tokens { vocab 9; dim 8 }\ndecoder x 1 {\n"
                                             "  attention self heads=2 mask=prefix + document + padding; feedforward d_ff=8\n"
                                             "  attention self heads=2 mask=block(4); feedforward d_ff=8\n"
                                             "  attention self heads=2 mask=sink(2, 5) + window(7); feedforward d_ff=8 }\n")
    # in one process, the imports last: they load transformers (without torch), which stays loaded
    commands = [[str(a) for a in c] for c in sorted(commands, key=lambda c: c[0] == "import")]
    done = subprocess.run([sys.executable, "-c", PROBE, json.dumps(commands)], capture_output=True, text=True,
                          cwd=ROOT)
    results = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("[[")]
    assert [r[0] for r in results] == commands, done.stderr[-1000:]
    for command, code, loaded in results:
        assert code == 0 and loaded == (["transformers"] if command[0] == "import" else []), (command, loaded)
    # transformers without torch reads a configuration as it does with torch (this process has torch)
    from tfspec.interop.families import import_config
    assert "torch" in sys.modules
    for name in ("llama", "gpt2"):
        assert (tmp_path / f"{name}.tfs").read_text() == import_config(tmp_path / name)


def test_the_interop_package_loads_its_parts_when_they_are_used():
    bert = "'tfspec.interop.families.hf_bert' in sys.modules"
    probe = (f"import sys, tfspec.interop as i; before = {bert}; f = i.from_hf_bert; "
             f"print(before, {bert}, callable(f), 'torch' in sys.modules, "
             "'from_hf_bert' in dir(i))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT)
    assert done.stdout.split() == ["False", "True", "True", "False", "True"], done.stderr


def test_the_parser_is_kept_between_runs_only_where_no_one_else_can_write(tmp_path):
    """Building the parser's tables is most of a small check: kept in the user's cache directory (a pickle, so
    only one no one else can write), and a run that finds it parses as one that built it."""
    import os
    environment = dict(os.environ, XDG_CACHE_HOME=str(tmp_path))
    parse = "import tfspec; print(tfspec.load('examples/gpt2_small.tfs').parameter_count())"
    runs = [subprocess.run([sys.executable, "-c", parse], capture_output=True, text=True, cwd=ROOT, env=environment)
            for _ in range(2)]
    assert runs[0].returncode == 0 and runs[0].stdout == runs[1].stdout == "124439808\n", runs[0].stderr
    cache = tmp_path / "tfspec"
    assert [p.name.startswith("parser-") for p in cache.iterdir()] == [True]
    assert cache.stat().st_mode & 0o777 == 0o700
    probe = ("import os, sys; from tfspec.front.syntax import parser_cache, grammar_text; "
             "print(parser_cache(grammar_text()))")
    os.chmod(cache, 0o777)  # anyone may write there now: not a place to read a pickle from
    shared = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, env=environment)
    assert shared.stdout == "None\n", shared.stderr
    os.chmod(cache, 0o700)
    own = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, env=environment)
    assert own.stdout.startswith(str(cache / "parser-"))
