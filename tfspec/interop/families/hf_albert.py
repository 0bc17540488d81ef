"""Hugging Face ``AlbertForMaskedLM`` / ``AlbertModel`` <-> a compiled encoder-only spec.

ALBERT (Lan et al. 2020) is BERT's post-norm encoder with two ways to fewer parameters: a factorised embedding
(a table ``embedding_size`` wide, projected into the stack by ``embedding_hidden_mapping_in``: ``embedding
tokens { dim 128; project 768 }``) and cross-layer sharing (the layers run ``num_hidden_groups`` sets of
weights, each by a run of consecutive layers: ``weight_sets 1``). Its MLM head maps back into the table's
width with ``hidden_act`` and is tied to it; ``AlbertModel``'s pooler is one linear map and tanh.
"""

from __future__ import annotations

from ..document import Statement
from ..writer import SpecWriter
from . import hf_bert
from ..facts import Facts
from ..fields import Field, Fields, Fixed
from ..mapping import Rule, rule, weight_and_bias

HEAD = {"transform": "predictions.dense", "norm": "predictions.LayerNorm", "decoder": "predictions.decoder",
        "bias": "predictions.bias", "pooler": "pooler"}

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


def spec_text(config, *, pooler: bool = False, head: bool = True, padding: bool = True, name: str = "reference",
              heading: tuple[str, ...] = ()) -> str:
    """The tfspec spec an ALBERT configuration describes: BERT's with a narrower token table projected into the
    stack and layers sharing ``num_hidden_groups`` sets of weights."""
    w = SpecWriter()
    s = FIELDS.write(config, w)
    document = hf_bert.projected(hf_bert.document(s, pooler=pooler, head=head, padding=padding), s).add(
        "encoder", Statement("weight_sets", "weight_sets"))
    return w.text(document.text(name), list(heading))

def hf_config(spec) -> dict:
    """The ALBERT configuration ``spec`` would be."""
    f = Facts(spec, "ALBERT")
    f.kind("encoder-only")
    if spec.embeddings[0].project is None:
        raise f.refuse("its embedding is not projected into the stack (`project`); ALBERT's always is")
    return {"model_type": "albert", **FIELDS.config(f)}


def _layer_rules(ours: str, i: int, prefix: str) -> list[Rule]:
    """ALBERT's names for the tensors of the layer that weight set ``i`` holds (``albert_layer_groups.{i}``)."""
    theirs = f"{prefix}encoder.albert_layer_groups.{i}.albert_layers.0"
    qkv = [f"{theirs}.attention.{n}" for n in ("query", "key", "value")]
    linear = weight_and_bias
    return [rule(f"{ours}.self_attn.qkv.weight", tuple(f"{q}.weight" for q in qkv)),
            rule(f"{ours}.self_attn.qkv.bias", tuple(f"{q}.bias" for q in qkv)),
            *linear(f"{ours}.self_attn.out", f"{theirs}.attention.dense"),
            *linear(f"{ours}.self_attn_norm", f"{theirs}.attention.LayerNorm"),
            *linear(f"{ours}.ffn.up", f"{theirs}.ffn"),
            *linear(f"{ours}.ffn.down", f"{theirs}.ffn_output"),
            *linear(f"{ours}.ffn_norm", f"{theirs}.full_layer_layer_norm")]


def _rules(model, prefix: str):
    rules, aliases = hf_bert.weight_rules(model, prefix, HEAD, layer=_layer_rules)
    return rules + weight_and_bias("embeddings.tokens.project", f"{prefix}encoder.embedding_hidden_mapping_in"), \
        aliases


EXPORT_PRIORITY = 40  # where export tries this module's families (lower first)
FAMILIES = (  # the families this module reads and writes (``tfspec.interop.family``)
    hf_bert.encoder_family(
        "ALBERT", ("albert",),
        {"AlbertForMaskedLM": {"pooler": False, "head": True},
         "AlbertModel": {"pooler": True, "head": False}},
        "ALBERT (Lan et al. 2020): BERT's post-norm encoder with a narrower token table projected into the stack "
        "and layers that share num_hidden_groups sets of weights (weight_sets); the MLM head maps back into the "
        "table's width with hidden_act and is tied to it",
        module=__name__, fields=FIELDS, spec_text=spec_text, hf_config=hf_config, rules=_rules,
        base="albert", head="predictions"),
)
