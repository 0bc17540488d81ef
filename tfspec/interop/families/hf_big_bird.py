"""Hugging Face ``BigBirdModel`` / ``BigBirdForMaskedLM`` <-> a compiled encoder-only spec.

BigBird's weights have BERT's names and layout (``hf_bert``'s mapping); its attention is
``kind=bigbird(block_size, random=num_random_blocks)`` with ``attention_type="block_sparse"``, ``kind=dot``
with ``"original_full"``. Which random blocks each query block sees is not a weight: Hugging Face draws them
with numpy, seeded by the layer index, in training, and uses block 0 for all of them in eval; tfspec draws them
from its own seeded generator, the same in training and eval. Outputs agree given the same blocks (the tests
give tfspec Hugging Face's, ``BigBirdAttention.patterns``).
"""

from __future__ import annotations

from dataclasses import replace

from ...registry import ATTENTION_KINDS
from ..fields import Field, Fields
from . import hf_bert
from .hf_bert import FIELDS as BERT_FIELDS
from .hf_bert import weight_rules, check_reference
from ..mapping import export_state, load_state
from ..document import Statement
from ..writer import SpecWriter
from ..family import Family, exported_config

REFERENCE = "Hugging Face BigBird"


def _big_bird_rules(model, reference_has_lm: bool):
    """BERT's mapping, with BigBird's pooler (a linear named ``pooler``, not ``pooler.dense``); without q/k/v
    biases (``use_bias=False``) their rule goes (a reference that has them is then reported as unmapped)."""
    rules, aliases = weight_rules(model, "bert." if reference_has_lm else "")
    ours = model.state_dict()
    return [replace(r, theirs=tuple(t.replace("pooler.dense.", "pooler.") for t in r.theirs)) for r in rules
            if all(o in ours for o in r.ours)], aliases


def _kind(f):
    return f.attention("encoder").kind


def _blocks(option: str):
    """A block-sparse attention's option, for export (None with full attention)."""
    return lambda f: _kind(f).options[option] if ATTENTION_KINDS[_kind(f).name].own_pattern else None


def _when_sparse(field: str):
    """A configuration's block field, for import: it only counts with block-sparse attention."""
    return lambda c: getattr(c, field) if c.attention_type == "block_sparse" else None


OWN_FIELDS = Fields(  # BigBird's own; the rest are BERT's (written by BERT's spec_text)
    Field("block", "block_size", _blocks("block"), read=_when_sparse("block_size")),
    Field("random_blocks", "num_random_blocks", _blocks("random"), read=_when_sparse("num_random_blocks")),
    Field("attention", "attention_type", lambda f: _kind(f).name,
          names={"block_sparse": "bigbird", "original_full": "dot"}),
    Field("qkv_bias", "use_bias", lambda f: f.attention("encoder").bias, let=False),
    Field("rescale", "rescale_embeddings", lambda f: f.embedding.scale != 1.0, let=False),
)
FIELDS = OWN_FIELDS + BERT_FIELDS


def spec_text(config, *, pooler: bool, head: bool, padding: bool = True, name: str = "reference",
              heading: tuple[str, ...] = ()) -> str:
    """The tfspec spec a BigBird configuration describes: ``BigBirdModel`` with ``pooler``, ``BigBirdForMaskedLM``
    with ``head`` (BERT's, with BigBird's attention and embedding scale)."""
    w = SpecWriter()
    s = OWN_FIELDS.write(config, w)
    kind = f"bigbird({s.block}, random={s.random_blocks})" if s.attention == "bigbird" else s.attention
    document = hf_bert.document(BERT_FIELDS.write(config, w), pooler=pooler, head=head, padding=padding).insert(
        "encoder", "attention", "mask", kind=kind, bias=s.qkv_bias, out_bias="true")
    if s.value("rescale"):
        document = document.add("embedding tokens", Statement("scale", repr(float(config.hidden_size) ** 0.5)))
    return w.text(document.text(name), list(heading))

hf_config = exported_config("BigBird", "big_bird", "encoder-only", FIELDS)


def from_hf_big_bird(model, reference) -> None:
    """Copy a ``BigBirdModel`` or ``BigBirdForMaskedLM``'s weights into ``model`` (every tensor accounted for)."""
    check_reference(model, reference, FIELDS, hf_config, spec_text)
    rules, aliases = _big_bird_rules(model, hasattr(reference, "bert"))
    load_state(model, reference.state_dict(), rules, reference=REFERENCE, aliases=aliases)


def to_hf_big_bird(model) -> dict:
    """A state dict for ``BigBirdForMaskedLM`` (spec with a head) or ``BigBirdModel`` (without)."""
    rules, aliases = _big_bird_rules(model, model.head is not None)
    return export_state(model, rules, reference=REFERENCE, aliases=aliases)


EXPORT_PRIORITY = 360  # where export tries this module's families (lower first)
FAMILIES = (  # the families this module reads and writes (``tfspec.interop.family``)
    Family("BigBird", ("big_bird",),
           {"BigBirdForMaskedLM": {"pooler": True, "head": True},  # HF keeps its pooler
           "BigBirdModel": {"pooler": True, "head": False}},
           "BigBird (Zaheer et al. 2020): BERT's encoder with block-sparse attention (window, global and random "
           "blocks)",
           module=__name__, fields=FIELDS, spec_text=spec_text, hf_config=hf_config, load=from_hf_big_bird,
           export=to_hf_big_bird),
)
