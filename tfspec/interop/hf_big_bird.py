"""Hugging Face ``BigBirdModel`` / ``BigBirdForMaskedLM`` <-> a compiled encoder-only spec.

BigBird's weights have BERT's names and layout (``tfspec.interop.hf_bert``'s mapping); its attention is
``kind=bigbird(block_size, random=num_random_blocks)`` with ``attention_type="block_sparse"``, ``kind=dot``
with ``"original_full"``. Which random blocks each query block sees is not a weight: Hugging Face draws them
with numpy, seeded by the layer index, in training, and uses block 0 for all of them in eval; tfspec draws them
from its own seeded generator, the same in training and eval. Outputs agree given the same blocks (the tests
give tfspec Hugging Face's, ``BigBirdAttention.patterns``).
"""

from __future__ import annotations

from dataclasses import replace

from .facts import Facts
from .hf_bert import ACTIVATIONS, _rules
from .hf_bert import hf_config as bert_hf_config
from .hf_bert import spec_text as bert_spec_text
from .mapping import InteropError, architecture_problems, export_state, load_state
from .writer import SpecWriter

REFERENCE = "Hugging Face BigBird"


def _big_bird_rules(model, reference_has_lm: bool):
    """BERT's mapping, with BigBird's pooler (a linear named ``pooler``, not ``pooler.dense``); without q/k/v
    biases (``use_bias=False``) their rule goes (a reference that has them is then reported as unmapped)."""
    rules, aliases = _rules(model, "bert." if reference_has_lm else "")
    ours = model.state_dict()
    return [replace(r, theirs=tuple(t.replace("pooler.dense.", "pooler.") for t in r.theirs)) for r in rules
            if all(o in ours for o in r.ours)], aliases


def spec_text(config, *, pooler: bool, head: bool, padding: bool = True, name: str = "reference",
              heading: tuple[str, ...] = ()) -> str:
    """The tfspec spec a BigBird configuration describes: ``BigBirdModel`` with ``pooler``, ``BigBirdForMaskedLM``
    with ``head`` (BERT's, with BigBird's attention and embedding scale)."""
    w = SpecWriter()
    kind = (f"bigbird({w('block', config.block_size, 'block_size')}, "
            f"random={w('random_blocks', config.num_random_blocks, 'num_random_blocks')})"
            if config.attention_type == "block_sparse" else "dot")
    attention = f"kind={kind} bias={str(bool(config.use_bias)).lower()} out_bias=true "
    scale = (f"scale {float(config.hidden_size) ** 0.5!r}",) if config.rescale_embeddings else ()
    return bert_spec_text(config, pooler=pooler, head=head, padding=padding, name=name, attention=attention,
                          embedding=scale, writer=w, heading=heading)


def hf_config(spec) -> dict:
    """The BigBird configuration ``spec`` would be: BERT's, with its attention kind and embedding scale."""
    config = bert_hf_config(spec, "big_bird")
    f = Facts(spec, "BigBird")
    attention = f.attention("encoder")
    if attention.kind.name == "bigbird":
        config.update(attention_type="block_sparse", block_size=attention.kind.options["block"],
                      num_random_blocks=attention.kind.options["random"])
    else:
        config.update(attention_type="original_full")
    return {**config, "use_bias": attention.bias, "rescale_embeddings": f.embedding.scale != 1.0}


def _config_problems(model, reference) -> list[str]:
    config = reference.config
    if config.hidden_act not in ACTIVATIONS:
        return [f"hidden_act '{config.hidden_act}' has no tfspec activation"]
    if getattr(config, "is_decoder", False):
        return ["a BigBird decoder (is_decoder) has no tfspec equivalent: tfspec's BigBird is an encoder's"]
    base = getattr(reference, "bert", reference)
    expected = spec_text(config, pooler=getattr(base, "pooler", None) is not None, head=hasattr(reference, "cls"),
                         padding=model.encoder.masks_padding)
    return architecture_problems(model.spec, expected, type(reference).__name__)


def from_hf_big_bird(model, reference) -> None:
    """Copy a ``BigBirdModel`` or ``BigBirdForMaskedLM``'s weights into ``model`` (every tensor accounted for)."""
    if model.spec.kind != "encoder-only":
        raise InteropError(f"BigBird is an encoder; spec '{model.spec.name}' is {model.spec.kind}")
    rules, aliases = _big_bird_rules(model, hasattr(reference, "bert"))
    load_state(model, reference.state_dict(), rules, reference=REFERENCE, aliases=aliases,
               config_problems=_config_problems(model, reference))


def to_hf_big_bird(model) -> dict:
    """A state dict for ``BigBirdForMaskedLM`` (spec with a head) or ``BigBirdModel`` (without)."""
    rules, aliases = _big_bird_rules(model, model.head is not None)
    return export_state(model, rules, reference=REFERENCE, aliases=aliases)
