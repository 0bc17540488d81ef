"""Pools: each one vector of a sequence as its formula, written here, says; refused where it cannot find its place."""

from __future__ import annotations

import pytest
import torch

import tfspec
from numerics import FLOAT32, assert_close

SPEC = """embedding tokens {{ vocab 12; dim 8; position learned(16) }}
encoder x 1 {{ attention self heads=2 mask=padding; feedforward d_ff=16 }}
head linear(5) pool={pool}"""

IDS = torch.tensor([[4, 11, 3, 9, 3, 0], [3, 2, 2, 7, 1, 1], [5, 6, 8, 10, 2, 2]])


def pooled_formula(pool: str, hidden: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """The vector each pool reads, one sequence at a time."""
    rows = []
    for h, seq in zip(hidden, ids.tolist()):
        if pool == "first":
            rows.append(h[0])
        elif pool == "last":
            rows.append(h[-1])
        elif pool == "mean":
            rows.append(h.mean(0))
        elif pool == "token(3)":  # the first 3, or the first position where there is none
            rows.append(h[seq.index(3)] if 3 in seq else h[0])
        elif pool == "highest_id":
            rows.append(h[seq.index(max(seq))])
    return torch.stack(rows)


@pytest.mark.parametrize("pool", ["first", "last", "mean", "token(3)", "highest_id"])
def test_a_pooled_head_projects_the_vector_its_pool_reads(pool):
    model = tfspec.compile(SPEC.format(pool=pool), seed=0).eval()
    with torch.no_grad():
        hidden = model.encoder(model.embed("encoder", "tokens", IDS, model.context("encoder", "tokens", IDS, {})),
                               model.context("encoder", "tokens", IDS, {}))
        expected = pooled_formula(pool, hidden, IDS) @ model.head.weight.T + model.head.bias
        assert_close(model(IDS), expected, FLOAT32)


def test_pools_that_read_positions_differ_where_the_sequences_say_so():
    outs = {p: tfspec.compile(SPEC.format(pool=p), seed=0).eval()(IDS) for p in ("token(3)", "highest_id", "first")}
    assert not torch.allclose(outs["token(3)"][0], outs["first"][0])  # its first 3 is at position 2
    assert torch.equal(outs["token(3)"][1], outs["first"][1])  # ... and at position 0 here
    assert not torch.allclose(outs["highest_id"][0], outs["token(3)"][0])


def test_a_pool_among_token_ids_is_refused_over_pictures():
    text = ("embedding image { input patches(image=8, patch=4); dim 8 }\n"
            "encoder x 1 { attention self heads=2; feedforward d_ff=16 }\nhead linear(5) pool=token(3)")
    with pytest.raises(tfspec.SpecError) as exc:
        tfspec.parse(text)
    message = str(exc.value)
    assert "pool=token finds its position among token ids" in message and "pictures" in message
    assert ":3:" in message  # at the head's line


def test_an_unknown_pool_is_a_located_error_with_a_suggestion():
    with pytest.raises(tfspec.SpecError) as exc:
        tfspec.parse(SPEC.format(pool="frist"))
    assert "unknown pool 'frist'" in str(exc.value) and "first" in str(exc.value)


def test_a_decoder_whose_head_pools_is_refused_by_generation():
    from tfspec.run.decoding import Continuation
    model = tfspec.compile("embedding tokens { vocab 12; dim 8 }\n"
                           "decoder x 1 { attention self heads=2 mask=causal; feedforward d_ff=16 }\n"
                           "head linear(5) pool=last", seed=0)
    with pytest.raises(ValueError, match="its head pools each sequence into one vector"):
        Continuation(model)
