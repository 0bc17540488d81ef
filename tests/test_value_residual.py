"""Value residual learning (ResFormer, Zhou et al. 2024): every layer after the first mixes the first layer's values
into its own, v_n ← λ·v_n + (1 − λ)·v_1, against the formula written out, and as a declared edge between layers."""

from __future__ import annotations

import math

import pytest
import torch

import tfspec
from tfspec.inspect.diagram import to_graphviz
from tfspec.ir import nodes as ir
from tfspec.nn.context import Context
from tfspec.run.decoding import Continuation
from numerics import FLOAT32, FLOAT64, assert_close

SPEC = """model resformer
embedding tokens {{ vocab 40; dim 16 }}
decoder x 4 {{
  residual pre; norm rmsnorm
  position rotary
  attention self heads=4 kv_heads=2 mask=causal + padding{steps}
  feedforward d_ff=32 activation=swiglu
  final rmsnorm
}}
head linear(40)
"""


def perturbed(model, seed=0, std=0.5):
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=generator, dtype=p.dtype) * std)
    return model


def test_a_later_layer_mixes_the_first_layers_values_into_its_own():
    """Layer 3's attention, given layer 0's values at the same positions, is the formula with
    v = λ·v₃ + (1 − λ)·v₀, in float64: rotary positions, grouped heads, causal."""
    model = perturbed(tfspec.compile(SPEC.format(steps=" steps=value_residual(0.3)"), seed=0)).double().eval()
    first, fourth = model.decoder.layers[0].self_attn, model.decoder.layers[3].self_attn
    x0, x3 = (torch.randn(2, 6, 16, generator=torch.Generator().manual_seed(i), dtype=torch.float64) for i in (1, 2))
    ctx = Context(torch.arange(6)[None])
    with torch.no_grad():
        first(x0, ctx)
        got = fourth(x3, ctx)
    d = 4
    _, _, v0 = first.qkv(x0).split((16, 8, 8), dim=-1)
    q, k, v3 = fourth.qkv(x3).split((16, 8, 8), dim=-1)
    values = 0.3 * v3 + 0.7 * v0  # (batch, 6, kv_heads · d)
    # the angles in float32, as rotary positions (and Hugging Face) compute them
    angles = torch.arange(6, dtype=torch.float32)[:, None] * (1.0 / 10000.0 ** (torch.arange(0, d, 2).float() / d))
    cos, sin = (f(torch.cat((angles, angles), -1)).double() for f in (torch.cos, torch.sin))

    def rotate(t):  # (batch, 6, d): Hugging Face's half-split rotary
        first_half, second_half = t[..., :d // 2], t[..., d // 2:]
        return t * cos + torch.cat((-second_half, first_half), -1) * sin

    heads = []
    for h in range(4):
        g = h // 2
        scores = rotate(q[..., h * d:(h + 1) * d]) @ rotate(k[..., g * d:(g + 1) * d]).transpose(-1, -2) / math.sqrt(d)
        scores = scores.masked_fill(~torch.ones(6, 6, dtype=torch.bool).tril(), -math.inf)
        heads.append(torch.softmax(scores, -1) @ values[..., g * d:(g + 1) * d])
    expected = fourth.out(torch.cat(heads, -1))
    assert_close(got, expected, FLOAT64)


def test_the_first_layer_hands_on_its_values_along_an_edge_of_the_graph():
    spec = tfspec.parse(SPEC.format(steps=" steps=value_residual(0.5)"))
    assert spec.decoder.schedule == (0, 1, 1, 1)
    g = spec.graph()
    first, later = g.of(ir.Attention)
    assert later.values_from == first.id and "hands on its values" in first.label
    assert "value residual(lam=0.5)" not in first.label and "value residual" in later.label
    dot = to_graphviz(spec).source
    assert "label=values" in dot and "1× (layer 0)" in dot and "3× (layers 1–3)" in dot


def test_with_its_own_values_whole_a_layer_is_plain_attention():
    """λ = 1: every layer's own values, as without the step (the first layer handing its values on changes
    nothing it computes)."""
    plain = perturbed(tfspec.compile(SPEC.format(steps=""), seed=0)).eval()
    kept = tfspec.compile(SPEC.format(steps=" steps=value_residual(1)"), seed=0).eval()
    kept.load_state_dict(plain.state_dict())
    tokens = torch.randint(0, 40, (2, 9), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        assert_close(kept(tokens), plain(tokens), FLOAT32)
        mixed = tfspec.compile(SPEC.format(steps=" steps=value_residual(0.5)"), seed=0).eval()
        mixed.load_state_dict(plain.state_dict())
        assert (mixed(tokens) - plain(tokens)).abs().max() > 1e-3  # (and at 0.5 it does mix)


def test_decoding_and_left_padding_keep_the_mixed_values():
    model = perturbed(tfspec.compile(SPEC.format(steps=" steps=value_residual(0.5)"), seed=0)).eval()
    tokens = torch.randint(0, 40, (2, 10), generator=torch.Generator().manual_seed(4))
    padding = torch.zeros(2, 10, dtype=torch.bool)
    padding[1, :3] = True
    positions = ((~padding).long().cumsum(1) - 1).clamp(min=0)
    with torch.no_grad():
        assert_close(model(tokens, padding, position_ids=positions)[1, 3:], model(tokens[1:, 3:])[0], FLOAT32)
        runs = [Continuation(model, prompt_padding_mask=padding[:, :5]),
                Continuation(model, use_cache=False, prompt_padding_mask=padding[:, :5]),
                Continuation(model, prompt_padding_mask=padding[:, :5], compile="eager", max_len=10)]
        logits = [run.feed(tokens[:, :5]) for run in runs]
        for i in range(5, 10):
            assert_close(logits[0], logits[1], 1e-4)
            assert_close(logits[2], logits[1], 1e-4)
            logits = [run.feed(tokens[:, i:i + 1]) for run in runs]


@pytest.mark.parametrize("where, message", [
    ("attention self heads=4 kind=latent(8, 4) mask=causal steps=value_residual(0.5)", "after its KV cache"),
])
def test_value_residual_is_refused_where_it_cannot_mix(where, message):
    with pytest.raises(tfspec.SpecError, match=message):
        tfspec.parse("embedding tokens { vocab 40; dim 16 }\n"
                     f"decoder x 2 {{ {where}; feedforward d_ff=8 }}")


def test_value_residual_is_for_self_attention():
    with pytest.raises(tfspec.SpecError, match="it is for self-attention"):
        tfspec.parse("embedding tokens { vocab 40; dim 16 }\nencoder x 1 { attention self heads=2 }\n"
                     "decoder x 2 { attention self heads=2 mask=causal; attention cross heads=2 "
                     "steps=value_residual(0.5); feedforward d_ff=8 }")
