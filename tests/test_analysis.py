"""The analysis (parameters, FLOPs, activation memory, complexity) against the compiled model.

FLOPs: the analysis's ``matmul`` figure must equal FlopCounterMode's count on the
compiled model exactly; the counter ignores element-wise work (bias, norms,
softmax, activations, residual sums), which the analysis adds by convention, so
the full total sits a little above the counter (within 2% at the examples'
sizes). Memory: the bytes autograd saves must equal the analysis exactly.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.nn.attention import SDPBackend

from strategies import valid_specs
from tfspec import SpecError, load, parse
from tfspec.inspect.analysis import AnalysisError, allowed_pairs, analyse, mask_reach, sweep
from tfspec.backend.compiler import compile as compile_spec
from tfspec.inspect.measure import measure
from tfspec import ir
from tfspec.ir.queries import default_length, fixed_length
from tfspec.registry import ATTENTION_KINDS, MASKS, NORMS, AttentionShape
from tfspec.front.schema import Choice, Towers

EXAMPLES = sorted(Path(__file__).parent.parent.joinpath("examples").glob("*.tfs"))


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_examples_match_flop_counter_and_saved_tensors_at_full_size(path):
    model = load(path)
    for spec in [t.spec for t in model.towers] if isinstance(model, Towers) else [model]:  # (each tower alone)
        _matches_at_full_size(spec)


def _matches_at_full_size(spec):
    # a model of pictures alone runs at their patches' length (an encoder of spectrograms beside a decoder: its own);
    # a text tower as long as its positions go, up to 128
    pictures = fixed_length(spec.graph(), spec.stacks[0].role) if len(spec.stacks) == 1 else None
    a = analyse(spec, seq_len=pictures or min(128, default_length(spec.graph())), batch=2)
    m = measure(spec, a.lengths, batch=2)  # meta device: no memory, no time
    assert m.flops == a.total.matmul
    # the systematic difference: element-wise work the counter does not see. It is O(n·d) per
    # sublayer against O(n·d²) for the products, so its share falls with width: under 2% for the
    # paper-sized examples, about 4% for the 64-wide reverse.tfs, 6.4% for clip_digits.tfs's 32-wide text tower
    width = spec.graph().stacks[spec.stacks[0].role].width
    bound = 0.02 if width >= 512 else 0.06 if width >= 64 else 0.08
    if spec.graph().of(ir.Mixer):  # a token mixer's scan is element-wise work of its own (Mamba's: 2% at d 768)
        bound *= 2
    assert 0 < a.total.elementwise < bound * m.flops
    assert abs(a.total.flops - m.flops) / m.flops < bound
    assert m.saved_bytes == a.total.memory
    assert a.total.params == m.parameters == spec.parameter_count()  # (the compiled model's)


def test_gpt2_small_at_1024_tokens_matches_the_flop_counter():
    spec = load("examples/gpt2_small.tfs")
    a = analyse(spec, seq_len=1024)
    m = measure(spec, a.lengths)
    assert a.total.params == 124_439_808
    assert a.total.matmul == m.flops == 291_648_307_200
    assert set(m.flops_by_op) == {"aten.addmm", "aten.bmm", "aten.mm"}
    # attention's n^2 terms: 12 layers x (QK^T + AV) x 2 FLOPs x n^2 x d
    assert m.flops_by_op["aten.bmm"] == 12 * 2 * 2 * 1024 ** 2 * 768


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(valid_specs(), st.integers(1, 3), st.integers(1, 13))
def test_generated_specs_match_the_compiled_model_exactly(generated, batch, length):
    spec = parse(generated.text)
    a = analyse(spec, seq_len=length, batch=batch)
    m = measure(spec, a.lengths, batch=batch)
    assert m.flops == a.total.matmul
    assert m.saved_bytes == a.total.memory
    assert a.total.params == sum(p.numel() for p in compile_spec(spec, device="meta").parameters())


@pytest.mark.parametrize("text", [
    """embedding tokens { vocab 50; dim 32; position learned(64) }
       decoder x 2 { attention self heads=4 mask=causal; feedforward d_ff=64; residual pre }
       head tied(tokens)""",
    """embedding tokens { vocab 50; dim 32 }
       encoder x 2 { attention self heads=4 mask=padding; feedforward d_ff=64 activation=swiglu }
       decoder x 1 { attention self heads=2 mask=causal; attention cross heads=2; feedforward d_ff=48 }
       head linear""",
], ids=["decoder", "encoder-decoder"])
@pytest.mark.parametrize("batch", [1, 3])
def test_fused_attention_memory_matches_the_cpu_flash_kernel(text, batch):
    spec = parse(text)
    a = analyse(spec, seq_len=16, batch=batch, fused_attention=True)
    m = measure(spec, a.lengths, batch=batch, device="cpu", attention_backend=SDPBackend.FLASH_ATTENTION)
    assert m.saved_bytes == a.total.memory
    assert a.total.memory < analyse(spec, seq_len=16, batch=batch).total.memory  # no T x T probabilities


@settings(max_examples=100, deadline=None)
@given(n=st.integers(1, 40), masks=st.lists(st.sampled_from(["causal", "window"]), unique=True),
       k=st.integers(1, 50))
def test_mask_reach_agrees_with_the_mask_itself(n, masks, k):
    choices = [Choice(name=m, options={"k": k} if m == "window" else {}) for m in masks]
    positions = torch.arange(n)
    allowed = torch.ones(n, n, dtype=torch.bool)
    for c in choices:
        variant = MASKS[c.name]
        allowed &= variant.allowed(positions, positions, variant.options(c.options), {})
    assert allowed_pairs(n, *mask_reach(choices)) == int(allowed.sum())


WINDOWED = """
embedding tokens { vocab 100; dim 64; position sinusoidal }
encoder x 4 { attention self heads=4 mask=window(16); feedforward d_ff=128 }
"""


def attention_core(a):
    row = next(r for r in a.rows if r.node.endswith("self_attn"))
    return row.cost


def test_window_attention_is_computed_in_time_linear_in_length():
    spec = parse(WINDOWED)
    small, large = analyse(spec, seq_len=1024), analyse(spec, seq_len=4096)
    projections = lambda n: 4 * (2 * n * 64 * 64) * 4  # noqa: E731  (q, k, v, out; 4 layers)
    executed = [attention_core(x).matmul - projections(n) for x, n in ((small, 1024), (large, 4096))]
    aware = [attention_core(x).matmul_mask_aware - projections(n) for x, n in ((small, 1024), (large, 4096))]
    # in bands: blocks of 16 queries against the 16 + 15 + 15 keys around them
    assert executed[0] == 4 * 4 * 4 * 16 * 1024 * (16 + 15 + 15)  # layers x 2 matmuls x 2 x d x pairs
    assert executed[1] == 4 * executed[0]
    assert 3.9 < aware[1] / aware[0] < 4.1  # n * r: what the window needs (edges make it a bit over 4)
    assert aware[0] == 4 * 4 * 4 * 16 * allowed_pairs(1024, 15, 15)
    assert executed[0] < 1.5 * aware[0]


def test_causal_attention_needs_about_half_the_score_flops():
    spec = load("examples/gpt2_small.tfs", overrides={"layers": 1})
    a = analyse(spec, seq_len=1024)
    core = attention_core(a)
    projections = 2 * 1024 * 768 * 4 * 768
    ratio = (core.matmul_mask_aware - projections) / (core.matmul - projections)
    assert ratio == pytest.approx((1024 * 1025 / 2) / 1024 ** 2)


def test_complexity_classes_follow_the_masks_not_the_example():
    text = """
    embedding tokens { vocab 100; dim 64 }
    encoder x 2 { attention self heads=4 mask=padding; feedforward d_ff=128 }
    decoder x 2 { attention self heads=4 mask=causal + window(8); attention cross heads=4; feedforward d_ff=128 }
    head tied(tokens)"""
    rows = {c.layer: c for c in analyse(parse(text)).complexity}
    assert (rows["Self-attention (Multi-Head, mask padding)"].per_layer, rows["Self-attention (Multi-Head, mask padding)"].path) == \
        ("O(n²·d)", "O(1)")
    windowed = rows["Self-attention (Multi-Head, mask causal+window(8))"]
    assert (windowed.per_layer, windowed.sequential, windowed.path) == ("O(r·n·d)", "O(1)", "O(n/r)")
    assert "r = 8 keys" in windowed.note
    assert rows["Cross-attention (Multi-Head, mask none)"].per_layer == "O(n·m·d)"
    assert rows["Feed-forward (position-wise)"].per_layer == "O(n·d·d_ff)"


def test_memory_grows_quadratically_only_through_materialised_attention():
    spec = load("examples/gpt2_small.tfs", overrides={"layers": 2})
    curve = sweep(spec, [256, 512, 1024])
    fused = sweep(spec, [256, 512, 1024], fused_attention=True)
    assert curve[2].total.memory / curve[1].total.memory > 2.2  # the T x T probabilities
    assert fused[2].total.memory == 2 * fused[1].total.memory  # flash-style kernels: linear in n
    assert all(f.total.memory < c.total.memory for f, c in zip(fused, curve))


def test_lengths_dtype_and_batch_are_checked():
    spec = load("examples/bert_base.tfs")
    with pytest.raises(AnalysisError, match="learned positions cover 512"):
        analyse(spec, seq_len=1024)
    with pytest.raises(AnalysisError, match="dtype"):
        analyse(spec, dtype="int8")
    with pytest.raises(AnalysisError, match="src_len"):
        analyse(spec, src_len=3)
    assert analyse(spec).lengths == {"encoder": 512}  # default: the learned positions' size
    half = analyse(spec, dtype="bfloat16")
    assert half.total.memory < analyse(spec).total.memory
    assert analyse(spec, batch=4).total.flops == 4 * analyse(spec, batch=1).total.flops


def test_encoder_decoder_lengths_are_separate():
    spec = load("examples/vaswani_base.tfs")
    a = analyse(spec, src_len=100, tgt_len=30)
    assert a.lengths == {"encoder": 100, "decoder": 30}
    assert measure(spec, a.lengths).flops == a.total.matmul


def test_summary_cli_prints_totals_that_match_the_counter(tfspec_cli, tmp_path):
    result = tfspec_cli("summary", "examples/gpt2_small.tfs", "--seq-len", "1024", "--measure", "--sweep",
                        "256,1024", "--plot", str(tmp_path / "cost.png"))
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "124,439,808" in out and "291.65 G in matrix products" in out
    assert "FlopCounterMode: 291.65 GFLOPs in matrix products (analysis 291.65 G, +0.00%)" in out
    assert "saved for backward: 2.45 GiB (analysis 2.45 GiB, +0.00%)" in out
    assert "Self-attention (Multi-Head, mask causal)" in out and "O(n²·d)" in out
    png = (tmp_path / "cost.png").read_bytes()
    assert png.startswith(b"\x89PNG")


def test_summary_json(tfspec_cli):
    result = tfspec_cli("summary", "examples/vaswani_base.tfs", "--json", "--seq-len", "64", "--sweep", "64,128")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["total"]["params"] == 63_082_496
    assert data["lengths"] == {"encoder": 64, "decoder": 64}
    assert [row["lengths"]["encoder"] for row in data["sweep"]] == [64, 128]
    assert sum(c["params"] for c in data["components"]) == data["total"]["params"]
    assert {c["layer"] for c in data["complexity"]} >= {"Cross-attention (Multi-Head, mask padding)"}


def test_summary_compares_several_specs_and_says_where_each_gets_cheaper(tfspec_cli, tmp_path):
    files = ["examples/bert_base.tfs", "examples/linformer.tfs", "examples/bigbird_base.tfs"]
    lengths = [512, 1024, 2048, 4096]
    result = tfspec_cli("summary", *files, "--set", "max_len=4096", "--sweep", ",".join(map(str, lengths)),
                        "--plot", str(tmp_path / "cost.png"))
    assert result.returncode == 0, result.stderr
    specs = [load(f, overrides={"max_len": 4096}) for f in files]
    costs = [[analyse(spec, seq_len=n).total for n in lengths] for spec in specs]
    dense, linformer, bigbird = costs
    # dense attention's n² overtakes Linformer's projections between 1024 and 2048, BigBird's blocks sooner
    assert [a.flops < b.flops for a, b in zip(linformer, dense)] == [False, False, True, True]
    assert [a.flops < b.flops for a, b in zip(bigbird, dense)] == [False, True, True, True]
    out = result.stdout
    assert (f"linformer: FLOPs less from n = 2048 ({linformer[-1].flops / dense[-1].flops:.2f}× at 4096); "
            f"memory less at every length ({linformer[-1].memory / dense[-1].memory:.2f}× at 4096)") in out
    assert f"bigbird_base: FLOPs less from n = 1024 ({bigbird[-1].flops / dense[-1].flops:.2f}× at 4096)" in out
    assert "bert_base: encoder-only, 112,234,752 parameters; at seq_len 4096" in out  # 4096 learned positions
    assert (tmp_path / "cost.png").read_bytes().startswith(b"\x89PNG")

    as_json = json.loads(tfspec_cli("summary", *files[:2], "--set", "max_len=4096", "--sweep", "512,4096",
                                    "--json").stdout)
    assert [s["file"] for s in as_json["specs"]] == files[:2]
    assert [row["flops"] for row in as_json["specs"][1]["sweep"]] == [linformer[0].flops, linformer[-1].flops]


def test_summary_of_several_specs_names_the_one_at_fault(tfspec_cli):
    both = ("summary", "examples/bert_base.tfs", "examples/gpt1.tfs")
    unknown, too_long, measured = tfspec_cli.many((*both, "--set", "max_len=1024"), (*both, "--seq-len", "1024"),
                                                  (*both, "--measure"))
    assert unknown.returncode == 1 and "examples/gpt1.tfs has no parameter 'max_len'" in unknown.stderr
    assert too_long.returncode == 2 and "examples/bert_base.tfs: the encoder sees 1024 positions" in too_long.stderr
    assert measured.returncode == 2 and "give one FILE" in measured.stderr


def test_summary_bad_arguments(tfspec_cli):
    cases = [(["examples/bert_base.tfs", "--seq-len", "1024"], "learned positions cover 512"),
             (["examples/gpt1.tfs", "--src-len", "5"], "src_len/tgt_len apply to encoder-decoder"),
             (["examples/gpt1.tfs", "--sweep", "a,b"], "comma-separated"),
             (["examples/gpt1.tfs", "--plot", "/no/such/dir/x.png"], "does not exist")]
    for (args, message), result in zip(cases, tfspec_cli.many(*[("summary", *args) for args, _ in cases])):
        assert result.returncode == 2, args
        assert message in result.stderr and "Traceback" not in result.stderr, args


# each head's norm once projected, of every kind, and the steps norming them elsewhere
QK_NORMS = [f"qk_norm={n}" for n in NORMS if not NORMS[n].absent] + ["steps=full_qk_norm", "steps=rotated_qk_norm",
                                                                      "steps=full_qk_norm(weight=false)"]


@pytest.mark.parametrize("kind", list(ATTENTION_KINDS))
@pytest.mark.parametrize("norm", QK_NORMS)
@pytest.mark.parametrize("batch, heads, kv_heads, cross", [(1, 2, 2, False), (2, 2, 2, False), (2, 4, 2, False),
                                                             (1, 4, 1, False), (1, 1, 1, True), (2, 2, 2, True)])
def test_qk_norm_memory_is_what_autograd_keeps(kind, norm, batch, heads, kv_heads, cross):
    """A qk-norm (``qk_norm=``, or a step norming them elsewhere) keeps its own tensors and, through its inputs,
    the projections they are views of."""
    example = ATTENTION_KINDS[kind].examples[-1]
    options = ATTENTION_KINDS[kind].options(example)
    problems = ATTENTION_KINDS[kind].check(options, AttentionShape(
        width=16, heads=heads, kv_heads=kv_heads, head_dim=16 // heads, memory_width=16, cross=cross,
        bias=True, out_bias=True))
    refusal = ATTENTION_KINDS[kind].qk_norm_problem(options)
    if refusal is not None:  # and the spec says why
        with pytest.raises(SpecError, match=refusal.message):
            parse(f"embedding t {{ vocab 40; dim 16; position none }}\nencoder x 1 {{ attention self heads=2 "
                  f"kind={Choice(name=kind, options=example)} {norm} }}")
        return
    if cross and "rotated" in norm:
        with pytest.raises(SpecError, match="memory is not rotated"):
            parse(f"embedding t {{ vocab 40; dim 16; position none }}\nencoder x 1 {{ feedforward d_ff=32 }}\n"
                  f"decoder x 1 {{ attention cross heads=2 {norm}; feedforward d_ff=32 }}")
        return
    if problems:
        pytest.skip(problems[0].message)
    kind = str(Choice(name=kind, options=example))
    attention = (f"attention {'cross' if cross else 'self'} heads={heads} kv_heads={kv_heads} kind={kind} "
                 f"{norm} mask=padding")
    stacks = (f"encoder x 1 {{ feedforward d_ff=32 }}\ndecoder x 1 {{ {attention}; feedforward d_ff=32 }}"
              if cross else f"encoder x 1 {{ {attention}; feedforward d_ff=32 }}")
    spec = parse(f"embedding t {{ vocab 40; dim 16; position none }}\n{stacks}\nhead linear(40)")
    lengths = {s.role: 7 + i for i, s in enumerate(spec.stacks)}
    analysed = (analyse(spec, src_len=lengths["encoder"], tgt_len=lengths["decoder"], batch=batch) if cross
                else analyse(spec, seq_len=lengths["encoder"], batch=batch))
    assert analysed.total.memory == measure(spec, lengths, batch=batch).saved_bytes
