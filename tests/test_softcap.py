"""Logit soft-capping (Gemma 2): attention scores capped to cap·tanh(s/cap) before the mask and softmax, and the
head's logits capped the same way, each equal to the formula written here; exact under a KV cache."""

import math

import pytest
import torch

import tfspec
from tfspec.nn.context import Context
from tfspec.run.decoding import Continuation, sample
from tfspec.inspect.verify import verify
from numerics import FLOAT32, assert_close

SPEC = ("embedding tokens {{ vocab 50; dim 16 }}\n"
        "decoder x 2 {{ residual pre; attention self heads=2 kv_heads={kv} kind=softcap({cap}) mask={mask}; "
        "feedforward d_ff=32 }}\nhead tied(tokens){head}")


def scaled(model, factor: float):
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(factor)
    return model


@pytest.mark.parametrize("kv, mask", [(2, "causal"), (1, "causal + window(3)")])
def test_a_layer_computes_the_formula(kv, mask):
    model = scaled(tfspec.compile(SPEC.format(kv=kv, cap=0.8, mask=mask, head=""), seed=0), 10).eval()
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
        scores = q @ k.transpose(-1, -2) / math.sqrt(8)
        assert scores.abs().max() > 1.5  # large enough that capping them matters
        capped = 0.8 * torch.tanh(scores / 0.8)
        weights = torch.softmax(capped.masked_fill(~allowed, float("-inf")), dim=-1)
        expected = attention.out((weights @ v).transpose(1, 2).reshape(1, n, 16))
        uncapped = attention.out((torch.softmax(scores.masked_fill(~allowed, float("-inf")), -1) @ v)
                                 .transpose(1, 2).reshape(1, n, 16))
    assert_close(got, expected, FLOAT32)
    assert (got - uncapped).abs().max() > 1e-2


def test_the_head_caps_the_logits():
    capped = scaled(tfspec.compile(SPEC.format(kv=2, cap=50, mask="causal", head=" softcap=0.3"), seed=0), 4).eval()
    plain = scaled(tfspec.compile(SPEC.format(kv=2, cap=50, mask="causal", head=""), seed=0), 4).eval()
    tokens = torch.randint(0, 50, (2, 7))
    with torch.no_grad():
        logits, raw = capped(tokens), plain(tokens)
    assert raw.abs().max() > 0.6
    assert_close(logits, 0.3 * torch.tanh(raw / 0.3), FLOAT32)
    assert "capped ±3" in tfspec.parse(SPEC.format(kv=2, cap=50, mask="causal", head=" softcap=3")
                                       ).graph().node("head").label


def test_cached_decoding_equals_recomputation():
    model = scaled(tfspec.compile(SPEC.format(kv=1, cap=1.5, mask="causal", head=" softcap=2"), seed=2), 25).eval()
    prompt = torch.randint(0, 50, (2, 4))
    cached, recomputed = Continuation(model), Continuation(model, use_cache=False)
    assert cached.use_cache
    assert sample(cached, prompt, max_new=10) == sample(recomputed, prompt, max_new=10)


def test_label_cost_verify_emit_and_errors(tmp_path):
    text = SPEC.format(kv=2, cap=50, mask="causal + padding", head=" softcap=30")
    spec = tfspec.parse(text)
    assert spec.graph().node("decoder.self_attn").label == "Soft-capped(50) Attention (causal, padding, 2 heads)"
    results = {r.name: r.status for r in verify(tfspec.compile(spec, seed=0), examples=3)}
    assert results["causality"] == "held" and results["padding invariance"] == "held"
    assert "violated" not in results.values()
    from tfspec.inspect.analysis import analyse
    plain = tfspec.parse(SPEC.format(kv=2, cap=50, mask="causal + padding", head="").replace("kind=softcap(50) ", ""))
    capped, uncapped = analyse(spec, seq_len=16), analyse(plain, seq_len=16)
    more = capped.total.elementwise - uncapped.total.elementwise
    assert capped.total.matmul == uncapped.total.matmul
    # per score (2 layers, 2 heads): tanh and the multiply, and the mask's add that SDPA's kernel does for dot;
    # per logit: divide, tanh, multiply
    assert more == capped.batch * (2 * 2 * 16 * 16 * 3 + 16 * 50 * 3)
    for bad, where in (("kind=softcap(0)", "cap"), ("head tied(tokens) softcap=-1", "softcap")):
        with pytest.raises(tfspec.SpecError) as info:
            tfspec.parse(text.replace("kind=softcap(50)", bad) if "kind" in bad
                         else text.replace("head tied(tokens) softcap=30", bad))
        assert where in info.value.message
