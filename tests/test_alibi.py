"""ALiBi (variants/alibi.py, nn/alibi.py): the paper's slopes, BLOOM's biases, and a naive attention formula."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import tfspec
from tfspec.run.decoding import Continuation
from tfspec.inspect.diagram import to_graphviz
from tfspec.nn.alibi import LinearBiases
from tfspec.variants.alibi import alibi_slopes

transformers = pytest.importorskip("transformers")
from transformers.models.bloom import modeling_bloom as bloom  # noqa: E402
from numerics import FLOAT32, assert_close


def test_slopes_are_the_papers_geometric_sequence_for_a_power_of_two():
    assert alibi_slopes(8) == pytest.approx([2.0 ** -k for k in range(1, 9)], rel=1e-12)
    assert alibi_slopes(16)[:3] == pytest.approx([2.0 ** -0.5, 2.0 ** -1, 2.0 ** -1.5], rel=1e-12)


@pytest.mark.parametrize("heads", [1, 2, 3, 5, 6, 8, 12, 16, 20, 24, 40])
def test_slopes_equal_blooms_for_any_head_count(heads):
    # build_alibi_tensor, public in every transformers version: each head's slope times the key's position (1 here)
    expected = bloom.build_alibi_tensor(torch.ones(1, 2), heads, torch.float32)[:, 0, 1]
    assert_close(torch.tensor(alibi_slopes(heads)), expected, FLOAT32)


def test_twelve_heads_interleave_the_slopes_of_sixteen():
    # 8 slopes of the 8-head sequence, then every other one of the 16-head sequence
    assert alibi_slopes(12) == alibi_slopes(8) + alibi_slopes(16)[0::2][:4]


def test_causal_attention_weights_equal_blooms_on_a_left_padded_batch():
    heads, length = 6, 7
    attention_mask = torch.tensor([[1] * length, [0, 0, 0] + [1] * (length - 3)])
    positions = (attention_mask.cumsum(-1) - 1).clamp(min=0)  # what HF generate passes for left padding
    scores = torch.randn(2, heads, length, length, generator=torch.Generator().manual_seed(0))
    allowed = torch.ones(length, length, dtype=torch.bool).tril() & attention_mask.bool()[:, None, None, :]
    theirs = bloom.build_alibi_tensor(attention_mask, heads, torch.float32).view(2, heads, 1, length)
    ours = LinearBiases(alibi_slopes(heads)).score_bias(positions, positions)
    weights = [(scores + bias).masked_fill(~allowed, float("-inf")).softmax(-1) for bias in (theirs, ours)]
    real = attention_mask.bool()[:, None, :, None].expand_as(weights[0])  # rows of padded queries are arbitrary
    assert_close(weights[0][real], weights[1][real], FLOAT32)


ALIBI_MODEL = """
embedding tokens { vocab 40; dim 24 }
decoder x 2 { position alibi; attention self heads=3 mask=causal + padding; feedforward d_ff=48 }
head tied(tokens)
"""


def test_an_alibi_attention_equals_the_naive_formula():
    model = tfspec.compile(ALIBI_MODEL, seed=0).eval()
    attention = model.decoder.layers[0].self_attn
    x = torch.randn(2, 6, 24, generator=torch.Generator().manual_seed(1))
    q, k, v = (t.view(2, 6, 3, 8).transpose(1, 2) for t in attention.qkv(x).chunk(3, dim=-1))
    i = torch.arange(6)
    # 3 heads: the 2-head slopes 2^-4, 2^-8, then the first of the 4-head ones, 2^-2
    slopes = torch.tensor([2 ** -4, 2 ** -8, 2 ** -2])[:, None, None]
    scores = q @ k.transpose(-1, -2) / math.sqrt(8) - slopes * (i[:, None] - i[None, :]).abs()
    scores = scores.masked_fill(i[None, :] > i[:, None], float("-inf"))
    expected = attention.out((scores.softmax(-1) @ v).transpose(1, 2).reshape(2, 6, 24))
    assert_close(attention(x), expected, FLOAT32)


def test_cached_decoding_with_alibi_equals_recomputation():
    model = tfspec.compile(ALIBI_MODEL, seed=0).eval()
    prompt = torch.randint(0, 40, (2, 4), generator=torch.Generator().manual_seed(0))
    cached, full = Continuation(model), Continuation(model, use_cache=False)
    with torch.no_grad():
        for step in [prompt, prompt[:, :1], prompt[:, 2:], prompt[:, :1]]:
            assert_close(cached.feed(step), full.feed(step), FLOAT32)


@settings(max_examples=20, deadline=None)
@given(shift=st.integers(1, 10_000), length=st.integers(1, 10))
def test_the_bias_depends_only_on_distances(shift, length):
    biases = LinearBiases(alibi_slopes(4))
    positions = torch.arange(length)[None]
    assert torch.equal(biases.score_bias(positions, positions), biases.score_bias(positions + shift, positions + shift))


def test_alibi_is_drawn_entering_the_scores_and_refused_on_cross_attention():
    source = to_graphviz(tfspec.parse(ALIBI_MODEL)).source
    assert "Positions\n(ALiBi)" in source and 'label="biases scores"' in source
    with pytest.raises(tfspec.SpecError) as info:
        tfspec.parse("embedding tokens { vocab 9; dim 16 }\nencoder x 1 { attention self heads=2 }\n"
                     "decoder x 1 { attention self heads=2 mask=causal; attention cross heads=2 position=alibi }")
    assert info.value.codes == ["variant"] and "distance means nothing" in info.value.message
    assert (info.value.line, info.value.column) == (3, 84)
