"""Hugging Face ``RobertaForMaskedLM`` / ``RobertaModel`` (and XLM-RoBERTa's) <-> a compiled encoder-only spec.

RoBERTa (Liu et al. 2019) is BERT's encoder (``hf_bert``) with two conventions of its own. Its
learned positions start after the padding token's id: position p reads row ``p + padding_idx + 1`` (two rows are
never read by a real token) and a padded batch's positions count only its real tokens (a pad reads row
``padding_idx``) -- ``learned(max_len, offset=padding_idx + 1, skip_padding=true)``. Its MLM head applies GELU
whatever ``hidden_act`` says, and is named ``lm_head``. XLM-RoBERTa is the same model with another vocabulary.
Hugging Face numbers positions by *token id* (a pad is a token equal to ``pad_token_id``), tfspec by the padding
mask: they agree wherever the pad token appears only where the batch is padded, as tokenizers put it.
"""

from __future__ import annotations

from . import hf_bert
from ..document import Document
from ..fields import Field, Fields
from ..family import masked_lm
from ..mapping import InteropError
from ..weights import MaskedLMHead
from ..layouts import covering


def _padding_idx(f) -> int:
    """The padding token's id, one below the first row a position reads."""
    position = f.embedding.position
    if f.position_table() is None or not position.options.get("skip_padding") or position.options["offset"] < 1:
        raise f.refuse(f"its positions are {position}, not learned(max_len, offset=padding_idx + 1, "
                       "skip_padding=true)")
    return position.options["offset"] - 1


FIELDS = Fields(*hf_bert.FIELDS.entries,
                Field("padding_idx", "pad_token_id", _padding_idx, let=False), ignored=hf_bert.FIELDS.ignored)


def document(s, *, pooler: bool, head: bool, padding: bool) -> Document:
    """RoBERTa's spec: BERT's whose positions start after the padding token's row and count real tokens only, its
    MLM head with GELU."""
    pad, length = s.config.pad_token_id, s.config.max_position_embeddings
    if pad is None or pad + 1 >= length:
        raise InteropError(f"pad_token_id {pad} leaves no row of the {length} positions for a token")
    document = hf_bert.document(s, pooler=pooler, head=head, padding=padding).change(
        "embedding tokens", "position", f"learned(max_len, offset={pad + 1}, skip_padding=true)")
    return document.change_tail("head", transform="gelu") if head else document


# BERT's checkpoint with its MLM head named ``lm_head``
EXAMPLES = {
    "RobertaForMaskedLM": dict(model_type="roberta", vocab_size=90, hidden_size=32, num_hidden_layers=2,
                               num_attention_heads=4, intermediate_size=64, max_position_embeddings=42,
                               type_vocab_size=1, hidden_act="relu", pad_token_id=1),
    "RobertaModel": dict(model_type="roberta", vocab_size=90, hidden_size=32, num_hidden_layers=1,
                         num_attention_heads=4, intermediate_size=64, max_position_embeddings=42, pad_token_id=1),
    "XLMRobertaForMaskedLM": dict(model_type="xlm-roberta", vocab_size=90, hidden_size=32, num_hidden_layers=1,
                                  num_attention_heads=4, intermediate_size=64, max_position_embeddings=42,
                                  pad_token_id=1),
    "XLMRobertaModel": dict(model_type="xlm-roberta", vocab_size=90, hidden_size=32, num_hidden_layers=1,
                            num_attention_heads=4, intermediate_size=64, max_position_embeddings=30,
                            pad_token_id=2),
}

COVERAGE = [covering("roberta", num_hidden_layers=3, max_position_embeddings=35, layer_norm_eps=1e-7,
                     hidden_dropout_prob=0.2, attention_probs_dropout_prob=0.3, initializer_range=0.05,
                     type_vocab_size=3, hidden_act="relu", tie_word_embeddings=False, pad_token_id=3,
                     architectures=["RobertaForMaskedLM"])]


WEIGHTS = hf_bert.WEIGHTS.derive(head=MaskedLMHead("lm_head.dense", "lm_head.layer_norm", "lm_head.decoder",
                                                   "lm_head.bias"))

ROBERTA = hf_bert.BERT.derive(
    "RoBERTa", ("roberta", "xlm-roberta"),
    {**masked_lm("Roberta"), **masked_lm("XLMRoberta")},
    "RoBERTa (Liu et al. 2019) and XLM-RoBERTa: BERT's encoder whose learned positions start at row "
    "padding_idx + 1 and count only real tokens, one segment, an MLM head with GELU",
    priority=20, fields=FIELDS, document=document, prefix="roberta.", rules=WEIGHTS)
