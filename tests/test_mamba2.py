"""Mamba-2 (``mixer mamba2``): its chunked and recurrent scans against the recurrence written out position by
position in float64, the scan against Hugging Face's, the layer against Hugging Face's Mamba-2 mixer, decoding from
its state against recomputation, and a hybrid of it with attention decoding cached, compiled and recomputed alike."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import tfspec
from tfspec.inspect.analysis import analyse
from tfspec.nn.context import Context
from tfspec.nn.mamba2 import Mamba2, chunked_ssd, recurrent_ssd
from tfspec.nn.state import RecurrentState
from tfspec.registry import MIXERS
from tfspec.run.decoding import Continuation
from hybrids import (assert_continues_from_its_state, assert_cost_is_measured, assert_decodes_like_recomputation,
                     assert_left_padding_is_invisible, perturbed)
from numerics import FLOAT32, FLOAT64, assert_close


def naive_scan(x, dt, A, B, C, initial=None):
    """S_t = exp(Δ_t A_h)·S_{t-1} + Δ_t x_t B_tᵀ, y_t = S_t C_t, head h reading group h // (heads / groups)'s B and
    C: one sequence, one head and one position at a time, in float64. The state as the scans keep it: (batch,
    groups, state, heads / groups · head_dim)."""
    batch, length, heads, head_dim = x.shape
    groups, width = B.shape[2], B.shape[3]
    per_group = heads // groups
    y = torch.zeros(batch, length, heads, head_dim, dtype=torch.float64)
    final = torch.zeros(batch, groups, width, per_group * head_dim, dtype=torch.float64)
    for b in range(batch):
        for h in range(heads):
            g, columns = h // per_group, slice((h % per_group) * head_dim, (h % per_group + 1) * head_dim)
            S = initial[b, g, :, columns].T.double() if initial is not None else \
                torch.zeros(head_dim, width, dtype=torch.float64)
            for t in range(length):
                S = math.exp(dt[b, t, h] * A[h]) * S + dt[b, t, h] * torch.outer(x[b, t, h].double(),
                                                                                 B[b, t, g].double())
                y[b, t, h] = S @ C[b, t, g].double()
            final[b, g, :, columns] = S.T
    return y, final


def inputs(batch, length, heads, head_dim, groups, width, seed=0, dtype=torch.float64):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, length, heads, head_dim, generator=generator, dtype=dtype)
    dt = torch.rand(batch, length, heads, generator=generator, dtype=dtype)  # after softplus: > 0
    A = -torch.rand(heads, generator=generator, dtype=dtype) * 2
    B, C = (torch.randn(batch, length, groups, width, generator=generator, dtype=dtype) for _ in range(2))
    return x, dt, A, B, C


@settings(max_examples=20, deadline=None)
@given(length=st.integers(1, 19), chunk=st.integers(1, 8), groups=st.sampled_from([1, 2]),
       continued=st.booleans())
def test_the_chunked_and_recurrent_scans_are_the_recurrence(length, chunk, groups, continued):
    """Chunks of any size (dividing the length or not), B and C shared by groups of heads, and a state carried in
    from before."""
    x, dt, A, B, C = inputs(2, length, 4, 3, groups, 5, seed=length)
    initial = torch.randn(2, groups, 5, 4 // groups * 3, dtype=torch.float64) if continued else None
    expected, state = naive_scan(x, dt, A, B, C, initial)
    for y, final in (chunked_ssd(x, dt, A, B, C, chunk, initial), recurrent_ssd(x, dt, A, B, C, initial)):
        assert_close(y, expected, FLOAT64)
        assert_close(final, state, FLOAT64)


def test_the_chunked_scan_is_hugging_faces():
    """Hugging Face's torch path of the SSD scan (its reference, when mamba_ssm's kernels are absent), and the
    final state it returns, (batch, heads, head_dim, state)."""
    from transformers.models.mamba2.modeling_mamba2 import mamba2_chunk_scan
    x, dt, A, B, C = inputs(2, 37, 4, 6, 2, 8, dtype=torch.float32)
    before_softplus = torch.log(torch.expm1(dt))
    theirs, state = mamba2_chunk_scan(x, before_softplus, A, B, C, chunk_size=16, dt_softplus=True,
                                      return_final_states=True)
    ours, final = chunked_ssd(x, dt, A, B, C, 16)
    assert_close(ours, theirs, FLOAT32)
    assert_close(final.view(2, 2, 8, 2, 6).permute(0, 1, 3, 4, 2).reshape(2, 4, 6, 8), state, FLOAT32)


def layer_pair(heads=4, head_dim=8, state=6, groups=2, kernel=3, bias=True, conv_bias=True, width=16):
    """Hugging Face's Mamba-2 mixer with every weight perturbed, and ours holding the same weights."""
    T = pytest.importorskip("transformers")
    from transformers.models.mamba2.modeling_mamba2 import Mamba2Mixer
    config = T.Mamba2Config(hidden_size=width, num_heads=heads, head_dim=head_dim, expand=heads * head_dim // width,
                            state_size=state, n_groups=groups, conv_kernel=kernel, use_bias=bias,
                            use_conv_bias=conv_bias, chunk_size=8, layer_norm_epsilon=1e-5, num_hidden_layers=1)
    torch.manual_seed(0)
    theirs = perturbed(Mamba2Mixer(config, 0), shift=0.1)
    ours = Mamba2(width, heads, head_dim, state, groups, kernel, 64, conv_bias, bias, 1e-5).eval()
    ours.load_state_dict(theirs.state_dict())
    return ours, theirs


@pytest.mark.parametrize("bias", [True, False])
def test_the_layer_computes_what_hugging_faces_mamba2_mixer_computes(bias):
    """The same weights under the same names (chunks of 8 against our 64); on a plain batch and on one whose rows
    are right- and left-padded: Hugging Face zeroes a padded position's input and its x, B and C after the
    convolution, and so do we -- which with biased projections lets the pads' projection reach the first real
    positions' convolution, as it does in Hugging Face's."""
    ours, theirs = layer_pair(bias=bias)
    x = torch.randn(3, 23, 16, generator=torch.Generator().manual_seed(1))
    mask = torch.ones(3, 23, dtype=torch.long)
    mask[1, 15:] = 0
    mask[2, :4] = 0
    with torch.no_grad():
        assert_close(ours(x), theirs(x), FLOAT32)
        padded = ours(x, Context(torch.arange(23)[None], mask == 0))
        assert_close(padded[mask.bool()], theirs(x, attention_mask=mask)[mask.bool()], FLOAT32)


@settings(max_examples=12, deadline=None)
@given(length=st.integers(1, 14), data=st.data())
def test_decoding_from_the_state_equals_recomputing(length, data):
    """A left-padded prompt, then calls of one to three positions: each continues from the state (the convolution's
    last inputs and the scan's state) what the whole sequence computes."""
    ours, _ = layer_pair()
    ours.chunk = data.draw(st.integers(1, 6), label="chunk")
    x = torch.randn(3, length, 16, generator=torch.Generator().manual_seed(length))
    state = assert_continues_from_its_state(ours, x, data)
    assert state.get("ssm").shape == (3, 2, 6, 16) and state.get("conv").shape == (3, 32 + 2 * 2 * 6, 2)


HYBRID = """model granite_h_like
embedding tokens { vocab 40; dim 16 }
decoder x 4 {
  residual pre
  norm rmsnorm
  mixer mamba2(4, head_dim=8, state=6, groups=2, kernel=3, chunk=4)
  feedforward d_ff=32 activation=swiglu
  layers 2 { mamba = attention(self, heads=2, mask=causal + padding) }
  final rmsnorm
}
head tied(tokens)
"""


def hybrid(text=HYBRID):
    return perturbed(tfspec.compile(text, seed=0))


def test_a_hybrid_decodes_cached_compiled_and_recomputed_alike():
    """Three Mamba-2 layers and one of attention: greedy decoding and beam search over the layers' own states (a
    convolution window and the scan's state; keys and values), eager, compiled into one graph over static buffers,
    and recomputed from scratch, with a left-padded prompt."""
    assert_decodes_like_recomputation(hybrid(), 40, 6)


def test_a_left_padded_row_computes_what_it_does_unpadded():
    """Without biased projections, a padded position's projection is zero and its x, B and C are zeroed after the
    convolution: what enters the state is what an unpadded row's does."""
    assert_left_padding_is_invisible(hybrid(), 40)


def test_a_model_of_mamba2_layers_alone_decodes_as_it_recomputes():
    """Mamba-2's own model: every layer a normed mixer and nothing else (no feed-forward, no attention)."""
    text = """model mamba2_like
embedding tokens { vocab 40; dim 16 }
decoder x 3 { residual pre; norm rmsnorm; mixer mamba2(4, head_dim=8, state=6, chunk=4); final rmsnorm }
head tied(tokens)
"""
    assert_decodes_like_recomputation(hybrid(text), 40, 5)


@pytest.mark.parametrize("length", [3, 4, 9])
def test_its_cost_and_memory_are_what_the_flop_counter_and_autograd_see(length):
    """Lengths within one chunk, at its end, and past it (a partial last chunk, padded)."""
    assert_cost_is_measured(HYBRID, length)


def test_it_starts_as_its_paper_says_and_its_state_is_what_summary_counts():
    """A ~ U(1, 16) kept as its log; the time step softplus(dt_bias) log-uniform in [0.001, 0.1]; D 1; decoding
    keeps a state of the size the analysis declares, whatever the length."""
    model = tfspec.compile(HYBRID.replace("mamba2(4,", "mamba2(64,").replace("groups=2", "groups=4"), seed=0)
    layer = model.decoder.layers[0].mamba
    A, step = layer.A_log.exp(), F.softplus(layer.dt_bias)
    assert (A >= 1 - 1e-5).all() and (A <= 16 + 1e-4).all() and A.std() > 3  # U(1, 16): std 4.3
    assert (step >= 0.001 - 1e-7).all() and (step <= 0.1 + 1e-6).all()
    assert (step.log().mean() - math.log(0.01)).abs() < 0.5  # log-uniform: its log's mean is log 0.01's
    assert torch.equal(layer.D, torch.ones(64))
    model = tfspec.compile(HYBRID, seed=0)
    with torch.no_grad():
        steps = Continuation(model.eval())
        steps.feed(torch.randint(0, 40, (1, 7)))
        steps.feed(torch.randint(0, 40, (1, 1)))
    held = sum(t.numel() for cache in steps.cache for state in cache.values() if isinstance(state, RecurrentState)
               for t in state.tensors.values())
    variant = MIXERS["mamba2"]
    options = variant.options({"heads": 4, "head_dim": 8, "state": 6, "groups": 2, "kernel": 3, "chunk": 4})
    assert held == 3 * variant.state_elements(16, options) == 3 * (2 * (32 + 2 * 2 * 6) + 4 * 8 * 6)


def test_heads_that_groups_do_not_divide_are_a_located_error():
    with pytest.raises(tfspec.SpecError, match="heads=3 is not a multiple of groups=2") as caught:
        tfspec.parse(HYBRID.replace("mamba2(4,", "mamba2(3,"))
    assert caught.value.diagnostics[0].span is not None


def test_the_state_stays_float32_under_half_precision_activations_as_summary_counts():
    """In bfloat16, the convolution's inputs are kept as the activations and the scan's state in float32: the bytes
    decoding holds are what the analysis says at that dtype."""
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


def test_a_hybrid_of_three_kinds_trains_on_text_from_the_cli_and_resumes_exactly(tfspec_cli, tmp_path):
    """Mamba-2, Gated DeltaNet and attention layers trained by ``tfspec train`` on a text file: a run stopped by
    SIGTERM after its second step and resumed with ``--resume`` logs the losses of the run that was not stopped."""
    import signal
    import subprocess
    import sys
    from tfspec.run.train import read_metrics
    spec, text = tmp_path / "hybrid.tfs", tmp_path / "corpus.txt"
    spec.write_text(HYBRID.replace("vocab 40", "vocab 300").replace(
        "  layers 2 { mamba = attention(self, heads=2, mask=causal + padding) }\n",
        "  layers 1 { mamba = mixer(gated_deltanet(2, key_dim=8, value_dim=8, chunk=4)) }\n"
        "  layers 2 { mamba = attention(self, heads=2, mask=causal + padding) }\n"))
    text.write_text("to be or not to be, that is the question. " * 20)
    common = ["--data", str(text), "--seq-len", "16", "--batch", "4", "--eval-every", "100", "--eval-size", "4",
              "--steps", "6", "--log-every", "1"]
    whole = tfspec_cli("train", spec, *common, "--no-progress", "--out", tmp_path / "whole")
    assert whole.returncode == 0, whole.stderr
    stopped = subprocess.Popen([sys.executable, "-m", "tfspec.cli", "train", str(spec), *common, "--out",
                                str(tmp_path / "part")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for line in stopped.stdout:
        if line.startswith("step 2/"):
            break
    stopped.send_signal(signal.SIGTERM)
    _, err = stopped.communicate(timeout=120)
    assert stopped.returncode in (0, 143), err  # (it may finish before the signal arrives)
    resumed = tfspec_cli("train", "--resume", tmp_path / "part", "--no-progress")
    assert resumed.returncode == 0, resumed.stderr
    losses = [[s["loss"] for s in read_metrics(tmp_path / run / "metrics.jsonl")[0]] for run in ("whole", "part")]
    assert len(losses[0]) == 6 and losses[0] == losses[1]
