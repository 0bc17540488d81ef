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

from ..document import Statement
from ..writer import SpecWriter
from . import hf_bert
from ..facts import Facts
from ..fields import Field, Fields, Fixed
from ..mapping import InteropError, Rule, rule, weight_and_bias

_BERT = [e for e in hf_bert.FIELDS.entries if isinstance(e, Field) and e.name != "segments"]
HEAD = {"transform": "lm_head.dense", "norm": "lm_head.layer_norm", "decoder": "lm_head.decoder",
        "bias": "lm_head.bias"}


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


def spec_text(config, *, pooler: bool, head: bool, padding: bool = True, name: str = "reference",
              heading: tuple[str, ...] = ()) -> str:
    """The tfspec spec an MPNet configuration describes: RoBERTa's without segments, with T5's relative bias shared
    by the stack's layers."""
    if config.max_position_embeddings <= 2:
        raise InteropError(f"max_position_embeddings {config.max_position_embeddings} leaves no row for a token")
    w = SpecWriter()
    document = (hf_bert.document(FIELDS.write(config, w), pooler=pooler, head=head, padding=padding)
                .change("embedding tokens", "position", "learned(max_len, offset=2, skip_padding=true)")
                .add("encoder", Statement("position", "t5(num_buckets=32, max_distance=128)",
                                          comment="shared by the layers")))
    return w.text((document.change_tail("head", transform="gelu") if head else document).text(name), list(heading))

def hf_config(spec) -> dict:
    """The MPNet configuration ``spec`` would be."""
    f = Facts(spec, "MPNet")
    f.kind("encoder-only")
    options = _t5(f)
    if f.embedding.segments:
        raise f.refuse("its embedding adds token types, which MPNet's has none of")
    if (options.get("num_buckets"), options.get("max_distance")) != (32, 128) or not options.get("bidirectional",
                                                                                                    True):
        raise f.refuse("its relative bias is not MPNet's: 32 bidirectional buckets up to distance 128")
    return {"model_type": "mpnet", **FIELDS.config(f)}


def _layer_rules(ours: str, i: int, prefix: str) -> list[Rule]:
    """MPNet's names for layer ``i``'s tensors (``ours``: the layer's prefix in the compiled model)."""
    theirs = f"{prefix}encoder.layer.{i}"
    qkv = [f"{theirs}.attention.attn.{n}" for n in "qkv"]
    linear = weight_and_bias
    return [rule(f"{ours}.self_attn.qkv.weight", tuple(f"{q}.weight" for q in qkv)),
            rule(f"{ours}.self_attn.qkv.bias", tuple(f"{q}.bias" for q in qkv)),
            *linear(f"{ours}.self_attn.out", f"{theirs}.attention.attn.o"),
            *linear(f"{ours}.self_attn_norm", f"{theirs}.attention.LayerNorm"),
            *linear(f"{ours}.ffn.up", f"{theirs}.intermediate.dense"),
            *linear(f"{ours}.ffn.down", f"{theirs}.output.dense"),
            *linear(f"{ours}.ffn_norm", f"{theirs}.output.LayerNorm")]


def _rules(model, prefix: str) -> tuple[list[Rule], dict[str, str]]:
    """BERT's rules with MPNet's names, no token types, and the stack's relative bias table."""
    rules, aliases = hf_bert.weight_rules(model, prefix, HEAD, _layer_rules)
    rules = [r for r in rules if not r.ours[0].startswith("embeddings.tokens.segments")]
    rules.append(rule("encoder.positions.self_attn.weight", f"{prefix}encoder.relative_attention_bias.weight"))
    return rules, aliases


EXPORT_PRIORITY = 480  # where export tries this module's families (lower first)
FAMILIES = (  # the families this module reads and writes (``tfspec.interop.family``)
    hf_bert.encoder_family(
        "MPNet", ("mpnet",),
        {"MPNetForMaskedLM": {"pooler": False, "head": True},
         "MPNetModel": {"pooler": True, "head": False}},
        "MPNet (all-mpnet-base-v2): RoBERTa's post-norm encoder without token types, positions from row 2 "
        "counting real tokens, and T5's bidirectional relative bias (32 buckets, distance 128) shared by the "
        "stack's layers",
        module=__name__, fields=FIELDS, spec_text=spec_text, hf_config=hf_config, rules=_rules,
        base="mpnet", head="lm_head"),
)
