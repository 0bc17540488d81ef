"""Sigmoid attention (Ramapuram et al. 2024): sigmoid(q·k/√d − log n) weights, no softmax, equal to the formula
written here; exact under a KV cache because n is the spec's, not the call's."""

import math

import pytest
import torch

import tfspec
from tfspec.run.decoding import Continuation, sample
from tfspec.nn.context import Context
from tfspec.inspect.verify import verify
from numerics import FLOAT32, assert_close

SPEC = ("embedding tokens {{ vocab 50; dim 16 }}\n"
        "decoder x 2 {{ residual pre; attention self heads=2 kv_heads={kv} kind=sigmoid({n}) mask={mask}; "
        "feedforward d_ff=32 }}\nhead tied(tokens)")


def scaled(model, factor: float):
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(factor)
    return model


@pytest.mark.parametrize("kv, mask", [(2, "causal"), (1, "causal + padding"), (2, "causal + window(3)")])
def test_a_layer_computes_the_formula(kv, mask):
    model = scaled(tfspec.compile(SPEC.format(kv=kv, n=64, mask=mask), seed=0), 10).eval()
    attention = model.decoder.layers[0].self_attn
    n, x = 11, torch.randn(1, 11, 16)
    allowed = torch.ones(n, n, dtype=torch.bool).tril()
    if "window" in mask:
        allowed &= torch.ones(n, n, dtype=torch.bool).triu(-2)
    with torch.no_grad():
        got = attention(x, Context(torch.arange(n)[None]))
        q, k, v = attention.qkv(x).split((16, 8 * kv, 8 * kv), dim=-1)
        q, k, v = (t.view(1, n, -1, 8).transpose(1, 2) for t in (q, k, v))
        k, v = k.repeat_interleave(2 // kv, dim=1), v.repeat_interleave(2 // kv, dim=1)
        weights = torch.sigmoid(q @ k.transpose(-1, -2) / math.sqrt(8) - math.log(64)) * allowed
        expected = attention.out((weights @ v).transpose(1, 2).reshape(1, n, 16))
    assert_close(got, expected, FLOAT32)


def test_weights_do_not_sum_to_one_and_n_sets_their_scale():
    model = tfspec.compile(SPEC.format(kv=2, n=8, mask="causal"), seed=0).eval()
    bigger = tfspec.compile(SPEC.format(kv=2, n=4096, mask="causal"), seed=0).eval()
    tokens = torch.randint(0, 50, (1, 9))
    with torch.no_grad():  # the same weights: only the bias differs, and with it every output
        assert (model(tokens) - bigger(tokens)).abs().max() > 1e-4


def test_cached_decoding_equals_recomputation_at_a_realistic_scale():
    model = scaled(tfspec.compile(SPEC.format(kv=1, n=16, mask="causal"), seed=2), 25).eval()
    prompt = torch.randint(0, 50, (2, 4))
    cached, recomputed = Continuation(model), Continuation(model, use_cache=False)
    assert cached.use_cache
    assert sample(cached, prompt, max_new=10) == sample(recomputed, prompt, max_new=10)


def test_label_verify_emit_and_errors():
    spec = tfspec.parse(SPEC.format(kv=2, n=1024, mask="causal + padding"))
    assert spec.graph().node("decoder.self_attn").label == "Sigmoid(1024) Attention (causal, padding, 2 heads)"
    results = {r.name: r.status for r in verify(tfspec.compile(spec, seed=0), examples=3)}
    assert results["causality"] == "held" and results["padding invariance"] == "held"
    assert "violated" not in results.values()
    with pytest.raises(tfspec.SpecError) as info:
        tfspec.parse(SPEC.format(kv=2, n=0, mask="causal"))
    assert "n" in info.value.message and info.value.line == 2
