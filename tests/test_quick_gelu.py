"""Quick GELU (CLIP): the formula and Hugging Face's ``quick_gelu``."""

from __future__ import annotations

import torch

from tfspec.registry import ACTIVATIONS
from numerics import FLOAT64, assert_close


def test_quick_gelu_is_its_formula_and_hugging_faces():
    from transformers.activations import ACT2FN
    x = torch.randn(4, 7, generator=torch.Generator().manual_seed(0), dtype=torch.float64) * 3
    ours = ACTIVATIONS["quick_gelu"].build()
    assert_close(ours(x), x / (1 + torch.exp(-1.702 * x)), FLOAT64)
    assert_close(ours(x), ACT2FN["quick_gelu"](x), FLOAT64)
    assert not torch.allclose(ours(x), torch.nn.functional.gelu(x))  # an approximation, not GELU itself
