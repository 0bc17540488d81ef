"""Hugging Face ``DistilBertForMaskedLM`` / ``DistilBertModel`` <-> a compiled encoder-only spec.

DistilBERT (Sanh et al. 2019) is BERT's encoder (``hf_bert``'s template) without token types or
pooler, its LayerNorms' eps fixed at 1e-12, and its MLM head (``vocab_transform``, the activation,
``vocab_layer_norm``, the tied ``vocab_projector`` with a bias) BERT's head under other names. Fixed sinusoidal
positions (``sinusoidal_pos_embds``) are not read: such a configuration is refused.
"""

from __future__ import annotations

from . import hf_bert
from ..facts import Facts
from ..fields import Field, Fields, Fixed
from ..mapping import InteropError, Rule, export_state, load_state, refuse_other_architecture, rule, weight_and_bias
from ..document import Statement
from ..writer import SpecWriter
from ..family import Family

EPS = 1e-12  # every DistilBERT LayerNorm's
REFERENCE = "Hugging Face DistilBERT"

FIELDS = Fields(
    Field("d_model", "dim", lambda f: f.embedding.dim),
    Field("heads", "n_heads", lambda f: f.attention("encoder").heads),
    Field("layers", "n_layers", lambda f: f.layers("encoder")),
    Field("d_ff", "hidden_dim", lambda f: f.feedforward("encoder").d_ff),
    Field("vocab", "vocab_size", lambda f: f.embedding.vocab),
    Field("max_len", "max_position_embeddings", lambda f: f.learned_positions()),
    Field("p_dropout", "dropout", lambda f: f.residual_dropout("encoder")),
    Field("p_attn_dropout", "attention_dropout", lambda f: f.attention("encoder").dropout),
    Field("init_std", "initializer_range", lambda f: f.init_option("std", 0.02)),
    Field("activation", "activation", lambda f: f.feedforward("encoder").activation.name,
          names=hf_bert.ACTIVATIONS),
    Field("tied", "tie_word_embeddings", lambda f: f.tied, let=False),
    Fixed("sinusoidal_pos_embds", False, "sinusoidal_pos_embds={value}: DistilBERT's fixed sinusoid table is not "
          "read (learned positions only)"),
    ignored={"qa_dropout": "dropout of the question-answering head, which tfspec does not import",
             "seq_classif_dropout": "dropout of the classification head, which tfspec does not import"},
)


def spec_text(config, *, pooler: bool = False, head: bool = True, padding: bool = True, name: str = "reference",
              heading: tuple[str, ...] = ()) -> str:
    """The tfspec spec a DistilBERT configuration describes (``head``: the MLM head): BERT's without segments or a
    pooler, its LayerNorms' eps fixed, the embeddings dropped out."""
    w = SpecWriter()
    s = FIELDS.write(config, w)
    document = hf_bert.document(s, pooler=False, head=head, padding=padding, norm=f"layernorm(eps={EPS})").add(
        "embedding tokens", Statement("dropout", s.p_dropout))
    return w.text(document.text(name), list(heading))

def hf_config(spec) -> dict:
    """The DistilBERT configuration ``spec`` would be."""
    f = Facts(spec, "DistilBERT")
    f.kind("encoder-only")
    if f.embedding.segments or spec.pooler is not None:
        raise f.refuse("it has token types or a pooler; DistilBERT has neither")
    return {"model_type": "distilbert", **FIELDS.config(f)}


def _rules(model, prefix: str) -> tuple[list[Rule], dict[str, str]]:
    if model.spec.kind != "encoder-only":
        raise InteropError(f"DistilBERT is an encoder; spec '{model.spec.name}' is {model.spec.kind}")
    e, p = "embeddings.tokens", f"{prefix}embeddings"
    rules = [rule(f"{e}.tokens.weight", f"{p}.word_embeddings.weight"),
             rule(f"{e}.positions.weight", f"{p}.position_embeddings.weight"),
             *weight_and_bias(f"{e}.norm", f"{p}.LayerNorm")]
    for i in range(len(model.encoder.layers)):
        ours, theirs = f"encoder.layers.{i}", f"{prefix}transformer.layer.{i}"
        a = f"{theirs}.attention"
        rules += [rule(f"{ours}.self_attn.qkv.weight", tuple(f"{a}.{n}_lin.weight" for n in "qkv")),
                  rule(f"{ours}.self_attn.qkv.bias", tuple(f"{a}.{n}_lin.bias" for n in "qkv")),
                  *weight_and_bias(f"{ours}.self_attn.out", f"{a}.out_lin"),
                  *weight_and_bias(f"{ours}.self_attn_norm", f"{theirs}.sa_layer_norm"),
                  *weight_and_bias(f"{ours}.ffn.up", f"{theirs}.ffn.lin1"),
                  *weight_and_bias(f"{ours}.ffn.down", f"{theirs}.ffn.lin2"),
                  *weight_and_bias(f"{ours}.ffn_norm", f"{theirs}.output_layer_norm")]
    aliases: dict[str, str] = {}
    if model.head is not None:
        rules += [*weight_and_bias("head.transform", "vocab_transform"),
                  *weight_and_bias("head.transform_norm", "vocab_layer_norm"),
                  rule("head.bias", "vocab_projector.bias")]
        if model.tied_to is not None:
            aliases["vocab_projector.weight"] = f"{e}.tokens.weight"
        else:
            rules.append(rule("head.weight", "vocab_projector.weight"))
    return rules, aliases


def from_hf_distilbert(model, reference) -> None:
    """Copy a ``DistilBertForMaskedLM`` or ``DistilBertModel``'s weights into ``model`` (every tensor accounted
    for); the spec must be the architecture the reference's configuration describes."""
    if model.spec.kind != "encoder-only":
        raise InteropError(f"{type(reference).__name__} is an encoder; spec '{model.spec.name}' is {model.spec.kind}")
    lm = hasattr(reference, "vocab_projector")
    refuse_other_architecture(model, reference, FIELDS, hf_config, lambda: spec_text(
        reference.config, head=lm, padding=model.encoder.masks_padding))
    rules, aliases = _rules(model, "distilbert." if lm else "")
    load_state(model, reference.state_dict(), rules, reference=REFERENCE, aliases=aliases)


def to_hf_distilbert(model) -> dict:
    """A state dict for ``DistilBertForMaskedLM`` (spec with a head) or ``DistilBertModel``."""
    rules, aliases = _rules(model, "distilbert." if model.head is not None else "")
    return export_state(model, rules, reference=REFERENCE, aliases=aliases)


EXPORT_PRIORITY = 60  # where export tries this module's families (lower first)
FAMILIES = (  # the families this module reads and writes (``tfspec.interop.family``)
    Family("DistilBERT", ("distilbert",),
           {"DistilBertForMaskedLM": {"pooler": False, "head": True},
           "DistilBertModel": {"pooler": False, "head": False}},
           "DistilBERT (Sanh et al. 2019): BERT's post-norm encoder without token types or pooler, LayerNorms of "
           "eps 1e-12, BERT's MLM head under other names",
           module=__name__, fields=FIELDS, spec_text=spec_text, hf_config=hf_config, load=from_hf_distilbert,
           export=to_hf_distilbert),
)
