"""Hugging Face ``BertModel`` / ``BertForMaskedLM`` <-> a compiled encoder-only spec.

``examples/bert_base.tfs`` is ``BertModel`` with its pooler; add
``head tied(tokens) transform=gelu norm=layernorm(eps=1e-12) bias=true`` for
``BertForMaskedLM`` (which has no pooler).
"""

from __future__ import annotations

import warnings

from ..mapping import InteropError, architecture_problems, load_state
from ..fields import Field, Fields, Fixed, standard
from ..document import Block, Document, Statement
from ..family import Family, masked_lm
from ..weights import MaskedLMHead, Weights
from ..layouts import covering


ACTIVATIONS = {"gelu": "gelu", "relu": "relu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh",
               "silu": "silu", "swish": "silu"}


FIELDS = Fields(
    *standard("encoder", d_model="hidden_size", heads="num_attention_heads", layers="num_hidden_layers",
              d_ff="intermediate_size", vocab="vocab_size", max_len="max_position_embeddings"),
    Field("eps", "layer_norm_eps", lambda f: f.embedding_norm_option("eps", 1e-12)),
    *standard("encoder", p_dropout="hidden_dropout_prob", p_attn_dropout="attention_probs_dropout_prob",
              init_std="initializer_range"),
    Field("segments", "type_vocab_size", lambda f: f.embedding.segments),
    Field("activation", "hidden_act", lambda f: f.feedforward("encoder").activation.name, names=ACTIVATIONS),
    Field("tied", "tie_word_embeddings", lambda f: f.tied, let=False),  # the MLM head's decoder
    Fixed("position_embedding_type", "absolute",
          "reference uses {value} positions; only absolute maps (tfspec's relative schemes are not BERT's)"),
    Fixed("is_decoder", False, "is_decoder=True makes the self-attention causal, a decoder's; tfspec imports "
                               "this family as the encoder it is"),
    Fixed("add_cross_attention", False, "add_cross_attention=True adds cross-attention to an encoder-decoder's "
                                        "decoder; tfspec imports this family as an encoder"),
)


def document(s, *, pooler: bool, head: bool, padding: bool, norm: str | None = None) -> Document:
    """BERT's spec from its settings ``s``: post-norm LayerNorm layers with dropout, learned positions, segments
    (where its table has them) and a LayerNorm on the embeddings, self-attention hiding padded keys where
    ``padding``; its tanh pooler where ``pooler``, its MLM head where ``head`` (a transform of ``activation``, a
    LayerNorm and a bias; tied to the token embedding unless ``tied`` says otherwise); ``norm``: every LayerNorm's,
    where the table has no ``eps`` (DistilBERT's)."""
    norm = norm or f"layernorm(eps={s.eps})"
    embedding = [Statement("vocab", s.vocab), Statement("dim", s.d_model),
                 Statement("position", f"learned({s.max_len})"),
                 *([Statement("segments", s.segments)] if s.has("segments") else []), Statement("norm", norm)]
    tail = ([Statement("pooler", "tanh")] if pooler else []) + ([Statement(
        "head", "tied(tokens)" if s.value("tied") else f"linear({s.vocab})", transform=s.activation, norm=norm,
        bias="true", comment="the MLM head")] if head else [])
    return Document.of(
        Block("defaults", Statement("residual", "post"), Statement("norm", norm), Statement("dropout", s.p_dropout),
              Statement("attn_dropout", s.p_attn_dropout), Statement("init", f"normal(std={s.init_std})")),
        Block("embedding tokens", *embedding),
        Block(f"encoder x {s.layers}",
              Statement("attention", "self", heads=s.heads, mask="padding" if padding else "none"),
              Statement("feedforward", d_ff=s.d_ff, activation=s.activation)), tail=tuple(tail))


def projected(document: Document, s) -> Document:
    """``document`` whose token table is ``embedding_size`` wide, projected into the stack's ``d_model`` (ALBERT's,
    ELECTRA-small's)."""
    return document.change("embedding tokens", "dim", "embedding_size").add(
        "embedding tokens", Statement("project", s.d_model), before="position")


# BERT's checkpoint: its embeddings, each layer's tensors (our modules' own paths), its MLM head and pooler
WEIGHTS = Weights({"self_attn.qkv": tuple(f"attention.self.{n}" for n in ("query", "key", "value")),
                   "self_attn.out": "attention.output.dense", "self_attn_norm": "attention.output.LayerNorm",
                   "ffn.up": "intermediate.dense", "ffn.down": "output.dense", "ffn_norm": "output.LayerNorm"},
                  top={f"embeddings.tokens.{ours}": f"embeddings.{theirs}" for ours, theirs in (
                      ("tokens", "word_embeddings"), ("positions", "position_embeddings"),
                      ("segments", "token_type_embeddings"), ("norm", "LayerNorm"))},
                  layers="encoder.layer", parts=None, head=MaskedLMHead())

EXAMPLES = {
    "BertForMaskedLM": dict(model_type="bert", vocab_size=90, hidden_size=32, num_hidden_layers=2,
                            num_attention_heads=4, intermediate_size=64, max_position_embeddings=40),
    "BertModel": dict(model_type="bert", vocab_size=90, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                      intermediate_size=64, max_position_embeddings=40, layer_norm_eps=1e-7, hidden_act="relu"),
}

COVERAGE = [covering("bert", num_hidden_layers=3, max_position_embeddings=33, layer_norm_eps=1e-7,
                     hidden_dropout_prob=0.2, attention_probs_dropout_prob=0.3, initializer_range=0.05,
                     type_vocab_size=3, hidden_act="relu", tie_word_embeddings=False,
                     architectures=["BertForMaskedLM"])]


BERT = Family(
    "BERT", ("bert",), masked_lm("Bert"),
    "BERT (Devlin et al. 2019): post-norm LayerNorm, GELU, learned absolute positions and segments, "
    "N(0, initializer_range) init; the MLM head is tied to the token embedding",
    priority=10, fields=FIELDS, document=document, kind="encoder-only", prefix="bert.", rules=WEIGHTS)


def from_hf_bert(model, reference, initialise: bool = False) -> None:
    """Copy a ``BertModel`` or ``BertForMaskedLM``'s weights into ``model`` (every tensor accounted for).

    The spec must be the architecture the reference's configuration describes. ``initialise``: the spec is
    another architecture with BERT's parameters, which starts from them (UniLM's prefix-LM, ``examples/unilm.tfs``,
    from BERT-large): every tensor must still map, name for name and shape for shape, and the differences are
    told in a warning instead of refused.
    """
    if not initialise:
        if model.spec.kind != "encoder-only" and len(model.spec.stacks) == 1:
            raise InteropError(f"{type(reference).__name__} is an encoder; spec '{model.spec.name}' is "
                               f"{model.spec.kind} (from_hf_bert(..., initialise=True) starts another architecture "
                               "with BERT's parameters from them)")
        return BERT.load(model, reference)
    expected = BERT.spec_text(reference.config, pooler=getattr(getattr(reference, "bert", reference), "pooler",
                                                               None) is not None, head=hasattr(reference, "cls"))
    role = model.spec.stacks[0].role  # compared as the same stack, so that what differs inside it is named
    differences = architecture_problems(model.spec, expected.replace("\nencoder x ", f"\n{role} x "),
                                        type(reference).__name__)
    if differences:
        warnings.warn(f"initialising spec '{model.spec.name}' from {type(reference).__name__} weights, whose "
                      "architecture differs:\n" + "\n".join(f"  {d}" for d in differences), stacklevel=2)
    state = reference.state_dict()
    rules, aliases = WEIGHTS(model, "bert." if hasattr(reference, "bert") else "", state, model.head is not None)
    load_state(model, state, rules, reference=type(reference).__name__, aliases=aliases)
