"""A spec as data (``tfspec.interop.document``) and the base layouts families derive their specs from."""

from __future__ import annotations

import pytest

import tfspec
from tfspec.interop.document import Block, Document, Statement
from tfspec.interop.families import hf_bloom, hf_mpt
from tfspec.interop.writer import SpecWriter

BASE = Document.of(Block("defaults", Statement("residual", "pre"), Statement("norm", "rmsnorm")),
                   Block("embedding tokens", Statement("vocab", "10"), Statement("dim", "8")),
                   Block("decoder x 2", Statement("attention", "self", heads="2", mask="causal"),
                         Statement("feedforward", d_ff="16", activation="swiglu")),
                   tail=("head tied(tokens)",))


def test_a_document_is_the_spec_it_says_and_parses():
    spec = tfspec.parse(BASE.text("base"))
    assert spec.name == "base" and spec.kind == "decoder-only" and spec.decoder.repeat == 2


def test_changes_keep_each_option_in_its_place_remove_with_none_and_add_after_the_others():
    changed = BASE.change("decoder", "attention", mask="causal + padding", bias="false")
    assert "attention self heads=2 mask=causal + padding bias=false" in changed.text("m")
    removed = changed.change("decoder", "attention", heads=None)
    assert "attention self mask=causal + padding bias=false" in removed.text("m")
    assert BASE.change("decoder", "attention", "cross").blocks[2].body[0].args == ("cross",)
    assert "residual post  # why" in BASE.change("defaults", "residual", "post", comment="why").text("m")


def test_statements_are_added_where_said_and_dropped_by_name():
    added = BASE.add("decoder", Statement("position", "alibi"), before="attention").add(
        "embedding tokens", Statement("norm", "layernorm"))
    text = added.text("m")
    assert text.index("position alibi") < text.index("attention self") and "  norm layernorm\n}" in text
    assert "norm rmsnorm" not in BASE.drop("defaults", "norm").text("m")
    assert BASE.text("m") == Document.of(*BASE.blocks, tail=BASE.tail).text("m")  # (changes made copies)


def test_options_are_inserted_before_the_one_named_and_the_head_is_changed_in_place():
    inserted = BASE.insert("decoder", "attention", "mask", kind="longformer")
    assert "attention self heads=2 kind=longformer mask=causal" in inserted.text("m")
    headed = BASE.with_tail(Statement("pooler", "tanh"), Statement("head", "tied(tokens)", transform="gelu"))
    assert headed.change_tail("head", transform="relu").text("m").endswith("pooler tanh\n\nhead tied(tokens) "
                                                                           "transform=relu\n")
    with pytest.raises(KeyError, match="no top-level 'mtp'"):
        headed.change_tail("mtp", depth="1")
    with pytest.raises(KeyError, match="statement 'attention' has no option 'scale'"):
        BASE.insert("decoder", "attention", "scale", kind="longformer")


@pytest.mark.parametrize("change, message", [
    (lambda d: d.change("encoder", "attention", bias="false"), "no block 'encoder'"),
    (lambda d: d.change("decoder", "mixer", kernel="4"), "block 'decoder x 2' has no statement 'mixer'"),
    (lambda d: d.add("decoder", Statement("position", "alibi"), before="final"), "has no statement 'final'"),
])
def test_a_change_naming_what_is_not_there_says_so(change, message):
    with pytest.raises(KeyError, match=message):
        change(BASE)


def test_mpt_is_blooms_document_changed_by_its_differences():
    """MPT's spec derived from BLOOM's (``hf_mpt.MPT.spec_text``) differs from it by what MPT's conventions say and by
    nothing else: its norms lose their bias, its embeddings their norm, its projections their biases."""
    import transformers as T
    bloom = T.BloomConfig(vocab_size=50, hidden_size=16, n_layer=2, n_head=2)
    mpt = T.MptConfig(vocab_size=50, d_model=16, n_layers=2, n_heads=2)
    w = SpecWriter()
    base = hf_bloom.document(hf_mpt.FIELDS.write(mpt, w), padding=True, head=True).text("m").split("\n")
    ours = [line.strip() for line in hf_mpt.MPT.spec_text(mpt, name="m").split("\n")
            if line.startswith(" ")]
    assert "norm layernorm(eps=eps)" in [line.strip() for line in base]
    assert "norm layernorm(eps=eps, bias=false)" in ours and "position alibi" in ours
    assert "attention self heads=heads mask=causal + padding bias=false" in ours
    assert "feedforward d_ff=4 * d_model activation=gelu bias=false" in ours
    assert not any(line.startswith("dropout") for line in ours)  # (MPT's table has no dropout)
    assert hf_bloom.BLOOM.spec_text(bloom, name="b").count("layernorm(eps=eps)") == 3  # defaults, embedding, final
