"""tfspec verify: a property is reported as held only when its test inputs could have broken it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import tfspec
from tfspec.inspect.analysis import count_parameters
from tfspec.inspect.verify import check_offset, small_version, verify
from tfspec.front.schema import Towers

EXAMPLES = sorted(Path(__file__).parent.parent.joinpath("examples").glob("*.tfs"))


def results(text: str, **kw) -> dict:
    return {r.name: r for r in verify(tfspec.compile(text, seed=0), **kw)}


def test_window_locality_is_tested_with_sequences_longer_than_the_window():
    held = results("embedding tokens { vocab 20; dim 8 }\n"
                   "encoder x 1 { attention self heads=2 mask=window(20); feedforward d_ff=8 }", examples=5)
    assert held["window locality"].status == "held"
    assert "sequences of 21-" in held["window locality"].detail  # 12 tokens would say nothing about window(20)


def test_window_locality_is_not_claimed_when_the_positions_cannot_reach_past_the_window():
    capped = results("embedding tokens { vocab 20; dim 8; position learned(16) }\n"
                     "encoder x 1 { attention self heads=2 mask=window(20); feedforward d_ff=8 }", examples=5)
    assert capped["window locality"].status == "not applicable"
    assert capped["window locality"].detail.startswith("not testable")


def test_offset_invariance_holds_for_rotary_and_fails_for_learned_positions():
    rotary = "embedding tokens { vocab 20; dim 8 }\ndecoder x 1 { position rotary; attention self heads=2 mask=causal }"
    assert results(rotary, examples=5)["offset invariance"].status == "held"
    learned = tfspec.compile(rotary.replace("dim 8 }", "dim 8; position learned(32) }")
                             .replace("position rotary; ", ""), seed=0).eval()
    assert "depends on absolute positions" in check_offset(learned, torch.tensor([[1, 2, 3, 4]]), 7)
    # chunks of position ids start at position 0: a shift moves their boundaries, which verify says, not fails
    chunked = results(rotary.replace("mask=causal", "mask=causal + chunked(2)"), examples=5)["offset invariance"]
    assert chunked.status == "not applicable" and "chunked masks compare position ids" in chunked.detail
    model = tfspec.compile(rotary.replace("mask=causal", "mask=causal + chunked(2)"), seed=0).eval()
    assert "depends on absolute positions" in check_offset(model, torch.tensor([[1, 2, 3, 4, 5]]), 1)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_the_test_size_model_is_never_larger_than_the_spec(path):
    model = tfspec.load(path)
    for spec in [t.spec for t in model.towers] if isinstance(model, Towers) else [model]:  # (each tower's)
        small, changes = small_version(spec)
        assert count_parameters(small.graph()) <= count_parameters(spec.graph())
        for role, info in small.graph().stacks.items():
            original = spec.graph().stacks[role]
            assert info.width <= original.width and info.repeat <= original.repeat


def test_verify_tests_a_4096_token_sliding_window_past_its_end():
    small, _ = small_version(tfspec.load("examples/mistral_7b.tfs"))
    found = {r.name: r for r in verify(tfspec.compile(small, seed=0), examples=2)}
    assert found["window locality"].status == "held"
    assert "sequences of 4097-" in found["window locality"].detail
    assert all(r.status != "violated" for r in found.values())
