"""Hugging Face ``AlbertForMaskedLM`` / ``AlbertModel`` <-> a compiled encoder-only spec.

ALBERT (Lan et al. 2020) is BERT's post-norm encoder with two ways to fewer parameters: a factorised embedding
(a table ``embedding_size`` wide, projected into the stack by ``embedding_hidden_mapping_in``: ``embedding
tokens { dim 128; project 768 }``) and cross-layer sharing (the layers run ``num_hidden_groups`` sets of
weights, each by a run of consecutive layers: ``weight_sets 1``). Its MLM head maps back into the table's
width with ``hidden_act`` and is tied to it; ``AlbertModel``'s pooler is one linear map and tanh.
"""

from __future__ import annotations

from ..document import Document, Statement
from . import hf_bert
from ..family import Requires, masked_lm
from ..fields import Field, Fields, Fixed
from ..weights import MaskedLMHead
from ..layouts import covering

FIELDS = Fields(
    Field("d_model", "hidden_size", lambda f: f.embedding.width),  # the stack's; the table's is embedding_size
    *(e for e in hf_bert.FIELDS.entries if getattr(e, "name", None) != "d_model"),
    Field("embedding_size", "embedding_size", lambda f: f.embedding.dim),
    Field("weight_sets", "num_hidden_groups", lambda f: f.weight_sets("encoder")),
    Fixed("inner_group_num", 1, "inner_group_num={value} runs {value} different layers per group each time the "
                                "group runs; tfspec's weight_sets run one layer's weights per layer"),
    ignored={**hf_bert.FIELDS.ignored,
             "classifier_dropout_prob": "dropout of classification heads, which tfspec does not import"},
)


def document(s, *, pooler: bool, head: bool, padding: bool) -> Document:
    """ALBERT's spec: BERT's with a narrower token table projected into the stack and layers sharing
    ``num_hidden_groups`` sets of weights."""
    return hf_bert.projected(hf_bert.document(s, pooler=pooler, head=head, padding=padding), s).add(
        "encoder", Statement("weight_sets", "weight_sets"))


EXAMPLES = {
    "AlbertForMaskedLM": dict(model_type="albert", vocab_size=90, embedding_size=16, hidden_size=32,
                              num_hidden_layers=3, num_attention_heads=4, intermediate_size=64,
                              max_position_embeddings=40),  # every layer runs one set of weights,
    "AlbertModel": dict(model_type="albert", vocab_size=90, embedding_size=32, hidden_size=32, num_hidden_layers=5,
                        num_hidden_groups=2, num_attention_heads=4, intermediate_size=64,
                        max_position_embeddings=40, hidden_act="relu"),
}

COVERAGE = [covering("albert", embedding_size=12, num_hidden_layers=6, num_hidden_groups=3, max_position_embeddings=33,
                     layer_norm_eps=1e-7, hidden_dropout_prob=0.2, attention_probs_dropout_prob=0.3,
                     initializer_range=0.05, type_vocab_size=3, hidden_act="relu", tie_word_embeddings=False,
                     architectures=["AlbertForMaskedLM"])]


ALBERT = hf_bert.BERT.derive(
    "ALBERT", ("albert",), masked_lm("Albert"),
    "ALBERT (Lan et al. 2020): BERT's post-norm encoder with a narrower token table projected into the stack "
    "and layers that share num_hidden_groups sets of weights (weight_sets); the MLM head maps back into the "
    "table's width with hidden_act and is tied to it",
    priority=40, fields=FIELDS, document=document, prefix="albert.",
    requires=(Requires(lambda f: f.spec.embeddings[0].project is not None,
                       "its embedding is not projected into the stack (`project`); ALBERT's always is"),),
    # each weight set's layer under ``albert_layer_groups``, the projection into the stack, its head and pooler
    rules=hf_bert.WEIGHTS.derive(
        {"self_attn.qkv": tuple(f"albert_layers.0.attention.{n}" for n in ("query", "key", "value")),
         "self_attn.out": "albert_layers.0.attention.dense", "self_attn_norm": "albert_layers.0.attention.LayerNorm",
         "ffn.up": "albert_layers.0.ffn", "ffn.down": "albert_layers.0.ffn_output",
         "ffn_norm": "albert_layers.0.full_layer_layer_norm"},
        top={"embeddings.tokens.project": "encoder.embedding_hidden_mapping_in"}, layers="encoder.albert_layer_groups",
        head=MaskedLMHead("predictions.dense", "predictions.LayerNorm", "predictions.decoder", "predictions.bias",
                          "pooler")))
