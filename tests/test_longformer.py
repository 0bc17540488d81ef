"""Longformer attention (``kind=longformer``): a sliding window plus the global tokens a call marks
(``global_tokens``), equal to Hugging Face's Longformer with ``global_attention_mask`` -- on a sequence short
enough for dense attention and on one long enough for bands of blocks, rows with different numbers of global
tokens, padding -- and to a formula written here; misuse is a spec error that says why."""

import pytest
import torch

import tfspec
from tfspec.inspect.analysis import analyse
from tfspec.inspect.measure import measure
from tfspec.nn.kernels import band_chunk
from numerics import FLOAT32, assert_close, close

SPEC = """embedding tokens {{ vocab 50; dim 16; position learned(128) }}
encoder x 1 {{ attention self heads=2 kind=longformer mask={mask} bias={bias}; feedforward d_ff=32 }}"""


def naive_layer_attention(attention, x, padding, is_global, reach):
    """Longformer's attention by its definition, one query at a time."""
    heads, dim = attention.heads, attention.head_dim
    q, k, v = attention.qkv(x).split(heads * dim, dim=-1)
    gq, gk, gv = attention.global_qkv(x).split(heads * dim, dim=-1)
    out = torch.zeros_like(q)
    for b in range(x.shape[0]):
        real = ~padding[b]
        for i in range(x.shape[1]):
            if is_global[b, i]:
                query, keys, values, seen = gq[b, i], gk[b], gv[b], real
            else:
                near = (torch.arange(x.shape[1]) - i).abs() <= reach
                query, keys, values, seen = q[b, i], k[b], v[b], (near | is_global[b]) & real
            for h in range(heads):
                part = slice(h * dim, (h + 1) * dim)
                scores = keys[seen, part] @ query[part] / dim ** 0.5
                out[b, i, part] = torch.softmax(scores, 0) @ values[seen, part]
    return attention.out(out)


@pytest.mark.parametrize("length", [11, 70])  # dense attention, then bands of blocks
@pytest.mark.parametrize("mask, reach", [("window(4) + padding", 3), ("none", 1000)])
def test_window_and_global_tokens_equal_the_definition(length, mask, reach):
    model = tfspec.compile(SPEC.format(mask=mask, bias="true"), seed=0).eval()
    attention = model.encoder.layers[0].self_attn
    x = torch.randn(2, length, 16, generator=torch.Generator().manual_seed(0))
    padding = torch.zeros(2, length, dtype=torch.bool)
    padding[1, length - 3:] = "padding" in mask
    marks = torch.zeros(2, length, dtype=torch.long)
    marks[0, [0, 5, length - 1]] = 1  # three global tokens in one row
    marks[1, [2, length - 1]] = 1  # one in the other: its last is a pad, which is never global
    given = padding if "padding" in mask else None
    ctx = model.context("encoder", "tokens", torch.zeros(2, length, dtype=torch.long), {"global_tokens": marks},
                        given)
    with torch.no_grad():
        ours = attention(x, ctx)
        expected = naive_layer_attention(attention, x, padding, (marks != 0) & ~padding, reach)
        real = ~padding
        assert_close(ours[real], expected[real], FLOAT32)
        banded = attention.band is not None and band_chunk(length, attention.band) is not None
        assert banded == (length == 70 and mask != "none")
        without = attention(x, model.context("encoder", "tokens", torch.zeros(2, length, dtype=torch.long), {},
                                             given))
        assert not close(ours[real], without[real], 1e-3)  # the global tokens change every row


def test_analysis_counts_the_global_projections_and_the_windowed_cost():
    spec = tfspec.parse(SPEC.format(mask="window(4) + padding", bias="false"))
    model = tfspec.compile(spec, seed=0)
    assert spec.parameter_count() == sum(p.numel() for p in model.parameters())
    assert tuple(model.encoder.layers[0].self_attn.global_qkv.weight.shape) == (48, 16)
    assert spec.graph().node("encoder.self_attn").label == "Longformer Attention (window(4), padding, 2 heads)"
    a = analyse(spec, seq_len=70, batch=2)
    m = measure(spec, {"encoder": 70}, batch=2)
    assert (m.flops, m.saved_bytes) == (a.total.matmul, a.total.memory)  # a call without global tokens


def test_the_emitted_file_takes_global_tokens_and_computes_what_the_model_does():
    from test_emit import assert_emitted_equals_compiled
    marks = torch.zeros(2, 70, dtype=torch.long)
    marks[0, [0, 9]] = marks[1, 33] = 1
    assert_emitted_equals_compiled(tfspec.parse(SPEC.format(mask="window(4) + padding", bias="true")),
                                   lengths=(70,), global_tokens=marks)


@pytest.mark.parametrize("text, message", [
    ("mask=causal + window(4)", "longformer attention cannot take a causal mask"),
    ("mask=padding position=rotary", "rotary positions act inside attention, but Longformer's global projections"),
    ("mask=padding kv_heads=1", "Longformer's global projections have a key and value head per query head"),
])
def test_misuse_is_a_spec_error(text, message):
    with pytest.raises(tfspec.SpecError) as info:
        tfspec.parse(SPEC.format(mask="padding", bias="true").replace("mask=padding", text))
    assert message in info.value.message


def test_global_tokens_are_checked_and_only_taken_where_read():
    model = tfspec.compile(SPEC.format(mask="window(4) + padding", bias="true"), seed=0)
    tokens = torch.randint(0, 50, (2, 9))
    with pytest.raises(ValueError, match=r"global_tokens must be shaped \(batch, length\)"):
        model(tokens, global_tokens=torch.ones(2, 8, dtype=torch.long))
    with pytest.raises(ValueError, match="global_tokens must hold integers"):
        model(tokens, global_tokens=torch.ones(2, 9))
    plain = tfspec.compile(SPEC.format(mask="window(4)", bias="true").replace("kind=longformer ", ""), seed=0)
    with pytest.raises(ValueError, match="unknown run-time input 'global_tokens'"):
        plain(tokens, global_tokens=torch.ones(2, 9, dtype=torch.long))


# ---------------------------------------------------------------- against Hugging Face
T = pytest.importorskip("transformers")


@pytest.mark.parametrize("length", [13, 57])  # dense attention, then bands of blocks
def test_global_tokens_compute_what_hugging_face_computes(tmp_path, length):
    from test_import import saved
    directory, reference = saved(tmp_path, "LongformerModel", attention_window=[4, 8])
    model = tfspec.from_pretrained(directory)
    tokens = torch.randint(3, 90, (2, length), generator=torch.Generator().manual_seed(1))
    mask = torch.ones(2, length, dtype=torch.long)
    mask[1, length - 4:] = 0
    marks = torch.zeros(2, length, dtype=torch.long)
    marks[0, [0, 4, length - 2]] = 1
    marks[1, [1, length - 1]] = 1  # a padded position marked global is not one, for either
    with torch.no_grad():
        ours, pooled = model(tokens, padding_mask=mask == 0, global_tokens=marks)
        theirs = reference(input_ids=tokens, attention_mask=mask, global_attention_mask=marks)
    real = mask == 1
    assert_close(ours[real], theirs.last_hidden_state[real], FLOAT32)
    assert_close(pooled, theirs.pooler_output, FLOAT32)
