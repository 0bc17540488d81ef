"""Squared ReLU (Primer): the formula, Hugging Face's ``relu2``, and a feed-forward built on it."""

from __future__ import annotations

import torch

import tfspec
from tfspec.registry import ACTIVATIONS
from numerics import FLOAT32, FLOAT64, assert_close


def test_squared_relu_is_its_formula_and_hugging_faces_relu2():
    from transformers.activations import ACT2FN
    x = torch.randn(4, 7, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    ours = ACTIVATIONS["squared_relu"].build()
    expected = torch.where(x > 0, x * x, torch.zeros_like(x))
    assert_close(ours(x), expected, FLOAT64)
    assert_close(ours(x), ACT2FN["relu2"](x), FLOAT64)
    x.requires_grad_(True)
    ours(x).sum().backward()
    assert_close(x.grad, torch.where(x > 0, 2 * x, torch.zeros_like(x)).detach(), FLOAT64)


def test_a_feed_forward_with_squared_relu_is_down_of_the_squared_up_projection():
    model = tfspec.compile("embedding tokens { vocab 30; dim 8 }\n"
                           "decoder x 1 { attention self heads=2 mask=causal; "
                           "feedforward d_ff=16 activation=squared_relu }", seed=0).eval()
    ffn = model.decoder.layers[0].ffn
    x = torch.randn(2, 5, 8, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        hidden = torch.relu(x @ ffn.up.weight.T + ffn.up.bias) ** 2
        assert_close(ffn(x), hidden @ ffn.down.weight.T + ffn.down.bias, FLOAT32)
