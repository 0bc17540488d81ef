"""The protocol every Hugging Face family follows: one declared ``Family`` each, in the module that reads and
writes it (``FAMILIES`` at its end), holding its whole contract: the model types and classes it covers, the
conventions its imported spec states, its table of configuration fields, the spec a configuration describes, the
configuration a spec describes, and the functions that copy weights each way. ``tfspec.interop.families`` lists
them in the order export tries them; every stage asks a family, never a module, for what it does.

    >>> from tfspec.interop.families.hf_llama import FAMILIES
    >>> FAMILIES[0].name, FAMILIES[0].model_types, next(iter(FAMILIES[0].classes))
    ('Llama', ('llama',), 'LlamaForCausalLM')
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable


@dataclass(frozen=True)
class Family:
    """One family. ``classes``: its Hugging Face model classes, each with the ``spec_text`` arguments that
    describe it (the first is the default); ``module``: the declaring module's ``__name__``; ``fields``: its
    ``tfspec.interop.fields.Fields`` table; ``spec_text(config, **options)``: the spec a configuration
    describes; ``hf_config(spec)``: the configuration a spec describes (an ``InteropError`` where none does);
    ``load(model, reference)`` / ``export(model)``: the weights each way; ``carried``: configuration keys
    export writes back as they were (see ``carried_values``); ``options_from_tensors(names)`` and
    ``options_from_model(model)``: ``spec_text`` arguments a checkpoint's tensor names, or a compiled model,
    decide (T5: whether its head is tied); ``towers``: its specs are models of several towers (CLIP's);
    ``pictures(config, outputs)``: a vision-language family's pictures as its compiled model reads them (its
    ``vision=`` input) from what its Hugging Face processor gives (``pixel_values`` and what goes with them); None:
    the processor's ``pixel_values`` as they are (``Family.processor_pictures``)."""

    name: str
    model_types: tuple[str, ...]
    classes: dict[str, dict] = field(hash=False)
    conventions: str
    module: str
    fields: Any = field(hash=False)
    spec_text: Callable[..., str] = field(hash=False)
    hf_config: Callable[[Any], dict] = field(hash=False)
    load: Callable[[Any, Any], None] = field(hash=False)
    export: Callable[[Any], dict] = field(hash=False)
    carried: tuple[str, ...] = ()
    options_from_tensors: Callable[[set], dict] | None = field(default=None, hash=False)
    options_from_model: Callable[[Any], dict] | None = field(default=None, hash=False)
    towers: bool = False  # its models are several towers (``schema.Towers``: CLIP's), not one
    pictures: Callable[[Any, dict], Any] | None = field(default=None, hash=False)
    # a tower that is a model of its own (``--tower text``) where the family's fields do not read it through its own
    # family (``tfspec.interop.nested.Nested``; those that do say so in ``fields.nested``)
    alone: Any = field(default=None, hash=False)

    def __post_init__(self):
        object.__setattr__(self, "module", self.module.rsplit(".", 1)[-1])  # hf_llama: the family's home

    def processor_pictures(self, config, outputs: dict):
        """The ``vision=`` input of this family's compiled model from its Hugging Face processor's ``outputs``
        (a batch of pictures, or a list of batches of several sizes, in the order of the prompts' image tokens)."""
        if "pixel_values" not in outputs:
            raise ValueError(f"the processor's outputs hold no pixel_values (they hold {', '.join(outputs) or 'none'})")
        if self.pictures is not None:
            return self.pictures(config, outputs)
        pixels = outputs["pixel_values"]
        if pixels.dim() != 4:
            raise ValueError(f"{self.name} reads pixel_values (pictures, channels, height, width); got "
                             f"{tuple(pixels.shape)}")
        return pixels

    def checkpoint_options(self, names: set[str]) -> dict:
        """``spec_text`` arguments that the checkpoint's tensor names decide (T5: a saved ``lm_head`` is untied)."""
        return self.options_from_tensors(names) if self.options_from_tensors and names else {}

    def model_options(self, model) -> dict:
        """``spec_text`` arguments that the compiled model decides (T5: whether its head is tied)."""
        return self.options_from_model(model) if self.options_from_model else {}

    def carried_values(self, config) -> dict:
        """Configuration values no spec setting holds that export writes back as they were: those that size
        tensors the checkpoint holds without changing what the model computes (Marian's sinusoid tables' length),
        values only another input reads (Qwen3.5's M-RoPE sections, ``rope_parameters.mrope_section``: a key inside
        a dict field is dotted), and a name's other spelling (Marian's ``swish``, which the spec writes as
        ``silu``)."""
        from .fields import _lookup
        carried = {key: _lookup(config, key) for key in self.carried if _lookup(config, key) is not None}
        for f in self.fields.fields:
            value = f.value(config) if f.names is not None and "." not in f.config else None
            if value in (f.names or {}) and next(k for k, v in f.names.items() if v == f.names[value]) != value:
                carried[f.config] = value
        return carried

    def unsupported(self, config) -> list[str]:
        """The configuration's values the family's specs cannot express, each with the reason."""
        return self.fields.unsupported(config)


def exported_config(name: str, model_type: str, kind: str, fields) -> Callable[[Any], dict]:
    """The ``hf_config`` of a family whose field table says all its configuration holds: a spec of ``kind``
    (``"decoder-only"``, ``"encoder-only"``), read field by field into a configuration of ``model_type``; the
    round trip (the spec that configuration describes, compared with the spec) has the final say on the rest."""
    def hf_config(spec) -> dict:
        from .facts import Facts

        facts = Facts(spec, name)
        facts.kind(kind)
        return {"model_type": model_type, **fields.config(facts)}

    hf_config.__doc__ = f"The {name} configuration ``spec`` would be."
    return hf_config

