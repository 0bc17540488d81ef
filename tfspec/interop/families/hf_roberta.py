"""Hugging Face ``RobertaForMaskedLM`` / ``RobertaModel`` (and XLM-RoBERTa's) <-> a compiled encoder-only spec.

RoBERTa (Liu et al. 2019) is BERT's encoder (``hf_bert``) with two conventions of its own. Its
learned positions start after the padding token's id: position p reads row ``p + padding_idx + 1`` (two rows are
never read by a real token) and a padded batch's positions count only its real tokens (a pad reads row
``padding_idx``) -- ``learned(max_len, offset=padding_idx + 1, skip_padding=true)``. Its MLM head applies GELU
whatever ``hidden_act`` says, and is named ``lm_head``. XLM-RoBERTa is the same model with another vocabulary.
Hugging Face numbers positions by *token id* (a pad is a token equal to ``pad_token_id``), tfspec by the padding
mask: they agree wherever the pad token appears only where the batch is padded, as tokenizers put it.
"""

from __future__ import annotations

from ..writer import SpecWriter
from . import hf_bert
from ..facts import Facts
from ..fields import Field, Fields
from ..mapping import InteropError, export_state, load_state
from ..family import Family

HEAD = {"transform": "lm_head.dense", "norm": "lm_head.layer_norm", "decoder": "lm_head.decoder",
        "bias": "lm_head.bias"}


def _padding_idx(f) -> int:
    """The padding token's id, one below the first row a position reads."""
    position = f.embedding.position
    if f.position_table() is None or not position.options.get("skip_padding") or position.options["offset"] < 1:
        raise f.refuse(f"its positions are {position}, not learned(max_len, offset=padding_idx + 1, "
                       "skip_padding=true)")
    return position.options["offset"] - 1


FIELDS = Fields(*hf_bert.FIELDS.entries,
                Field("padding_idx", "pad_token_id", _padding_idx, let=False), ignored=hf_bert.FIELDS.ignored)


def spec_text(config, *, pooler: bool, head: bool, padding: bool = True, name: str = "reference",
              heading: tuple[str, ...] = ()) -> str:
    """The tfspec spec a RoBERTa or XLM-RoBERTa configuration describes: BERT's whose positions start after the
    padding token's row and count real tokens only, its MLM head with GELU."""
    if config.pad_token_id is None or config.pad_token_id + 1 >= config.max_position_embeddings:
        raise InteropError(f"pad_token_id {config.pad_token_id} leaves no row of the "
                           f"{config.max_position_embeddings} positions for a token")
    w = SpecWriter()
    document = hf_bert.document(FIELDS.write(config, w), pooler=pooler, head=head, padding=padding).change(
        "embedding tokens", "position", f"learned(max_len, offset={config.pad_token_id + 1}, skip_padding=true)")
    return w.text((document.change_tail("head", transform="gelu") if head else document).text(name), list(heading))

def hf_config(spec, model_type: str = "roberta") -> dict:
    """The RoBERTa configuration ``spec`` would be."""
    f = Facts(spec, "RoBERTa")
    f.kind("encoder-only")
    return {"model_type": model_type, **FIELDS.config(f)}


def from_hf_roberta(model, reference) -> None:
    """Copy a ``RobertaModel``/``RobertaForMaskedLM`` (or XLM-RoBERTa's) weights into ``model``."""
    hf_bert.check_reference(model, reference, FIELDS, lambda spec: hf_config(spec, reference.config.model_type),
                            spec_text, base="roberta", head="lm_head")
    rules, aliases = hf_bert.weight_rules(model, "roberta." if hasattr(reference, "roberta") else "", HEAD)
    load_state(model, reference.state_dict(), rules, reference="Hugging Face RoBERTa", aliases=aliases)


def to_hf_roberta(model) -> dict:
    """A state dict for ``RobertaForMaskedLM`` (spec with a head) or ``RobertaModel`` (without)."""
    rules, aliases = hf_bert.weight_rules(model, "roberta." if model.head is not None else "", HEAD)
    return export_state(model, rules, reference="Hugging Face RoBERTa", aliases=aliases)


EXPORT_PRIORITY = 20  # where export tries this module's families (lower first)
FAMILIES = (  # the families this module reads and writes (``tfspec.interop.family``)
    Family("RoBERTa", ("roberta", "xlm-roberta"),
           {"RobertaForMaskedLM": {"pooler": False, "head": True}, "RobertaModel": {"pooler": True, "head": False},
           "XLMRobertaForMaskedLM": {"pooler": False, "head": True},
           "XLMRobertaModel": {"pooler": True, "head": False}},
           "RoBERTa (Liu et al. 2019) and XLM-RoBERTa: BERT's encoder whose learned positions start at row "
           "padding_idx + 1 and count only real tokens, one segment, an MLM head with GELU",
           module=__name__, fields=FIELDS, spec_text=spec_text, hf_config=hf_config, load=from_hf_roberta,
           export=to_hf_roberta),
)
