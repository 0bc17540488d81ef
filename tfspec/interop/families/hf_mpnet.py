"""Hugging Face ``MPNetForMaskedLM`` / ``MPNetModel`` (Song et al. 2020; all-mpnet-base-v2's encoder) <-> a
compiled encoder-only spec.

MPNet is RoBERTa's post-norm encoder (``hf_roberta``: learned positions from row 2 counting only
real tokens, an MLM head with GELU) without token types, whose attention adds a relative position bias shared by
the stack's layers: T5's bidirectional buckets (``position t5(num_buckets=32, max_distance=128)``, one table of
32 buckets per head) on top of scores scaled by 1/sqrt(head_dim). Hugging Face numbers its positions after token
id 1 and computes 32 buckets whatever ``pad_token_id`` and ``relative_attention_num_buckets`` say, so other
values are refused.
"""

from __future__ import annotations

from ..document import Document, Statement
from . import hf_bert, hf_roberta
from ..family import Requires, masked_lm
from ..fields import Field, Fields, Fixed
from ..mapping import InteropError
from ..layouts import covering

_BERT = [e for e in hf_bert.FIELDS.entries if isinstance(e, Field) and e.name != "segments"]


def _t5(f) -> dict:
    """The stack's relative bias (refused where its attention has another scheme)."""
    return f.stack_bias("encoder").options


FIELDS = Fields(
    *_BERT,
    Fixed("relative_attention_num_buckets", 32, "relative_attention_num_buckets={value}: MPNet's encoder computes "
          "32 buckets whatever this says (it sizes the table only)"),
    Fixed("pad_token_id", 1, "pad_token_id={value}: MPNet numbers its positions after token id 1 whatever this "
          "says, which tfspec's padding mask cannot follow", read=lambda c: c.pad_token_id),
    ignored=hf_bert.FIELDS.ignored,
)


def document(s, *, pooler: bool, head: bool, padding: bool) -> Document:
    """MPNet's spec: RoBERTa's without segments, with T5's relative bias shared by the stack's layers."""
    if s.config.max_position_embeddings <= 2:
        raise InteropError(f"max_position_embeddings {s.config.max_position_embeddings} leaves no row for a token")
    document = (hf_bert.document(s, pooler=pooler, head=head, padding=padding)
                .change("embedding tokens", "position", "learned(max_len, offset=2, skip_padding=true)")
                .add("encoder", Statement("position", "t5(num_buckets=32, max_distance=128)",
                                          comment="shared by the layers")))
    return document.change_tail("head", transform="gelu") if head else document


def _mpnet_bias(f) -> bool:
    options = _t5(f)
    return (options.get("num_buckets"), options.get("max_distance")) == (32, 128) and options.get("bidirectional",
                                                                                                    True)


EXAMPLES = {
    "MPNetForMaskedLM": dict(model_type="mpnet", vocab_size=90, hidden_size=32, num_hidden_layers=2,
                             num_attention_heads=4, intermediate_size=48, max_position_embeddings=40),
    "MPNetModel": dict(model_type="mpnet", vocab_size=90, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                       intermediate_size=48, max_position_embeddings=40, hidden_act="relu", layer_norm_eps=1e-5),
}

COVERAGE = [covering("mpnet", num_hidden_layers=3, max_position_embeddings=35, layer_norm_eps=1e-7,
                     hidden_dropout_prob=0.2, attention_probs_dropout_prob=0.3, initializer_range=0.05,
                     hidden_act="relu", tie_word_embeddings=False, architectures=["MPNetForMaskedLM"])]


MPNET = hf_roberta.ROBERTA.derive(
    "MPNet", ("mpnet",), masked_lm("MPNet"),
    "MPNet (all-mpnet-base-v2): RoBERTa's post-norm encoder without token types, positions from row 2 "
    "counting real tokens, and T5's bidirectional relative bias (32 buckets, distance 128) shared by the "
    "stack's layers",
    priority=480, fields=FIELDS, document=document, prefix="mpnet.",
    requires=(Requires(lambda f: not f.embedding.segments, "its embedding adds token types, which MPNet's has none of"),
              Requires(_mpnet_bias, "its relative bias is not MPNet's: 32 bidirectional buckets up to distance 128")),
    # RoBERTa's with MPNet's names, no token types, and the stack's relative bias table
    rules=hf_roberta.WEIGHTS.derive(
        {"self_attn.qkv": tuple(f"attention.attn.{n}" for n in "qkv"), "self_attn.out": "attention.attn.o",
         "self_attn_norm": "attention.LayerNorm"},
        top={"embeddings.tokens.segments": None,
             "encoder.positions.self_attn": "encoder.relative_attention_bias"}))
