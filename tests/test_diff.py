"""tfspec diff: the architectural differences between two specs, read from their IRs."""

from __future__ import annotations

import json

from tfspec import load, parse
from tfspec.inspect.diff import diff


def lines(first, second, **options):
    return [str(c) for c in diff(first, second, **options).changes]


def test_gpt1_to_gpt2_lists_the_real_differences():
    assert lines(load("examples/gpt1.tfs"), load("examples/gpt2_small.tfs")) == [
        "model: init normal(std=0.02) → gpt2(std=0.02)",
        "embedding tokens: vocab 40,478 → 50,257",
        "embedding tokens: position learned(512) → learned(1024)",
        "decoder: residual post-norm → pre-norm (every sublayer)",
        "decoder: final norm none → layernorm",
        "decoder.ffn: activation GELU → GELU (tanh)",
    ]


def test_identical_specs_have_no_changes_and_equal_totals():
    result = diff(load("examples/vaswani_base.tfs"), load("examples/vaswani_base.tfs"))
    assert result.changes == []
    assert all(a == b for _, a, b in result.totals)


def test_wiring_is_compared_by_what_it_computes():
    sequential = parse("""
        embedding tokens { vocab 100; dim 32 }
        decoder x 2 { residual pre; attention self heads=4 mask=causal; feedforward d_ff=64 }
        head tied(tokens)""")
    wired = parse("""
        embedding tokens { vocab 100; dim 32 }
        decoder x 2 {
          x = x + attention(layernorm(x), heads=4, mask=causal)
          x = x + feedforward(layernorm(x), d_ff=64)
        }
        head tied(tokens)""")
    parallel = parse("""
        embedding tokens { vocab 100; dim 32 }
        decoder x 3 {
          h = layernorm(x)
          x = x + attention(h, heads=8, mask=causal + window(16)) + feedforward(h, d_ff=64)
        }
        head tied(tokens)""")
    same = diff(sequential, wired)
    assert [c for c in same.changes if c.what in ("residual", "norm", "mask", "heads")] == []
    changed = lines(sequential, parallel)
    assert "decoder: layers 2 → 3" in changed
    assert any(c.startswith("decoder: residual pre-norm → parallel") or
               c.startswith("decoder.attention: residual pre-norm → parallel") for c in changed), changed
    assert any("mask causal → causal + window(16)" in c for c in changed), changed


def test_sizes_and_totals_change_together():
    result = diff(load("examples/vaswani_base.tfs"), load("examples/vaswani_big.tfs"), seq_len=64)
    changed = [str(c) for c in result.changes]
    assert "encoder.self_attn: heads 8 → 16" in changed and "decoder.ffn: d_ff 2048 → 4096" in changed
    assert "decoder: dropout 0.1 → 0.3 (every sublayer)" in changed
    totals = {what: (a, b) for what, a, b in result.totals}
    assert totals["parameters"] == (63_082_496, 214_245_376)
    assert result.seq_len == 64


def test_diff_cli(tfspec_cli):
    result, as_json, bad, too_long = tfspec_cli.many(
        ("diff", "examples/gpt1.tfs", "examples/gpt2_small.tfs"),
        ("diff", "examples/gpt1.tfs", "examples/gpt2_small.tfs", "--json"),
        ("diff", "examples/gpt1.tfs", "examples/missing.tfs"),
        ("diff", "examples/gpt1.tfs", "examples/bert_base.tfs", "--seq-len", "4096"))
    assert result.returncode == 0, result.stderr
    assert "decoder: residual post-norm → pre-norm (every sublayer)" in result.stdout
    assert "parameters: 116,534,784 → 124,439,808 (+6.8%)" in result.stdout
    data = json.loads(as_json.stdout)
    assert {"where": "decoder.ffn", "what": "activation", "before": "GELU", "after": "GELU (tanh)"} in data["changes"]
    assert bad.returncode == 1 and "no such file" in bad.stderr and "Traceback" not in bad.stderr
    assert too_long.returncode == 2 and "learned positions cover 512" in too_long.stderr
