"""Shaw et al. 2018's relative position representations (variants/shaw.py) against the paper's formula, pair by pair."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from tfspec import ir
import tfspec
from tfspec.nn.shaw import RelativeRepresentations
from numerics import FLOAT32, FLOAT64, assert_close

EXAMPLES = Path(__file__).parent.parent / "examples"


def naive_shaw(q, k, v, table_k, table_v, clip, positions, allowed):
    """Equations (3)-(5) of the paper, one query-key pair at a time."""
    batch, heads, length, dim = q.shape
    out = torch.zeros_like(q)
    for b in range(batch):
        for h in range(heads):
            for i in range(length):
                keys = [j for j in range(length) if allowed[i, j]]
                rel = {j: max(-clip, min(clip, int(positions[b, j] - positions[b, i]))) + clip for j in keys}
                e = {j: float(q[b, h, i] @ (k[b, h, j] + table_k[rel[j]])) / math.sqrt(dim) for j in keys}
                top = max(e.values())
                total = sum(math.exp(x - top) for x in e.values())
                out[b, h, i] = sum(math.exp(e[j] - top) / total * (v[b, h, j] + table_v[rel[j]]) for j in keys)
    return out


@pytest.mark.parametrize("clip", [1, 3, 20])
@pytest.mark.parametrize("causal", [False, True])
def test_attention_is_the_papers_formula(clip, causal):
    g = torch.Generator().manual_seed(clip)
    q, k, v = (torch.randn(2, 3, 9, 4, generator=g, dtype=torch.float64) for _ in range(3))
    scheme = RelativeRepresentations(4, clip).double()
    torch.nn.init.normal_(scheme.keys, generator=g)
    torch.nn.init.normal_(scheme.values, generator=g)
    positions = torch.stack([torch.arange(9), torch.arange(9) * 2 + 5])  # offsets beyond the clip, too
    allowed = torch.ones(9, 9, dtype=torch.bool).tril() if causal else torch.ones(9, 9, dtype=torch.bool)
    mask = torch.zeros(9, 9, dtype=torch.float64).masked_fill(~allowed, torch.finfo(torch.float64).min)
    got = scheme.attend(None, q, k, v, mask, positions, positions, None, lambda weights: weights)
    expected = naive_shaw(q, k, v, scheme.keys.detach(), scheme.values.detach(), clip, positions, allowed)
    assert_close(got, expected, FLOAT64)


def test_tables_are_one_pair_per_layer_shared_by_the_heads():
    spec = tfspec.parse("embedding t { vocab 30; dim 32; position none }\n"
                        "encoder x 3 { position shaw(4); attention self heads=4; feedforward d_ff=64 }")
    shapes = {k: tuple(v.shape) for k, v in tfspec.compile(spec).state_dict().items() if "position" in k}
    assert shapes == {f"encoder.layers.{i}.self_attn.position.{t}": (9, 8) for i in range(3)
                      for t in ("keys", "values")}


def test_kv_cached_decoding_reproduces_recomputation():
    from tfspec.run.decoding import Continuation, cache_supported
    model = tfspec.compile("embedding t { vocab 30; dim 16; position none }\n"
                           "decoder x 2 { position shaw(3); attention self heads=2 mask=causal; feedforward d_ff=32 }\n"
                           "head tied(t)", seed=0).eval()
    assert cache_supported(model.spec)
    tokens = torch.randint(0, 30, (2, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        cached, full = Continuation(model, use_cache=True), Continuation(model, use_cache=False)
        assert_close(cached.feed(tokens[:, :5]), full.feed(tokens[:, :5]), FLOAT32)
        for i in range(5, 12):  # offsets beyond the clip after the fourth step
            assert_close(cached.feed(tokens[:, i:i + 1]), full.feed(tokens[:, i:i + 1]), FLOAT32)


def test_the_papers_base_model_example():
    spec = tfspec.load(EXAMPLES / "shaw_relative.tfs")
    labels = [a.label for a in spec.graph().of(ir.Attention)]
    assert sum("Shaw relative(16)" in label for label in labels) == 2  # encoder and decoder self-attention
    # the base model without its (parameter-free) sinusoids, plus two tables of 33 x 64 per self-attention
    base = tfspec.load(EXAMPLES / "vaswani_base.tfs").parameter_count()
    assert spec.parameter_count() == base + 12 * 2 * 33 * 64
