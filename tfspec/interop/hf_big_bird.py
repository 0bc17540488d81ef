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

from .hf_bert import ACTIVATIONS, _rules
from .mapping import InteropError, architecture_problems, export_state, load_state

REFERENCE = "Hugging Face BigBird"


def _big_bird_rules(model, reference_has_lm: bool):
    """BERT's mapping, with BigBird's pooler (a linear named ``pooler``, not ``pooler.dense``)."""
    rules, aliases = _rules(model, "bert." if reference_has_lm else "")
    return [replace(r, theirs=tuple(t.replace("pooler.dense.", "pooler.") for t in r.theirs)) for r in rules], aliases


def spec_text(config, *, pooler: bool, head: bool, padding: bool = True, name: str = "reference") -> str:
    """The tfspec spec a BigBird configuration describes: ``BigBirdModel`` with ``pooler``, ``BigBirdForMaskedLM``
    with ``head``."""
    eps = repr(float(config.layer_norm_eps))
    activation = ACTIVATIONS.get(config.hidden_act, "gelu")
    kind = (f"bigbird({config.block_size}, random={config.num_random_blocks})"
            if config.attention_type == "block_sparse" else "dot")
    scale = f"; scale {float(config.hidden_size) ** 0.5!r}" if config.rescale_embeddings else ""
    lines = [f"model {name}",
             f"defaults {{ residual post; norm layernorm(eps={eps}); dropout {float(config.hidden_dropout_prob)!r}; "
             f"attn_dropout {float(config.attention_probs_dropout_prob)!r} }}",
             f"embedding tokens {{ vocab {config.vocab_size}; dim {config.hidden_size}; "
             f"position learned({config.max_position_embeddings}); segments {config.type_vocab_size}; "
             f"norm layernorm(eps={eps}){scale} }}",
             f"encoder x {config.num_hidden_layers} {{ attention self heads={config.num_attention_heads} "
             f"kind={kind} bias={str(bool(config.use_bias)).lower()} out_bias=true "
             f"mask={'padding' if padding else 'none'}; feedforward d_ff={config.intermediate_size} "
             f"activation={activation} }}"]
    if pooler:
        lines.append("pooler tanh")
    if head:
        lines.append(f"head tied(tokens) transform={activation} norm=layernorm(eps={eps}) bias=true")
    return "\n".join(lines) + "\n"


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
