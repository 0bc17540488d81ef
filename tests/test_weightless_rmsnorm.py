"""rmsnorm(weight=false): x / rms(x) and nothing trained (Llama 4's qk "L2 norm")."""

from __future__ import annotations

import torch

import tfspec
from tfspec.registry import NORMS
from numerics import FLOAT32, assert_close


def test_a_weightless_rmsnorm_is_x_over_its_rms_and_trains_nothing():
    variant, options = NORMS.of(tfspec.parse("""model m
embedding tokens { vocab 20; dim 16; position none }
decoder x 1 { position rotary; attention self heads=2 mask=causal qk_norm=rmsnorm(eps=1e-5, weight=false); \\
              feedforward d_ff=32 }""").decoder.block.sublayers[0].body.qk_norm)
    assert variant.params(8, options) == {}
    module = variant.build(8, options)
    x = torch.randn(3, 5, 8, dtype=torch.float64)
    expected = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5)  # Hugging Face's Llama4TextL2Norm
    assert_close(module.double()(x), expected, FLOAT32)
    assert list(module.parameters()) == []
