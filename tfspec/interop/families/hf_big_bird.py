"""Hugging Face ``BigBirdModel`` / ``BigBirdForMaskedLM`` <-> a compiled encoder-only spec.

BigBird's weights have BERT's names and layout (``hf_bert``'s mapping); its attention is
``kind=bigbird(block_size, random=num_random_blocks)`` with ``attention_type="block_sparse"``, ``kind=dot``
with ``"original_full"``. Which random blocks each query block sees is not a weight: Hugging Face draws them
with numpy, seeded by the layer index, in training, and uses block 0 for all of them in eval; tfspec draws them
from its own seeded generator, the same in training and eval. Outputs agree given the same blocks (the tests
give tfspec Hugging Face's, ``BigBirdAttention.patterns``).
"""

from __future__ import annotations

from ...registry import ATTENTION_KINDS
from ..fields import Field, Fields
from ..family import masked_lm
from . import hf_bert
from ..document import Document, Statement
from ..weights import MaskedLMHead
from ..layouts import covering


def _kind(f):
    return f.attention("encoder").kind


def _blocks(option: str):
    """A block-sparse attention's option, for export (None with full attention)."""
    return lambda f: _kind(f).options[option] if ATTENTION_KINDS[_kind(f).name].own_pattern else None


def _when_sparse(field: str):
    """A configuration's block field, for import: it only counts with block-sparse attention."""
    return lambda c: getattr(c, field) if c.attention_type == "block_sparse" else None


OWN_FIELDS = Fields(  # BigBird's own; the rest are BERT's (written by BERT's spec_text)
    Field("block", "block_size", _blocks("block"), read=_when_sparse("block_size")),
    Field("random_blocks", "num_random_blocks", _blocks("random"), read=_when_sparse("num_random_blocks")),
    Field("attention", "attention_type", lambda f: _kind(f).name,
          names={"block_sparse": "bigbird", "original_full": "dot"}),
    Field("qkv_bias", "use_bias", lambda f: f.attention("encoder").bias, let=False),
    Field("rescale", "rescale_embeddings", lambda f: f.embedding.scale != 1.0, let=False),
)
FIELDS = OWN_FIELDS + hf_bert.FIELDS


def document(s, *, pooler: bool, head: bool, padding: bool) -> Document:
    """BigBird's spec: ``BigBirdModel`` with ``pooler``, ``BigBirdForMaskedLM`` with ``head`` (BERT's, with
    BigBird's attention and embedding scale)."""
    kind = f"bigbird({s.block}, random={s.random_blocks})" if s.attention == "bigbird" else s.attention
    document = hf_bert.document(s, pooler=pooler, head=head, padding=padding).insert(
        "encoder", "attention", "mask", kind=kind, bias=s.qkv_bias, out_bias="true")
    if s.value("rescale"):
        document = document.add("embedding tokens", Statement("scale", repr(float(s.config.hidden_size) ** 0.5)))
    return document


EXAMPLES = {
    "BigBirdModel": dict(model_type="big_bird", vocab_size=90, hidden_size=32, num_hidden_layers=1,
                         num_attention_heads=4, intermediate_size=64, max_position_embeddings=64,
                         attention_type="original_full"),
    "BigBirdForMaskedLM": dict(model_type="big_bird", vocab_size=90, hidden_size=32, num_hidden_layers=2,
                               num_attention_heads=4, intermediate_size=64, max_position_embeddings=128,
                               block_size=4, num_random_blocks=1),
}

COVERAGE = [covering("big_bird", num_hidden_layers=3, max_position_embeddings=96, layer_norm_eps=1e-7,
                     hidden_dropout_prob=0.2, attention_probs_dropout_prob=0.3, initializer_range=0.05,
                     type_vocab_size=3, hidden_act="relu", tie_word_embeddings=False, block_size=4, num_random_blocks=2,
                     use_bias=False, rescale_embeddings=True, architectures=["BigBirdForMaskedLM"]),
            covering("big_bird", num_hidden_layers=1, attention_type="original_full")]


BIG_BIRD = hf_bert.BERT.derive(
    "BigBird", ("big_bird",), masked_lm("BigBird", lm_pooler=True),  # (its masked LM keeps the pooler)
    "BigBird (Zaheer et al. 2020): BERT's encoder with block-sparse attention (window, global and random "
    "blocks)",
    priority=360, fields=FIELDS, document=document,
    rules=hf_bert.WEIGHTS.derive(head=MaskedLMHead(pooler="pooler")))  # (its pooler a linear map named pooler)
