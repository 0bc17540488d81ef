"""Compiled specs against the implementations people trust: same weights, same outputs (<= 1e-5)."""

from __future__ import annotations

import pytest
import torch

import tfspec
from tfspec.interop import InteropError
from tfspec.interop import from_hf_bert, to_hf_bert
from tfspec.interop import from_hf_gpt2, to_hf_gpt2
from tfspec.interop.torch_transformer import from_torch_transformer, to_torch_transformer
from numerics import FLOAT32, assert_close

transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()
TOL = FLOAT32


def torch_transformer_spec(residual: str, activation: str = "relu") -> str:
    return f"""
embedding tokens {{ vocab 23; dim 32 }}
defaults {{ residual {residual}; activation {activation}; dropout 0.1; attn_dropout 0.1; act_dropout 0.1 }}
encoder x 2 {{ attention self heads=4 mask=padding; feedforward d_ff=48; final layernorm }}
decoder x 3 {{ attention self heads=4 mask=causal + padding; attention cross heads=4 mask=padding; feedforward d_ff=48; final layernorm }}
"""


@pytest.mark.parametrize("norm_first", [False, True])
def test_matches_torch_nn_transformer(norm_first):
    torch.manual_seed(0)
    reference = torch.nn.Transformer(d_model=32, nhead=4, num_encoder_layers=2, num_decoder_layers=3,
                                     dim_feedforward=48, dropout=0.1, batch_first=True, norm_first=norm_first).eval()
    model = tfspec.compile(torch_transformer_spec("pre" if norm_first else "post")).eval()
    assert from_torch_transformer(model, reference) == ["embeddings.tokens.tokens.weight"]
    src, tgt = torch.randint(0, 23, (3, 9)), torch.randint(0, 23, (3, 6))
    src_pad = torch.zeros(3, 9, dtype=torch.bool)
    src_pad[1, 6:] = src_pad[2, 2:] = True
    tgt_pad = torch.zeros(3, 6, dtype=torch.bool)
    tgt_pad[2, 4:] = True
    embed = model.embeddings.tokens.tokens.weight
    with torch.no_grad():
        ours = model(src, tgt, src_pad, tgt_pad)
        theirs = reference(embed[src], embed[tgt], tgt_mask=reference.generate_square_subsequent_mask(6),
                           src_key_padding_mask=src_pad, tgt_key_padding_mask=tgt_pad,
                           memory_key_padding_mask=src_pad, tgt_is_causal=True)
    assert_close(ours[~tgt_pad], theirs[~tgt_pad], TOL)
    fresh = torch.nn.Transformer(d_model=32, nhead=4, num_encoder_layers=2, num_decoder_layers=3,
                                 dim_feedforward=48, batch_first=True, norm_first=norm_first)
    fresh.load_state_dict(to_torch_transformer(model))  # strict: every key present and used
    assert all(torch.equal(a, b) for a, b in zip(fresh.state_dict().values(), reference.state_dict().values()))


def test_torch_transformer_mismatch_is_an_error_listing_it():
    reference = torch.nn.Transformer(d_model=32, nhead=4, num_encoder_layers=2, num_decoder_layers=3,
                                     dim_feedforward=48, batch_first=True, norm_first=True)
    model = tfspec.compile(torch_transformer_spec("post", "gelu"))
    with pytest.raises(InteropError) as info:
        from_torch_transformer(model, reference)
    text = str(info.value)
    assert "encoder self_attn: residual post, but torch.nn.Transformer is pre-norm" in text
    assert "encoder ffn: activation gelu, reference relu" in text
    no_final = tfspec.compile(torch_transformer_spec("pre").replace("; final layernorm", ""))
    with pytest.raises(InteropError, match=r"torch.nn.Transformer tensors with no place in the compiled model \(4\)"):
        from_torch_transformer(no_final, reference)
    extra = torch_transformer_spec("pre").replace("feedforward d_ff=48; final", "feedforward d_ff=48; feedforward d_ff=8; final", 1)
    with pytest.raises(InteropError, match=r"has no place for \(12\):\n    encoder.layers.0.ffn_1_norm.weight"):
        to_torch_transformer(tfspec.compile(extra))


def bert_config(**kw):
    return transformers.BertConfig(vocab_size=60, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                   intermediate_size=128, max_position_embeddings=24, **kw)


BERT_SIZES = {"d_model": 32, "heads": 4, "layers": 2, "vocab": 60, "max_len": 24}


def test_matches_hf_bert_model_with_padding_and_token_types():
    torch.manual_seed(0)
    reference = transformers.BertModel(bert_config()).eval()
    model = tfspec.compile("examples/bert_base.tfs", overrides=BERT_SIZES).eval()
    from_hf_bert(model, reference)
    tokens, types = torch.randint(0, 60, (3, 11)), torch.randint(0, 2, (3, 11))
    pad = torch.zeros(3, 11, dtype=torch.bool)
    pad[1, 7:] = pad[2, 3:] = True
    with torch.no_grad():
        hidden, pooled = model(tokens, pad, types)
        out = reference(input_ids=tokens, attention_mask=(~pad).long(), token_type_ids=types)
    assert_close(hidden[~pad], out.last_hidden_state[~pad], TOL)
    assert_close(pooled, out.pooler_output, TOL)
    reference.load_state_dict(to_hf_bert(model))


def test_matches_hf_bert_masked_lm_with_tied_transform_head():
    torch.manual_seed(0)
    reference = transformers.BertForMaskedLM(bert_config()).eval()
    model = tfspec.compile("examples/bert_base_mlm.tfs", overrides=BERT_SIZES).eval()  # as shipped
    from_hf_bert(model, reference)
    tokens = torch.randint(0, 60, (2, 10))
    with torch.no_grad():
        assert_close(model(tokens), reference(input_ids=tokens).logits, TOL)
    state = to_hf_bert(model)
    assert torch.equal(state["cls.predictions.decoder.weight"], state["bert.embeddings.word_embeddings.weight"])
    reference.load_state_dict(state)


def gpt2_reference(**kw):
    config = transformers.GPT2Config(vocab_size=70, n_embd=32, n_layer=3, n_head=4, n_positions=20,
                                     resid_pdrop=0.1, embd_pdrop=0.1, attn_pdrop=0.1, bos_token_id=0,
                                     eos_token_id=0, **kw)
    return transformers.GPT2LMHeadModel(config).eval()


GPT2_SIZES = {"d_model": 32, "heads": 4, "layers": 3, "vocab": 70, "context": 20}


def test_matches_hf_gpt2_lm_head_logits():
    torch.manual_seed(0)
    reference = gpt2_reference()
    model = tfspec.compile("examples/gpt2_small.tfs", overrides=GPT2_SIZES).eval()
    from_hf_gpt2(model, reference)
    tokens = torch.randint(0, 70, (3, 20))
    with torch.no_grad():
        assert_close(model(tokens), reference(tokens).logits, TOL)
    fresh = gpt2_reference()
    fresh.load_state_dict(to_hf_gpt2(model))
    with torch.no_grad():
        assert torch.equal(fresh(tokens).logits, reference(tokens).logits)


def test_gpt2_mismatches_are_listed():
    reference = gpt2_reference(activation_function="relu")
    model = tfspec.compile("examples/gpt2_small.tfs", overrides={**GPT2_SIZES, "layers": 2})
    with pytest.raises(InteropError) as info:
        from_hf_gpt2(model, reference)
    text = str(info.value)
    assert "decoder.ffn: activation GELU (tanh) → ReLU (ours → GPT2LMHeadModel)" in text
    assert "decoder: layers 2 → 3 (ours → GPT2LMHeadModel)" in text
    assert "n_layer: 3 in the configuration, 2 in the spec" in text  # and the configuration fields, first
    assert "activation_function: 'relu' in the configuration, 'gelu_new' in the spec" in text
    assert "transformer.h" not in text  # the architecture is refused before any tensor is named
    untied = gpt2_reference(tie_word_embeddings=False)
    with pytest.raises(InteropError) as info:
        from_hf_gpt2(tfspec.compile("examples/gpt2_small.tfs", overrides=GPT2_SIZES), untied)
    assert "head: projection tied to 'tokens' → linear(70) (ours → GPT2LMHeadModel)" in str(info.value)


def count(module) -> int:
    return sum(p.numel() for p in module.parameters())  # shared (tied) parameters once


def test_full_size_parameter_counts_equal_the_references():
    with torch.device("meta"):
        gpt2 = transformers.GPT2LMHeadModel(transformers.GPT2Config())
        bert = transformers.BertModel(transformers.BertConfig())
        gpt1 = transformers.OpenAIGPTLMHeadModel(transformers.OpenAIGPTConfig())
        paper = torch.nn.Transformer(d_model=512, nhead=8, dim_feedforward=2048)
    assert count(tfspec.compile("examples/gpt2_small.tfs", device="meta")) == count(gpt2) == 124_439_808
    assert count(tfspec.compile("examples/bert_base.tfs", device="meta")) == count(bert) == 109_482_240
    assert count(tfspec.compile("examples/gpt1.tfs", device="meta")) == count(gpt1) == 116_534_784
    # nn.Transformer has no embeddings but always has final norms; the paper's model has one shared
    # 37000 x 512 embedding (also the output projection) and no final norms.
    ours = count(tfspec.compile("examples/vaswani_base.tfs", device="meta"))
    assert ours - 37000 * 512 == count(paper) - 2 * (2 * 512)


def test_cached_greedy_generation_matches_hf_gpt2_generate():
    """Our KV-cached greedy decoding gives Hugging Face's tokens, and its step logits, for the same weights."""
    from tfspec.run.decoding import Continuation, sample

    torch.manual_seed(1)
    reference = gpt2_reference()
    model = tfspec.compile("examples/gpt2_small.tfs", overrides=GPT2_SIZES).eval()
    from_hf_gpt2(model, reference)
    prompt = torch.randint(1, 70, (3, 5))
    ours = sample(Continuation(model), prompt, 15)
    reference.generation_config.eos_token_id = None  # run the full length, like ours without an end token
    with torch.no_grad():
        out = reference.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=15,
                                 do_sample=False, pad_token_id=0, output_logits=True, return_dict_in_generate=True)
    assert out.sequences[:, 5:].tolist() == ours
    steps = Continuation(model)
    with torch.no_grad():
        logits = [steps.feed(prompt)] + [steps.feed(out.sequences[:, i:i + 1]) for i in range(5, 19)]
    for a, b in zip(logits, out.logits):
        assert_close(a, b, TOL)


@pytest.mark.parametrize("edit, expected, field", [
    (("  norm layernorm(eps=1e-12)\n}", "  norm layernorm(eps=1e-6)\n}"), "embedding tokens: norm layernorm(eps=1e-06) → ",
     "layer_norm_eps: 1e-12 in the configuration, 1e-06 in the spec"),
    (("  segments 2\n", "  segments 2\n  scale 2.0\n"), "embedding tokens: scale 2 → 1", None),
    (("pooler tanh", "pooler relu"), "pooler: activation relu → tanh", None),  # no field: BERT's pooler is tanh
    (("activation=gelu", "activation=relu"), "encoder.ffn: activation ReLU → GELU",
     "hidden_act: 'gelu' in the configuration, 'relu' in the spec"),
])
def test_bert_interop_refuses_embedding_and_pooler_differences_that_change_outputs(edit, expected, field):
    """Every differing fact is listed, and first the configuration field that differs, where one does."""
    torch.manual_seed(0)
    reference = transformers.BertModel(bert_config()).eval()
    text = open("examples/bert_base.tfs").read()
    assert edit[0] in text
    model = tfspec.compile(text.replace(edit[0], edit[1]), overrides=BERT_SIZES)
    with pytest.raises(InteropError) as info:
        from_hf_bert(model, reference)
    assert expected in str(info.value), str(info.value)
    lines = str(info.value).splitlines()
    assert (lines[1].strip() == field) if field else "in the configuration" not in str(info.value)
