"""The prefix-LM mask (variants/prefix.py): UNILM's rule, its run-time input, causality after the prefix, caching."""

from __future__ import annotations

import pytest
import torch

import tfspec
from tfspec.run.decoding import Continuation
from tfspec.registry import MASKS
from tfspec.inspect.verify import verify
from numerics import FLOAT32, assert_close, close

PREFIX_LM = """
embedding tokens { vocab 40; dim 24; position learned(32) }
decoder x 2 { attention self heads=3 mask=prefix + padding; feedforward d_ff=48 }
head tied(tokens)
"""


def unilm_mask(length: int, prefix: int) -> torch.Tensor:
    """Written out from the paper: prefix tokens see the prefix; target tokens see the prefix and earlier targets."""
    allowed = torch.zeros(length, length, dtype=torch.bool)
    for i in range(length):
        for j in range(length):
            allowed[i, j] = j < prefix or j <= i
    return allowed


@pytest.mark.parametrize("length", [1, 4, 7])
def test_the_mask_is_unilms_for_each_sequences_prefix(length):
    variant = MASKS["prefix"]
    index = torch.arange(length)
    prefixes = torch.tensor([0, 2, length])
    allowed = variant.allowed(index, index, variant.options({}), {"prefix_lengths": prefixes})
    for row, prefix in zip(allowed, prefixes.tolist()):
        assert torch.equal(row, unilm_mask(length, prefix))
    assert torch.equal(variant.allowed(index, index, variant.options({}), {}), unilm_mask(length, 0))


@pytest.mark.parametrize("length, k", [(1, 1), (6, 2), (9, 3)])
def test_a_prefix_window_with_the_prefix_mask_is_a_sliding_window_that_keeps_the_prefix_whole(length, k):
    """``prefix + prefix_window(k)``: written out as Hugging Face's PaliGemma 2 computes its sliding layers' mask, a
    window of k keys up to the query's own, or the query and the key both in the prefix."""
    index = torch.arange(length)
    prefixes = torch.tensor([0, 2, length])
    inputs = {"prefix_lengths": prefixes}
    prefix, window = MASKS["prefix"], MASKS["prefix_window"]
    allowed = prefix.allowed(index, index, prefix.options({}), inputs) & \
        window.allowed(index, index, window.options({"k": k}), inputs)
    for row, p in zip(allowed, prefixes.tolist()):
        expected = torch.tensor([[(j <= i and i - j < k) or (i < p and j < p) for j in range(length)]
                                 for i in range(length)])
        assert torch.equal(row, expected)


def model_and_tokens(seed=0):
    model = tfspec.compile(PREFIX_LM, seed=seed).eval()
    tokens = torch.randint(0, 40, (2, 8), generator=torch.Generator().manual_seed(seed))
    return model, tokens


def test_without_prefix_lengths_it_is_the_causal_model():
    model, tokens = model_and_tokens()
    causal = tfspec.compile(PREFIX_LM.replace("mask=prefix", "mask=causal")).eval()
    causal.load_state_dict(model.state_dict())
    with torch.no_grad():
        assert_close(model(tokens), causal(tokens), FLOAT32)


def test_the_prefix_is_bidirectional_and_the_rest_causal():
    model, tokens = model_and_tokens()
    prefix = torch.tensor([4, 4])
    changed_in_prefix, changed_after = tokens.clone(), tokens.clone()
    changed_in_prefix[:, 3] = (tokens[:, 3] + 1) % 40
    changed_after[:, 5] = (tokens[:, 5] + 1) % 40
    with torch.no_grad():
        base = model(tokens, prefix_lengths=prefix)
        inside = model(changed_in_prefix, prefix_lengths=prefix)
        after = model(changed_after, prefix_lengths=prefix)
    assert not close(base[:, :3], inside[:, :3], 1e-4)  # earlier prefix positions see position 3
    assert_close(base[:, :5], after[:, :5], FLOAT32)  # nothing before position 5 sees it


def test_prefix_lengths_differ_per_sequence():
    model, tokens = model_and_tokens()
    with torch.no_grad():
        both = model(tokens, prefix_lengths=torch.tensor([2, 6]))
        first = model(tokens[:1], prefix_lengths=torch.tensor([2]))
        second = model(tokens[1:], prefix_lengths=torch.tensor([6]))
    assert_close(both, torch.cat((first, second)), FLOAT32)


def test_cached_prefix_lm_decoding_equals_recomputation_with_the_prompt_as_prefix():
    model, tokens = model_and_tokens()
    prompt = tokens[:, :5]
    cached = Continuation(model)
    assert cached.use_cache  # cache-exact: the prefix arrives whole in the first step
    with torch.no_grad():
        logits = [cached.feed(prompt)]
        for step in range(5, 8):
            logits.append(cached.feed(tokens[:, step:step + 1]))
        full = model(tokens, prefix_lengths=torch.tensor([5, 5]))
    expected = [full[:, 4], full[:, 5], full[:, 6], full[:, 7]]
    assert all(close(a, b, FLOAT32) for a, b in zip(logits, expected))


@pytest.mark.parametrize("value, message", [
    (torch.tensor([1.0, 2.0]), "prefix_lengths must hold integers"),
    (torch.tensor([[1, 2]]), r"prefix_lengths must be shaped \(batch,\) = \(2,\)"),
    (torch.tensor([-1, 2]), "prefix_lengths contains -1"),
    ([1, 2], "prefix_lengths must be a torch.Tensor"),
])
def test_bad_prefix_lengths_are_value_errors_naming_the_input(value, message):
    model, tokens = model_and_tokens()
    with pytest.raises(ValueError, match=message):
        model(tokens, prefix_lengths=value)


def test_a_model_without_the_mask_refuses_prefix_lengths():
    causal = tfspec.compile(PREFIX_LM.replace("mask=prefix", "mask=causal"), seed=0)
    with pytest.raises(ValueError, match="unknown run-time input 'prefix_lengths'; this model reads position_ids"):
        causal(torch.zeros(1, 3, dtype=torch.long), prefix_lengths=torch.tensor([1]))


def test_verify_proves_causality_after_the_prefix_and_finds_it_broken_without_one():
    results = {r.name: r for r in verify(tfspec.compile(PREFIX_LM, seed=0), examples=10)}
    assert results["causality"].status == "held" and "after the prefix" in results["causality"].detail
    bidirectional = tfspec.compile(PREFIX_LM.replace("mask=prefix + padding", "mask=padding"), seed=0)
    assert {r.name: r for r in verify(bidirectional, examples=10)}["causality"].status == "violated"


def test_prefix_on_cross_attention_is_a_located_error():
    with pytest.raises(tfspec.SpecError) as info:
        tfspec.parse("embedding tokens { vocab 9; dim 16 }\nencoder x 1 { attention self heads=2 }\n"
                     "decoder x 1 { attention self heads=2 mask=causal; attention cross heads=2 mask=prefix }")
    assert info.value.codes == ["mask"] and (info.value.line, info.value.column) == (3, 80)
