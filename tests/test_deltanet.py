"""Gated DeltaNet (``mixer gated_deltanet``): its chunked and recurrent forms against the delta rule written out
position by position in float64, the layer against Hugging Face's Qwen3.5 layer, decoding from its state against
recomputation, and a hybrid of it with attention decoding cached, compiled and recomputed alike."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import tfspec
from tfspec.inspect.analysis import analyse
from tfspec.nn.context import Context
from tfspec.nn.deltanet import GatedDeltaNet, chunked_gated_delta_rule, recurrent_gated_delta_rule
from tfspec.nn.state import RecurrentState
from tfspec.registry import MIXERS
from tfspec.run.decoding import Continuation
from hybrids import (assert_continues_from_its_state, assert_cost_is_measured, assert_decodes_like_recomputation,
                     assert_left_padding_is_invisible, perturbed)
from numerics import FLOAT32, FLOAT64, assert_close


def naive_delta_rule(q, k, v, g, beta, initial=None):
    """S_t = exp(g_t)·S_{t-1} + β_t k_t (v_t − S_{t-1}ᵀ·exp(g_t)·k_t)ᵀ, o_t = S_tᵀ q_t / √key_dim with q and k
    L2-normed (eps 1e-6 under the root) and each key head serving its group of value heads: one sequence, one head
    and one position at a time, in float64."""
    batch, length, heads, value_dim = v.shape
    key_dim, group = q.shape[-1], heads // q.shape[2]
    out = torch.zeros(batch, length, heads, value_dim, dtype=torch.float64)
    states = torch.zeros(batch, heads, key_dim, value_dim, dtype=torch.float64)
    for b in range(batch):
        for h in range(heads):
            S = initial[b, h].double() if initial is not None else torch.zeros(key_dim, value_dim, dtype=torch.float64)
            for t in range(length):
                qt, kt = q[b, t, h // group].double(), k[b, t, h // group].double()
                qt, kt = qt / math.sqrt((qt * qt).sum() + 1e-6), kt / math.sqrt((kt * kt).sum() + 1e-6)
                S = math.exp(g[b, t, h]) * S
                S = S + beta[b, t, h].double() * torch.outer(kt, v[b, t, h].double() - S.T @ kt)
                out[b, t, h] = S.T @ qt / math.sqrt(key_dim)
            states[b, h] = S
    return out, states


def inputs(batch, length, key_heads, heads, key_dim, value_dim, seed=0, dtype=torch.float64):
    generator = torch.Generator().manual_seed(seed)
    q, k = (torch.randn(batch, length, key_heads, key_dim, generator=generator, dtype=dtype) for _ in range(2))
    v = torch.randn(batch, length, heads, value_dim, generator=generator, dtype=dtype)
    g = -torch.rand(batch, length, heads, generator=generator, dtype=dtype) * 2  # log α ≤ 0
    beta = torch.rand(batch, length, heads, generator=generator, dtype=dtype)
    return q, k, v, g, beta


@settings(max_examples=30, deadline=None)
@given(length=st.integers(1, 19), chunk=st.integers(1, 8), group=st.sampled_from([1, 2]),
       continued=st.booleans())
def test_the_chunked_and_recurrent_forms_are_the_delta_rule(length, chunk, group, continued):
    """Chunks of any size (dividing the length or not), grouped heads, and a state carried in from before."""
    q, k, v, g, beta = inputs(2, length, 2, 2 * group, 3, 4, seed=length)
    initial = torch.randn(2, 2 * group, 3, 4, dtype=torch.float64) if continued else None
    expected, state = naive_delta_rule(q, k, v, g, beta, initial)
    for out, final in (chunked_gated_delta_rule(q, k, v, g, beta, chunk, initial),
                       recurrent_gated_delta_rule(q, k, v, g, beta, initial)):
        assert_close(out, expected, FLOAT64)
        assert_close(final, state, FLOAT64)


def test_the_chunked_form_is_hugging_faces():
    """Hugging Face's torch path of the gated delta rule (its reference, when the fla kernels are absent)."""
    from transformers.models.qwen3_next.modeling_qwen3_next import torch_chunk_gated_delta_rule
    q, k, v, g, beta = inputs(2, 37, 2, 4, 8, 6, dtype=torch.float32)
    theirs, state = torch_chunk_gated_delta_rule(q, k, v, g, beta, chunk_size=16, output_final_state=True,
                                                 use_qk_l2norm_in_kernel=True)
    ours, final = chunked_gated_delta_rule(q, k, v, g, beta, 16)
    assert_close(ours, theirs, FLOAT32)
    assert_close(final, state, FLOAT32)


def layer_pair(heads=4, key_heads=2, key_dim=6, value_dim=5, kernel=3, width=16):
    """Hugging Face's Qwen3.5 Gated DeltaNet layer with every weight perturbed, and ours holding the same weights."""
    T = pytest.importorskip("transformers")
    from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5GatedDeltaNet
    config = T.Qwen3_5TextConfig(hidden_size=width, linear_num_value_heads=heads, linear_num_key_heads=key_heads,
                                 linear_key_head_dim=key_dim, linear_value_head_dim=value_dim,
                                 linear_conv_kernel_dim=kernel, rms_norm_eps=1e-6, num_hidden_layers=1,
                                 layer_types=["linear_attention"])
    torch.manual_seed(0)
    theirs = perturbed(Qwen3_5GatedDeltaNet(config, 0), shift=0.1)
    ours = GatedDeltaNet(width, heads, key_heads, key_dim, value_dim, kernel, 64, 1e-6).eval()
    ours.load_state_dict(theirs.state_dict())
    return ours, theirs


def test_the_layer_computes_what_hugging_faces_qwen3_5_layer_computes():
    """The same weights under the same names; on a plain batch and on one whose second row is right-padded (Hugging
    Face zeroes padded positions' inputs; so do we)."""
    ours, theirs = layer_pair()
    x = torch.randn(2, 23, 16, generator=torch.Generator().manual_seed(1))
    mask = torch.ones(2, 23, dtype=torch.long)
    mask[1, 15:] = 0
    with torch.no_grad():
        assert_close(ours(x), theirs(x), FLOAT32)
        padded = ours(x, Context(torch.arange(23)[None], mask == 0))
        assert_close(padded[mask.bool()], theirs(x, attention_mask=mask)[mask.bool()], FLOAT32)


@settings(max_examples=25, deadline=None)
@given(length=st.integers(1, 14), data=st.data())
def test_decoding_from_the_state_equals_recomputing(length, data):
    """A left-padded prompt, then calls of one to three positions: each continues from the state (the convolution's
    last inputs and the delta rule's state) what the whole sequence computes."""
    ours, _ = layer_pair()
    ours.chunk = data.draw(st.integers(1, 6), label="chunk")
    x = torch.randn(3, length, 16, generator=torch.Generator().manual_seed(length))
    state = assert_continues_from_its_state(ours, x, data)
    assert state.get("recurrent").shape == (3, 4, 6, 5) and state.get("conv").shape == (3, 2 * 2 * 6 + 20, 2)


HYBRID = """model qwen_next_like
embedding tokens { vocab 40; dim 16 }
decoder x 4 {
  residual pre
  norm rmsnorm
  mixer gated_deltanet(4, key_heads=2, key_dim=6, value_dim=5, kernel=3, chunk=4)
  feedforward d_ff=32 activation=swiglu
  layers 3 { linear_attn = attention(self, heads=2, mask=causal + padding) }
  final rmsnorm
}
head tied(tokens)
"""


def hybrid():
    return perturbed(tfspec.compile(HYBRID, seed=0))


def test_a_hybrid_decodes_cached_compiled_and_recomputed_alike():
    """Three Gated DeltaNet layers and one of attention: greedy decoding and beam search over the layers' own states
    (a convolution window and the delta rule's state; keys and values), eager, compiled into one graph over static
    buffers, and recomputed from scratch, with a left-padded prompt."""
    assert_decodes_like_recomputation(hybrid(), 40, 6)


def test_a_left_padded_row_computes_what_it_does_unpadded():
    assert_left_padding_is_invisible(hybrid(), 40)


@pytest.mark.parametrize("length", [3, 4, 9])
def test_its_cost_and_memory_are_what_the_flop_counter_and_autograd_see(length):
    """Lengths within one chunk, at its end, and past it (a partial last chunk, padded)."""
    assert_cost_is_measured(HYBRID, length)


def test_it_starts_as_its_paper_says_and_its_state_is_what_summary_counts():
    """A ~ U(0.01, 16) kept as its log, dt_bias 1; decoding keeps a state of the size the analysis declares,
    whatever the length."""
    model = tfspec.compile(HYBRID, seed=0)
    layer = model.decoder.layers[0].linear_attn
    assert torch.equal(layer.dt_bias, torch.ones(4))
    assert (layer.A_log >= math.log(0.01)).all() and (layer.A_log <= math.log(16)).all() and layer.A_log.std() > 0
    with torch.no_grad():
        steps = Continuation(model.eval())
        steps.feed(torch.randint(0, 40, (1, 7)))
        steps.feed(torch.randint(0, 40, (1, 1)))
    held = sum(t.numel() for cache in steps.cache for state in cache.values() if isinstance(state, RecurrentState)
               for t in state.tensors.values())
    variant = MIXERS["gated_deltanet"]
    options = variant.options({"heads": 4, "key_heads": 2, "key_dim": 6, "value_dim": 5, "kernel": 3, "chunk": 4})
    assert held == 3 * variant.state_elements(16, options)


def test_value_heads_that_key_heads_do_not_divide_are_a_located_error():
    with pytest.raises(tfspec.SpecError, match="heads=3 is not a multiple of key_heads=2") as caught:
        tfspec.parse(HYBRID.replace("gated_deltanet(4, key_heads=2", "gated_deltanet(3, key_heads=2"))
    assert caught.value.diagnostics[0].span is not None


def test_summary_weighs_the_hybrids_decoding_state_against_attention_in_every_layer():
    """The hybrid keeps the attention layer's keys and values and the mixers' states; the model of its shape with
    that attention in every layer keeps what its own analysis says its KV cache holds."""
    hybrid = analyse(tfspec.parse(HYBRID), seq_len=50)
    everywhere = tfspec.parse(HYBRID.replace(
        "mixer gated_deltanet(4, key_heads=2, key_dim=6, value_dim=5, kernel=3, chunk=4)",
        "attention self heads=2 mask=causal + padding").replace(
        "  layers 3 { linear_attn = attention(self, heads=2, mask=causal + padding) }\n", ""))
    assert hybrid.all_attention_bytes == analyse(everywhere, seq_len=50).kv_cache_bytes == 4 * 50 * 2 * 16 * 4
    assert hybrid.kv_cache_bytes == 50 * 2 * 16 * 4
    from tfspec.inspect.summary import format_summary
    assert f"with attention in every layer {hybrid.all_attention_bytes / 1024:.2f} KiB" in format_summary(hybrid)


def test_a_hybrid_trains_and_resumes_exactly(tmp_path):
    """The reverse task on the hybrid (three Gated DeltaNet layers, one of attention), with dropout: an interrupted
    run resumes to the uninterrupted one's losses, and the loss falls."""
    from tfspec.run.train import TrainConfig, resume, train
    spec = HYBRID.replace("vocab 40", "vocab 16").replace("residual pre", "residual pre\n  dropout 0.1")
    config = dict(task="reverse", steps=8, save_every=4, eval_every=4, symbols=6, min_len=2, max_len=6, batch=8,
                  eval_size=8, lr=3e-3)
    quiet = lambda *_: None  # noqa: E731
    whole = train(spec, TrainConfig(**config), tmp_path / "a", progress=False, log=quiet)
    train(spec, TrainConfig(**config), tmp_path / "b", progress=False, log=quiet, stop_after=3)
    rest = resume(tmp_path / "b", progress=False, log=quiet)
    assert whole.losses[3:] == rest.losses
    assert sum(whole.losses[-3:]) < sum(whole.losses[:3])


def test_the_state_stays_float32_under_half_precision_activations_as_summary_counts():
    """In bfloat16, the convolution's inputs are kept as the activations and the delta rule's state in float32 (as
    Hugging Face keeps it): the bytes decoding holds are what the analysis says at that dtype."""
    model = tfspec.compile(HYBRID, seed=0, dtype="bfloat16").eval()
    with torch.no_grad():
        steps = Continuation(model)
        steps.feed(torch.randint(0, 40, (1, 7)))
        steps.feed(torch.randint(0, 40, (1, 1)))
    states = [t for cache in steps.cache for s in cache.values() if isinstance(s, RecurrentState)
              for t in s.tensors.values()]
    assert {t.dtype for t in states} == {torch.bfloat16, torch.float32}
    held = sum(t.numel() * t.element_size() for t in states)
    assert held == analyse(tfspec.parse(HYBRID), seq_len=8, dtype="bfloat16").state_bytes
