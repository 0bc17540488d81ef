"""Hugging Face ``ElectraForMaskedLM`` (the generator) / ``ElectraModel`` <-> a compiled encoder-only spec.

ELECTRA (Clark et al. 2020) is BERT's encoder (``tfspec.interop.hf_bert``) without a pooler; its generator's MLM
head applies GELU whatever ``hidden_act`` says and is named ``generator_predictions`` and ``generator_lm_head``.
An ``embedding_size`` other than ``hidden_size`` (ELECTRA-small's 128 under 256) projects the embeddings into
the stack, which the language does not express yet: such a configuration is refused.
"""

from __future__ import annotations

from . import hf_bert
from .facts import Facts
from .fields import Field, Fields, Fixed
from .mapping import export_state, load_state

HEAD = {"transform": "generator_predictions.dense", "norm": "generator_predictions.LayerNorm",
        "decoder": "generator_lm_head", "bias": "generator_lm_head.bias"}

FIELDS = Fields(
    *hf_bert.FIELDS.entries,
    Field("embedding_size", "embedding_size", lambda f: f.embedding.dim, read=lambda c: c.embedding_size,
          setting=False),
    Fixed("embedding_size", "hidden_size", "embedding_size {value} differs from hidden_size: a projection of the "
          "embeddings into the stack, which is not expressed yet",
          read=lambda c: "hidden_size" if c.embedding_size == c.hidden_size else c.embedding_size),
    ignored={**hf_bert.FIELDS.ignored,
             **{name: "ElectraForPreTraining's and the classification heads' summary, which tfspec does not import"
                for name in ("summary_type", "summary_use_proj", "summary_activation", "summary_last_dropout")}},
)


def spec_text(config, *, pooler: bool = False, head: bool = True, padding: bool = True, name: str = "reference",
              heading: tuple[str, ...] = ()) -> str:
    """The tfspec spec an ELECTRA configuration describes."""
    return hf_bert.spec_text(config, pooler=False, head=head, padding=padding, name=name, heading=heading,
                             fields=FIELDS, head_activation="gelu")


def hf_config(spec) -> dict:
    """The ELECTRA configuration ``spec`` would be."""
    f = Facts(spec, "ELECTRA")
    f.kind("encoder-only")
    if spec.pooler is not None:
        raise f.refuse("it has a pooler; ELECTRA has none")
    return {"model_type": "electra", **FIELDS.config(f)}


def from_hf_electra(model, reference) -> None:
    """Copy an ``ElectraForMaskedLM`` or ``ElectraModel``'s weights into ``model`` (every tensor accounted for)."""
    hf_bert.check_reference(model, reference, FIELDS, hf_config, spec_text, base="electra",
                            head="generator_lm_head")
    rules, aliases = hf_bert._rules(model, "electra." if hasattr(reference, "electra") else "", HEAD)
    load_state(model, reference.state_dict(), rules, reference="Hugging Face ELECTRA", aliases=aliases)


def to_hf_electra(model) -> dict:
    """A state dict for ``ElectraForMaskedLM`` (spec with a head) or ``ElectraModel`` (without)."""
    rules, aliases = hf_bert._rules(model, "electra." if model.head is not None else "", HEAD)
    return export_state(model, rules, reference="Hugging Face ELECTRA", aliases=aliases)
