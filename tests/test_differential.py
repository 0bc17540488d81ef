"""Differential attention (Ye et al. 2024) against Hugging Face's DiffLlama and the paper's formula: pairs of heads,
λ_init by the layer's depth, λ vectors drawn from N(0, std), decoding from its cache."""

from __future__ import annotations

import math

import pytest
import torch

import tfspec
from tfspec.interop.families.hf_llama import WEIGHTS as _rules
from tfspec.interop.mapping import load_state, rule
from tfspec.run.decoding import Continuation
from numerics import FLOAT32, FLOAT64, assert_close

SPEC = """embedding tokens {{ vocab 64; dim 32 }}
decoder x 3 {{
  residual pre; norm rmsnorm(eps=1e-6); bias false
  position rotary(theta=10000)
  attention self heads=4 kv_heads={kv_heads} kind=differential(eps=1e-6) mask=causal + padding
  feedforward d_ff=48 activation=swiglu
  final rmsnorm(eps=1e-6)
}}
head linear(64) bias=false
"""


def diffllama(kv_heads: int):
    from transformers import DiffLlamaConfig, DiffLlamaForCausalLM
    config = DiffLlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=3,
                             num_attention_heads=4, num_key_value_heads=kv_heads, rms_norm_eps=1e-6,
                             max_position_embeddings=64, tie_word_embeddings=False, attn_implementation="eager")
    torch.manual_seed(0)
    model = DiffLlamaForCausalLM(config).eval()
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():  # every weight moved off its initial value (a norm weight of 1 hides mistakes)
        for p in model.parameters():
            p.add_(0.2 * torch.randn(p.shape, generator=generator))
    return model


def loaded(reference, kv_heads: int):
    ours = tfspec.compile(SPEC.format(kv_heads=kv_heads), seed=0).eval()
    state = reference.state_dict()
    rules, aliases = _rules(ours, "model.", state, True)
    rules += [rule(f"decoder.layers.{i}.self_attn.differential.lambda_{side}", f"model.layers.{i}.self_attn.lambda_{side}")
              for i in range(3) for side in ("q1", "k1", "q2", "k2")]
    load_state(ours, state, rules, reference="DiffLlamaForCausalLM", aliases=aliases)
    return ours


@pytest.mark.parametrize("kv_heads", [4, 2])
def test_differential_attention_equals_hugging_faces_diffllama(kv_heads):
    """Logits on a left-padded batch, each layer with its own λ_init (0.8 − 0.6·exp(−0.3·layer)), grouped heads
    or not; and greedy decoding from the cache, token for token."""
    reference = diffllama(kv_heads)
    ours = loaded(reference, kv_heads)
    assert [layer.self_attn.differential.lambda_init for layer in ours.decoder.layers] == \
        [layer.self_attn.lambda_init for layer in reference.model.layers]
    ids = torch.randint(0, 64, (2, 13), generator=torch.Generator().manual_seed(0))
    mask = torch.ones(2, 13, dtype=torch.long)
    mask[1, :4] = 0
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        expected = reference(ids, attention_mask=mask, position_ids=positions).logits
        got = ours(ids, padding_mask=mask == 0, position_ids=positions)
    real = mask.bool()
    assert_close(got[real], expected[real], FLOAT32)
    with torch.no_grad():
        generated = reference.generate(ids[:1], attention_mask=mask[:1], max_new_tokens=8, do_sample=False,
                                       pad_token_id=0)
        steps = Continuation(ours)
        logits, tokens = steps.feed(ids[:1]), []
        for _ in range(8):
            tokens.append(int(logits.argmax(-1)))
            logits = steps.feed(torch.tensor([[tokens[-1]]]))
    assert tokens == generated[0, 13:].tolist()


def test_one_pair_of_heads_is_the_papers_formula():
    """(softmax(Q1K1ᵀ/√d) − λ·softmax(Q2K2ᵀ/√d)) [V1 V2], RMS-normed and scaled by 1 − λ_init, in float64."""
    model = tfspec.compile(SPEC.format(kv_heads=2).replace("position rotary(theta=10000)", ""), seed=0).double()
    attention = model.decoder.layers[2].self_attn
    generator = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for p in attention.parameters():
            p.copy_(torch.randn(p.shape, generator=generator, dtype=torch.float64) * 0.3)
    x = torch.randn(1, 6, 32, generator=generator, dtype=torch.float64)
    step, d = attention.differential, 8
    q, k, v = (x @ attention.qkv.weight.T).split((32, 16, 16), dim=-1)
    # λ's exponents summed in float32, as Hugging Face's (the rest in float64)
    lam = (torch.exp((step.lambda_q1 * step.lambda_k1).sum(dtype=torch.float32)).double()
           - torch.exp((step.lambda_q2 * step.lambda_k2).sum(dtype=torch.float32)).double() + step.lambda_init)
    causal = torch.ones(6, 6, dtype=torch.bool).tril()

    def weights(h):  # query head h with its key head (two query heads a key head)
        scores = q[0, :, h * d:(h + 1) * d] @ k[0, :, (h // 2) * d:(h // 2 + 1) * d].T / math.sqrt(d)
        return torch.softmax(scores.masked_fill(~causal, -math.inf), dim=-1)

    heads = []
    for h in range(2):  # pair h: heads h and h + 2; values of key heads (h mod 1) and 1 + (h mod 1), side by side
        values = torch.cat((v[0, :, 0:d], v[0, :, d:2 * d]), dim=-1)
        difference = (weights(h) - lam * weights(h + 2)) @ values
        normed = difference / torch.sqrt(difference.pow(2).mean(-1, keepdim=True) + 1e-6)
        heads.append((1 - step.lambda_init) * normed)
    expected = torch.cat(heads, dim=-1) @ attention.out.weight.T
    with torch.no_grad():
        assert_close(attention(x)[0], expected, FLOAT64)
    assert step.lambda_init == 0.8 - 0.6 * math.exp(-0.6)


def test_the_lambda_vectors_start_at_their_own_distribution_under_every_scheme():
    for init in ("normal(std=0.02)", "xavier", "t5"):
        model = tfspec.compile(f"defaults {{ init {init} }}\n" + SPEC.format(kv_heads=2).replace(
            "dim 32", "dim 512").replace("heads=4", "heads=2").replace("kv_heads=2", "kv_heads=2")
            .replace("kind=differential(eps=1e-6)", "kind=differential(std=0.3, eps=1e-6)"), seed=0)
        drawn = torch.cat([getattr(layer.self_attn.differential, f"lambda_{side}").detach()
                           for layer in model.decoder.layers for side in ("q1", "k1", "q2", "k2")])
        assert 0.27 < float(drawn.std()) < 0.33, init


def test_differential_attention_pairs_heads():
    with pytest.raises(tfspec.SpecError, match="pairs heads") as info:
        tfspec.parse(SPEC.format(kv_heads=1))
    assert info.value.line == 5
