"""Rotary positions (variants/rotary.py, nn/rotary.py) against Hugging Face's RoPE and the complex-number formula."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import tfspec
from tfspec.run.decoding import Continuation
from tfspec.inspect.diagram import to_graphviz
from tfspec.nn.rotary import RotaryPositions

transformers = pytest.importorskip("transformers")
from transformers.models.gpt_neox import modeling_gpt_neox as neox  # noqa: E402
from transformers.models.llama import modeling_llama as llama  # noqa: E402
from numerics import FLOAT32, assert_close, close


def heads(batch=2, n_heads=4, length=9, head_dim=16, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(batch, n_heads, length, head_dim, generator=g).to(dtype)


def rotate(rotary: RotaryPositions, q, k, positions):
    return rotary.rotate(q, k, rotary.tables(positions, q.dtype))


@pytest.mark.parametrize("theta", [10000.0, 500000.0])
def test_full_rotation_equals_hugging_face_llama(theta):
    config = transformers.LlamaConfig(hidden_size=64, num_attention_heads=4, rope_theta=theta)
    q, k = heads(), heads(seed=1)
    positions = torch.tensor([[0, 1, 2, 3, 4, 5, 6, 7, 8], [0, 0, 0, 1, 2, 3, 4, 5, 6]])  # one left-padded row
    cos, sin = llama.LlamaRotaryEmbedding(config)(q, positions)
    expected = llama.apply_rotary_pos_emb(q, k, cos, sin)
    got = rotate(RotaryPositions(16, theta), q, k, positions)
    assert all(close(a, b, FLOAT32) for a, b in zip(got, expected))


def test_partial_rotation_equals_hugging_face_gpt_neox():
    config = transformers.GPTNeoXConfig(hidden_size=64, num_attention_heads=4, rotary_pct=0.25,
                                        rotary_emb_base=20000)
    q, k = heads(), heads(seed=1)
    positions = torch.arange(3, 12)[None]
    cos, sin = neox.GPTNeoXRotaryEmbedding(config)(q, positions)
    expected = neox.apply_rotary_pos_emb(q, k, cos, sin)
    got = rotate(RotaryPositions(4, 20000.0), q, k, positions)
    assert all(close(a, b, FLOAT32) for a, b in zip(got, expected))
    assert torch.equal(got[0][..., 4:], q[..., 4:])  # the unrotated three quarters pass through


def test_clockwise_rotation_equals_nanochats_and_the_rotation_at_negated_positions():
    """``clockwise=true`` turns each pair by the negated angle: NanoChat's quarter turn (a, b) -> (b, -a), and so the
    usual rotation at positions -p."""
    from transformers.models.nanochat import modeling_nanochat as nanochat
    config = transformers.NanoChatConfig(hidden_size=64, num_attention_heads=4)
    q, k = heads(), heads(seed=1)
    positions = torch.tensor([[0, 1, 2, 3, 4, 5, 6, 7, 8], [0, 0, 0, 1, 2, 3, 4, 5, 6]])
    cos, sin = nanochat.NanoChatRotaryEmbedding(config)(q, positions)
    expected = nanochat.apply_rotary_pos_emb(q, k, cos, sin)
    got = rotate(RotaryPositions(16, 10000.0, clockwise=True), q, k, positions)
    assert all(close(a, b, FLOAT32) for a, b in zip(got, expected))
    backwards = rotate(RotaryPositions(16, 10000.0), q, k, -positions)
    assert all(close(a, b, FLOAT32) for a, b in zip(got, backwards))
    assert not close(got[0], rotate(RotaryPositions(16, 10000.0), q, k, positions)[0], FLOAT32)


@pytest.mark.parametrize("proportion, factor", [(0.25, 1.0), (0.5, 2.0), (1.0, 1.0)])
def test_proportional_rotation_equals_hugging_face_gemma_4s(proportion, factor):
    """p-RoPE (Gemma 4's global layers): the fastest ``proportion`` of the frequencies over the whole head, the rest
    0 -- those pairs pass unrotated -- all divided by ``factor``: Hugging Face's frequencies, applied as its
    half-split rotation applies them."""
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    config = transformers.LlamaConfig(hidden_size=64, num_attention_heads=4, head_dim=16, rope_parameters={
        "rope_type": "proportional", "rope_theta": 1e6, "partial_rotary_factor": proportion, "factor": factor})
    inv_freq, scale = ROPE_INIT_FUNCTIONS["proportional"](config)
    rotary = RotaryPositions(16, 1e6, scaling={"kind": "proportional", "proportion": proportion, "factor": factor})
    q, k = heads(), heads(seed=1)
    positions = torch.arange(3, 12)[None]
    angles = positions[..., None].float() * inv_freq
    cos, sin = torch.cat((angles, angles), -1).cos() * scale, torch.cat((angles, angles), -1).sin() * scale
    expected = llama.apply_rotary_pos_emb(q, k, cos, sin)
    got = rotate(rotary, q, k, positions)
    assert all(close(a, b, FLOAT32) for a, b in zip(got, expected))
    turning = int(proportion * 16 // 2)
    if turning < 8:  # the slowest pairs (i, i + 8) for i >= turning pass through
        assert torch.equal(got[0][..., turning:8], q[..., turning:8])
        assert not torch.equal(got[0][..., :turning], q[..., :turning])


def test_bfloat16_rotates_by_float32_angles_as_hugging_face_does():
    config = transformers.LlamaConfig(hidden_size=64, num_attention_heads=4)
    q, k = heads(dtype=torch.bfloat16), heads(seed=1, dtype=torch.bfloat16)
    positions = torch.arange(4000, 4009)[None]  # large angles: bfloat16 angles would be visibly wrong
    cos, sin = llama.LlamaRotaryEmbedding(config)(q, positions)
    expected = llama.apply_rotary_pos_emb(q, k, cos, sin)
    rotary = RotaryPositions(16, 10000.0)
    got = rotate(rotary, q, k, positions)
    assert all(a.dtype == torch.bfloat16 and torch.equal(a, b) for a, b in zip(got, expected))
    table_cos, _ = rotary.tables(positions, torch.float32)  # what the bf16 tables are cast from
    low_precision = (positions[..., None].to(torch.bfloat16) * 1.0).cos()  # the first pair's angle in bf16
    assert not close(table_cos[0, 0, :, 0], low_precision[0, :, 0].float(), 1e-2)


def test_interleaved_layout_equals_the_complex_number_formula():
    q, k = heads(), heads(seed=1)
    positions = torch.arange(9)[None]
    freqs = 1.0 / (10000.0 ** (torch.arange(0, 16, 2).float() / 16))
    turn = torch.polar(torch.ones(9, 8), torch.outer(torch.arange(9).float(), freqs))  # e^{i p θ_j}

    def complex_rotation(x):  # Meta's original Llama code: pairs (2j, 2j+1) as complex numbers
        return torch.view_as_real(torch.view_as_complex(x.reshape(*x.shape[:-1], 8, 2)) * turn).flatten(-2)

    got = rotate(RotaryPositions(16, 10000.0, interleaved=True), q, k, positions)
    assert_close(got[0], complex_rotation(q), FLOAT32)
    assert_close(got[1], complex_rotation(k), FLOAT32)


@settings(max_examples=25, deadline=None)
@given(shift=st.integers(0, 5000), length=st.integers(1, 12), fraction=st.sampled_from([0.25, 0.5, 1.0]))
def test_scores_depend_only_on_the_difference_of_positions(shift, length, fraction):
    rotary = RotaryPositions(int(16 * fraction), 10000.0)
    q, k = heads(length=length), heads(length=length, seed=1)
    positions = torch.arange(length)[None]
    a = rotate(rotary, q, k, positions)
    b = rotate(rotary, q, k, positions + shift)
    assert_close(a[0] @ a[1].transpose(-1, -2), b[0] @ b[1].transpose(-1, -2), 2e-3)


LLAMA_LIKE = """
embedding tokens { vocab 48; dim 32 }
decoder x 2 {
  residual pre; norm rmsnorm; position rotary(theta=500000, fraction=0.5)
  attention self heads=4 kv_heads=2 mask=causal + padding bias=false
  feedforward d_ff=64 activation=swiglu bias=false
}
head linear(48) bias=false
"""


def test_cached_decoding_with_rotary_and_grouped_query_attention_equals_recomputation():
    model = tfspec.compile(LLAMA_LIKE, seed=0).eval()
    prompt = torch.randint(0, 48, (2, 5), generator=torch.Generator().manual_seed(0))
    cached, full = Continuation(model), Continuation(model, use_cache=False)
    with torch.no_grad():
        for step in [prompt, prompt[:, :1], prompt[:, 1:3], prompt[:, :1]]:
            assert_close(cached.feed(step), full.feed(step), FLOAT32)


def test_rotary_misuse_is_a_located_error():
    with pytest.raises(tfspec.SpecError) as info:
        tfspec.parse("embedding tokens { vocab 9; dim 16; position rotary }\n"
                     "decoder x 1 { attention self heads=2 mask=causal }")
    assert info.value.codes == ["variant"] and (info.value.line, info.value.column) == (1, 46)
    assert "act inside attention" in info.value.message
    with pytest.raises(tfspec.SpecError) as info:  # 8 dims per head x 0.2 = 1 dimension: nothing to pair it with
        tfspec.parse("embedding tokens { vocab 9; dim 16 }\n"
                     "decoder x 1 { attention self heads=2 mask=causal position=rotary(fraction=0.2) }")
    assert (info.value.line, info.value.column) == (2, 59) and "even number" in info.value.message
    with pytest.raises(tfspec.SpecError) as info:
        tfspec.parse("embedding tokens { vocab 9; dim 16 }\nencoder x 1 { attention self heads=2 }\n"
                     "decoder x 1 { attention self heads=2 mask=causal; attention cross heads=2 position=rotary }")
    assert info.value.codes == ["variant"] and "different sequences" in info.value.message
    with pytest.raises(tfspec.SpecError) as info:
        tfspec.parse("embedding tokens { vocab 9; dim 16 }\n"
                     "decoder x 1 { position rotary(theta=1); attention self heads=2 mask=causal }")
    assert (info.value.line, info.value.column) == (2, 37)  # at the bad value


def test_diagram_and_labels_show_where_rotary_positions_enter():
    spec = tfspec.parse(LLAMA_LIKE)
    source = to_graphviz(spec).source
    assert "Positions\n(rotary(theta=500000, fraction=0.5))" in source
    assert 'label="rotates q, k"' in source
    label = spec.graph().node("decoder.self_attn").label
    assert label == "Multi-Head Attention (causal, padding, rotary(theta=500000, fraction=0.5), 4 heads, 2 kv heads)"


def test_rotary_is_refused_where_scores_are_not_dot_products():
    with pytest.raises(tfspec.SpecError) as info:  # w·tanh(Rq + Rk) is not a function of the offset
        tfspec.parse("embedding tokens { vocab 9; dim 16 }\n"
                     "encoder x 1 { position rotary; attention self heads=2 kind=additive }")
    assert info.value.codes == ["variant"] and "need dot-product scores" in info.value.message
    assert (info.value.line, info.value.column) == (2, 24)


def test_rotary_positions_on_an_attention_that_gives_them_no_dimension_are_refused():
    """A fuzzed spec found it: latent attention with rope_dim=0 under rotary positions divided by zero."""
    import pytest

    import tfspec

    with pytest.raises(tfspec.SpecError, match="rotary positions have no dimension to rotate"):
        tfspec.parse("embedding t { vocab 10; dim 16 }\ndecoder x 1 { position rotary; attention self heads=2 "
                     "kind=latent(8, 0) mask=causal; feedforward d_ff=8 }\nhead tied(t)")


def test_ntk_alpha_stretches_the_base_by_alpha_to_the_power_d_over_d_minus_2():
    """Hunyuan's fixed NTK scaling: the frequencies of a base theta * alpha ** (d / (d - 2)), at any length."""
    from tfspec.nn.rope_scaling import rope_frequencies
    dim, theta, alpha = 16, 10000.0, 1000.0
    base = theta * alpha ** (dim / (dim - 2))
    expected = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float) / dim))
    inv_freq, factor = rope_frequencies(dim, theta, {"kind": "ntk_alpha", "alpha": alpha}, longest=torch.tensor(99))
    assert factor == 1.0 and torch.equal(inv_freq, expected)


def test_a_qk_norm_after_the_positions_norms_the_rotated_queries_and_keys():
    spec = """model m
embedding tokens {{ vocab 20; dim 16; position none }}
decoder x 1 {{ position rotary; attention self heads=2 mask=causal {qk}; feedforward d_ff=32 }}"""
    with pytest.raises(tfspec.SpecError) as info:  # normed twice
        tfspec.parse(spec.format(qk="qk_norm=rmsnorm steps=rotated_qk_norm"))
    assert "normed twice (rmsnorm, rotated_qk_norm)" in info.value.message and info.value.column > 50
    model = tfspec.compile(spec.format(qk="steps=rotated_qk_norm"), seed=0).eval()
    attention = model.decoder.layers[0].self_attn
    norms = attention.rotated_qk_norm
    with torch.no_grad():
        norms.q.weight.normal_()
        norms.k.weight.normal_()
    x = torch.randn(1, 5, 16)
    from tfspec.nn.context import Context
    ctx = Context(torch.arange(5)[None])
    q, k, _, _, _, _ = attention.project_in_context(x, ctx, None)
    raw_q, raw_k, _ = attention.qkv(x).split((16, 16, 16), dim=-1)
    split = lambda t: t.view(1, 5, 2, 8).transpose(1, 2)  # noqa: E731
    tables = attention.position.tables(ctx.positions, torch.float32)
    rotated_q, rotated_k = attention.position.rotate(split(raw_q), split(raw_k), tables)
    rms = lambda t, w: t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + 1e-6) * w  # noqa: E731
    assert torch.allclose(q, rms(rotated_q, norms.q.weight), atol=1e-6)
    assert torch.allclose(k, rms(rotated_k, norms.k.weight), atol=1e-6)
    assert not torch.allclose(q, rms(split(raw_q), norms.q.weight), atol=1e-3)  # (normed, then rotated: other)


def test_a_full_width_qk_norm_norms_all_heads_at_once_before_the_split():
    model = tfspec.compile("""model m
embedding tokens { vocab 20; dim 16; position none }
decoder x 1 { attention self heads=2 kv_heads=1 mask=causal steps=full_qk_norm(1e-5); feedforward d_ff=32 }""",
                           seed=0).eval()
    attention = model.decoder.layers[0].self_attn
    norms = attention.full_qk_norm
    assert norms.q.weight.shape == (16,) and norms.k.weight.shape == (8,)
    with torch.no_grad():
        norms.q.weight.normal_()
        norms.k.weight.normal_()
    x = torch.randn(1, 5, 16)
    q, k, _ = attention.project(x)
    raw_q, raw_k, _ = attention.qkv(x).split((16, 8, 8), dim=-1)
    rms = lambda t, w: t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + 1e-5) * w  # noqa: E731
    assert torch.allclose(q, rms(raw_q, norms.q.weight).view(1, 5, 2, 8).transpose(1, 2), atol=1e-6)
    assert torch.allclose(k, rms(raw_k, norms.k.weight).view(1, 5, 1, 8).transpose(1, 2), atol=1e-6)
