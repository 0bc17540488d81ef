"""Mamba (``mixer mamba``, Mamba-1's selective scan as Jamba runs it): the scan against the recurrence written out
one channel and state number at a time in float64, the layer against Hugging Face's Jamba layer, decoding from its
state against recomputation, and its cost and memory."""

from __future__ import annotations


import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import tfspec
from tfspec.nn.context import Context
from tfspec.nn.mamba import Mamba, selective_scan
from hybrids import (assert_continues_from_its_state, assert_cost_is_measured, assert_decodes_like_recomputation,
                     perturbed)
from numerics import FLOAT32, FLOAT64, assert_close


@settings(max_examples=15, deadline=None)
@given(length=st.integers(1, 9), continued=st.booleans())
def test_the_scan_is_the_recurrence(length, continued):
    """h_t = exp(Δ_t A) ⊙ h_{t−1} + Δ_t x_t B_t, y_t = h_t · C_t, each channel and state number on its own."""
    g = torch.Generator().manual_seed(length)
    x, dt = torch.randn(2, length, 3, generator=g, dtype=torch.float64), torch.rand(2, length, 3, generator=g,
                                                                                    dtype=torch.float64)
    A = -torch.rand(3, 4, generator=g, dtype=torch.float64)
    B, C = (torch.randn(2, length, 4, generator=g, dtype=torch.float64) for _ in range(2))
    initial = torch.randn(2, 3, 4, generator=g, dtype=torch.float64) if continued else None
    y, final = selective_scan(x, dt, A, B, C, initial)
    # the recurrence one position at a time (every channel and state number at once)
    h = initial.clone() if continued else torch.zeros(2, 3, 4, dtype=torch.float64)
    for t in range(length):
        h = (dt[:, t, :, None] * A).exp() * h + (dt[:, t] * x[:, t])[..., None] * B[:, t, None, :]
        assert_close(y[:, t], (h * C[:, t, None, :]).sum(-1), FLOAT64)
    assert_close(final, h, FLOAT64)


def layer_pair():
    T = pytest.importorskip("transformers")
    from transformers.models.jamba.modeling_jamba import JambaMambaMixer
    config = T.JambaConfig(hidden_size=16, mamba_expand=2, mamba_d_state=4, mamba_d_conv=3, mamba_dt_rank=3,
                           mamba_proj_bias=True, rms_norm_eps=1e-6, num_hidden_layers=2, attn_layer_period=2,
                           attn_layer_offset=1, num_attention_heads=2, num_key_value_heads=2)
    torch.manual_seed(0)
    theirs = perturbed(JambaMambaMixer(config, 0), shift=0.1)
    ours = Mamba(16, 32, 4, 3, 3, True, True, True, 1e-6).eval()
    ours.load_state_dict(theirs.state_dict())
    return ours, theirs


def test_the_layer_computes_what_hugging_faces_jamba_layer_computes():
    """The same weights under the same names, its RMSNorms of the time step, B and C included; on a plain batch and
    on one with a right- and a left-padded row."""
    ours, theirs = layer_pair()
    x = torch.randn(3, 9, 16, generator=torch.Generator().manual_seed(1))
    mask = torch.ones(3, 9, dtype=torch.long)
    mask[1, 6:] = 0
    mask[2, :2] = 0
    with torch.no_grad():
        assert_close(ours(x), theirs(x), FLOAT32)
        padded = ours(x, Context(torch.arange(9)[None], mask == 0))
        assert_close(padded[mask.bool()], theirs(x, attention_mask=mask)[mask.bool()], FLOAT32)


@settings(max_examples=10, deadline=None)
@given(length=st.integers(1, 9), data=st.data())
def test_decoding_from_the_state_equals_recomputing(length, data):
    ours, _ = layer_pair()
    x = torch.randn(3, length, 16, generator=torch.Generator().manual_seed(length))
    state = assert_continues_from_its_state(ours, x, data)
    assert state.get("ssm").shape == (3, 32, 4) and state.get("conv").shape == (3, 32, 2)


JAMBA_LIKE = """model jamba_like
embedding tokens { vocab 40; dim 16 }
decoder x 3 {
  residual pre
  norm rmsnorm
  mixer mamba(32, state=4, kernel=3, norms=true)
  feedforward d_ff=24 activation=swiglu
  layers 1 { mamba = attention(self, heads=2, mask=causal + padding) }
  final rmsnorm
}
head tied(tokens)
"""


def test_a_hybrid_decodes_cached_compiled_and_recomputed_alike():
    model = tfspec.compile(JAMBA_LIKE, seed=0).eval()
    assert_decodes_like_recomputation(model, 40, 5)


@pytest.mark.parametrize("length, batch", [(1, 2), (5, 1), (9, 2)])
def test_its_cost_and_memory_are_what_the_flop_counter_and_autograd_see(length, batch):
    assert_cost_is_measured(JAMBA_LIKE, length, batch)


def test_it_starts_as_its_paper_says():
    """S4D-real's A: its n-th column n, kept as its log; D 1; the time step softplus(dt_proj's bias) log-uniform in
    [0.001, 0.1]; the time step's rank ⌈width/16⌉ unless given."""
    layer = tfspec.compile(JAMBA_LIKE, seed=0).decoder.layers[0].mamba
    assert torch.equal(layer.A_log.exp().round(), torch.arange(1, 5.0).expand(32, 4))
    assert torch.equal(layer.D, torch.ones(32)) and layer.dt_rank == 1
    step = torch.nn.functional.softplus(layer.dt_proj.bias)
    assert (step >= 0.001 - 1e-7).all() and (step <= 0.1 + 1e-6).all() and step.std() > 0
