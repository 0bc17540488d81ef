"""The parts today's families brought, each against a naive formula written here or the reference's own module:
Llama 4's chunked attention (chunks of position ids), attention temperature tuning (queries scaled by their index in
the sequence) and mixture whose routing weight scales each expert's input; Gemma 4's value norm. The families
themselves are exact against Hugging Face in ``test_import`` (its CONFIGS)."""

from __future__ import annotations

import math

import pytest
import torch

import tfspec
from tfspec.run.decoding import Continuation
from numerics import FLOAT32, assert_close
from test_dsa import rotate_halves

ONE_LAYER = """
embedding tokens {{ vocab 30; dim 16; position none }}
decoder x 1 {{ attention self heads=2 mask={mask} {steps}; feedforward d_ff=32 }}
head linear(30)
"""


def attention_of(model, x: torch.Tensor, allowed: torch.Tensor, query_scale: torch.Tensor | None = None
                 ) -> torch.Tensor:
    """``model``'s first attention applied to ``x`` (batch, length, width), written out in float64."""
    attention = model.decoder.layers[0].self_attn
    heads, dim = attention.heads, attention.head_dim
    weight, bias = attention.qkv.weight.double(), attention.qkv.bias.double()
    q, k, v = (x.double() @ weight.T + bias).split(heads * dim, dim=-1)
    q, k, v = (t.view(*t.shape[:2], heads, dim).transpose(1, 2) for t in (q, k, v))
    if query_scale is not None:
        q = q * query_scale.double()[None, None, :, None]
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(dim)
    scores = scores.masked_fill(~allowed[:, None], float("-inf"))
    y = (scores.softmax(dim=-1) @ v).transpose(1, 2).reshape(*x.shape[:2], heads * dim)
    return y @ attention.out.weight.double().T + attention.out.bias.double()


@pytest.mark.parametrize("chunk, length", [(1, 5), (3, 10), (4, 8)])
def test_chunked_attention_sees_the_earlier_keys_of_its_own_chunk(chunk, length):
    model = tfspec.compile(ONE_LAYER.format(mask=f"causal + chunked({chunk})", steps=""), seed=0).eval()
    x = torch.randn(2, length, 16, generator=torch.Generator().manual_seed(0))
    i = torch.arange(length)
    allowed = ((i[None, :] <= i[:, None]) & (i[None, :] // chunk == i[:, None] // chunk))[None]
    with torch.no_grad():
        ours = model.decoder.layers[0].self_attn(x)
    assert_close(ours, attention_of(model, x, allowed), FLOAT32)
    if chunk > 1:  # the first query of a chunk sees itself alone: its output is its own value, projected
        first = attention_of(model, x, torch.eye(length, dtype=torch.bool)[None])
        assert_close(ours[:, chunk], first[:, chunk], FLOAT32)


def test_chunks_are_of_position_ids_so_a_left_padded_prompt_decodes_as_it_does_alone():
    """Decoding counts a left-padded prompt's positions from its first real token: its chunks start there, and the
    padded row's tokens and logits are those of the row decoded alone."""
    model = tfspec.compile(ONE_LAYER.format(
        mask="causal + chunked(3) + padding", steps=""), seed=0).eval()
    prompt = torch.randint(0, 30, (1, 5), generator=torch.Generator().manual_seed(1))
    padded = torch.cat((torch.zeros(1, 2, dtype=torch.long), prompt), dim=1)
    padding = torch.arange(7)[None] < 2
    new = torch.randint(0, 30, (1, 6), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        alone, with_pads = Continuation(model), Continuation(model, prompt_padding_mask=padding)
        assert_close(with_pads.feed(padded), alone.feed(prompt), FLOAT32)
        for t in range(new.shape[1]):
            assert_close(with_pads.feed(new[:, t:t + 1]), alone.feed(new[:, t:t + 1]), FLOAT32, msg=t)


def test_chunked_attention_over_a_long_sequence_runs_in_bands_that_equal_dense_attention():
    from test_sparse import output_and_gradients
    model = tfspec.compile(ONE_LAYER.format(mask="causal + chunked(8) + padding", steps=""), seed=0)
    attention = model.decoder.layers[0].self_attn
    assert attention.band == (7, 0)
    tokens = torch.randint(0, 30, (2, 90), generator=torch.Generator().manual_seed(3))
    extra = {"padding_mask": torch.arange(90)[None] >= torch.tensor([[90], [61]])}
    banded, dense = (output_and_gradients(model, tokens, extra, band) for band in (True, False))
    for a, b in zip(banded, dense):
        assert_close(a, b, 1e-4)


def temperature(index: torch.Tensor, floor: int, scale: float) -> torch.Tensor:
    return 1 + scale * torch.log(1 + torch.floor((index.double() + 1) / floor))


def test_temperature_tuning_scales_each_query_by_its_index():
    model = tfspec.compile(ONE_LAYER.format(mask="causal", steps="steps=temperature(floor=3, scale=0.5)"),
                           seed=0).eval()
    with torch.no_grad():  # attention far from uniform, where scaling the scores shows
        for p in model.parameters():
            p.normal_(0.0, 0.5, generator=torch.Generator().manual_seed(p.numel()))
    x = torch.randn(2, 12, 16, generator=torch.Generator().manual_seed(4))
    i = torch.arange(12)
    factors = temperature(i, 3, 0.5)
    assert factors[:2].tolist() == [1.0, 1.0] and factors[2] > 1  # the index is 2 when (i + 1) / 3 first is 1
    causal = (i[None, :] <= i[:, None])[None]
    with torch.no_grad():
        ours = model.decoder.layers[0].self_attn(x)
    assert_close(ours, attention_of(model, x, causal, factors), FLOAT32)
    assert (ours - attention_of(model, x, causal)).abs().max() > 1e-3  # the factors change the output


def test_temperature_counts_cached_positions_in_eager_and_compiled_decoding(no_recompiles):
    """The factor's index continues after the KV cache's positions: a compiled step (whose offset is a tensor)
    and eager decoding give the logits of recomputing the whole sequence, with chunks of a left-padded prompt's
    positions in the other layer, in one graph."""
    model = tfspec.compile("""
embedding tokens { vocab 30; dim 16; position none }
decoder x 2 {
  position rotary(interleaved=true)
  attention self heads=2 mask=causal + chunked(4) + padding steps=rotated_qk_norm(weight=false)
  feedforward d_ff=32 activation=swiglu
  layers 1 { self_attn mask=causal + padding steps=temperature(floor=2, scale=0.5); position none }
}
head linear(30)
""", seed=0).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    prompt = torch.randint(0, 30, (2, 5), generator=torch.Generator().manual_seed(5))
    padding = torch.zeros(2, 5, dtype=torch.bool)
    padding[1, :2] = True
    new = torch.randint(0, 30, (2, 9), generator=torch.Generator().manual_seed(6))

    def decoded(**options) -> list[torch.Tensor]:
        steps = Continuation(model, prompt_padding_mask=padding, **options)
        with torch.no_grad():
            return [steps.feed(prompt)] + [steps.feed(new[:, t:t + 1]) for t in range(new.shape[1])]

    recomputed, eager = decoded(use_cache=False), decoded()  # (before compiling: they share the model's code)
    compiled = decoded(compile="eager", max_len=14)
    for t, (a, b, c) in enumerate(zip(eager, compiled, recomputed)):
        assert_close(a, c, FLOAT32, msg=t)
        assert_close(b, c, FLOAT32, msg=t)
    assert no_recompiles["stats"]["unique_graphs"] == 1


def test_a_mixture_weighing_inputs_runs_each_chosen_expert_on_its_scaled_input():
    """Llama 4's routing: sigmoid(logit) of the top experts scales the input of each, their outputs are summed as
    they are, and the shared expert's is added."""
    model = tfspec.compile("""
embedding tokens { vocab 30; dim 16; position none }
decoder x 1 { attention self heads=2 mask=causal
              feedforward d_ff=8 activation=swiglu bias=false kind=moe(4, 2, weigh=inputs, shared=12) router=sigmoid }
head linear(30)
""", seed=0).eval()
    moe = model.decoder.layers[0].ffn
    with torch.no_grad():
        for p in moe.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    x = torch.randn(3, 5, 16, generator=torch.Generator().manual_seed(7))

    def expert(e: int, h: torch.Tensor) -> torch.Tensor:
        gate, up = (h @ moe.experts.up[e].double().T).chunk(2, dim=-1)
        return (torch.nn.functional.silu(gate) * up) @ moe.experts.down[e].double().T

    flat = x.reshape(-1, 16).double()
    logits = flat @ moe.router.weight.double().T
    top = logits.topk(2, dim=-1)
    expected = torch.stack([sum(expert(int(e), h * torch.sigmoid(w)) for w, e in zip(ws, es))
                            for h, ws, es in zip(flat, top.values, top.indices)])
    shared_gate, shared_up = (flat @ moe.shared.up.weight.double().T).chunk(2, dim=-1)
    expected = expected + (torch.nn.functional.silu(shared_gate) * shared_up) @ moe.shared.down.weight.double().T
    with torch.no_grad():
        ours = moe(x)
    assert_close(ours.reshape(-1, 16), expected, FLOAT32)


def test_a_section_leaves_out_the_stacks_steps_with_steps_none():
    spec = tfspec.parse("""
embedding tokens { vocab 30; dim 16; position none }
decoder x 3 {
  attention self heads=2 mask=causal steps=temperature(floor=2)
  feedforward d_ff=32
  layers 1 { self_attn steps=none }
}
head linear(30)
""")
    model = tfspec.compile(spec, seed=0)
    assert [hasattr(layer.self_attn, "temperature") for layer in model.decoder.layers] == [True, False, True]


def test_the_value_norm_divides_each_heads_values_by_their_rms_as_gemma_4s_does():
    """``steps=value_norm``: Gemma 4's ``v_norm`` (its RMSNorm without a scale) on each head's values, before the
    mix and before a KV cache keeps them."""
    pytest.importorskip("transformers")
    from transformers.models.gemma4.modeling_gemma4 import Gemma4RMSNorm
    model = tfspec.compile(ONE_LAYER.format(mask="causal", steps="steps=value_norm(1e-6)"), seed=0).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.5, generator=torch.Generator().manual_seed(p.numel()))
    attention = model.decoder.layers[0].self_attn
    x = torch.randn(2, 7, 16, generator=torch.Generator().manual_seed(8))
    heads, dim = attention.heads, attention.head_dim
    q, k, v = (x @ attention.qkv.weight.T + attention.qkv.bias).split(heads * dim, dim=-1)
    v = Gemma4RMSNorm(dim, eps=1e-6, with_scale=False)(v.view(2, 7, heads, dim)).view(2, 7, heads * dim)
    q, k, v = (t.view(2, 7, heads, dim).transpose(1, 2) for t in (q, k, v))
    y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    expected = attention.out(y.transpose(1, 2).reshape(2, 7, -1))
    with torch.no_grad():
        assert_close(attention(x), expected, FLOAT32)
        steps = Continuation(model)
        cached = [steps.feed(x.new_zeros(1, 3, dtype=torch.long) + 4)] + [
            steps.feed(torch.tensor([[t]])) for t in (5, 6, 7)]
        whole = model(torch.tensor([[4, 4, 4, 5, 6, 7]]))
    assert_close(torch.stack(cached, 1)[0], whole[0, 2:], FLOAT32)


def test_same_kv_attention_takes_its_values_from_its_keys_projection_before_norm_and_rotation():
    """``kind=same_kv`` (Gemma 4's global layers): ``qkv`` has no value rows; the values are the keys as projected,
    before their qk-norm and their rotation, then a value norm makes them differ from the keys."""
    text = """
embedding tokens { vocab 30; dim 16; position none }
decoder x 1 { position rotary
  attention self heads=2 kv_heads=1 head_dim=8 kind=same_kv mask=causal qk_norm=rmsnorm steps=value_norm
  feedforward d_ff=32 }
head linear(30)
"""
    model = tfspec.compile(text, seed=0).double().eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.5, generator=torch.Generator().manual_seed(p.numel()))
    attention = model.decoder.layers[0].self_attn
    assert attention.qkv.weight.shape == (24, 16)  # 2 query heads and 1 key head of 8: no value rows
    x = torch.randn(2, 6, 16, generator=torch.Generator().manual_seed(9), dtype=torch.float64)
    q, k = (x @ attention.qkv.weight.T + attention.qkv.bias).split((16, 8), dim=-1)
    q, k, v = q.view(2, 6, 2, 8).transpose(1, 2), k.view(2, 6, 1, 8).transpose(1, 2), k.view(2, 6, 1, 8).transpose(1, 2)

    def rms(t, weight=None):
        t = t / (t.pow(2).mean(-1, keepdim=True) + 1e-6).sqrt()
        return t if weight is None else t * weight

    q, k, v = rms(q, attention.q_norm.weight), rms(k, attention.k_norm.weight), rms(v)
    positions = torch.arange(6)
    q, k = rotate_halves(q, positions, 8), rotate_halves(k, positions, 8)
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(8)
    scores = scores.masked_fill(~torch.ones(6, 6, dtype=torch.bool).tril(), float("-inf"))
    expected = attention.out((scores.softmax(-1) @ v).transpose(1, 2).reshape(2, 6, 16))
    with torch.no_grad():  # (the value norm runs in float32, as Gemma 4's does whatever the model's dtype)
        assert_close(attention(x), expected, 1e-6)
    with torch.no_grad():  # the cache keeps the keys rotated and the values as they are
        steps = Continuation(model)
        tokens = torch.tensor([[3, 1, 4, 1, 5, 9]])
        cached = [steps.feed(tokens[:, :2])] + [steps.feed(tokens[:, t:t + 1]) for t in range(2, 6)]
        assert_close(torch.stack(cached, 1)[0], model(tokens)[0, 1:], 1e-9)

