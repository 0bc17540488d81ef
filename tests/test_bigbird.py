"""BigBird attention (``kind=bigbird(block, random)``): block-sparse attention equal to dense attention over the
same pattern, and to Hugging Face's ``BigBirdModel`` (``attention_type="block_sparse"``) given its random blocks;
the length rules; determinism; memory that grows as n·(5 + r)·block."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import tfspec
from tfspec.nn.attention import Geometry
from tfspec.inspect.analysis import analyse
from tfspec.interop import from_hf_big_bird, to_hf_big_bird
from tfspec.interop.families.hf_big_bird import BIG_BIRD

spec_text = BIG_BIRD.spec_text
from tfspec.nn.bigbird import BigBirdAttention
from tfspec.nn.bigbird_pattern import bigbird_allowed, bigbird_key_blocks, bigbird_sparse
from numerics import FLOAT32, FLOAT64, assert_close

T = pytest.importorskip("transformers")


def dense_reference(q, k, v, seen, block, padding=None):
    """softmax(q k^T / sqrt(d) + mask) v in float64 with the pattern written as a dense per-head mask: the first
    and last query blocks see everything, the others the key blocks ``seen`` lists."""
    mask = torch.from_numpy(bigbird_allowed(seen.numpy(), q.shape[2], block))[None]
    if padding is not None:
        mask = mask & ~padding[:, None, None, :]
    scores = (q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])).masked_fill(~mask, float("-inf"))
    return scores.softmax(-1) @ v


@pytest.mark.parametrize("rows", [1024, 1, 12])  # query blocks recomputed at once: all, one, three or four
@pytest.mark.parametrize("length, block, random", [(70, 4, 2), (64, 4, 1), (33, 2, 3), (200, 8, 3)])
def test_block_sparse_attention_equals_dense_attention_over_its_pattern(length, block, random, rows):
    assert bigbird_sparse(length, block, random)
    attention = BigBirdAttention(Geometry(32, 4, 4, 8), block=block, random=random, seed=5).double()
    attention.band_rows = rows
    g = torch.Generator().manual_seed(length)
    q, k, v = (torch.randn(2, 4, length, 8, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(3))
    padding = torch.arange(length)[None] >= torch.tensor([[length], [length - 11]])
    mask = torch.zeros(2, 1, 1, length, dtype=torch.float64).masked_fill(padding[:, None, None], -1e300)
    got = attention.mix(q, k, v, mask, False)
    seen = attention.patterns[-(-length // block)]
    expected = dense_reference(q, k, v, seen, block, padding)
    assert (got - expected)[0].abs().max() < 1e-12 and (got - expected)[1, :, :length - 11].abs().max() < 1e-12
    # gradients through the recomputed groups (the padded queries' outputs left out: they are meaningless)
    weight = torch.randn(got.shape, generator=g, dtype=torch.float64)
    weight[1, :, length - 11:] = 0
    grads = torch.autograd.grad((got * weight).sum(), (q, k, v))
    expected_grads = torch.autograd.grad((expected * weight).sum(), (q, k, v))
    for a, b in zip(grads, expected_grads):
        assert_close(a, b, FLOAT64)


def test_the_pattern_is_window_global_and_distinct_random_blocks():
    seen = bigbird_key_blocks(20, heads=3, random=3, seed=0)
    assert seen.shape == (3, 18, 8) and seen.dtype == np.int64
    for h in range(3):
        for i, row in enumerate(seen[h].tolist(), start=1):
            assert row[:5] == [0, i - 1, i, i + 1, 19]
            drawn = row[5:]
            assert len(set(drawn)) == 3 and all(0 < j < 19 and abs(j - i) > 1 for j in drawn)
    assert not np.array_equal(seen[0], seen[1])  # drawn per head
    assert np.array_equal(seen, bigbird_key_blocks(20, heads=3, random=3, seed=0))  # reproducible
    assert not np.array_equal(seen, bigbird_key_blocks(20, heads=3, random=3, seed=1))


@pytest.mark.parametrize("blocks, heads, random, seed", [(12, 2, 1, 0), (20, 3, 3, 7), (9, 4, 2, 123),
                                                         (40, 2, 0, 5), (64, 1, 30, 2), (11, 2, 3, (1 << 31) - 1)])
def test_the_numpy_draw_is_the_one_torch_drew(blocks, heads, random, seed):
    """The blocks drawn before the pattern moved to numpy: ``torch.randperm`` from a seeded CPU generator, row
    after row from one stream. A checkpoint trained then keeps its pattern (the largest seed overflows 32 bits
    in ``seed * 1_000_003 + blocks``: torch keeps the low 32, as the numpy draw does)."""
    generator = torch.Generator().manual_seed(seed * 1_000_003 + blocks)
    rows = []
    for _ in range(heads):
        for i in range(1, blocks - 1):
            others = [j for j in range(1, blocks - 1) if abs(j - i) > 1]
            drawn = torch.randperm(len(others), generator=generator)[:random].tolist()
            rows.append([0, i - 1, i, i + 1, blocks - 1] + [others[j] for j in drawn])
    assert bigbird_key_blocks(blocks, heads, random, seed).tolist() == \
        torch.tensor(rows).view(heads, blocks - 2, 5 + random).tolist()


def test_evaluation_is_deterministic_and_training_draws_the_same_blocks():
    model = tfspec.compile("embedding t { vocab 40; dim 16; position learned(128) }\n"
                           "encoder x 2 { attention self heads=2 kind=bigbird(4, random=2) mask=padding; "
                           "feedforward d_ff=32 }", seed=0)
    tokens = torch.randint(0, 40, (2, 60), generator=torch.Generator().manual_seed(0))
    model.eval()
    with torch.no_grad():
        first, second = model(tokens), model(tokens)
    assert torch.equal(first, second)
    patterns = model.encoder.layers[0].self_attn.patterns[15].clone()
    model.train()
    model(tokens)
    assert torch.equal(model.encoder.layers[0].self_attn.patterns[15], patterns)


def test_short_sequences_are_dense_as_hugging_face_does():
    """At most (5 + 2r)·block positions: the blocks would cover nearly every key, so attention is dense."""
    attention = BigBirdAttention(Geometry(16, 2, 2, 8), block=4, random=2).double()
    q, k, v = (torch.randn(1, 2, 36, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(i))
               for i in range(3))
    assert not bigbird_sparse(36, 4, 2) and bigbird_sparse(37, 4, 2)
    expected = (q @ k.transpose(-1, -2) / math.sqrt(8)).softmax(-1) @ v
    assert_close(attention.mix(q, k, v, None, False), expected, FLOAT64)
    assert attention.patterns == {}


def big_bird(config_extra=None, seed=0):
    torch.manual_seed(seed)
    values = dict(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48,
                  max_position_embeddings=128, block_size=4, num_random_blocks=2, attention_type="block_sparse",
                  hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, pad_token_id=0, bos_token_id=1,
                  eos_token_id=2, sep_token_id=3)
    config = T.BigBirdConfig(**{**values, **(config_extra or {})})
    return T.BigBirdModel(config)


def test_equals_hugging_face_big_bird_block_sparse_given_its_random_blocks():
    """Train mode (dropout 0) makes Hugging Face draw real random blocks (seeded by the layer index); tfspec is
    given the same ones. 70 positions: 18 blocks of 4, sparse (more than (5 + 2·2)·4 = 36), padded by HF to 72."""
    reference = big_bird()
    ours = tfspec.compile(spec_text(reference.config, pooler=True, head=False), seed=0).eval()
    from_hf_big_bird(ours, reference)
    drawn = {}
    for i, layer in enumerate(reference.encoder.layer):
        attention = layer.attention.self
        original = attention._bigbird_block_rand_mask_with_head
        attention._bigbird_block_rand_mask_with_head = \
            lambda *a, _i=i, _f=original, **k: drawn.setdefault(_i, _f(*a, **k))
    tokens = torch.randint(4, 64, (2, 70), generator=torch.Generator().manual_seed(0))
    attention_mask = torch.ones(2, 70, dtype=torch.long)
    attention_mask[1, 52:] = 0
    reference.train()
    with torch.no_grad():
        expected = reference(tokens, attention_mask=attention_mask)
    blocks = 18
    middle = torch.arange(1, blocks - 1)
    fixed = torch.stack([middle * 0, middle - 1, middle, middle + 1, middle * 0 + blocks - 1], -1)
    for i, layer in enumerate(ours.encoder.layers):
        random = torch.tensor(np.stack(drawn[i]), dtype=torch.long)  # (heads, blocks - 2, r)
        assert random.shape == (4, 16, 2)
        layer.self_attn.patterns[blocks] = torch.cat([fixed.expand(4, -1, -1), random], -1)
    with torch.no_grad():
        hidden, pooled = ours(tokens, padding_mask=attention_mask == 0)
    real = attention_mask.bool()
    assert expected.last_hidden_state[real].abs().max() > 0.5
    assert_close(hidden[real], expected.last_hidden_state[real], FLOAT32)
    assert_close(pooled, expected.pooler_output, FLOAT32)
    state = to_hf_big_bird(ours)
    assert state.keys() == reference.state_dict().keys()
    assert all(torch.equal(state[k], v) for k, v in reference.state_dict().items())


def test_a_differing_block_size_or_attention_type_is_refused():
    reference = big_bird({"block_size": 8})
    ours = tfspec.compile(spec_text(big_bird().config, pooler=True, head=False))
    with pytest.raises(tfspec.interop.InteropError, match=r"kind BigBird\(4, random=2\) → BigBird\(8, random=2\)"):
        from_hf_big_bird(ours, reference)
    full = big_bird({"attention_type": "original_full"})
    with pytest.raises(tfspec.interop.InteropError, match=r"kind BigBird\(4, random=2\) → Multi-Head"):
        from_hf_big_bird(ours, full)


@pytest.mark.parametrize("mask, message", [("causal", "decides itself which keys"),
                                           ("window(3) + padding", "decides itself which keys")])
def test_masks_of_structure_and_score_biases_are_spec_errors(mask, message):
    with pytest.raises(tfspec.SpecError, match=message):
        tfspec.parse(f"embedding t {{ vocab 40; dim 16 }}\nencoder x 1 {{ attention self heads=2 "
                     f"kind=bigbird(4) mask={mask}; feedforward d_ff=32 }}")
    with pytest.raises(tfspec.SpecError, match="bias every query-key score"):
        tfspec.parse("embedding t { vocab 40; dim 16 }\nencoder x 1 { position alibi; attention self heads=2 "
                     "kind=bigbird(4) mask=padding; feedforward d_ff=32 }")
    with pytest.raises(tfspec.SpecError, match="draws random blocks per query head"):
        tfspec.parse("embedding t { vocab 40; dim 16 }\nencoder x 1 { attention self heads=2 kv_heads=1 "
                     "kind=bigbird(4) mask=padding; feedforward d_ff=32 }")


def test_memory_grows_linearly_with_the_length():
    spec = tfspec.load("examples/bigbird_base.tfs", overrides={"layers": 1})
    memory = {n: analyse(spec, seq_len=n).total.memory for n in (1024, 2048, 4096)}
    assert 1.9 < memory[2048] / memory[1024] < 2.1 and 1.9 < memory[4096] / memory[2048] < 2.1


def test_bigbird_base_example_has_hugging_faces_parameters_and_architecture():
    from tfspec.inspect.analysis import count_parameters
    from tfspec.interop.mapping import architecture_problems

    config = T.BigBirdConfig(vocab_size=50358, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                             intermediate_size=3072, max_position_embeddings=4096, block_size=64,
                             num_random_blocks=3, attention_type="block_sparse")
    with torch.device("meta"):
        reference = T.BigBirdModel(config)
    spec = tfspec.load("examples/bigbird_base.tfs")
    assert count_parameters(spec.graph()) == sum(p.numel() for p in reference.parameters())
    assert architecture_problems(spec, spec_text(config, pooler=True, head=False), "HF") == []


def test_without_query_key_value_biases_every_weight_still_maps():
    reference = big_bird({"use_bias": False, "attention_type": "original_full"})
    ours = tfspec.compile(spec_text(reference.config, pooler=True, head=False), seed=0).eval()
    from_hf_big_bird(ours, reference)
    tokens = torch.randint(4, 64, (2, 20), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected = reference.eval()(tokens).last_hidden_state
        got = ours(tokens)[0]
    assert_close(got, expected, FLOAT32)
    with pytest.raises(tfspec.interop.InteropError, match="bias false → true"):
        from_hf_big_bird(ours, big_bird({"attention_type": "original_full"}))


@pytest.mark.parametrize("length", [1, 2, 3, 40])
def test_what_backward_keeps_is_declared_at_every_length_even_one_position(length):
    """A single position made ``contiguous`` a no-op, so the projection itself was kept (found by Hypothesis).
    At 40 positions the pattern is sparse, and recomputed in backward: only q, k, v and the output are kept."""
    from tfspec.inspect.analysis import analyse
    from tfspec.inspect.measure import measure
    spec = tfspec.parse("embedding tokens { vocab 5; dim 8; position learned(64) }\n"
                        "encoder x 1 { attention self heads=1 mask=none kind=bigbird(2, random=1) }")
    analysed = analyse(spec, seq_len=length)
    assert measure(spec, analysed.lengths).saved_bytes == analysed.total.memory
