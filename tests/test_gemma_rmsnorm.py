"""Gemma's RMSNorm: x / rms(x) · (1 + w), equal to the formula written here and to Hugging Face's Gemma2RMSNorm."""

import pytest
import torch

import tfspec
from numerics import FLOAT32, assert_close

SPEC = ("embedding tokens {{ vocab 40; dim 16; position learned(32) }}\n"
        "decoder x 2 {{ residual pre; norm {norm}; attention self heads=2 mask=causal; feedforward d_ff=32; "
        "final {norm} }}\nhead tied(tokens)")


def formula(x, weight, eps):
    x64 = x.double()
    return (x64 / torch.sqrt(x64.pow(2).mean(-1, keepdim=True) + eps) * (1 + weight.double())).to(x.dtype)


def test_a_layer_computes_the_formula_in_each_norms_place():
    model = tfspec.compile(SPEC.format(norm="gemma_rmsnorm(eps=1e-5)"), seed=0).eval()
    with torch.no_grad():  # every parameter off its initial value: w = 0 would hide a missing offset
        for i, p in enumerate(model.parameters()):
            p.add_(0.3 * torch.randn(p.shape, generator=torch.Generator().manual_seed(i)))
    layer = model.decoder.layers[1]
    x = torch.randn(2, 7, 16)
    norm = lambda m, t: formula(t, m.weight, 1e-5)  # noqa: E731
    h = x + layer.self_attn(norm(layer.self_attn_norm, x))
    expected = h + layer.ffn(norm(layer.ffn_norm, h))
    assert_close(layer(x), expected, FLOAT32)


@pytest.mark.parametrize("init", ["normal", "gpt2", "t5(factor=0.5)"])
def test_the_offset_starts_at_zero_under_every_scheme(init):
    model = tfspec.compile(f"defaults {{ init {init} }}\n" + SPEC.format(norm="gemma_rmsnorm"), seed=0)
    norms = [m for m in model.modules() if type(m).__name__ == "UnitOffsetRMSNorm"]
    assert len(norms) == 5 and all(torch.equal(m.weight, torch.zeros(16)) for m in norms)
    x = torch.randn(3, 16)
    assert_close(norms[0](x), x / x.pow(2).mean(-1, keepdim=True).add(1e-6).sqrt(), FLOAT32)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_equals_hugging_faces_gemma2_norm(dtype):
    from transformers.models.gemma2.modeling_gemma2 import Gemma2RMSNorm
    ours = tfspec.compile(SPEC.format(norm="gemma_rmsnorm"), seed=0).decoder.final_norm
    reference = Gemma2RMSNorm(16, eps=1e-6)
    with torch.no_grad():
        reference.weight.copy_(torch.randn(16, generator=torch.Generator().manual_seed(1)))
        ours.weight.copy_(reference.weight)
    x = torch.randn(2, 5, 16, generator=torch.Generator().manual_seed(2)).to(dtype)
    assert_close(ours(x), reference(x), FLOAT32 if dtype == torch.float32 else 0)  # bf16: the same roundings
