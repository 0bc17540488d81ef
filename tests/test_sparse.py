"""Structural sparsity computed sparsely: attention of bounded reach runs in bands of blocks, equal to dense.

Dense here is the same model with its band switched off, which builds the full
T×T mask from the same rules. Each case checks that its attention is configured
to run in bands at the test length; a tensor-size record checks that the banded
path makes no tensor of T×T entries.
"""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import tfspec
from tfspec.nn.attention import MultiHeadAttention
from tfspec.nn.kernels import band_chunk
from tfspec.registry import MASKS
from numerics import FLOAT32, assert_close

LENGTH = 96
SPEC = """
embedding t {{ vocab 40; dim 16; position none }}
decoder x 2 {{ position rotary; attention self heads=2 mask={masks}; feedforward d_ff=32 }}
head tied(t)
"""


def banded_cases():
    """Every bounded structural mask's examples, alone, with causal, with padding, with packed documents."""
    documents = torch.arange(LENGTH).div(37, rounding_mode="floor")[None].expand(2, -1)
    for name in MASKS:
        variant = MASKS[name]
        if not variant.structural:
            continue
        for example in variant.examples:
            behind, ahead = variant.reach(variant.options(example))
            if behind is None or ahead is None:
                continue
            choice = name + ("(" + ", ".join(f"{k}={v}" for k, v in example.items()) + ")" if example else "")
            yield choice + " + padding", {}
            yield "causal + " + choice, {}
            yield "causal + document + " + choice + " + padding", {"document_ids": documents}


CASES = list(banded_cases())


def with_band(model, on: bool):
    """Switch attention in bands on (as compiled) or off (dense, with the mask built from the same rules)."""
    for module in model.modules():
        if isinstance(module, MultiHeadAttention):
            if not hasattr(module, "compiled_band"):
                module.compiled_band = module.band
            module.band = module.compiled_band if on else None


def output_and_gradients(model, tokens, extra: dict, band: bool) -> list[torch.Tensor]:
    """The outputs at unpadded positions and every parameter's gradient, in eval mode (no dropout)."""
    with_band(model, band)
    model.eval().zero_grad()
    logits = model(tokens, **extra)
    kept = ~extra["padding_mask"] if "padding_mask" in extra else torch.ones(tokens.shape, dtype=torch.bool)
    logits[kept].square().mean().backward()
    return [logits[kept].detach()] + [p.grad.clone() for p in model.parameters() if p.grad is not None]


def batch():
    tokens = torch.randint(0, 40, (2, LENGTH), generator=torch.Generator().manual_seed(3))
    padding = torch.zeros(2, LENGTH, dtype=torch.bool)
    padding[1, :29] = True  # left padding, longer than any reach: whole bands see nothing but padding
    return tokens, padding


class LargestTensor(TorchDispatchMode):
    """Records the most elements any operation's output has."""

    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor):
                self.largest = max(self.largest, t.numel())
        return out


def test_the_cases_cover_every_bounded_mask():
    assert {"window", "block"} <= {case.split(" + ")[0].split("(")[0] for case, _ in CASES}


@pytest.mark.parametrize("group", ["one group", "a group a block"])
@pytest.mark.parametrize("masks, extra", CASES, ids=[c for c, _ in CASES])
def test_banded_attention_equals_dense_attention_forward_and_backward(masks, extra, group):
    """Bands recompute in groups of blocks (``mix_in_bands``): one group for the whole sequence, or one a block."""
    model = tfspec.compile(SPEC.format(masks=masks), seed=0)
    for module in model.modules():
        if isinstance(module, MultiHeadAttention) and group == "a group a block":
            module.band_rows = 1
    band = next(m.band for m in model.modules() if isinstance(m, MultiHeadAttention))
    assert band is not None and band_chunk(LENGTH, band) is not None, "this case does not run in bands"
    tokens, padding = batch()
    given = {"padding_mask": padding} if "padding" in masks else {}
    banded, dense = (output_and_gradients(model, tokens, {**given, **extra}, on) for on in (True, False))
    assert_close(banded[0], dense[0], FLOAT32)
    for a, b in zip(banded[1:], dense[1:]):
        assert_close(a, b, 1e-4)


@pytest.mark.parametrize("masks", ["window(4)", "causal + block(4) + padding"])
def test_no_tensor_grows_with_the_square_of_the_length(masks):
    model = tfspec.compile(SPEC.format(masks=masks), seed=0).eval()
    length = 1024  # dense scores: 2 heads x 1024² entries; every tensor of the banded path is linear in length
    tokens = torch.randint(0, 40, (1, length))
    given = {"padding_mask": torch.arange(length)[None] < 100} if "padding" in masks else {}
    largest = []
    for on in (True, False):
        with_band(model, on)
        with torch.no_grad(), LargestTensor() as record:
            model(tokens, **given)
        largest.append(record.largest)
    banded, dense = largest
    assert dense >= length * length
    assert banded <= 64 * length, f"the banded path made a tensor of {banded} entries"
