"""Keys without a bias where queries and values have one (``attention ... key_bias=false``, Whisper's ``k_proj``):
the same function as a biased model whose keys' bias is zero, with the parameters, costs, initial values and
standalone file it declares, in self- and cross-attention."""

from __future__ import annotations

import pytest
import torch

import tfspec
from tfspec.inspect.analysis import analyse
from tfspec.inspect.measure import measure
from numerics import FLOAT32, assert_close
from test_emit import assert_emitted_equals_compiled

TEXT = """embedding tokens {{ vocab 30; dim 16; position learned(24) }}
encoder x 2 {{ residual pre; attention self heads=4 kv_heads={kv} {key}; feedforward d_ff=32; final layernorm }}
decoder x 2 {{ residual pre; attention self heads=4 kv_heads={kv} mask=causal + padding {key}
              attention cross heads=4 kv_heads={kv} memory=encoder {key}; feedforward d_ff=32; final layernorm }}
head tied(tokens)"""


@pytest.mark.parametrize("kv", [4, 2])
def test_unbiased_keys_compute_what_a_zero_key_bias_computes(kv):
    keyless = tfspec.compile(TEXT.format(kv=kv, key="key_bias=false"), seed=0).eval()
    biased = tfspec.compile(TEXT.format(kv=kv, key=""), seed=0).eval()
    q, k = 16, 4 * kv  # the queries' and the keys' (or values') rows
    with torch.no_grad():
        for p in keyless.parameters():
            p.add_(0.1 * torch.randn_like(p))  # every weight away from its start: a zero bias hides mistakes
        state = {}
        for name, tensor in keyless.state_dict().items():
            if name.endswith("qkv.bias"):
                tensor = torch.cat((tensor[:q], torch.zeros(k), tensor[q:]))
            elif name.endswith("cross_attn.kv.bias"):
                tensor = torch.cat((torch.zeros(k), tensor))
            state[name] = tensor
        biased.load_state_dict(state)
        src = torch.randint(0, 30, (2, 9), generator=torch.Generator().manual_seed(0))
        tgt = torch.randint(0, 30, (2, 7), generator=torch.Generator().manual_seed(1))
        assert_close(keyless(src, tgt), biased(src, tgt), FLOAT32)
        # a bias on the keys adds one value to all of a query's scores: softmax ignores it (why Whisper has none)
        for name, tensor in state.items():
            if name.endswith("qkv.bias"):
                tensor[q:q + k] = torch.randn(k)
        biased.load_state_dict(state)
        assert_close(keyless(src, tgt), biased(src, tgt), FLOAT32)
        state["encoder.layers.0.self_attn.qkv.bias"][-1] += 1.0  # a value's bias is no such thing
        biased.load_state_dict(state)
        assert not torch.allclose(keyless(src, tgt), biased(src, tgt))


def test_unbiased_keys_declare_their_parameters_costs_and_initial_values():
    spec = tfspec.parse(TEXT.format(kv=2, key="key_bias=false"))
    model = tfspec.compile(spec, seed=0)
    state = model.state_dict()
    assert state["encoder.layers.0.self_attn.qkv.bias"].shape == (16 + 8,)  # queries' and values' rows
    assert state["decoder.layers.0.cross_attn.kv.bias"].shape == (8,)  # values' rows
    assert all(not state[n].any() for n in state if n.endswith((".qkv.bias", ".kv.bias")))  # they start at zero
    assert spec.parameter_count() == sum(p.numel() for p in model.parameters())
    biased = tfspec.parse(TEXT.format(kv=2, key=""))
    assert biased.parameter_count() - spec.parameter_count() == 2 * 8 + 2 * (8 + 8)  # the keys' rows, self and cross
    lengths = {"encoder": 9, "decoder": 7}
    analysed, measured = analyse(spec, src_len=9, tgt_len=7, batch=2), measure(spec, lengths, batch=2)
    assert measured.flops == analysed.total.matmul and measured.saved_bytes == analysed.total.memory
    assert_emitted_equals_compiled(spec)


def test_diff_names_keys_without_a_bias():
    from tfspec.inspect.diff import diff
    changes = diff(tfspec.parse(TEXT.format(kv=4, key="")), tfspec.parse(TEXT.format(kv=4, key="key_bias=false")))
    assert [str(c) for c in changes.changes] == [f"{where}: key bias true → false" for where in (
        "encoder.self_attn", "decoder.self_attn", "decoder.cross_attn")]


def test_keys_without_a_bias_where_nothing_has_one_is_a_located_error():
    with pytest.raises(tfspec.SpecError) as info:
        tfspec.parse(TEXT.format(kv=4, key="bias=false key_bias=true"))
    assert "which have no bias here (bias=false)" in info.value.message and info.value.line == 2
