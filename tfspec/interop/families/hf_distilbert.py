"""Hugging Face ``DistilBertForMaskedLM`` / ``DistilBertModel`` <-> a compiled encoder-only spec.

DistilBERT (Sanh et al. 2019) is BERT's encoder (``hf_bert``'s template) without token types or
pooler, its LayerNorms' eps fixed at 1e-12, and its MLM head (``vocab_transform``, the activation,
``vocab_layer_norm``, the tied ``vocab_projector`` with a bias) BERT's head under other names. Fixed sinusoidal
positions (``sinusoidal_pos_embds``) are not read: such a configuration is refused.
"""

from __future__ import annotations

from . import hf_bert
from ..fields import Field, Fields, Fixed, standard
from ..document import Document, Statement
from ..family import Requires, masked_lm
from ..weights import MaskedLMHead

EPS = 1e-12  # every DistilBERT LayerNorm's

FIELDS = Fields(
    *standard("encoder", d_model="dim", heads="n_heads", layers="n_layers", d_ff="hidden_dim", vocab="vocab_size",
              max_len="max_position_embeddings", p_dropout="dropout", p_attn_dropout="attention_dropout",
              init_std="initializer_range"),
    Field("activation", "activation", lambda f: f.feedforward("encoder").activation.name,
          names=hf_bert.ACTIVATIONS),
    Field("tied", "tie_word_embeddings", lambda f: f.tied, let=False),
    Fixed("sinusoidal_pos_embds", False, "sinusoidal_pos_embds={value}: DistilBERT's fixed sinusoid table is not "
          "read (learned positions only)"),
    ignored={"qa_dropout": "dropout of the question-answering head, which tfspec does not import",
             "seq_classif_dropout": "dropout of the classification head, which tfspec does not import"},
)


def document(s, *, pooler: bool, head: bool, padding: bool) -> Document:
    """DistilBERT's spec (``head``: the MLM head): BERT's without segments or a pooler, its LayerNorms' eps fixed,
    the embeddings dropped out."""
    return hf_bert.document(s, pooler=False, head=head, padding=padding, norm=f"layernorm(eps={EPS})").add(
        "embedding tokens", Statement("dropout", s.p_dropout))


EXAMPLES = {
    "DistilBertForMaskedLM": dict(model_type="distilbert", vocab_size=90, dim=32, n_layers=2, n_heads=4,
                                  hidden_dim=64, max_position_embeddings=40),
    "DistilBertModel": dict(model_type="distilbert", vocab_size=90, dim=32, n_layers=1, n_heads=4, hidden_dim=64,
                            max_position_embeddings=40, activation="relu"),
}

COVERAGE = [dict(model_type="distilbert", vocab_size=91, dim=24, n_layers=3, n_heads=3, hidden_dim=40,
                 max_position_embeddings=33, dropout=0.2, attention_dropout=0.3, initializer_range=0.05,
                 activation="relu", tie_word_embeddings=False, architectures=["DistilBertForMaskedLM"])]


DISTILBERT = hf_bert.BERT.derive(
    "DistilBERT", ("distilbert",), masked_lm("DistilBert", pooler=False),
    "DistilBERT (Sanh et al. 2019): BERT's post-norm encoder without token types or pooler, LayerNorms of "
    "eps 1e-12, BERT's MLM head under other names",
    priority=60, fields=FIELDS, document=document, prefix="distilbert.",
    requires=(Requires(lambda f: not f.embedding.segments and f.spec.pooler is None,
                       "it has token types or a pooler; DistilBERT has neither"),),
    rules=hf_bert.WEIGHTS.derive(
        {"self_attn.qkv": tuple(f"attention.{n}_lin" for n in "qkv"), "self_attn.out": "attention.out_lin",
         "self_attn_norm": "sa_layer_norm", "ffn.up": "ffn.lin1", "ffn.down": "ffn.lin2",
         "ffn_norm": "output_layer_norm"},
        layers="transformer.layer",
        head=MaskedLMHead("vocab_transform", "vocab_layer_norm", "vocab_projector", "vocab_projector.bias")))
