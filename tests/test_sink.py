"""The attention-sink mask (StreamingLLM): the first s tokens and the last w, equal to the formula written here."""

import pytest
import torch

import tfspec
from tfspec.inspect.analysis import analyse, mask_pairs
from tfspec.run.decoding import Continuation, sample
from tfspec.front.schema import Choice
from tfspec.inspect.verify import verify
from numerics import FLOAT32, assert_close

SPEC = ("embedding tokens {{ vocab 50; dim 16 }}\n"
        "decoder x 2 {{ residual pre; position rotary; attention self heads=2 mask={mask}; feedforward d_ff=32 }}\n"
        "head tied(tokens)")


def naive_allowed(n: int, s: int, w: int) -> torch.Tensor:
    return torch.tensor([[j <= i and (j < s or i - j < w) for j in range(n)] for i in range(n)])


@pytest.mark.parametrize("s, w", [(0, 3), (2, 3), (4, 1), (3, 20)])
def test_the_pattern_and_its_pair_count_are_the_papers(s, w):
    n = 12
    choice = Choice(name="sink", options={"s": s, "w": w})
    allowed = naive_allowed(n, s, w)
    assert int(allowed.sum()) == mask_pairs(n, [choice])  # two ranges apart, counted exactly
    model = tfspec.compile(SPEC.format(mask=f"sink({s}, {w})"), seed=0).eval()
    attention = model.decoder.layers[0].self_attn
    x = torch.randn(1, n, 16)
    q_bias = torch.zeros(n, n).masked_fill(~allowed, float("-inf"))
    with torch.no_grad():  # the same attention with the formula's mask as an additive bias
        reference = torch.nn.functional.scaled_dot_product_attention
        from tfspec.nn.context import Context
        got = attention(x, Context(torch.arange(n)[None]))
        qkv = attention.qkv(x).view(1, n, 3, 2, 8).permute(2, 0, 3, 1, 4)
        q, k = attention.position.rotate(qkv[0], qkv[1], attention.position.tables(torch.arange(n)[None], x.dtype))
        expected = attention.out(reference(q, k, qkv[2], q_bias).transpose(1, 2).reshape(1, n, 16))
    assert_close(got, expected, FLOAT32)


def test_a_sink_differs_from_a_plain_window_only_where_the_sinks_are_out_of_reach():
    window = tfspec.compile(SPEC.format(mask="causal + window(3)"), seed=0).eval()
    sink = tfspec.compile(SPEC.format(mask="sink(2, 3)"), seed=0).eval()
    tokens = torch.randint(0, 50, (1, 10))
    with torch.no_grad():
        for model in (window, sink):  # the same weights, at a scale where attention is far from uniform
            for p in model.parameters():
                p.mul_(20)
        a, b = window(tokens), sink(tokens)
    assert_close(a[:, :3], b[:, :3], FLOAT32)  # the window still reaches back to the sinks
    assert (a[:, 3:] - b[:, 3:]).abs().max() > 1e-3


def test_cost_counts_the_allowed_pairs_and_cached_decoding_is_exact():
    spec = tfspec.parse(SPEC.format(mask="sink(2, 4) + padding"))
    analysis = analyse(spec, seq_len=64)
    dense = analyse(tfspec.parse(SPEC.format(mask="causal + padding")), seq_len=64)
    assert analysis.total.matmul_mask_aware < dense.total.matmul_mask_aware
    model = tfspec.compile(spec, seed=1).eval()
    with torch.no_grad():
        for p in model.parameters():  # a realistic scale: a cache that were inexact would show
            p.mul_(25)
    prompt = torch.randint(0, 50, (2, 3))
    cached, recomputed = Continuation(model), Continuation(model, use_cache=False)
    assert cached.use_cache
    assert sample(cached, prompt, max_new=12) == sample(recomputed, prompt, max_new=12)


def test_label_verify_and_located_errors():
    spec = tfspec.parse(SPEC.format(mask="sink(4, 8)"))
    assert "sink(4, 8)" in spec.graph().node("decoder.self_attn").label
    results = {r.name: r.status for r in verify(tfspec.compile(spec, seed=0), examples=3)}
    assert results["causality"] == "held" and "violated" not in results.values()
    with pytest.raises(tfspec.SpecError) as info:
        tfspec.parse(SPEC.format(mask="sink(4, 0)"))
    assert "w" in info.value.message and info.value.line == 2
    with pytest.raises(tfspec.SpecError) as info:
        tfspec.parse("embedding tokens { vocab 50; dim 16 }\nencoder x 1 { attention self heads=2 }\n"
                     "decoder x 1 { attention cross heads=2 mask=sink(1, 2) }")
    assert "'sink' mask on cross-attention" in info.value.message
