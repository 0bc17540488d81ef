"""FlexAttention (tfspec/nn/flex.py): the masks' rules and BigBird's blocks as a BlockMask, equal to the dense path.

The path runs on CUDA; here the CPU is added to ``FLEX_DEVICES`` to check the BlockMask and ``mask_mod``
against the dense (or banded, or block-sparse) computation, forward only (FlexAttention has no CPU
backward in torch 2.13) and uncompiled. With CUDA, the same comparisons run there with gradients.
"""

from __future__ import annotations

import pytest
import torch

import tfspec
import tfspec.nn.attention
import tfspec.nn.bigbird
import tfspec.nn.flex as flex
from tfspec.backend.compiler import attention_config
from tfspec.nn.flex import flex_mix
from tfspec.registry import ATTENTION_KINDS, MASKS
from numerics import assert_close, close

SPEC = """
embedding tokens {{ vocab 50; dim 16; position learned(320) }}
encoder x 2 {{ attention self heads=4 {attention}; feedforward d_ff=32 }}
head linear(50)
"""
def _choice(name: str, options: dict) -> str:
    return f"{name}({', '.join(f'{k}={v}' for k, v in options.items())})" if options else name


# every structural mask (each with its example options) and every kind that decides its own pattern, from the
# registry: a new one is tested here by being registered
PATTERNS = ([f"mask={_choice(n, o)} + padding" for n in MASKS if MASKS[n].structural for o in MASKS[n].examples]
            + [f"kind={_choice(n, o)} mask=padding" for n in ATTENTION_KINDS if ATTENTION_KINDS[n].own_pattern
               for o in ATTENTION_KINDS[n].examples]
            # and combinations: a window dense at one length and banded at the other, causal with others
            + ["mask=window(40) + padding", "mask=causal + window(6)", "mask=causal + document",
               "kv_heads=2 mask=causal + window(9) + padding"])
ROWS = 3


@pytest.fixture
def counted(monkeypatch):
    """FlexAttention allowed on the CPU, and its calls counted."""
    calls = []

    def spy(*args, **kwargs):
        calls.append(args[3])
        return flex_mix(*args, **kwargs)

    monkeypatch.setattr(flex, "FLEX_DEVICES", {"cuda", "cpu"})
    monkeypatch.setattr(tfspec.nn.attention, "flex_mix", spy)
    monkeypatch.setattr(tfspec.nn.bigbird, "flex_mix", spy)
    return calls


def inputs(length: int, device="cpu") -> tuple[torch.Tensor, dict]:
    """Tokens of three rows (the second and third padded), and every run-time input the masks declare, from its
    example for each row's real length (those without one, which the model fills itself, left out)."""
    g = torch.Generator().manual_seed(length)
    tokens = torch.randint(0, 50, (ROWS, length), generator=g)
    real = [length, length - 7, length // 2]
    extra = {"padding_mask": torch.arange(length)[None] >= torch.tensor(real)[:, None]}
    for variant in (MASKS[n] for n in MASKS):
        for declared in (i for i in variant.inputs if i.example is not None):
            rows = [declared.example(n) for n in real]
            if declared.per == "position":  # padded rows continue their last value
                rows = [row + row[-1:] * (length - len(row)) for row in rows]
            extra[declared.name] = torch.tensor(rows)
    return tokens.to(device), {k: v.to(device) for k, v in extra.items()}


def run(model, tokens, extra, attention):
    declared = {i.name for n in MASKS if n in attention for i in MASKS[n].inputs}
    wanted = {k: v for k, v in extra.items() if k in declared or k == "padding_mask" and "padding" in attention}
    return model(tokens, **wanted), wanted.get("padding_mask")


def attended_densely(attention: str, length: int) -> bool:
    """A kind that decides its own pattern may attend densely at short lengths (BigBird, as Hugging Face does)."""
    for name in ATTENTION_KINDS:
        if f"kind={name}" in attention:
            variant = ATTENTION_KINDS[name]
            options = next(o for o in variant.examples if f"kind={_choice(name, o)} " in attention + " ")
            sparse = getattr(variant, "sparse", None)
            return sparse is not None and not sparse(variant.options(options), length)
    return False


@pytest.mark.parametrize("attention", PATTERNS)
@pytest.mark.parametrize("length", [60, 300])
def test_flex_attention_equals_the_dense_path(attention, length, counted):
    model = tfspec.compile(SPEC.format(attention=attention), seed=0).eval()
    tokens, extra = inputs(length)
    with torch.no_grad():
        flexed, padding = run(model, tokens, extra, attention)
        assert len(counted) == (0 if attended_densely(attention, length) else 2), "both layers took FlexAttention"
        flex.FLEX_DEVICES.discard("cpu")
        dense, _ = run(model, tokens, extra, attention)
    real = torch.ones_like(tokens, dtype=torch.bool) if padding is None else ~padding
    assert_close(flexed[real], dense[real], 2e-5)


def test_flex_tiles_of_a_pictures_own_grid_width_equal_the_dense_path(counted):
    """``tiles`` given its pictures' grid width (``patch_columns``, what a tower fills for pictures of another size)
    in FlexAttention and densely, and as ``tiles`` written with that width: a grid wider than the options' reaches
    farther than their band, so the call attends densely (in bands it left keys out: 9e-4 off)."""
    model = tfspec.compile(SPEC.format(attention="mask=tiles(side=4, size=2)"), seed=0).eval()
    tokens = torch.randint(0, 50, (ROWS, 60), generator=torch.Generator().manual_seed(5))
    width = torch.full((ROWS,), 6)
    with torch.no_grad():
        flexed = model(tokens, patch_columns=width)
        assert len(counted) == 2
        flex.FLEX_DEVICES.discard("cpu")
        dense = model(tokens, patch_columns=width)
        written = tfspec.compile(SPEC.format(attention="mask=tiles(side=6, size=2)"), seed=0).eval()(tokens)
    assert_close(flexed, dense, 2e-5)
    assert_close(dense, written, 2e-5)


def test_only_plain_softmax_over_a_structural_pattern_takes_it():
    def applies(attention, position="none"):
        spec = tfspec.parse(SPEC.format(attention=attention).replace("learned(320)", "none")
                            .replace("encoder x 2 {", f"encoder x 2 {{ position {position};"))
        g = spec.graph()
        return attention_config(g.node("encoder.self_attn")).flex

    assert applies("mask=window(5)") and applies("mask=causal + padding") and applies("mask=document")
    assert applies("mask=window(5)", "rotary")  # rotary turns q and k before scoring: still a plain softmax
    assert not applies("mask=padding")  # nothing structural: SDPA's own kernels
    assert not applies("mask=window(5)", "alibi") and not applies("mask=window(5)", "shaw(4)")
    assert not applies("mask=window(5)", "t5") and not applies("kind=topk(3) mask=window(5)")
    assert not applies("kind=additive mask=window(5)")


def test_training_with_attention_dropout_keeps_sdpa(counted):
    model = tfspec.compile(SPEC.format(attention="mask=window(5) attn_dropout=0.1"), seed=0).train()
    tokens, _ = inputs(60)
    with torch.no_grad():
        model(tokens)
    assert not counted
    model.eval()
    with torch.no_grad():
        model(tokens)
    assert len(counted) == 2


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="FlexAttention's fused kernel runs on CUDA")
@pytest.mark.parametrize("attention", PATTERNS)
def test_on_cuda_flex_attention_equals_the_dense_path_with_gradients(attention, monkeypatch):
    calls = []
    monkeypatch.setattr(tfspec.nn.attention, "flex_mix", lambda *a, **k: calls.append(1) or flex_mix(*a, **k))
    monkeypatch.setattr(tfspec.nn.bigbird, "flex_mix", lambda *a, **k: calls.append(1) or flex_mix(*a, **k))
    wide = SPEC.replace("dim 16", "dim 64").replace("d_ff=32", "d_ff=128")  # CUDA's kernels: heads of >= 16
    model = tfspec.compile(wide.format(attention=attention), seed=0).cuda().eval()
    tokens, extra = inputs(300, "cuda")
    results = []
    for devices in ({"cuda"}, set()):
        monkeypatch.setattr(flex, "FLEX_DEVICES", devices)
        model.zero_grad()
        out, padding = run(model, tokens, extra, attention)
        real = torch.ones_like(tokens, dtype=torch.bool) if padding is None else ~padding
        out[real].square().mean().backward()
        results.append((out[real].detach(), [p.grad.clone() for p in model.parameters()]))
    assert len(calls) == 2, "both layers took FlexAttention on CUDA"
    (a, grads_a), (b, grads_b) = results
    assert_close(a, b, 1e-4)
    assert all(close(x, y, 1e-4) for x, y in zip(grads_a, grads_b))

