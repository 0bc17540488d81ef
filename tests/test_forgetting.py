"""Forgetting attention (the Forgetting Transformer, Lin et al. 2025) against its definition written out in float64:
softmax_j(q_i·k_j/√d + Σ_{l=j+1..i} log f_l) over j ≤ i, f_t = sigmoid(w_h·x_t + b_h); decoding from its cache;
bfloat16 at a thousand tokens."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import tfspec
from tfspec.nn.context import Context
from tfspec.run.decoding import Continuation, beam_search
from numerics import FLOAT32, assert_close

SPEC = """embedding tokens {{ vocab 50; dim {width} }}
decoder x 2 {{ residual pre; norm rmsnorm
  attention self heads={heads} kv_heads={kv_heads} kind=forgetting mask=causal + padding
  feedforward d_ff=32 activation=swiglu; final rmsnorm }}
head linear(50)
"""


def model(width=16, heads=4, kv_heads=2, seed=0, std=0.5):
    m = tfspec.compile(SPEC.format(width=width, heads=heads, kv_heads=kv_heads), seed=0).eval()
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in m.parameters():  # every weight away from its initialisation (a zero gate bias hides a missing one)
            p.copy_(torch.randn(p.shape, generator=generator) * std)
    return m


def definition(attention, x: torch.Tensor, padding: torch.Tensor | None = None) -> torch.Tensor:
    """The paper's forgetting attention, element by element, in float64, from the module's weights; a padded
    position's gate is 1 and its key unseen."""
    heads, kv_heads, d = attention.heads, attention.kv_heads, attention.head_dim
    x = x.double()
    qkv = x @ attention.qkv.weight.double().T + attention.qkv.bias.double()
    q, k, v = qkv.split((heads * d, kv_heads * d, kv_heads * d), dim=-1)
    gate = attention.forget
    log_f = F.logsigmoid(x @ gate.weight.double().T + gate.bias.double())  # (batch, n, heads)
    batch, n, _ = x.shape
    out = torch.zeros(batch, n, heads, d, dtype=torch.float64)
    for b in range(batch):
        for h in range(heads):
            g = h // (heads // kv_heads)
            for i in range(n):
                scores = []
                for j in range(i + 1):
                    if padding is not None and padding[b, j]:
                        continue
                    forget = sum(log_f[b, l, h] for l in range(j + 1, i + 1)
                                 if padding is None or not padding[b, l])
                    score = q[b, i, h * d:(h + 1) * d] @ k[b, j, g * d:(g + 1) * d] / math.sqrt(d) + forget
                    scores.append((score, v[b, j, g * d:(g + 1) * d]))
                if not scores:
                    continue
                weights = torch.softmax(torch.stack([s for s, _ in scores]), dim=0)
                out[b, i, h] = sum(w * value for w, (_, value) in zip(weights, scores))
    y = out.reshape(batch, n, heads * d)
    return y @ attention.out.weight.double().T + attention.out.bias.double()


def test_forgetting_attention_is_its_definition():
    attention = model().decoder.layers[0].self_attn
    x = torch.randn(2, 9, 16, generator=torch.Generator().manual_seed(1))
    padding = torch.zeros(2, 9, dtype=torch.bool)
    padding[1, :3] = True
    with torch.no_grad():
        assert_close(attention(x), definition(attention, x), FLOAT32)
        got = attention(x, Context(torch.arange(9)[None], padding))
    expected = definition(attention, x, padding)
    assert_close(got[0], expected[0], FLOAT32)
    assert_close(got[1, 3:], expected[1, 3:], FLOAT32)  # (a padded query's output means nothing)


def test_a_left_padded_row_computes_what_it_does_unpadded():
    m = model()
    tokens = torch.randint(0, 50, (2, 10), generator=torch.Generator().manual_seed(2))
    padding = torch.zeros(2, 10, dtype=torch.bool)
    padding[1, :4] = True
    with torch.no_grad():
        assert_close(m(tokens, padding)[1, 4:], m(tokens[1:, 4:])[0], FLOAT32)


def test_decoding_continues_the_gates_from_the_cache():
    """Eager and compiled decoding (static buffers, the running sum written in place) and beam search equal
    recomputing the sequence, after a left-padded prompt."""
    m = model()
    prompt = torch.randint(0, 50, (2, 6), generator=torch.Generator().manual_seed(3))
    padding = torch.zeros(2, 6, dtype=torch.bool)
    padding[0, :2] = True
    with torch.no_grad():
        runs = [Continuation(m, prompt_padding_mask=padding),
                Continuation(m, use_cache=False, prompt_padding_mask=padding),
                Continuation(m, prompt_padding_mask=padding, compile="eager", max_len=14)]
        logits = [run.feed(prompt) for run in runs]
        for _ in range(7):
            token = logits[1].argmax(-1, keepdim=True)
            assert_close(logits[0], logits[1], 1e-4)
            assert_close(logits[2], logits[1], 1e-4)
            logits = [run.feed(token) for run in runs]
        beams = [beam_search(Continuation(m, **options), prompt[:1, 2:], max_new=5, eos=0, beam=3)
                 for options in ({}, {"use_cache": False}, {"compile": "eager", "max_len": 10})]
    assert [h.tokens for h in beams[0][0]] == [h.tokens for h in beams[1][0]] == [h.tokens for h in beams[2][0]]


def test_forgetting_attention_needs_a_causal_mask():
    with pytest.raises(tfspec.SpecError, match="needs a causal mask") as info:
        tfspec.parse(SPEC.format(width=16, heads=4, kv_heads=2).replace("mask=causal + padding", "mask=padding"))
    assert info.value.line == 3


def test_in_bfloat16_at_a_thousand_tokens_it_stays_near_the_float64_definition():
    """The score terms are sums of a thousand log gates that differ by little; kept in float32 (the mask that
    carries them, and the softmax that reads them), bfloat16 forgetting attention stays as close to its float64
    definition as plain attention does to its own: what remains is bfloat16's rounding of the projections and the
    output (the reference computes the bfloat16 model's own weights and input in float64)."""
    width, heads, n = 64, 4, 1024
    text = ("embedding tokens {{ vocab 50; dim {width} }}\n"
            "decoder x 1 {{ attention self heads={heads} kind={kind} mask=causal + padding; feedforward d_ff=8 }}")
    errors = {}
    for kind in ("forgetting", "dot"):
        attention = tfspec.compile(text.format(width=width, heads=heads, kind=kind), seed=0).decoder.layers[0].self_attn
        generator = torch.Generator().manual_seed(4)
        with torch.no_grad():
            for p in attention.parameters():
                p.copy_(torch.randn(p.shape, generator=generator) * width ** -0.5)
            if kind == "forgetting":  # gates near 1, as a trained model's long-memory heads: sums of small logs
                attention.forget.bias.fill_(4.0)
        x = torch.randn(1, n, width, generator=generator)
        padding = torch.zeros(1, n, dtype=torch.bool)
        padding[0, 0] = True  # a mask tensor, as a padded batch has
        with torch.no_grad():  # the reference: the bfloat16 model's own weights and input, computed in float64
            low = attention.bfloat16()(x.bfloat16(), Context(torch.arange(n)[None], padding)).double()
            reference = attention.double()(x.bfloat16().double(), Context(torch.arange(n)[None], padding))
        # relative to the output's scale
        errors[kind] = ((low - reference)[0, 1:].abs().max() / reference[0, 1:].abs().max()).item()
    # (this CPU: forgetting 3.9e-3 of the output's scale, plain attention 3.3e-3; with its score terms rounded to
    # bfloat16 in the mask, forgetting attention is 5.3e-3 off)
    assert errors["forgetting"] < 1e-2 and errors["forgetting"] <= 1.5 * errors["dot"], errors


@pytest.mark.parametrize("position, schedule", [
    ("kerple", ""),  # each layer's learned bias and the gates ride on one mask: one bool condition kept, not two
    ("t5(num_buckets=4, max_distance=8)", ""),  # the stack's bias is built anew in each layer's mask, with its gates
    ("t5(num_buckets=4, max_distance=8)", "layers 1 { self_attn kind=dot }"),  # and shared by the others
])
def test_what_autograd_keeps_beside_a_learned_position_bias_is_what_the_analysis_declares(position, schedule):
    from tfspec.inspect.analysis import analyse
    from tfspec.inspect.measure import measure
    spec = tfspec.parse("embedding tokens { vocab 5; dim 8; position none }\n"
                        f"decoder x 3 {{ position {position}; attention self heads=2 mask=causal kind=forgetting; "
                        f"{schedule} }}")
    for n in (1, 6):
        analysed = analyse(spec, seq_len=n, batch=1)
        assert measure(spec, analysed.lengths, batch=1).saved_bytes == analysed.total.memory
