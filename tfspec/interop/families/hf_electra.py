"""Hugging Face ``ElectraForMaskedLM`` (the generator) / ``ElectraModel`` <-> a compiled encoder-only spec.

ELECTRA (Clark et al. 2020) is BERT's encoder (``hf_bert``) without a pooler; its generator's MLM
head applies GELU whatever ``hidden_act`` says and is named ``generator_predictions`` and ``generator_lm_head``.
An ``embedding_size`` other than ``hidden_size`` (ELECTRA-small's 128 under 256) projects the embeddings into
the stack (``embedding tokens { dim 128; project 256 }``, ``embeddings_project``), and the head's transform maps
back into the table's width.
"""

from __future__ import annotations

from . import hf_bert
from ..fields import Field, Fields
from ..document import Document
from ..family import Requires, masked_lm
from ..weights import MaskedLMHead
from ..layouts import covering

FIELDS = Fields(
    Field("d_model", "hidden_size", lambda f: f.embedding.width),  # the stack's; the table's is embedding_size
    *(e for e in hf_bert.FIELDS.entries if getattr(e, "name", None) != "d_model"),
    Field("embedding_size", "embedding_size", lambda f: f.embedding.dim,
          read=lambda c: c.embedding_size if c.embedding_size != c.hidden_size else None),
    ignored={**hf_bert.FIELDS.ignored,
             **{name: "ElectraForPreTraining's and the classification heads' summary, which tfspec does not import"
                for name in ("summary_type", "summary_use_proj", "summary_activation", "summary_last_dropout")}},
)


def document(s, *, pooler: bool, head: bool, padding: bool) -> Document:
    """ELECTRA's spec: BERT's without a pooler, the generator's head with GELU, a narrower token table projected
    into the stack where embedding_size says."""
    document = hf_bert.document(s, pooler=False, head=head, padding=padding)
    if s.config.embedding_size != s.config.hidden_size:
        document = hf_bert.projected(document, s)
    return document.change_tail("head", transform="gelu") if head else document


EXAMPLES = {
    "ElectraForMaskedLM": dict(model_type="electra", vocab_size=90, embedding_size=16, hidden_size=32,
                               num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                               max_position_embeddings=40, hidden_act="relu"),
    "ElectraModel": dict(model_type="electra", vocab_size=90, embedding_size=16, hidden_size=32, num_hidden_layers=1,
                         num_attention_heads=4, intermediate_size=64, max_position_embeddings=40),
}

COVERAGE = [covering("electra", embedding_size=12, num_hidden_layers=3, max_position_embeddings=33, layer_norm_eps=1e-7,
                     hidden_dropout_prob=0.2, attention_probs_dropout_prob=0.3, initializer_range=0.05,
                     type_vocab_size=3, hidden_act="relu", tie_word_embeddings=False,
                     architectures=["ElectraForMaskedLM"])]


ELECTRA = hf_bert.BERT.derive(
    "ELECTRA", ("electra",), masked_lm("Electra", pooler=False),
    "ELECTRA (Clark et al. 2020): BERT's encoder without a pooler, the generator's MLM head with GELU; an "
    "embedding_size apart from hidden_size projects the embeddings into the stack",
    priority=30, fields=FIELDS, document=document, prefix="electra.",
    requires=(Requires(lambda f: f.spec.pooler is None, "it has a pooler; ELECTRA has none"),),
    # BERT's names, ELECTRA's head, and the projection into the stack where the embeddings have one
    rules=hf_bert.WEIGHTS.derive(top={"embeddings.tokens.project": "embeddings_project"},
                                 head=MaskedLMHead("generator_predictions.dense", "generator_predictions.LayerNorm",
                                                   "generator_lm_head", "generator_lm_head.bias")))
