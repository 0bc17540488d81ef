"""Hugging Face ``ApertusForCausalLM`` (the Swiss AI Initiative's Apertus; and its base model) <-> a compiled spec.

Apertus is Llama's attention (``hf_llama``: q/k/v/o projections, rotary positions, scaled as Llama
3.1's where ``rope_parameters`` say) with each head's queries and keys RMS-normed before rotating (as Qwen3's), and
a feed-forward that is no gated unit: ``down(act(up(x)))`` with xIELU (``activation=xielu``), whose two trained
values each network holds (``act_fn.alpha_p``, ``act_fn.alpha_n``) and whose constants Hugging Face keeps as
buffers (``act_fn.beta``, ``act_fn.eps``: checked against the spec's, and written back). Its norms are named
``attention_layernorm`` and ``feedforward_layernorm``.
"""

from __future__ import annotations

from . import hf_llama
from ..family import Family, exported_config
from ..fields import Field, Fields
from ..mapping import InteropError, Rule, export_state, layer_modules, linear_rules, load_state, \
    refuse_other_architecture, rule, same_head
from ..writer import SpecWriter

ACTIVATIONS = {"xielu": "xielu", "silu": "silu", "gelu": "gelu", "relu": "relu", "relu2": "squared_relu",
               "gelu_pytorch_tanh": "gelu_tanh"}

FIELDS = Fields(
    *(e for e in hf_llama.FIELDS.entries if getattr(e, "name", None) not in
      {"head_dim", "window", "mlp_bias", "activation", "rotary_fraction"} and getattr(e, "config", None)
      != "pretraining_tp"),
    Field("activation", "hidden_act", lambda f: f.feedforward("decoder").activation.name, names=ACTIVATIONS),
    ignored={**hf_llama.FIELDS.ignored,
             "rope_parameters.partial_rotary_factor": "Apertus's rotary rotates every dimension"},
)


def spec_text(config, *, head: bool = True, padding: bool = True, name: str = "reference",
              heading: tuple[str, ...] = ()) -> str:
    """The tfspec spec an Apertus configuration describes: Llama's with each head's queries and keys RMS-normed."""
    w = SpecWriter()
    s = FIELDS.write(config, w)
    document = hf_llama.document(s, padding=padding, head=head).change(
        "decoder", "attention", qk_norm=f"rmsnorm(eps={s.eps})")
    return w.text(document.text(name), list(heading))

hf_config = exported_config("Apertus", "apertus", "decoder-only", FIELDS)


def _sublayer_rules(model, attention: str, feedforward: str, theirs: str, state: dict, ours_state: dict
                    ) -> list[Rule]:
    """One layer's attention (Llama's projections, each head's query and key norms) and its plain feed-forward
    with xIELU's two trained values."""
    rules = hf_llama.attention_rules(model, attention, theirs, state, ours_state)
    rules += [rule(f"{attention}.{n}.weight", f"{theirs}.self_attn.{n}.weight") for n in ("q_norm", "k_norm")]
    rules += [*linear_rules(f"{feedforward}.up", f"{theirs}.mlp.up_proj", state, ours_state),
              *linear_rules(f"{feedforward}.down", f"{theirs}.mlp.down_proj", state, ours_state)]
    return rules + [rule(f"{feedforward}.activation.{n}", f"{theirs}.mlp.act_fn.{n}") for n in ("alpha_p", "alpha_n")
                    if f"{feedforward}.activation.{n}" in ours_state]


def _rules(model, prefix: str, state: dict, lm: bool) -> tuple[list[Rule], dict[str, str]]:
    if model.spec.kind != "decoder-only":
        raise InteropError(f"Apertus is decoder-only; spec '{model.spec.name}' is {model.spec.kind}")
    return hf_llama.layout_rules(model, prefix, state, lm, _sublayer_rules,
                                 norms=("attention_layernorm", "feedforward_layernorm"))


def _constants(model, prefix: str) -> dict:
    """xIELU's constants, which Hugging Face keeps as buffers of each network's ``act_fn``, from the spec's."""
    import torch

    parts, constants = layer_modules(model), {}
    for i, layer in enumerate(model.decoder.layers):
        activation = getattr(layer.get_submodule(parts["feedforward"]), "activation", None)
        if hasattr(activation, "beta") and hasattr(activation, "eps"):
            for n in ("beta", "eps"):
                constants[f"{prefix}layers.{i}.mlp.act_fn.{n}"] = torch.tensor(getattr(activation, n))
    return constants


def from_hf_apertus(model, reference) -> None:
    """Copy an ``ApertusForCausalLM`` (or ``ApertusModel``)'s weights into ``model``; the spec must be the
    architecture the reference's configuration describes, and xIELU's constants the reference's."""
    lm = hasattr(reference, "lm_head")
    same_head(model, reference, lm)
    refuse_other_architecture(model, reference, FIELDS, hf_config, lambda: spec_text(
        reference.config, head=lm, padding=model.decoder.masks_padding))
    state = reference.state_dict()
    prefix = "model." if lm else ""
    names, aliases = _rules(model, prefix, state, lm)
    load_state(model, state, names, reference=type(reference).__name__, aliases=aliases,
               derived=_constants(model, prefix))


def to_hf_apertus(model) -> dict:
    """A state dict for ``ApertusForCausalLM`` (spec with a head) or ``ApertusModel``."""
    lm = model.head is not None
    prefix = "model." if lm else ""
    names, aliases = _rules(model, prefix, {}, lm)
    return export_state(model, names, reference="Hugging Face Apertus", aliases=aliases,
                        derived=_constants(model, prefix))


EXPORT_PRIORITY = 500  # where export tries this module's families (lower first)
FAMILIES = (  # the families this module reads and writes (``tfspec.interop.family``)
    Family("Apertus", ("apertus",), {"ApertusForCausalLM": {"head": True}, "ApertusModel": {"head": False}},
           "Apertus: Llama's attention with each head's queries and keys RMS-normed, and a feed-forward of one "
           "projection up, xIELU (activation=xielu, its two trained values per network) and one down",
           module=__name__, fields=FIELDS, spec_text=spec_text, hf_config=hf_config, load=from_hf_apertus,
           export=to_hf_apertus),
)
