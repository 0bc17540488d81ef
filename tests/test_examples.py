"""The shipped examples: published parameter counts, structure, and overrides."""

from pathlib import Path

import pytest

import tfspec
from tfspec.errors import SpecError

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

# Published figures: GPT-2 small and BERT-base (BertModel, with pooler) as counted by Hugging Face
# transformers; GPT-1 as OpenAIGPTModel; Vaswani base/big with source, target and output
# embeddings shared (the paper reports "65M"/"213M" without saying what it counted); T5-small as Hugging Face counts it.
PUBLISHED = {
    "gpt2_small": 124_439_808,
    "bert_base": 109_482_240,
    "bert_base_mlm": 109_514_298,  # BertForMaskedLM, the decoder tied to the word embeddings
    "gpt1": 116_534_784,
    "vaswani_base": 63_082_496,
    "vaswani_big": 214_245_376,
    "t5_small": 60_506_624,  # T5ForConditionalGeneration(t5-small's configuration), tests/test_t5.py
}


@pytest.mark.parametrize("name, count", PUBLISHED.items())
def test_parameter_counts(name, count):
    assert tfspec.load(EXAMPLES / f"{name}.tfs").parameter_count() == count


def test_bert_without_pooler_is_the_other_documented_figure():
    text = (EXAMPLES / "bert_base.tfs").read_text().replace("pooler tanh", "")
    assert tfspec.parse(text).parameter_count() == 108_891_648


def test_every_example_is_listed():
    assert {p.stem for p in EXAMPLES.glob("*.tfs")} >= set(PUBLISHED)


def test_example_structure():
    gpt2 = tfspec.load(EXAMPLES / "gpt2_small.tfs")
    assert gpt2.kind == "decoder-only" and gpt2.decoder.repeat == 12
    assert gpt2.decoder.final_norm.name == "layernorm"
    assert [s.residual for s in gpt2.decoder.block.sublayers] == ["pre", "pre"]
    assert gpt2.head.tied_to == "tokens" and not gpt2.head.bias
    bert = tfspec.load(EXAMPLES / "bert_base.tfs")
    assert bert.kind == "encoder-only" and bert.embeddings[0].segments == 2
    assert bert.embeddings[0].norm.options == {"eps": 1e-12, "bias": True}
    vaswani = tfspec.load(EXAMPLES / "vaswani_base.tfs")
    assert vaswani.kind == "encoder-decoder"
    assert vaswani.embeddings[0].scale == pytest.approx(512 ** 0.5)
    cross = vaswani.decoder.block.sublayers[1].body
    assert cross.reads == "cross" and cross.mask_names == ["padding"]
    assert vaswani.decoder.block.sublayers[0].body.mask_names == ["causal", "padding"]


def test_overrides_replace_parameters_and_dependents_follow():
    spec = tfspec.load(EXAMPLES / "bert_base.tfs", overrides={"layers": 2, "d_model": 64, "heads": 4})
    assert spec.encoder.repeat == 2
    assert spec.embeddings[0].dim == 64
    assert spec.encoder.block.sublayers[1].body.d_ff == 256  # d_ff = 4 * d_model follows
    assert spec.params["d_model"] == 64


def test_override_with_expression_and_validation():
    spec = tfspec.load(EXAMPLES / "gpt2_small.tfs", overrides={"context": "d_model * 2", "layers": 1})
    assert spec.embeddings[0].position.options["max_len"] == 1536
    with pytest.raises(SpecError) as info:  # an override sees only the parameters defined before it
        tfspec.load(EXAMPLES / "gpt2_small.tfs", overrides={"d_model": "heads * 16"})
    assert info.value.message == "parameter 'heads' is used before it is defined"
    assert (info.value.file, info.value.column) == ("--set d_model", 15)
    with pytest.raises(SpecError) as info:  # validated like the file's own values
        tfspec.load(EXAMPLES / "gpt2_small.tfs", overrides={"d_model": 100})
    assert info.value.codes == ["shape"] and "not divisible by heads=12" in info.value.message
    with pytest.raises(SpecError) as info:
        tfspec.load(EXAMPLES / "gpt2_small.tfs", overrides={"d_modle": 64})
    assert info.value.codes == ["override"] and info.value.first.hint == "did you mean 'd_model'?"
    with pytest.raises(SpecError) as info:
        tfspec.load(EXAMPLES / "gpt2_small.tfs", overrides={"layers": "2 +"})
    assert info.value.codes == ["syntax"] and info.value.file == "--set layers"


def test_missing_file():
    with pytest.raises(SpecError) as info:
        tfspec.load(EXAMPLES / "no_such.tfs")
    assert info.value.codes == ["io"] and "no such file" in info.value.message


def test_unilm_has_the_parameters_of_bert_large_cased_for_masked_lm():
    """UniLM is BERT-large (cased vocabulary) with the prefix mask; its MLM head is BertForMaskedLM's."""
    transformers = pytest.importorskip("transformers")
    import torch

    config = transformers.BertConfig(vocab_size=28996, hidden_size=1024, num_hidden_layers=24,
                                     num_attention_heads=16, intermediate_size=4096)
    with torch.device("meta"):
        reference = transformers.BertForMaskedLM(config)
    spec = tfspec.load(EXAMPLES / "unilm.tfs")
    assert spec.parameter_count() == sum(p.numel() for p in reference.parameters()) == 333_610_308
    assert [m.name for m in spec.decoder.block.sublayers[0].body.mask] == ["prefix", "padding"]
