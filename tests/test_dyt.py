"""DyT (Zhu et al. 2025): weight·tanh(α·x) + bias in a norm's place, equal to the formula written here."""

import pytest
import torch

import tfspec
from tfspec import ir
from tfspec.inspect.verify import verify
from numerics import FLOAT32, assert_close

SPEC = ("embedding tokens {{ vocab 40; dim 16; position learned(32) }}\n"
        "decoder x 2 {{ residual pre; norm {norm}; attention self heads=2 mask=causal; feedforward d_ff=32; "
        "final {norm} }}\nhead tied(tokens)")


def dyt(x, alpha, weight, bias):
    return weight * torch.tanh(alpha * x) + bias


def perturbed(model, seed=0):
    """Every parameter moved off its initial value (α = 1 or weight = 1 would hide a mistake)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=g))
    return model


def test_a_layer_computes_the_formula_in_each_norms_place():
    model = perturbed(tfspec.compile(SPEC.format(norm="dyt(alpha=0.8)"), seed=0)).eval()
    layer = model.decoder.layers[1]
    x = torch.randn(2, 7, 16)
    norm = lambda m, t: dyt(t, m.alpha, m.weight, m.bias)  # noqa: E731
    h = x + layer.self_attn(norm(layer.self_attn_norm, x))
    expected = h + layer.ffn(norm(layer.ffn_norm, h))
    assert_close(layer(x), expected, 0)
    tokens = torch.randint(0, 40, (2, 7))
    hidden = model.embeddings["tokens"](tokens, torch.arange(7)[None])
    for each in model.decoder.layers:
        hidden = each(hidden)
    logits = norm(model.decoder.final_norm, hidden) @ model.embeddings["tokens"].tokens.weight.T
    assert_close(model(tokens), logits, FLOAT32)


@pytest.mark.parametrize("init", ["normal", "gpt2", "xavier", "t5(factor=0.5)"])
@pytest.mark.parametrize("alpha", [None, 2.0])
def test_alpha_starts_at_its_option_under_every_scheme(init, alpha):
    norm = "dyt" if alpha is None else f"dyt(alpha={alpha})"
    model = tfspec.compile(f"defaults {{ init {init} }}\n" + SPEC.format(norm=norm), seed=0)
    alphas = [m.alpha for m in model.modules() if hasattr(m, "alpha")]
    assert len(alphas) == 5  # two per layer, and the final one
    assert all(a.item() == (0.5 if alpha is None else alpha) for a in alphas)
    scale = 0.5 if init.startswith("t5") else 1.0  # T5 starts norm scales at its factor
    assert all(torch.equal(m.weight, torch.full_like(m.weight, scale)) for m in model.modules() if hasattr(m, "alpha"))


def test_alpha_is_learned():
    model = tfspec.compile(SPEC.format(norm="dyt"), seed=0)
    tokens = torch.randint(0, 40, (2, 9))
    torch.nn.functional.cross_entropy(model(tokens).flatten(0, 1), tokens.flatten()).backward()
    grads = [m.alpha.grad for m in model.modules() if hasattr(m, "alpha")]
    assert all(g is not None and g.abs().item() > 0 for g in grads)


def test_the_wiring_form_label_and_properties():
    spec = tfspec.parse("embedding tokens { vocab 40; dim 16 }\n"
                        "decoder x 1 {\n h = dyt(x, alpha=0.25)\n x = x + attention(h, heads=2, mask=causal)\n}")
    assert [n.label for n in spec.graph().ordered() if isinstance(n, ir.Norm)] == ["Norm (dyt(alpha=0.25))"]
    model = tfspec.compile(spec, seed=0)
    assert model.decoder.layers[0].norm.alpha.item() == 0.25
    results = {r.name: r.status for r in verify(perturbed(tfspec.compile(SPEC.format(norm="dyt"), seed=1)),
                                                 examples=3)}
    assert results["causality"] == "held" and "violated" not in results.values()


def test_a_bad_alpha_is_located():
    with pytest.raises(tfspec.SpecError) as info:
        tfspec.parse(SPEC.format(norm="dyt(alpha=-1)"))
    assert "alpha" in info.value.message and info.value.line == 2
