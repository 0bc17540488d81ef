"""Lightning attention (``mixer lightning``): its blocked and recurrent forms against the decayed linear attention
written out position by position in float64, the layer against Hugging Face's MiniMax layer in every layer of a
stack (its slopes depend on the depth), decoding from its state against recomputation, and a hybrid decoding
cached, compiled and recomputed alike."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import tfspec
from tfspec.nn.context import Context
from tfspec.nn.lightning import LightningAttention, blocked_lightning, recurrent_lightning
from hybrids import (assert_continues_from_its_state, assert_cost_is_measured, assert_decodes_like_recomputation,
                     assert_left_padding_is_invisible, perturbed)
from numerics import FLOAT32, FLOAT64, assert_close


def naive_lightning(q, k, v, slope, initial=None):
    """S_t = exp(−slope_h)·S_{t−1} + k_t v_tᵀ, o_t = S_tᵀ q_t: one sequence, head and position at a time, float64."""
    batch, heads, length, dim = q.shape
    out = torch.zeros(batch, heads, length, dim, dtype=torch.float64)
    final = torch.zeros(batch, heads, dim, dim, dtype=torch.float64)
    for b in range(batch):
        for h in range(heads):
            S = initial[b, h].double() if initial is not None else torch.zeros(dim, dim, dtype=torch.float64)
            for t in range(length):
                S = math.exp(-float(slope[h])) * S + torch.outer(k[b, h, t].double(), v[b, h, t].double())
                out[b, h, t] = S.T @ q[b, h, t].double()
            final[b, h] = S
    return out, final


@settings(max_examples=20, deadline=None)
@given(length=st.integers(1, 19), block=st.integers(1, 8), continued=st.booleans())
def test_the_blocked_and_recurrent_forms_are_the_decayed_linear_attention(length, block, continued):
    """Blocks of any size (dividing the length or not), and a state carried in from before."""
    generator = torch.Generator().manual_seed(length)
    q, k, v = (torch.randn(2, 3, length, 4, generator=generator, dtype=torch.float64) for _ in range(3))
    slope = torch.rand(3, generator=generator, dtype=torch.float64)
    initial = torch.randn(2, 3, 4, 4, generator=generator, dtype=torch.float64) if continued else None
    expected, state = naive_lightning(q, k, v, slope, initial)
    for out, final in (blocked_lightning(q, k, v, slope, block, initial), recurrent_lightning(q, k, v, slope, initial)):
        assert_close(out, expected, FLOAT64)
        assert_close(final, state, FLOAT64)


def test_every_layer_computes_what_hugging_faces_minimax_layer_computes():
    """The same weights under the same names in each of four layers, whose slopes Hugging Face scales by the
    layer's depth (ours from its index, ``LAYER``); on a plain batch and on one with a right- and a left-padded row
    (q, k and v zeroed at a pad, as Hugging Face zeroes them)."""
    T = pytest.importorskip("transformers")
    from transformers.models.minimax.modeling_minimax import MiniMaxLightningAttention
    config = T.MiniMaxConfig(hidden_size=16, num_attention_heads=2, head_dim=8, num_hidden_layers=4, block_size=4,
                             layer_types=["linear_attention"] * 4)
    x = torch.randn(3, 11, 16, generator=torch.Generator().manual_seed(1))
    mask = torch.ones(3, 11, dtype=torch.long)
    mask[1, 8:] = 0
    mask[2, :3] = 0
    for layer in range(4):
        torch.manual_seed(layer)
        theirs = perturbed(MiniMaxLightningAttention(config, layer), shift=0.1)
        ours = LightningAttention(16, 2, 8, 4, layer, 4, 1e-6).eval()
        ours.load_state_dict({k: v for k, v in theirs.state_dict().items() if k in ours.state_dict()})
        assert torch.equal(ours.slope, theirs.slope_rate.flatten())
        with torch.no_grad():
            assert_close(ours(x), theirs(x, None, None)[0], FLOAT32)
            padded = ours(x, Context(torch.arange(11)[None], mask == 0))
            assert_close(padded[mask.bool()], theirs(x, None, mask)[0][mask.bool()], FLOAT32)


@settings(max_examples=12, deadline=None)
@given(length=st.integers(1, 14), data=st.data())
def test_decoding_from_the_state_equals_recomputing(length, data):
    """A left-padded prompt, then calls of one to three positions: each continues from the heads' states what
    the whole sequence computes."""
    torch.manual_seed(0)
    ours = LightningAttention(16, 2, 8, data.draw(st.integers(1, 6), label="block"), 1, 3, 1e-6).eval()
    with torch.no_grad():
        for p in ours.parameters():
            p.add_(0.1 * torch.randn_like(p))
    x = torch.randn(3, length, 16, generator=torch.Generator().manual_seed(length))
    state = assert_continues_from_its_state(ours, x, data)
    assert state.get("kv").shape == (3, 2, 8, 8) and state.get("kv").dtype == torch.float32


HYBRID = """model minimax_like
embedding tokens { vocab 40; dim 16 }
decoder x 4 {
  residual pre
  norm rmsnorm
  mixer lightning(2, head_dim=8, block=4, layers=4)
  feedforward d_ff=32 activation=swiglu
  layers 1 { self_attn = attention(self, heads=2, mask=causal + padding) }
  final rmsnorm
}
head tied(tokens)
"""


def hybrid():
    return perturbed(tfspec.compile(HYBRID, seed=0))


def test_a_hybrid_decodes_cached_compiled_and_recomputed_alike():
    """Three lightning layers (each its own slopes) and one of attention: greedy decoding and beam search over the
    layers' states, eager, compiled over static buffers, and recomputed, with a left-padded prompt."""
    model = hybrid()
    assert [float(model.decoder.layers[i].self_attn.slope[0]) for i in (0, 2)] == \
        pytest.approx([2 ** -4 * (1 - i / (3 + 1e-5) + 1e-5) for i in (0, 2)])
    assert_decodes_like_recomputation(model, 40, 6)
    assert_left_padding_is_invisible(model, 40)


@pytest.mark.parametrize("length, batch", [(3, 2), (4, 1), (9, 2)])
def test_its_cost_and_memory_are_what_the_flop_counter_and_autograd_see(length, batch):
    """Lengths within one block, at its end, and past it (a partial last block, padded); one sequence and two."""
    assert_cost_is_measured(HYBRID, length, batch)


def test_slopes_that_do_not_span_the_stack_are_a_located_error():
    """Past the depth its slopes span, a layer's factor 1 − layer/(layers − 1) turns negative: its state would grow."""
    with pytest.raises(tfspec.SpecError, match="slopes span layers=3, but the stack has 4 layers") as caught:
        tfspec.parse(HYBRID.replace("layers=4)", "layers=3)"))
    assert caught.value.diagnostics[0].span is not None
