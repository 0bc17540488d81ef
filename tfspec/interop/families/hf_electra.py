"""Hugging Face ``ElectraForMaskedLM`` (the generator) / ``ElectraModel`` <-> a compiled encoder-only spec.

ELECTRA (Clark et al. 2020) is BERT's encoder (``hf_bert``) without a pooler; its generator's MLM
head applies GELU whatever ``hidden_act`` says and is named ``generator_predictions`` and ``generator_lm_head``.
An ``embedding_size`` other than ``hidden_size`` (ELECTRA-small's 128 under 256) projects the embeddings into
the stack (``embedding tokens { dim 128; project 256 }``, ``embeddings_project``), and the head's transform maps
back into the table's width.
"""

from __future__ import annotations

from ..writer import SpecWriter
from . import hf_bert
from ..facts import Facts
from ..fields import Field, Fields
from ..mapping import weight_and_bias

HEAD = {"transform": "generator_predictions.dense", "norm": "generator_predictions.LayerNorm",
        "decoder": "generator_lm_head", "bias": "generator_lm_head.bias"}

FIELDS = Fields(
    Field("d_model", "hidden_size", lambda f: f.embedding.width),  # the stack's; the table's is embedding_size
    *(e for e in hf_bert.FIELDS.entries if getattr(e, "name", None) != "d_model"),
    Field("embedding_size", "embedding_size", lambda f: f.embedding.dim,
          read=lambda c: c.embedding_size if c.embedding_size != c.hidden_size else None),
    ignored={**hf_bert.FIELDS.ignored,
             **{name: "ElectraForPreTraining's and the classification heads' summary, which tfspec does not import"
                for name in ("summary_type", "summary_use_proj", "summary_activation", "summary_last_dropout")}},
)


def spec_text(config, *, pooler: bool = False, head: bool = True, padding: bool = True, name: str = "reference",
              heading: tuple[str, ...] = ()) -> str:
    """The tfspec spec an ELECTRA configuration describes: BERT's without a pooler, the generator's head with GELU,
    a narrower token table projected into the stack where embedding_size says."""
    w = SpecWriter()
    s = FIELDS.write(config, w)
    document = hf_bert.document(s, pooler=False, head=head, padding=padding)
    if config.embedding_size != config.hidden_size:
        document = hf_bert.projected(document, s)
    return w.text((document.change_tail("head", transform="gelu") if head else document).text(name), list(heading))

def hf_config(spec) -> dict:
    """The ELECTRA configuration ``spec`` would be."""
    f = Facts(spec, "ELECTRA")
    f.kind("encoder-only")
    if spec.pooler is not None:
        raise f.refuse("it has a pooler; ELECTRA has none")
    return {"model_type": "electra", **FIELDS.config(f)}


def _rules(model, prefix: str):
    """BERT's names, ELECTRA's head, and the projection into the stack where the embeddings have one."""
    rules, aliases = hf_bert.weight_rules(model, prefix, HEAD)
    if model.embeddings["tokens"].project is not None:
        rules += weight_and_bias("embeddings.tokens.project", f"{prefix}embeddings_project")
    return rules, aliases


EXPORT_PRIORITY = 30  # where export tries this module's families (lower first)
FAMILIES = (  # the families this module reads and writes (``tfspec.interop.family``)
    hf_bert.encoder_family(
        "ELECTRA", ("electra",),
        {"ElectraForMaskedLM": {"pooler": False, "head": True},
         "ElectraModel": {"pooler": False, "head": False}},
        "ELECTRA (Clark et al. 2020): BERT's encoder without a pooler, the generator's MLM head with GELU; an "
        "embedding_size apart from hidden_size projects the embeddings into the stack",
        module=__name__, fields=FIELDS, spec_text=spec_text, hf_config=hf_config, rules=_rules,
        base="electra", head="generator_lm_head"),
)
