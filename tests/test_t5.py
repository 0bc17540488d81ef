"""T5's relative attention bias (``position t5``) and the T5 family against Hugging Face ``T5ForConditionalGeneration``
/ ``T5Model``: random weights from tiny configs (v1.1: gated GELU, untied head; v1.0: ReLU, tied and scaled
head), fp32, eval, padded batches; nothing is downloaded.

Tolerance: T5's own initialisation (unit-variance embeddings, no 1/sqrt(d) in attention) gives logits of
magnitude ~20, where float32's spacing is ~2e-6, so logits agree within 1e-5 + 1e-6·|logit| (a few units in
the last place); hidden states, of magnitude ~1, within 1e-5.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import tfspec
from tfspec.inspect.analysis import count_parameters
from tfspec.run.decoding import Continuation, sample
from tfspec.interop import InteropError
from tfspec.interop.families.hf_t5 import T5
from tfspec.interop.mapping import architecture_problems
from tfspec.nn.t5 import relative_bucket
from numerics import FLOAT32, assert_close

T = pytest.importorskip("transformers")

TINY = dict(vocab_size=64, d_model=32, d_kv=8, d_ff=48, num_layers=2, num_decoder_layers=3, num_heads=4,
            relative_attention_num_buckets=8, relative_attention_max_distance=12, decoder_start_token_id=0)
V1_1 = dict(feed_forward_proj="gated-gelu", tie_word_embeddings=False)
V1_0 = dict(feed_forward_proj="relu", tie_word_embeddings=True)
T5_SMALL = dict(vocab_size=32128, d_model=512, d_kv=64, d_ff=2048, num_layers=6, num_heads=8,
                relative_attention_num_buckets=32, relative_attention_max_distance=128, feed_forward_proj="relu",
                tie_word_embeddings=True, layer_norm_epsilon=1e-6, dropout_rate=0.1)


def naive_bucket(offset: int, bidirectional: bool, num_buckets: int, max_distance: int) -> int:
    """The bucketing of Raffel et al. (Mesh TensorFlow's ``_relative_position_bucket``), one offset at a time."""
    bucket = 0
    if bidirectional:
        num_buckets //= 2
        bucket = num_buckets if offset > 0 else 0
        distance = abs(offset)
    else:
        distance = max(-offset, 0)
    exact = num_buckets // 2
    if distance < exact:
        return bucket + distance
    wide = exact + int(math.log(distance / exact) / math.log(max_distance / exact) * (num_buckets - exact))
    return bucket + min(wide, num_buckets - 1)


@settings(max_examples=40, deadline=None)
@given(bidirectional=st.booleans(), num_buckets=st.integers(4, 64), max_distance=st.integers(1, 300))
def test_buckets_are_the_papers_for_every_offset(bidirectional, num_buckets, max_distance):
    exact = (num_buckets // 2 if bidirectional else num_buckets) // 2
    max_distance = max(max_distance, exact + 1)
    offsets = torch.arange(-400, 401)
    got = relative_bucket(offsets, bidirectional, num_buckets, max_distance).tolist()
    expected = [naive_bucket(o, bidirectional, num_buckets, max_distance) for o in offsets.tolist()]
    # float32 logarithms may round a boundary offset differently from Python's doubles: allow one bucket there,
    # and require agreement with Hugging Face's float32 implementation exactly (below)
    assert all(abs(g - e) <= 1 for g, e in zip(got, expected))
    assert sum(g != e for g, e in zip(got, expected)) <= 4
    reference = T.models.t5.modeling_t5.T5Attention._relative_position_bucket(
        offsets, bidirectional=bidirectional, num_buckets=num_buckets, max_distance=max_distance)
    assert got == reference.tolist()
    assert min(got) >= 0 and max(got) < num_buckets


def pair(version: dict, config_extra: dict | None = None, lm: bool = True, seed: int = 0):
    """A Hugging Face T5 with random weights (its relative-bias tables widened so buckets matter, the v1.1 head
    untied) and our model compiled from the spec its configuration describes, weights copied in."""
    torch.manual_seed(seed)
    config = T.T5Config(**{**TINY, **version, **(config_extra or {})})
    reference = (T.T5ForConditionalGeneration if lm else T.T5Model)(config).eval()
    with torch.no_grad():
        for stack in (reference.encoder, reference.decoder):
            stack.block[0].layer[0].SelfAttention.relative_attention_bias.weight.normal_(0.0, 2.0)
    if lm and not version["tie_word_embeddings"]:
        reference.lm_head.weight = nn.Parameter(torch.randn(config.vocab_size, config.d_model))
    tied = lm and reference.lm_head.weight is reference.shared.weight
    ours = tfspec.compile(T5.spec_text(config, head=lm, tied=tied), seed=seed).eval()
    T5.load(ours, reference)
    return ours, reference


def padded_batch(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    src, tgt = torch.randint(1, 64, (2, 23), generator=g), torch.randint(1, 64, (2, 17), generator=g)
    src_padding = torch.arange(23)[None] >= torch.tensor([[23], [15]])
    tgt_padding = torch.arange(17)[None] >= torch.tensor([[17], [11]])
    return src, tgt, src_padding, tgt_padding


def outputs(ours, reference, lm: bool = True):
    src, tgt, src_padding, tgt_padding = padded_batch()
    with torch.no_grad():
        theirs = reference(input_ids=src, attention_mask=(~src_padding).long(), decoder_input_ids=tgt,
                           decoder_attention_mask=(~tgt_padding).long())
        got = ours(src, tgt, src_padding, tgt_padding)
    expected = theirs.logits if lm else theirs.last_hidden_state
    real = ~tgt_padding  # HF's outputs at padded positions are arbitrary
    return got[real], expected[real]


@pytest.mark.parametrize("version", [V1_1, V1_0], ids=["v1.1", "v1.0"])
def test_t5_for_conditional_generation_equals_hugging_face_on_a_padded_batch(version):
    ours, reference = pair(version)
    got, expected = outputs(ours, reference)
    assert expected.abs().max() > 1.0  # a real comparison, not of zeros
    assert_close(got, expected, FLOAT32)
    head = ours.spec.head
    assert (head.tied_to is not None) == (version is V1_0) and (head.scale != 1.0) == (version is V1_0)


def test_t5_model_without_a_head_equals_hugging_face():
    ours, reference = pair(V1_1, lm=False)
    got, expected = outputs(ours, reference, lm=False)
    assert expected.abs().max() > 0.1
    assert_close(got, expected, FLOAT32)


def test_the_relative_bias_decides_the_outputs():
    """Zeroing one stack's table changes the logits: the equality above rests on the buckets too."""
    ours, reference = pair(V1_1)
    before, _ = outputs(ours, reference)
    for role in ("encoder", "decoder"):
        changed = tfspec.compile(ours.spec, seed=0).eval()
        changed.load_state_dict(ours.state_dict())
        with torch.no_grad():
            changed.get_submodule(f"{role}.positions.self_attn").weight.zero_()
        after, _ = outputs(changed, reference)
        assert (after - before).abs().max() > 1e-2, role


def test_every_weight_round_trips_and_the_stack_owns_one_table():
    ours, reference = pair(V1_1)
    state = T5.export(ours)
    assert state.keys() == reference.state_dict().keys()
    assert all(torch.equal(state[k], v) for k, v in reference.state_dict().items())
    tables = [k for k in ours.state_dict() if "positions" in k]
    assert tables == ["encoder.positions.self_attn.weight", "decoder.positions.self_attn.weight"]


def test_the_bias_is_built_once_per_stack_and_call(monkeypatch):
    ours, _ = pair(V1_1)
    calls = []
    for role in ("encoder", "decoder"):
        module = ours.get_submodule(f"{role}.positions.self_attn")
        original = module.score_bias
        monkeypatch.setattr(module, "score_bias", lambda q, k, f=original, r=role: calls.append(r) or f(q, k))
    src, tgt, src_padding, tgt_padding = padded_batch()
    with torch.no_grad():
        ours(src, tgt, src_padding, tgt_padding)
    assert calls == ["encoder", "decoder"]  # not once per layer (2 and 3 of them)


def test_cached_greedy_generation_equals_hugging_face_generate():
    # as many decoder layers as encoder layers: transformers' generate sizes its cache by num_layers
    ours, reference = pair(V1_1, {"num_decoder_layers": 2}, seed=1)
    src, _, src_padding, _ = padded_batch(seed=1)
    start = torch.zeros(2, 1, dtype=torch.long)  # T5 starts decoding from the pad token
    with torch.no_grad():
        expected = reference.generate(input_ids=src, attention_mask=(~src_padding).long(), max_new_tokens=12,
                                      do_sample=False, decoder_start_token_id=0)[:, 1:]
    steps = Continuation(ours, src=src, src_padding_mask=src_padding)
    assert steps.use_cache
    assert sample(steps, start, max_new=12) == expected.tolist()
    recomputed = Continuation(ours, src=src, src_padding_mask=src_padding, use_cache=False)
    assert sample(recomputed, start, max_new=12) == expected.tolist()


@pytest.mark.parametrize("change, expected", [
    ({"relative_attention_num_buckets": 16}, "bias(num_buckets=8, max_distance=12) → T5 relative "
                                             "bias(num_buckets=16, max_distance=12)"),
    ({"relative_attention_max_distance": 64}, "bias(num_buckets=8, max_distance=12) → T5 relative "
                                              "bias(num_buckets=8, max_distance=64)"),
    ({"layer_norm_epsilon": 1e-5}, "rmsnorm(eps=1e-05)"),
    ({"feed_forward_proj": "gated-silu"}, "activation GEGLU (tanh) → SwiGLU"),
    ({"d_kv": 16}, "head dim 8 → 16"),
    ({"num_decoder_layers": 2}, "decoder: layers 3 → 2"),
])
def test_every_t5_configuration_difference_is_refused_and_named(change, expected):
    torch.manual_seed(0)
    reference = T.T5ForConditionalGeneration(T.T5Config(**{**TINY, **V1_1, **change}))
    reference.lm_head.weight = nn.Parameter(torch.randn(reference.config.vocab_size, reference.config.d_model))
    ours = tfspec.compile(T5.spec_text(T.T5Config(**{**TINY, **V1_1})))
    from test_families import assert_refused_and_untouched
    assert_refused_and_untouched(T5.load, ours, reference, expected)


def test_a_dropout_difference_copies_the_weights_with_a_warning():
    """Dropout changes training, not what the weights compute in eval: told, never refused."""
    torch.manual_seed(0)
    reference = T.T5ForConditionalGeneration(T.T5Config(**{**TINY, **V1_1, "dropout_rate": 0.2}))
    reference.lm_head.weight = nn.Parameter(torch.randn(reference.config.vocab_size, reference.config.d_model))
    ours = tfspec.compile(T5.spec_text(T.T5Config(**{**TINY, **V1_1})))
    with pytest.warns(UserWarning, match="trains with other dropout or loss weights than .*dropout 0.1 → 0.2"):
        T5.load(ours, reference)
    assert torch.equal(ours.head.weight, reference.lm_head.weight)


def test_a_tied_head_or_a_missing_scale_is_refused():
    torch.manual_seed(0)
    tied = T.T5ForConditionalGeneration(T.T5Config(**{**TINY, **V1_1}))  # transformers ties a v1.1 head too
    with pytest.raises(InteropError, match="head: projection linear\\(64\\) → tied to 'tokens'"):
        T5.load(tfspec.compile(T5.spec_text(tied.config, tied=False)), tied)
    unscaled = T5.spec_text(T.T5Config(**{**TINY, **V1_0})).replace(f" scale={32 ** -0.5!r}", "")
    with pytest.raises(InteropError, match="input scale 1 → 0.176777"):
        T5.load(tfspec.compile(unscaled), T.T5ForConditionalGeneration(T.T5Config(**{**TINY, **V1_0})))
    with pytest.raises(InteropError, match="T5ForConditionalGeneration is encoder-decoder; spec 'model' is decoder-"):
        T5.load(tfspec.compile("embedding tokens { vocab 64; dim 32 }\n"
                                  "decoder x 1 { attention self heads=4 mask=causal; feedforward d_ff=48 }\n"
                                  "head tied(tokens)"), tied)


def test_t5_small_example_has_hugging_faces_parameters_and_architecture():
    with torch.device("meta"):
        reference = T.T5ForConditionalGeneration(T.T5Config(**T5_SMALL))
    spec = tfspec.load("examples/t5_small.tfs")
    assert count_parameters(spec.graph()) == sum(p.numel() for p in reference.parameters()) == 60_506_624
    assert architecture_problems(spec, T5.spec_text(reference.config), "HF") == []


def test_t5_init_draws_every_tensor_as_hugging_face_does():
    """``init t5(factor)``: each tensor's spread is Hugging Face's (queries with T5's folded 1/sqrt(d_kv), the
    relative-bias tables, the untied head, unit-spread embeddings), and norm scales are the factor."""
    config = T.T5Config(**{**TINY, **V1_1, "d_model": 128, "d_kv": 32, "d_ff": 256, "vocab_size": 512,
                           "num_layers": 1, "num_decoder_layers": 1, "relative_attention_num_buckets": 32,
                           "relative_attention_max_distance": 128,
                           "initializer_factor": 0.5})
    torch.manual_seed(0)
    reference = T.T5ForConditionalGeneration(config).state_dict()
    spec = T5.spec_text(config)
    assert "init t5(factor=init_factor)" in spec and "init_factor = 0.5" in spec
    ours = T5.export(tfspec.compile(spec, seed=0))
    for name, tensor in ours.items():
        if name.endswith("layer_norm.weight"):
            assert torch.all(tensor == 0.5), name
            continue
        spread, expected = float(tensor.std()), float(reference[name].std())
        assert abs(spread / expected - 1) < (0.3 if tensor.numel() < 1000 else 0.05), (name, spread, expected)


def test_verify_holds_for_t5_offset_invariance_included():
    """Relative positions in both stacks: shifting the target's position ids changes nothing."""
    from tfspec.inspect.verify import verify

    model = tfspec.compile(T5.spec_text(T.T5Config(**{**TINY, **V1_1, "num_decoder_layers": 1})), seed=0)
    results = {r.name: r.status for r in verify(model, examples=8)}
    assert results["offset invariance"] == "held" and results["causality"] == "held"
    assert "violated" not in results.values()
