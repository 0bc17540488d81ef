"""KERPLE's log kernel (Chi et al. 2022): -r1·log(1 + r2·|i − j|) per head, r1 and r2 learned per layer, equal to
the formula written here."""

import math

import pytest
import torch

import tfspec
from tfspec.nn.context import Context
from tfspec.inspect.verify import verify
from numerics import FLOAT32, assert_close

SPEC = ("embedding tokens {{ vocab 50; dim 16 }}\n"
        "decoder x 2 {{ residual pre; position {position}; attention self heads=2 mask={mask}; feedforward d_ff=32 }}\n"
        "head tied(tokens)")


def naive_attention(attention, x, r1, r2, allowed):
    n = x.shape[1]
    q, k, v = (t.view(1, n, 2, 8).transpose(1, 2) for t in attention.qkv(x).split(16, dim=-1))
    distance = (torch.arange(n)[:, None] - torch.arange(n)[None, :]).abs().float()
    bias = -r1[:, None, None] * torch.log(1 + r2[:, None, None] * distance)
    scores = (q @ k.transpose(-1, -2) / math.sqrt(8) + bias).masked_fill(~allowed, float("-inf"))
    return attention.out((scores.softmax(-1) @ v).transpose(1, 2).reshape(1, n, 16))


@pytest.mark.parametrize("mask", ["causal", "causal + padding", "none"])
def test_each_layer_adds_its_own_learned_bias(mask):
    model = tfspec.compile(SPEC.format(position="kerple(r1=0.5, r2=2)", mask=mask), seed=0).eval()
    with torch.no_grad():  # every layer's r1 and r2 of their own, far from their start
        for i, layer in enumerate(model.decoder.layers):
            layer.self_attn.position.r1.copy_(torch.tensor([0.3, 1.7]) * (i + 1))
            layer.self_attn.position.r2.copy_(torch.tensor([2.5, 0.2]) * (i + 1))
    n = 9
    allowed = torch.ones(n, n, dtype=torch.bool).tril() if "causal" in mask else torch.ones(n, n, dtype=torch.bool)
    tokens = torch.randint(0, 50, (1, n))
    with torch.no_grad():
        ctx = Context(torch.arange(n)[None])
        x = model.embeddings["tokens"](tokens, torch.arange(n)[None])
        for layer in model.decoder.layers:
            attention = layer.self_attn
            expected = naive_attention(attention, layer.self_attn_norm(x), attention.position.r1, attention.position.r2,
                                       allowed)
            assert_close(attention(layer.self_attn_norm(x), ctx), expected, FLOAT32)
            x = layer(x, ctx)
        assert_close(model(tokens), x @ model.embeddings["tokens"].tokens.weight.T, FLOAT32)


def test_r1_and_r2_start_as_written_and_are_learned():
    model = tfspec.compile("defaults { init t5(factor=0.5) }\n" + SPEC.format(position="kerple(r1=0.5, r2=2)",
                                                                            mask="causal"), seed=0)
    positions = [layer.self_attn.position for layer in model.decoder.layers]
    assert all(torch.equal(p.r1, torch.full((2,), 0.5)) and torch.equal(p.r2, torch.full((2,), 2.0)) for p in positions)
    tokens = torch.randint(0, 50, (2, 8))
    torch.nn.functional.cross_entropy(model(tokens).flatten(0, 1), tokens.flatten()).backward()
    assert all(p.r1.grad.abs().min() > 0 and p.r2.grad.abs().min() > 0 for p in positions)


def test_label_verify_and_errors():
    spec = tfspec.parse(SPEC.format(position="kerple", mask="causal + padding"))
    assert "KERPLE" in spec.graph().node("decoder.self_attn").label
    results = {r.name: r.status for r in verify(tfspec.compile(spec, seed=0), examples=3)}
    assert results["offset invariance"] == "held" and results["causality"] == "held"
    assert "violated" not in results.values()
    with pytest.raises(tfspec.SpecError) as info:
        tfspec.parse(SPEC.format(position="kerple(r1=0)", mask="causal"))
    assert "r1" in info.value.message and info.value.line == 2
    with pytest.raises(tfspec.SpecError) as info:
        tfspec.parse("embedding tokens { vocab 50; dim 16 }\nencoder x 1 { attention self heads=2 }\n"
                     "decoder x 1 { attention cross heads=2 position=kerple }")
    assert "KERPLE on cross-attention" in info.value.message
