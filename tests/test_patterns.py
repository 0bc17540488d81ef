"""`tfspec mask`: the pictured pattern of every attention is what the compiled model computes.

For every attention kind and mask the registry holds (with the option values each declares), the keys
a picture shows for query i are exactly the keys whose input the attention's output i depends on,
found with autograd on the compiled sublayer, at the length the picture would choose.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import tfspec
from tfspec.registry import ATTENTION_KINDS
from tfspec.nn.context import Context
from tfspec.inspect.patterns import attention_patterns, default_length, describe, seen_share
from test_variants import ENTRIES, IDS, spec_text

SHAPES = [e for e in ENTRIES if e[0] in ("attention kind", "mask")]


def dependence(attention, length: int, inputs: dict) -> torch.Tensor:
    """Bool (queries, keys): does output i of ``attention`` change with input j (autograd, exact zeros)."""
    x = torch.randn(1, length, attention.out.out_features, dtype=torch.float64)
    ctx = Context(torch.arange(length)[None], inputs={k: torch.tensor([v]) for k, v in inputs.items()})
    jacobian = torch.autograd.functional.jacobian(lambda t: attention(t, ctx), x)  # (1, n, w, 1, n, w)
    return jacobian.abs().sum(dim=(0, 2, 3, 5)) > 0


@pytest.mark.parametrize("family, name, options", SHAPES, ids=[IDS[ENTRIES.index(e)] for e in SHAPES])
def test_the_picture_shows_the_keys_each_output_depends_on(family, name, options):
    spec = tfspec.parse(spec_text(family, name, options).replace("heads=2", "heads=4"))
    model = tfspec.compile(spec, seed=0).double().eval()
    length = default_length(spec.graph())
    assert length <= 64
    attention = model.get_submodule(f"{spec.stacks[0].role}.layers.0.self_attn")
    by_head = [attention_patterns(spec, head=h)[0] for h in range(4)]
    drawn = torch.from_numpy(np.stack([p.allowed for p in by_head]).any(0))  # the output mixes every head
    seen = dependence(attention, length, by_head[0].inputs)
    kind = ATTENTION_KINDS[name] if family == "attention kind" else None
    kept = kind.kept_keys(kind.options(options), 4) if kind is not None else None
    if kept is not None:  # only the best of the drawn keys, chosen at run time, reach the output (and its own)
        assert (seen <= drawn).all() and (seen.sum(1) <= kept + 1).all()
        assert (seen.sum(1) < drawn.sum(1)).any()  # the choice leaves keys out
    else:
        assert torch.equal(seen, drawn), describe(by_head[0])


def test_bigbird_heads_differ_and_the_picture_says_which_it_draws():
    spec = tfspec.load("examples/bigbird_base.tfs", overrides={"layers": 1})
    first, third = (attention_patterns(spec, head=h)[0] for h in (0, 2))
    assert first.allowed.shape == (1024, 1024) and first.head_text == "head 1 of 12"
    assert not np.array_equal(first.allowed, third.allowed)
    # 16 blocks of 64: two global rows of blocks, 14 middle rows of 3 window + 2 global + 3 random blocks
    assert first.pairs == third.pairs == 64 * 64 * (2 * 16 + 14 * 8) - 2 * 64 * 64  # minus the doubled neighbours
    with pytest.raises(tfspec.inspect.analysis.AnalysisError, match="no head 13"):
        attention_patterns(spec, head=12)


def test_run_time_inputs_are_drawn_with_their_example_values():
    spec = tfspec.parse("embedding tokens { vocab 9; dim 8 }\n"
                        "decoder x 1 { attention self heads=2 mask=prefix + document; feedforward d_ff=8 }")
    pattern, = attention_patterns(spec, seq_len=8)
    assert pattern.inputs == {"prefix_lengths": 4, "document_ids": [0, 0, 1, 1, 1, 1, 2, 2]}
    # the prefix (0..3) sees itself within its documents; later positions see earlier keys of their document
    expected = np.array([[1, 1, 0, 0, 0, 0, 0, 0],
                         [1, 1, 0, 0, 0, 0, 0, 0],
                         [0, 0, 1, 1, 0, 0, 0, 0],
                         [0, 0, 1, 1, 0, 0, 0, 0],
                         [0, 0, 1, 1, 1, 0, 0, 0],
                         [0, 0, 1, 1, 1, 1, 0, 0],
                         [0, 0, 0, 0, 0, 0, 1, 0],
                         [0, 0, 0, 0, 0, 0, 1, 1]], dtype=bool)
    assert np.array_equal(pattern.allowed, expected)
    assert "document_ids = [0, 0, 1, 1, 1, 1, 2, 2]" in describe(pattern)


def test_cross_attention_has_its_own_lengths_and_long_pictures_are_pooled():
    spec = tfspec.load("examples/vaswani_base.tfs")
    patterns = {p.sublayer: p for p in attention_patterns(spec, src_len=40, tgt_len=24)}
    assert patterns["decoder.cross_attn"].allowed.shape == (24, 40) and patterns["decoder.cross_attn"].allowed.all()
    assert patterns["decoder.self_attn"].pairs == 24 * 25 // 2
    causal = np.tril(np.ones((3000, 3000), dtype=bool))
    share, tile = seen_share(causal)
    assert tile == 3 and share.shape == (1000, 1000)
    assert share[0, 0] == pytest.approx(6 / 9) and share[0, 1] == 0 and share[5, 0] == 1
    assert float(share.mean()) == pytest.approx(float(causal.mean()))


def test_default_length_shows_the_pattern_within_the_spec_limits():
    assert default_length(tfspec.load("examples/vaswani_base.tfs").graph()) == 64
    assert default_length(tfspec.load("examples/mistral_7b.tfs").graph()) == 8190  # twice the window's reach
    assert default_length(tfspec.load("examples/bigbird_base.tfs").graph()) == 1024  # sparse, 16 blocks
    linformer = tfspec.load("examples/linformer.tfs", overrides={"max_len": 48, "k": 8})
    assert default_length(linformer.graph()) == 48  # its projections cover 48


def test_mask_cli_writes_the_picture_and_describes_each_attention(tfspec_cli, tmp_path):
    out = tmp_path / "masks.png"
    result = tfspec_cli("mask", "examples/unilm.tfs", "-o", str(out), "--seq-len", "16")
    assert result.returncode == 0, result.stderr
    # causal: 16·17/2 = 136 pairs; the prefix of 8 adds the 7 + 6 + … + 0 = 28 later prefix keys its rows see
    assert "decoder.self_attn: 16 queries × 16 keys, 164 pairs (64.1%); prefix_lengths = 8" in result.stdout
    assert out.read_bytes().startswith(b"\x89PNG")


MASK_CLI_ERRORS = [
    (["examples/gpt1.tfs", "-o", "{tmp}/m.txt"], "write a .png, .svg or .pdf"),
    (["examples/gpt1.tfs", "-o", "/no/such/dir/m.png"], "does not exist"),
    (["examples/gpt1.tfs", "-o", "{tmp}/m.png", "--seq-len", "5000"], "learned positions cover 512"),
    (["examples/mistral_7b.tfs", "-o", "{tmp}/m.png", "--seq-len", "20000"], "use a length <= 16384"),
    (["examples/bigbird_base.tfs", "-o", "{tmp}/m.png", "--head", "13"], "there is no head 13"),
    (["examples/gpt1.tfs", "-o", "{tmp}/m.png", "--src-len", "5"], "src_len/tgt_len apply to encoder-decoder"),
]


def test_mask_cli_bad_arguments(tfspec_cli, tmp_path):
    results = tfspec_cli.many(*(("mask", *[a.format(tmp=tmp_path) for a in args]) for args, _ in MASK_CLI_ERRORS))
    for (args, message), result in zip(MASK_CLI_ERRORS, results):
        assert result.returncode == 2, args
        assert message in result.stderr and "Traceback" not in result.stderr, args
