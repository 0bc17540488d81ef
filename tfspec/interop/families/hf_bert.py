"""Hugging Face ``BertModel`` / ``BertForMaskedLM`` <-> a compiled encoder-only spec.

``examples/bert_base.tfs`` is ``BertModel`` with its pooler; add
``head tied(tokens) transform=gelu norm=layernorm(eps=1e-12) bias=true`` for
``BertForMaskedLM`` (which has no pooler).
"""

from __future__ import annotations

import warnings
from typing import Callable

from ..mapping import (InteropError, Rule, architecture_problems, export_state, load_state, refuse_other_architecture,
                       rule, weight_and_bias)
from ..facts import Facts
from ..fields import Field, Fields, Fixed
from ..document import Block, Document, Statement
from ..writer import SpecWriter
from ..family import Family

REFERENCE = "Hugging Face BERT"
ACTIVATIONS = {"gelu": "gelu", "relu": "relu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh",
               "silu": "silu", "swish": "silu"}


def bert_layer_rules(ours: str, i: int, prefix: str) -> list[Rule]:
    """BERT's names for layer ``i``'s tensors (``ours``: the layer's prefix in the compiled model)."""
    theirs = f"{prefix}encoder.layer.{i}"
    qkv = [f"{theirs}.attention.self.{n}" for n in ("query", "key", "value")]
    return [rule(f"{ours}.self_attn.qkv.weight", tuple(f"{q}.weight" for q in qkv)),
            rule(f"{ours}.self_attn.qkv.bias", tuple(f"{q}.bias" for q in qkv)),
            *weight_and_bias(f"{ours}.self_attn.out", f"{theirs}.attention.output.dense"),
            *weight_and_bias(f"{ours}.self_attn_norm", f"{theirs}.attention.output.LayerNorm"),
            *weight_and_bias(f"{ours}.ffn.up", f"{theirs}.intermediate.dense"),
            *weight_and_bias(f"{ours}.ffn.down", f"{theirs}.output.dense"),
            *weight_and_bias(f"{ours}.ffn_norm", f"{theirs}.output.LayerNorm")]


def weight_rules(model, prefix: str, head: dict[str, str] | None = None,
           layer: Callable[[str, int, str], list[Rule]] = bert_layer_rules) -> tuple[list[Rule], dict[str, str]]:
    """BERT's tensor names (under ``prefix``); ``head``: the MLM head's (``transform``, ``norm``, ``decoder``,
    ``bias``) and the pooler's (``pooler``), BERT's ``cls.predictions...`` and ``pooler.dense`` by default
    (RoBERTa's differ); ``layer``: a relative's names for a layer's tensors. The layers are the spec's one
    stack's (an encoder's, or the decoder of a prefix-LM initialised from BERT)."""
    if len(model.spec.stacks) != 1:
        raise InteropError(f"BERT is one stack; spec '{model.spec.name}' is {model.spec.kind}")
    role = model.spec.stacks[0].role
    names = head or {"transform": "cls.predictions.transform.dense", "norm": "cls.predictions.transform.LayerNorm",
                     "decoder": "cls.predictions.decoder", "bias": "cls.predictions.bias"}
    e, p = "embeddings.tokens", f"{prefix}embeddings"
    rules = [rule(f"{e}.tokens.weight", f"{p}.word_embeddings.weight"),
             rule(f"{e}.positions.weight", f"{p}.position_embeddings.weight"),
             rule(f"{e}.segments.weight", f"{p}.token_type_embeddings.weight"),
             *weight_and_bias(f"{e}.norm", f"{p}.LayerNorm")]
    for i in range(len(getattr(model, role).layers)):
        rules += layer(f"{role}.layers.{i}", i, prefix)
    aliases = {}
    if model.pooler is not None:
        rules += weight_and_bias("pooler.dense", f"{prefix}{names.get('pooler', 'pooler.dense')}")
    if model.head is not None:
        rules += [*weight_and_bias("head.transform", names["transform"]),
                  *weight_and_bias("head.transform_norm", names["norm"]), rule("head.bias", names["bias"])]
        aliases = {f"{names['decoder']}.bias": "head.bias"}
        if model.tied_to is not None:
            aliases[f"{names['decoder']}.weight"] = f"{e}.tokens.weight"
        else:
            rules.append(rule("head.weight", f"{names['decoder']}.weight"))
    return rules, aliases


FIELDS = Fields(
    Field("d_model", "hidden_size", lambda f: f.embedding.dim),
    Field("heads", "num_attention_heads", lambda f: f.attention("encoder").heads),
    Field("layers", "num_hidden_layers", lambda f: f.layers("encoder")),
    Field("d_ff", "intermediate_size", lambda f: f.feedforward("encoder").d_ff),
    Field("vocab", "vocab_size", lambda f: f.embedding.vocab),
    Field("max_len", "max_position_embeddings", lambda f: f.learned_positions()),
    Field("eps", "layer_norm_eps", lambda f: f.embedding_norm_option("eps", 1e-12)),
    Field("p_dropout", "hidden_dropout_prob", lambda f: f.residual_dropout("encoder")),
    Field("p_attn_dropout", "attention_probs_dropout_prob", lambda f: f.attention("encoder").dropout),
    Field("init_std", "initializer_range", lambda f: f.init_option("std", 0.02)),
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


def spec_text(config, *, pooler: bool, head: bool, padding: bool = True, name: str = "reference",
              heading: tuple[str, ...] = ()) -> str:
    """The tfspec spec a BERT configuration describes: ``BertModel`` with ``pooler``, ``BertForMaskedLM`` with
    ``head``."""
    w = SpecWriter()
    return w.text(document(FIELDS.write(config, w), pooler=pooler, head=head, padding=padding).text(name),
                  list(heading))

def hf_config(spec, model_type: str = "bert") -> dict:
    """The BERT configuration ``spec`` would be (exported after ``architecture_problems`` finds no difference)."""
    f = Facts(spec, "BERT")
    f.kind("encoder-only")
    return {"model_type": model_type, **FIELDS.config(f)}


def from_hf_bert(model, reference, initialise: bool = False) -> None:
    """Copy a ``BertModel`` or ``BertForMaskedLM``'s weights into ``model`` (every tensor accounted for).

    The spec must be the architecture the reference's configuration describes. ``initialise``: the spec is
    another architecture with BERT's parameters, which starts from them (UniLM's prefix-LM, ``examples/unilm.tfs``,
    from BERT-large): every tensor must still map, name for name and shape for shape, and the differences are
    told in a warning instead of refused.
    """
    if initialise:
        expected = spec_text(reference.config, pooler=getattr(getattr(reference, "bert", reference), "pooler",
                                                               None) is not None, head=hasattr(reference, "cls"))
        role = model.spec.stacks[0].role  # compared as the same stack, so that what differs inside it is named
        expected = expected.replace("\nencoder x ", f"\n{role} x ")
        differences = architecture_problems(model.spec, expected, type(reference).__name__)
        if differences:
            warnings.warn(f"initialising spec '{model.spec.name}' from {type(reference).__name__} weights, whose "
                          "architecture differs:\n" + "\n".join(f"  {d}" for d in differences), stacklevel=2)
    else:
        check_reference(model, reference, FIELDS, hf_config, spec_text)
    rules, aliases = weight_rules(model, "bert." if hasattr(reference, "bert") else "")
    load_state(model, reference.state_dict(), rules, reference=REFERENCE, aliases=aliases)


def check_reference(model, reference, fields, exported, describe, base: str = "bert", head: str = "cls") -> None:
    """The checks of BERT and its relatives: ``describe`` (a ``spec_text``) writes the spec the reference's
    configuration describes, with its pooler and head; the embedding norm's eps and scale, the pooler's
    activation and the head's transform are compared with the rest."""
    if model.spec.kind != "encoder-only":
        hint = " (from_hf_bert(..., initialise=True) starts another architecture with BERT's parameters from them)" \
            if base == "bert" and len(model.spec.stacks) == 1 else ""
        raise InteropError(f"{type(reference).__name__} is an encoder; spec '{model.spec.name}' is "
                           f"{model.spec.kind}{hint}")
    inner = getattr(reference, base, reference)
    refuse_other_architecture(model, reference, fields, exported, lambda: describe(
        reference.config, pooler=getattr(inner, "pooler", None) is not None, head=hasattr(reference, head),
        padding=model.encoder.masks_padding))


def to_hf_bert(model) -> dict:
    """A state dict for ``BertForMaskedLM`` (spec with a head) or ``BertModel`` (without)."""
    rules, aliases = weight_rules(model, "bert." if model.head is not None else "")
    return export_state(model, rules, reference=REFERENCE, aliases=aliases)


def encoder_family(name: str, model_types: tuple[str, ...], classes: dict, conventions: str, *, module: str,
                   fields, spec_text, hf_config, rules, base: str, head: str) -> Family:
    """A family of BERT's relatives whose masked LM holds its encoder under ``base`` (``albert``) and its head under
    ``head``: ``check_reference``'s checks, then the weights each way by ``rules(model, prefix)`` -> (rules,
    aliases), the base model's tensors prefixed ``base.`` inside the masked LM."""
    def load(model, reference) -> None:
        check_reference(model, reference, fields, hf_config, spec_text, base=base, head=head)
        names, aliases = rules(model, f"{base}." if hasattr(reference, base) else "")
        load_state(model, reference.state_dict(), names, reference=f"Hugging Face {name}", aliases=aliases)

    def export(model) -> dict:
        names, aliases = rules(model, f"{base}." if model.head is not None else "")
        return export_state(model, names, reference=f"Hugging Face {name}", aliases=aliases)

    return Family(name, model_types, classes, conventions, module=module, fields=fields, spec_text=spec_text,
                  hf_config=hf_config, load=load, export=export)


EXPORT_PRIORITY = 10  # where export tries this module's families (lower first)
FAMILIES = (  # the families this module reads and writes (``tfspec.interop.family``)
    Family("BERT", ("bert",),
           {"BertForMaskedLM": {"pooler": False, "head": True},
           "BertModel": {"pooler": True, "head": False}},
           "BERT (Devlin et al. 2019): post-norm LayerNorm, GELU, learned absolute positions and segments, "
           "N(0, initializer_range) init; the MLM head is tied to the token embedding",
           module=__name__, fields=FIELDS, spec_text=spec_text, hf_config=hf_config, load=from_hf_bert,
           export=to_hf_bert),
)
