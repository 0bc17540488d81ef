"""Token mixers that carry a state (``mixer KIND``): the short convolution against its formula and Hugging Face's
LFM2, decoding from its state against recomputation, and layer schedules that put another sublayer in a mixer's
place or drop one (a hybrid's layers)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import tfspec
from tfspec.inspect.analysis import analyse
from tfspec.inspect.diagram import to_graphviz
from tfspec.inspect.diff import diff
from tfspec.inspect.summary import summary_line
from tfspec.nn.context import Context
from tfspec.nn.shortconv import ShortConv
from hybrids import (assert_continues_from_its_state, assert_decodes_like_recomputation,
                     assert_left_padding_is_invisible)
from numerics import FLOAT32, FLOAT64, assert_close


def perturbed(module: torch.nn.Module, seed: int = 0, std: float = 0.5) -> torch.nn.Module:
    """Every weight drawn away from its initialisation (a zero bias hides a missing one)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=generator, dtype=p.dtype) * std)
    return module


def naive_short_convolution(conv: ShortConv, x: torch.Tensor, padding: torch.Tensor | None = None) -> torch.Tensor:
    """out(C_t ⊙ (Σ_j w_j · (B ⊙ x)_{t-k+1+j} + b)), position by position, in float64; padded positions and those
    before the first enter as zeros."""
    width, k = x.shape[-1], conv.kernel
    weight = conv.in_proj.weight.double()
    bias = conv.in_proj.bias.double() if conv.in_proj.bias is not None else torch.zeros(3 * width, dtype=torch.float64)
    projected = x.double() @ weight.T + bias
    b, c, h = projected[..., :width], projected[..., width:2 * width], projected[..., 2 * width:]
    gated = b * h
    if padding is not None:
        gated = gated * (~padding)[..., None]
    filters = conv.conv.weight.double()[:, 0]  # (width, k)
    out = torch.zeros_like(gated)
    for t in range(x.shape[1]):
        for j in range(k):
            source = t - (k - 1) + j
            if source >= 0:
                out[:, t] += filters[:, j] * gated[:, source]
        if conv.conv.bias is not None:
            out[:, t] += conv.conv.bias.double()
    y = c * out
    out_bias = conv.out_proj.bias.double() if conv.out_proj.bias is not None else 0
    return y @ conv.out_proj.weight.double().T + out_bias


@pytest.mark.parametrize("kernel, bias", [(1, False), (3, False), (4, True)])
def test_the_short_convolution_is_its_formula(kernel, bias):
    conv = perturbed(ShortConv(6, kernel, bias), seed=kernel).double()
    x = torch.randn(2, 7, 6, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    padding = torch.zeros(2, 7, dtype=torch.bool)
    padding[1, :3] = True
    assert_close(conv(x), naive_short_convolution(conv, x), FLOAT64)
    assert_close(conv(x, Context(torch.arange(7)[None], padding)), naive_short_convolution(conv, x, padding), FLOAT64)


def test_the_short_convolution_equals_hugging_faces_lfm2():
    """Hugging Face's ``Lfm2ShortConv`` (LFM2 has no biases there) with the same weights, on a left-padded batch:
    it zeroes a padded position's input, which without biases is what zeroing the convolution's input does."""
    from transformers import Lfm2Config
    from transformers.models.lfm2.modeling_lfm2 import Lfm2ShortConv
    config = Lfm2Config(hidden_size=12, conv_L_cache=3, conv_bias=False, num_hidden_layers=1,
                        layer_types=["conv"], num_attention_heads=2, num_key_value_heads=2, vocab_size=10)
    reference = perturbed(Lfm2ShortConv(config, 0), seed=3).eval()
    ours = ShortConv(12, 3, False).eval()
    ours.load_state_dict(reference.state_dict())  # in_proj rows B, C, x; conv (width, 1, kernel); out_proj
    x = torch.randn(2, 8, 12, generator=torch.Generator().manual_seed(2))
    keep = torch.ones(2, 8, dtype=torch.long)
    keep[0, :2] = 0
    with torch.no_grad():
        expected = reference(x, attention_mask=keep)
        got = ours(x, Context(torch.arange(8)[None], keep == 0))
    assert_close(got, expected, FLOAT32)


@settings(max_examples=40, deadline=None)
@given(kernel=st.integers(1, 5), length=st.integers(1, 12), bias=st.booleans(), data=st.data())
def test_decoding_from_the_state_equals_recomputing(kernel, length, bias, data):
    """A prompt, then chunks of any size: each call continues from the state what the whole sequence computes,
    with left padding in the prompt."""
    conv = perturbed(ShortConv(5, kernel, bias), seed=kernel).eval()
    x = torch.randn(3, length, 5, generator=torch.Generator().manual_seed(length))
    state = assert_continues_from_its_state(conv, x, data)
    assert state.get("inputs").shape == (3, 5, kernel - 1)  # kernel − 1 inputs, whatever the length


HYBRID = """model hybrid
embedding tokens {{ vocab 40; dim 16 }}
decoder x 4 {{
  residual pre
  norm rmsnorm
  mixer shortconv({kernel})
  feedforward d_ff=32 activation=swiglu
  layers 3 {{ conv = attention(self, heads=2, mask=causal + padding) }}
  final rmsnorm
}}
head tied(tokens)
"""


def hybrid(kernel: int = 3, seed: int = 0):
    return perturbed(tfspec.compile(HYBRID.format(kernel=kernel), seed=0), seed=seed).eval()


def test_a_layer_whose_mixer_becomes_attention_is_a_second_kind_of_layer():
    spec = tfspec.parse(HYBRID.format(kernel=3))
    assert summary_line("hybrid.tfs", spec) == ("hybrid.tfs: hybrid: decoder-only, 4 layers (2 kinds), d_model 16, "
                                                "2 heads, shortconv mixer, 11,552 parameters")
    first, second = spec.decoder.blocks
    assert [s.name for s in first.sublayers] == ["conv", "ffn"] and [s.name for s in second.sublayers] == \
        ["self_attn", "ffn"]
    assert spec.decoder.schedule == (0, 0, 0, 1)
    dot = to_graphviz(spec).source
    assert "3× (layers 0–2)" in dot and "1× (layer 3)" in dot
    assert "Short Convolution (kernel 3)" in dot and "Multi-Head Attention (causal, padding, 2 heads)" in dot
    model = tfspec.compile(spec, seed=0)
    assert [type(layer).__name__ for layer in model.decoder.layers] == ["DecoderLayer"] * 3 + ["DecoderLayer1"]
    assert {n.split(".")[3] for n in model.state_dict() if n.startswith("decoder.layers.3.")} == \
        {"self_attn_norm", "self_attn", "ffn_norm", "ffn"}
    plain = tfspec.parse(HYBRID.format(kernel=3).replace("  layers 3 { conv = attention(self, heads=2, mask=causal "
                                                          "+ padding) }\n", ""))
    changes = [f"{c.where} {c.what}: {c.after}" for c in diff(plain, spec).changes]
    assert "decoder schedule: layer 3: self_attn (Multi-Head Attention (causal, padding, 2 heads)), no conv" in changes


def test_cached_and_compiled_decoding_of_a_hybrid_equal_recomputation():
    """Greedy decoding and beam search over the layers' own states (a convolution window, keys and values): eager,
    compiled into one graph over static buffers, and recomputed from scratch, with a left-padded prompt."""
    assert_decodes_like_recomputation(hybrid(kernel=4), 40, 5)


def test_a_left_padded_row_computes_what_it_does_unpadded():
    assert_left_padding_is_invisible(hybrid(), 40)


def test_a_mixer_declares_its_state_reach_and_cost():
    spec = tfspec.parse(HYBRID.format(kernel=4))
    a = analyse(spec, seq_len=64, batch=2)
    assert a.state_bytes == 2 * 3 * 16 * (4 - 1) * 4  # three conv layers, kernel − 1 inputs of width 16, float32
    assert a.kv_cache_bytes == 2 * 64 * 2 * 16 * 4  # the attention layer's keys and values
    assert any(c.layer == "Mixer (Short Convolution(kernel=4))" and c.per_layer == "O(k·n·d)" for c in a.complexity)
    from tfspec.inspect.verify import window_reaches
    assert window_reaches(spec, "decoder") == {0: 3, 3: None}


SCHEDULED = """embedding tokens {{ vocab 40; dim 16 }}
decoder x 6 {{
  residual pre
  norm rmsnorm
  {body}
  final rmsnorm
}}
head tied(tokens)
"""


def test_a_block_may_be_a_single_mixer_attention_or_mixture():
    """Nemotron-H's layers: each one sublayer, a mixer, attention or a mixture of experts, by a schedule."""
    spec = tfspec.parse(SCHEDULED.format(body="mixer shortconv(4)\n"
                                               "  layers every(3, from=1) { conv = attention(self, heads=2, mask=causal) }\n"
                                               "  layers every(3, from=2) { conv = feedforward(d_ff=64, kind=moe(4, 2)) }"))
    kinds = [[s.name for s in block.sublayers] for block in spec.decoder.blocks]
    assert kinds == [["conv"], ["self_attn"], ["ffn"]] and spec.decoder.schedule == (0, 1, 2, 0, 1, 2)
    model = tfspec.compile(spec, seed=0).eval()
    with torch.no_grad():
        assert model(torch.randint(0, 40, (2, 7))).shape == (2, 7, 40)


def test_the_wiring_form_takes_mixers_and_layer_kinds_that_replace_or_drop_a_call():
    text = SCHEDULED.format(body="h = norm(x)\n"
                                 "  x = x + mixer(h, shortconv(3)) + feedforward(h, d_ff=32)\n"
                                 "  layers 3 { conv = attention(self, heads=2, mask=causal) }\n"
                                 "  layers 1 { ffn = none }")
    spec = tfspec.parse(text)
    assert len(spec.decoder.blocks) == 3 and spec.decoder.schedule == (0, 1, 0, 2, 0, 0)
    model = tfspec.compile(spec, seed=0)
    assert not any(n.startswith("decoder.layers.1.ffn") for n in model.state_dict())
    assert any(n.startswith("decoder.layers.3.self_attn.") for n in model.state_dict())
    assert not any(n.startswith("decoder.layers.3.conv.") for n in model.state_dict())


@pytest.mark.parametrize("section, message, caret", [
    ("layers 2 { attn = attention(self, heads=2) }", "no sublayer 'attn' in this stack's layers", "attn"),
    ("layers 2 { conv = rmsnorm(eps=1e-5) }", "conv can be replaced by a sublayer or dropped", "rmsnorm"),
    ("layers 2 { conv = none; ffn = none }", "drops every sublayer of its layers", "layers"),
    ("layers 2 { conv = attention(self, heads=2); conv kind=shortconv(4) }", "both replaced and changed",
     "kind=shortconv"),
    ("layers 2 { conv = attention(self, heads=3) }", "not divisible by heads=3", "3)"),
    ("layers 2 { conv = mixer(shortconv(0)) }", "kernel", "0"),
])
def test_a_wrong_replacement_is_located(section, message, caret):
    text = SCHEDULED.format(body=f"mixer shortconv(3)\n  feedforward d_ff=32\n  {section}")
    with pytest.raises(tfspec.SpecError) as info:
        tfspec.parse(text)
    assert message in str(info.value)
    line = text.splitlines()[info.value.line - 1]
    assert line[info.value.column - 1:].startswith(caret), str(info.value)


def test_dropping_a_call_whose_value_is_not_a_term_of_a_sum_is_located():
    text = SCHEDULED.format(body="h = mixer(x, shortconv(3))\n  x = x + feedforward(h, d_ff=32)\n"
                                 "  layers 1 { conv = none }")
    with pytest.raises(tfspec.SpecError, match="its value is not a term of a sum") as info:
        tfspec.parse(text)
    assert info.value.line == 5


# ---------------------------------------------------------------- what a variant may read and declare
class DepthScaled(torch.nn.Module):
    """A test mixer: x · w · (layer + 1), from its own position alone."""

    def __init__(self, width: int, layer: int) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.empty(width))
        self.layer = layer

    def forward(self, x, ctx=None, state=None):
        return x * self.weight * (self.layer + 1)


@pytest.fixture
def depth_scaled():
    """A mixer reading its layer's index and declaring a parameter drawn from N(0, 0.5), registered for one test."""
    from tfspec.registry import LAYER, MIXERS, Constructor, Param, TokenMixer

    class Depth(TokenMixer):
        name = "depth_test"
        doc = "depth_test: x · w · (layer + 1)"

        def params(self, width, options):
            return {"weight": Param((width,), "vector", std=0.5)}

        def module(self, width, options):
            return Constructor(DepthScaled, (width, LAYER))

        def flops(self, width, options, length):
            return 0, 2 * length * width

        def saved(self, width, options, batch, length):
            return 0

        def state_elements(self, width, options):
            return 0

    MIXERS.register(Depth)
    yield
    del MIXERS._entries["depth_test"]


@pytest.mark.parametrize("init", ["normal", "gpt2", "xavier", "t5"])
def test_a_variant_reads_its_layers_index_and_starts_at_its_own_distribution(depth_scaled, init):
    """Each layer's module is built with its index in the stack (``LAYER``), in the compiled model and in the file
    ``tfspec emit`` writes; a parameter declared with ``std`` is drawn from N(0, std) under every scheme."""
    from test_emit import assert_emitted_equals_compiled, load_emitted
    from tfspec.backend.standalone import emit
    text = (f"defaults {{ init {init} }}\nembedding tokens {{ vocab 20; dim 2048 }}\n"
            "decoder x 3 { residual none; mixer depth_test }")
    model = tfspec.compile(text, seed=0).eval()
    x = torch.randn(1, 2, 2048)
    for i, layer in enumerate(model.decoder.layers):
        weight = layer.mixer.weight.detach()
        assert 0.45 < float(weight.std()) < 0.55 and abs(float(weight.mean())) < 0.05, (init, i)
        assert layer.mixer.layer == i
        with torch.no_grad():
            assert_close(layer(x), x * weight * (i + 1), FLOAT32)
    emitted = load_emitted(emit(tfspec.parse(text))).Model()
    assert [layer.mixer.layer for layer in emitted.decoder["layers"]] == [0, 1, 2]
    assert_emitted_equals_compiled(tfspec.parse(text))
    scheduled = tfspec.parse(text.replace("mixer depth_test }", "mixer depth_test; layers 1 { mixer = feedforward("
                                                                "d_ff=8) } }"))
    emitted = load_emitted(emit(scheduled)).Model()
    assert [type(layer).__name__ for layer in emitted.decoder["layers"]] == ["DecoderLayer", "DecoderLayer1",
                                                                             "DecoderLayer"]
    assert emitted.decoder["layers"][2].mixer.layer == 2
    assert_emitted_equals_compiled(scheduled)
