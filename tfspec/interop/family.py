"""The protocol every Hugging Face family follows: one declared ``Family`` each, in the module that reads and
writes it, holding its whole contract: the model types and classes it covers, the conventions its imported spec
states, its table of configuration fields, the document its spec is built from, the weight table its checkpoint
maps by, and where export tries it (``priority``). A family derived from another states its differences alone
(``Family.derive``), as Hugging Face's ``modular_*.py`` derives Qwen3 from Qwen2. ``tfspec.interop.families``
finds every declared family and lists them in the order export tries them; every stage asks a family, never a
module, for what it does. Beside its family, a module holds its tests' configurations: ``EXAMPLES``, a tiny one
of each class (built, saved and compared with Hugging Face's), and ``COVERAGE``, configurations that together set
every field of its table away from its default (each imported and exported back), written as changes of
``layouts.example`` and ``layouts.covering``.

    >>> from tfspec.interop.families.hf_llama import LLAMA, MISTRAL
    >>> LLAMA.name, LLAMA.model_types, next(iter(LLAMA.classes)), MISTRAL.rules is LLAMA.rules
    ('Llama', ('llama',), 'LlamaForCausalLM', True)
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field, fields as dataclass_fields
from typing import Any, Callable


def causal_lm(name: str, base: str | None = None) -> dict[str, dict]:
    """A decoder family's classes: ``{name}ForCausalLM`` (the spec with a head, the default) and its base model,
    ``{name}Model`` unless ``base`` names it otherwise.

    >>> causal_lm("Qwen3_5", base="Qwen3_5TextModel")
    {'Qwen3_5ForCausalLM': {'head': True}, 'Qwen3_5TextModel': {'head': False}}
    """
    return {f"{name}ForCausalLM": {"head": True}, base or f"{name}Model": {"head": False}}


def masked_lm(name: str, pooler: bool = True, lm_pooler: bool = False) -> dict[str, dict]:
    """An encoder family's classes: ``{name}ForMaskedLM`` (the spec with the MLM head, the default; with a pooler
    where ``lm_pooler``) and ``{name}Model`` (with a pooler where ``pooler``).

    >>> masked_lm("DistilBert", pooler=False)
    {'DistilBertForMaskedLM': {'pooler': False, 'head': True}, 'DistilBertModel': {'pooler': False, 'head': False}}
    """
    return {f"{name}ForMaskedLM": {"pooler": lm_pooler, "head": True},
            f"{name}Model": {"pooler": pooler, "head": False}}


@dataclass(frozen=True)
class Requires:
    """A fact a spec must have to be a family's, which its field table does not read (GLM-4's rotary positions
    pairing neighbouring dimensions): ``holds(facts)``; export refuses a spec without it, saying ``why`` (or
    ``why(facts)``, where the reason names the spec's value)."""

    holds: Callable[[Any], Any]
    why: str | Callable[[Any], str]

    def check(self, facts) -> None:
        if not self.holds(facts):
            raise facts.refuse(self.why(facts) if callable(self.why) else self.why)


@dataclass(frozen=True)
class Family:
    """One family. ``classes``: its Hugging Face model classes, each with the ``spec_text`` arguments that
    describe it (the first is the default); ``fields``: its
    ``tfspec.interop.fields.Fields`` table; ``document(s, padding=, head=)``: the spec its configuration's
    settings ``s`` (``fields.write``'s) describe, as a ``tfspec.interop.document.Document``; ``kind``: what its
    specs are (``"decoder-only"``, ``"encoder-only"``); ``requires``: what export asks of a spec beyond its fields
    (``Requires``); ``rules``: its weight table (``tfspec.interop.weights.Weights``, or any
    ``rules(model, prefix, state, lm)`` giving ``mapping.Rule``s), the model with a head holding its base model under
    ``prefix``; ``computed(model, prefix, state)``: tensors the reference holds and the model computes (MiniMax's
    decays, Marian's sinusoids: as long as the reference's ``state`` holds them; ``state`` empty on export);
    ``priority``: where export tries it, lower first.

    From these the family's four functions are derived, each given instead where a family reads otherwise:
    ``spec_text(config, **options)``, the spec a configuration describes; ``hf_config(spec)``, the configuration
    a spec describes (an ``InteropError`` where none does: the fields read back from its facts, the round trip
    having the final say); ``load(model, reference)`` / ``export(model)``, the weights each way.

    ``carried``: configuration keys export writes back as they were (see ``carried_values``);
    ``options_from_tensors(names)`` and ``options_from_model(model)``: ``spec_text`` arguments a checkpoint's
    tensor names, or a compiled model, decide (T5: whether its head is tied); ``towers``: its specs are models of
    several towers (CLIP's: loaded by ``load_towers``); ``text``: a vision-language family's text model, read,
    loaded and exported through its own family (``load_connected``); ``pictures(config, outputs)``: a
    vision-language family's pictures as its compiled model reads them (its ``vision=`` input) from what its Hugging
    Face processor gives (``pixel_values`` and what goes with them); None: the processor's ``pixel_values`` as they
    are (``Family.processor_pictures``).

    A family derived from another (``derive``) states only its differences, as Hugging Face's ``modular_*.py``
    derives Qwen3 from Qwen2."""

    name: str
    model_types: tuple[str, ...]
    classes: dict[str, dict] = field(hash=False)
    conventions: str
    priority: int  # where export tries it (lower first): one describing a spec as exactly as another, more general
    fields: Any = field(hash=False)
    # the declaring module (``hf_llama``): by default the one whose code declares the family, as ``namedtuple``
    # finds its caller's; a function declaring families for others (``hybrid.mixers_alone_family``) passes its
    # caller's
    module: str = ""
    spec_text: Callable[..., str] | None = field(default=None, hash=False)
    hf_config: Callable[[Any], dict] | None = field(default=None, hash=False)
    load: Callable[[Any, Any], None] | None = field(default=None, hash=False)
    export: Callable[[Any], dict] | None = field(default=None, hash=False)
    document: Callable[..., Any] | None = field(default=None, hash=False)
    kind: str = "decoder-only"
    requires: tuple[Requires, ...] = ()
    rules: Callable | None = field(default=None, hash=False)
    prefix: str = "model."
    computed: Callable | None = field(default=None, hash=False)
    carried: tuple[str, ...] = ()
    options_from_tensors: Callable[[set], dict] | None = field(default=None, hash=False)
    options_from_model: Callable[[Any], dict] | None = field(default=None, hash=False)
    towers: bool = False  # its models are several towers (``schema.Towers``: CLIP's), not one
    pictures: Callable[[Any, dict], Any] | None = field(default=None, hash=False)
    # a tower that is a model of its own (``--tower text``) where the family's fields do not read it through its own
    # family (``tfspec.interop.nested.Nested``; those that do say so in ``fields.nested``)
    alone: Any = field(default=None, hash=False)
    # a vision-language family's text model, the target of its one connector, written, loaded and exported through
    # its own family (a ``nested.Nested``: LLaVA's Llama); ``rules`` then give the other towers' and the connector's
    text: Any = field(default=None, hash=False)
    # which of the four functions were derived (a derived family derives them anew from its own declaration)
    derived_functions: frozenset = field(default=frozenset(), init=False, hash=False, compare=False)

    def __post_init__(self):
        module = self.module or sys._getframe(2).f_globals["__name__"]  # (2: past __init__, its caller)
        object.__setattr__(self, "module", module.rsplit(".", 1)[-1])
        derived = {"spec_text": self._spec_text, "hf_config": self._hf_config, "load": self._load,
                   "export": self._export}
        missing = {name for name in derived if getattr(self, name) is None}
        if "spec_text" in missing and self.document is None or {"load", "export"} & missing and self.rules is None:
            raise TypeError(f"family {self.name}: a spec_text or a document, and load and export or rules")
        for name in missing:
            object.__setattr__(self, name, derived[name])
        object.__setattr__(self, "derived_functions", frozenset(missing))

    def derive(self, name: str, model_types: tuple[str, ...], classes: dict[str, dict], conventions: str, *,
               priority: int, **differences) -> "Family":
        """The family ``name`` that is this one but for its ``differences`` (any of ``Family``'s fields), declared
        by the module that calls this."""
        declared = {f.name: getattr(self, f.name) for f in dataclass_fields(self) if f.init}
        declared.update({function: None for function in self.derived_functions})
        return Family(**{**declared, "name": name, "model_types": model_types, "classes": classes,
                         "conventions": conventions, "priority": priority,
                         "module": sys._getframe(1).f_globals["__name__"], **differences})

    def _spec_text(self, config, *, head: bool = True, padding: bool = True, name: str = "reference",
                   heading: tuple[str, ...] = (), **options) -> str:
        from .writer import SpecWriter

        writer = SpecWriter()
        settings = self.fields.write(config, writer)
        return writer.text(self.document(settings, padding=padding, head=head, **options).text(name), list(heading))

    def _hf_config(self, spec) -> dict:
        from .facts import Facts, TowerFacts

        if self.towers:
            facts = TowerFacts(spec, self.name)
        else:
            facts = Facts(spec, self.name)
            facts.kind(self.kind)
        for required in self.requires:
            required.check(facts)
        return {"model_type": self.model_types[0], **self.fields.config(facts)}

    def _load(self, model, reference) -> None:
        load = load_connected if self.text is not None else load_towers if self.towers else \
            load_encoder if self.kind == "encoder-only" else load_decoder
        load(model, reference, self)

    def _export(self, model) -> dict:
        """The state dict of ``model`` by the family's rules: the model with a head (its base model under
        ``prefix``) or the base model; the tensors the reference holds and the model computes written as computed."""
        from .mapping import export_state

        lm = not self.towers and model.head is not None  # (a model of towers: its own names, no prefix)
        prefix = self.prefix if lm else ""
        names, aliases = self.rules(model, prefix, {}, lm)
        # a connected text model's tensors are its own family's (``text``)
        outside = (f"towers.{model.spec.connectors[0].target}.",) if self.text is not None else ()
        state = export_state(model, names, reference=f"Hugging Face {self.name}", aliases=aliases, outside=outside,
                             derived=self.computed(model, prefix, {}) if self.computed else None)
        return {**state, **self.text.export(model.towers[model.spec.connectors[0].target])} if outside else state

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
        from .fields import lookup
        carried = {key: lookup(config, key) for key in self.carried if lookup(config, key) is not None}
        for f in self.fields.fields:
            value = f.value(config) if f.names is not None and "." not in f.config else None
            if value in (f.names or {}) and next(k for k, v in f.names.items() if v == f.names[value]) != value:
                carried[f.config] = value
        return carried

    def unsupported(self, config) -> list[str]:
        """The configuration's values the family's specs cannot express, each with the reason."""
        return self.fields.unsupported(config)


def load_decoder(model, reference, family: Family) -> None:
    """Copy a decoder-only causal LM's (or base model's) weights into ``model`` by the family's rules, once
    ``model``'s spec is the architecture the reference's configuration describes; every tensor must be accounted
    for, and the tensors the reference holds that the model computes (MiniMax's decays, ``family.computed``) are
    checked. The causal LM holds its base model under the family's ``prefix`` (Llama's ``model.``, BLOOM's
    ``transformer.``)."""
    from . import mtp
    from .mapping import InteropError, load_state, refuse_other_architecture, same_head

    lm, prefix = reference.get_output_embeddings() is not None, family.prefix  # (Whisper's is proj_out)
    if model.spec.kind != family.kind:
        raise InteropError(f"{type(reference).__name__} is {family.kind}; spec '{model.spec.name}' is "
                           f"{model.spec.kind}")
    same_head(model, reference, lm)
    # what the reference's tensors decide, as its checkpoint would: a parameter shared by two names listed once
    options = family.checkpoint_options({name for name, _ in reference.named_parameters()})
    refuse_other_architecture(model, reference, family.fields, family.hf_config, lambda: family.spec_text(
        reference.config, head=lm, padding=model.decoder.masks_padding, **options))
    # multi-token prediction's modules, which Hugging Face's model leaves out: from its checkpoint's files
    state = {**reference.state_dict(), **(mtp.checkpoint_tensors(reference, model, prefix) if lm else {})}
    names, aliases = family.rules(model, prefix if lm else "", state, lm)
    names, aliases, outside = mtp.without_missing(model, state, names, aliases, prefix, type(reference).__name__)
    computed = family.computed(model, prefix if lm else "", state) if family.computed else None
    load_state(model, state, names, reference=type(reference).__name__, aliases=aliases, outside=outside,
               derived=computed)


def load_encoder(model, reference, family: Family) -> None:
    """Copy an encoder's weights (its masked LM's, which holds the base model under the family's ``prefix``, or the
    base model's) into ``model`` by the family's rules, once ``model``'s spec is the architecture the reference's
    configuration describes, its pooler and masked-LM head included."""
    from .mapping import InteropError, load_state, refuse_other_architecture

    if model.spec.kind != "encoder-only":
        raise InteropError(f"{type(reference).__name__} is an encoder; spec '{model.spec.name}' is {model.spec.kind}")
    base = family.prefix.split(".")[0]
    inner = getattr(reference, base, reference)
    refuse_other_architecture(model, reference, family.fields, family.hf_config, lambda: family.spec_text(
        reference.config, pooler=getattr(inner, "pooler", None) is not None,
        head=hasattr(reference, family.rules.head.module), padding=model.encoder.masks_padding))
    state = reference.state_dict()
    names, aliases = family.rules(model, family.prefix if hasattr(reference, base) else "", state,
                                  model.head is not None)
    load_state(model, state, names, reference=type(reference).__name__, aliases=aliases)


def load_towers(model, reference, family: Family) -> None:
    """Copy a model of towers' weights (CLIP's: two towers and a contrastive head; Qwen2.5-VL's: a vision tower,
    its merger and the text model it reads) into ``model`` by the family's rules, once ``model``'s spec is the
    architecture the reference's configuration describes."""
    from ..front.schema import Towers
    from .mapping import InteropError, load_state, refuse_undescribed

    name = type(reference).__name__
    if not isinstance(model.spec, Towers):
        raise InteropError(f"{name} is a model of several towers; spec '{model.spec.name}' is one model")
    refuse_undescribed(model, reference, family.fields, family.spec_text)
    state = reference.state_dict()
    names, aliases = family.rules(model, "", state, False)
    load_state(model, state, names, reference=name, aliases=aliases)


def load_connected(model, reference, family: Family) -> None:
    """Copy a vision-language model's weights into ``model``: the vision tower's and the connector's by the family's
    rules, the text model's through its own family (``family.text``: its tensors where ``text.renames`` says), once
    ``model``'s spec is the architecture the reference's configuration describes."""
    from ..front.schema import Towers
    from .mapping import InteropError, load_state, refuse_undescribed

    name = type(reference).__name__
    if not isinstance(model.spec, Towers) or len(model.spec.connectors) != 1:
        raise InteropError(f"{name} is a vision tower connected to a text model; spec '{model.spec.name}' is not")
    refuse_undescribed(model, reference, family.fields, family.spec_text)
    target = model.spec.connectors[0].target
    theirs = tuple(whole for whole, _ in family.text.renames)  # the text model's, copied by its own family
    state = {k: v for k, v in reference.state_dict().items() if not k.startswith(theirs)}
    names, aliases = family.rules(model, "", state, False)
    load_state(model, state, names, reference=name, aliases=aliases, outside=(f"towers.{target}.",))
    family.text.load(model.towers[target], reference)
