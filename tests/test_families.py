"""The modern decoder family against Hugging Face: Llama (GQA), Mistral (sliding window), GPT-NeoX (parallel
residual, partial rotary). Random weights from small configs, fp32, eval; nothing is downloaded."""

from __future__ import annotations

import pytest
import torch

import tfspec
from tfspec.inspect.analysis import count_parameters
from tfspec.run.decoding import Continuation, sample
from tfspec.interop import InteropError
from tfspec.interop import from_hf_gpt_neox, from_hf_llama, to_hf_gpt_neox, to_hf_llama
from tfspec.interop.families.hf_gpt_neox import GPT_NEOX
from tfspec.interop.families.hf_llama import LLAMA

llama_spec, neox_spec = LLAMA.spec_text, GPT_NEOX.spec_text
from tfspec.interop.mapping import architecture_problems
from numerics import FLOAT32, assert_close

T = pytest.importorskip("transformers")

LLAMA2_7B = dict(vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                 num_attention_heads=32, num_key_value_heads=32, rms_norm_eps=1e-5, rope_theta=10000.0)
MISTRAL_7B = dict(vocab_size=32000, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
                  num_attention_heads=32, num_key_value_heads=8, rms_norm_eps=1e-5, rope_theta=10000.0,
                  sliding_window=4096)
PYTHIA_160M = dict(vocab_size=50304, hidden_size=768, intermediate_size=3072, num_hidden_layers=12,
                   num_attention_heads=12, rotary_pct=0.25, rotary_emb_base=10000, layer_norm_eps=1e-5,
                   use_parallel_residual=True, tie_word_embeddings=False)
FULL_SIZE = [("llama2_7b", T.LlamaConfig, T.LlamaForCausalLM, LLAMA2_7B, llama_spec),
             ("mistral_7b", T.MistralConfig, T.MistralForCausalLM, MISTRAL_7B, llama_spec),
             ("pythia_160m", T.GPTNeoXConfig, T.GPTNeoXForCausalLM, PYTHIA_160M, neox_spec)]


@pytest.mark.parametrize("example, config_class, model_class, config, describe", FULL_SIZE, ids=lambda x: str(x)[:12])
def test_examples_have_the_parameters_and_architecture_of_hugging_faces_models(example, config_class, model_class,
                                                                               config, describe):
    with torch.device("meta"):
        reference = model_class(config_class(**config))
    spec = tfspec.load(f"examples/{example}.tfs")
    assert count_parameters(spec.graph()) == sum(p.numel() for p in reference.parameters())
    assert architecture_problems(spec, describe(reference.config), "HF") == []


def test_check_prints_the_hugging_face_parameter_count_of_llama2_7b(tfspec_cli):
    result = tfspec_cli("check", "examples/llama2_7b.tfs")
    assert result.returncode == 0, result.stderr
    assert "6,738,415,616 parameters" in result.stdout


def left_padded(vocab: int, length: int = 11, pads: int = 4, seed: int = 0):
    """Two rows, the second left-padded; the attention mask, padding mask and position ids HF generate uses."""
    ids = torch.randint(0, vocab, (2, length), generator=torch.Generator().manual_seed(seed))
    attention_mask = torch.ones(2, length, dtype=torch.long)
    attention_mask[1, :pads] = 0
    positions = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    return ids, attention_mask, positions


def assert_same_logits(ours, reference, vocab: int, length: int = 11):
    ids, attention_mask, positions = left_padded(vocab, length)
    with torch.no_grad():
        expected = reference(ids, attention_mask=attention_mask, position_ids=positions).logits
        got = ours(ids, padding_mask=attention_mask == 0, position_ids=positions)
    real = attention_mask.bool()  # HF's outputs at padded positions are arbitrary
    assert expected[real].abs().max() > 1e-3  # a real comparison, not of zeros
    assert_close(got[real], expected[real], FLOAT32)


def pair(config, model_class, describe, load, seed=0):
    torch.manual_seed(seed)
    reference = model_class(config).eval()
    ours = tfspec.compile(describe(config), seed=seed).eval()
    load(ours, reference)
    return ours, reference


TINY_LLAMA = dict(vocab_size=96, hidden_size=48, intermediate_size=80, num_hidden_layers=2, num_attention_heads=6,
                  num_key_value_heads=2, rms_norm_eps=1e-6, rope_theta=500000.0)


def test_llama_with_grouped_query_attention_equals_hugging_face_on_a_left_padded_batch():
    ours, reference = pair(T.LlamaConfig(**TINY_LLAMA), T.LlamaForCausalLM, llama_spec, from_hf_llama)
    assert_same_logits(ours, reference, 96)
    exported = to_hf_llama(ours)
    assert exported.keys() == reference.state_dict().keys()
    assert all(torch.equal(exported[k], v) for k, v in reference.state_dict().items())


def test_mistral_with_a_sliding_window_shorter_than_the_sequence_equals_hugging_face():
    config = T.MistralConfig(**{**TINY_LLAMA, "sliding_window": 4})
    ours, reference = pair(config, T.MistralForCausalLM, llama_spec, from_hf_llama)
    assert "window(4)" in ours.spec.graph().node("decoder.self_attn").label
    assert_same_logits(ours, reference, 96, length=13)


@pytest.mark.parametrize("parallel", [True, False])
def test_gpt_neox_with_partial_rotary_equals_hugging_face(parallel):
    config = T.GPTNeoXConfig(vocab_size=96, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                             num_attention_heads=4, rotary_pct=0.25, rotary_emb_base=10000,
                             use_parallel_residual=parallel, tie_word_embeddings=False)
    ours, reference = pair(config, T.GPTNeoXForCausalLM, neox_spec, from_hf_gpt_neox)
    assert_same_logits(ours, reference, 96)
    exported = to_hf_gpt_neox(ours)
    assert all(torch.equal(exported[k], v) for k, v in reference.state_dict().items())


def test_cached_greedy_generation_equals_hugging_face_generate_for_llama():
    ours, reference = pair(T.LlamaConfig(**TINY_LLAMA), T.LlamaForCausalLM, llama_spec, from_hf_llama, seed=1)
    ids, attention_mask, _ = left_padded(96, length=6, pads=2, seed=1)
    with torch.no_grad():
        expected = reference.generate(ids, attention_mask=attention_mask, max_new_tokens=10, do_sample=False,
                                      pad_token_id=0)[:, ids.shape[1]:]
    steps = Continuation(ours, prompt_padding_mask=attention_mask == 0)
    assert steps.use_cache
    assert sample(steps, ids, max_new=10) == expected.tolist()
    recomputed = Continuation(ours, prompt_padding_mask=attention_mask == 0, use_cache=False)
    assert sample(recomputed, ids, max_new=10) == expected.tolist()


@pytest.mark.parametrize("change, expected", [
    ({"rope_theta": 10000.0}, "position rotary(theta=500000) → rotary"),
    ({"rms_norm_eps": 1e-5}, "rmsnorm(eps=1e-05)"),
    ({"num_key_value_heads": 3}, "kv heads 2 → 3"),
    ({"head_dim": 16}, "head dim 8 → 16"),
    ({"attention_bias": True}, "bias false → true"),
    ({"tie_word_embeddings": True}, "head: projection linear(96) → tied to 'tokens'"),
])
def test_every_llama_configuration_difference_is_refused_and_named(change, expected):
    torch.manual_seed(0)
    reference = T.LlamaForCausalLM(T.LlamaConfig(**{**TINY_LLAMA, **change}))
    ours = tfspec.compile(llama_spec(T.LlamaConfig(**TINY_LLAMA)))
    assert_refused_and_untouched(from_hf_llama, ours, reference, expected)


def assert_refused_and_untouched(load, ours, reference, expected: str) -> None:
    """``load(ours, reference)`` raises an InteropError saying ``expected``, and copies nothing."""
    before = {k: v.clone() for k, v in ours.state_dict().items()}
    with pytest.raises(InteropError) as info:
        load(ours, reference)
    assert expected in str(info.value), str(info.value)
    assert all(torch.equal(before[k], v) for k, v in ours.state_dict().items())  # nothing copied


def test_a_sliding_window_or_partial_rotary_that_differs_is_refused():
    torch.manual_seed(0)
    mistral = T.MistralForCausalLM(T.MistralConfig(**{**TINY_LLAMA, "sliding_window": 4}))
    with pytest.raises(InteropError, match=r"mask causal \+ padding → causal \+ padding \+ window\(4\)"):
        from_hf_llama(tfspec.compile(llama_spec(T.LlamaConfig(**TINY_LLAMA))), mistral)
    config = dict(vocab_size=96, hidden_size=64, intermediate_size=96, num_hidden_layers=1, num_attention_heads=4)
    neox = T.GPTNeoXForCausalLM(T.GPTNeoXConfig(**config, rotary_pct=0.5))
    with pytest.raises(InteropError, match=r"rotary\(fraction=0.25\) → rotary\(fraction=0.5\)"):
        from_hf_gpt_neox(tfspec.compile(neox_spec(T.GPTNeoXConfig(**config, rotary_pct=0.25))), neox)
    scaled = T.LlamaForCausalLM(T.LlamaConfig(**{**TINY_LLAMA, "rope_scaling": {"rope_type": "linear", "factor": 2.0}}))
    with pytest.raises(InteropError) as info:  # a spec of unscaled positions does not take scaled ones' weights
        from_hf_llama(tfspec.compile(llama_spec(T.LlamaConfig(**TINY_LLAMA))), scaled)
    assert "rope_parameters.rope_type: 'linear' in the configuration, 'default' in the spec" in str(info.value)
    assert "rotary(theta=500000) → rotary(theta=500000, scaling=linear, factor=2)" in str(info.value)
