"""A tower read through the family of its own nested configuration: LLaVA's ``text_config`` is a Llama's (or a
Mistral's, a Qwen2's ...), so its text tower is what that family writes, loads and exports, not a copy of it.

``Nested("text_config", "text", "text_")`` says where the configuration is, which tower it is and how the tower's
``let`` parameters are prefixed in the whole model's spec (``text_d_model``, citing ``text_config.hidden_size``):

- ``tower_text(writer, config)``: the tower as its family writes it, inside ``tower text { ... }``;
- ``fields(own)``: a family's table together with the nested family's, each of whose fields is ``text_config.X``;
- ``config(spec)``: the nested configuration a tower's spec is, by the first family whose configuration describes
  it exactly;
- ``load(...)`` / ``export(...)``: the tower's tensors through its family, their names moved from the whole
  model's (``model.language_model.layers.0...``) to a model of its own (``model.layers.0...``) and back.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Callable

from .fields import Fields, lookup
from .mapping import InteropError
from .writer import SpecWriter


@dataclass(frozen=True)
class Catalog:
    """The families tfspec reads, as ``tfspec.interop.families`` lists them, with its ``family_of`` and
    ``read_config``: it hands them here once it has them (``CATALOG``), so a family of towers reads its nested
    configurations through the others without importing the list that imports it."""

    families: tuple = ()
    family_of: Callable | None = None
    read_config: Callable | None = None


CATALOG = Catalog()


@dataclass(frozen=True)
class Nested:
    """A tower whose configuration is nested at ``where``; ``tower``: its name in the spec; ``prefix``: of its
    ``let``s; ``default``: the model type the whole model's class builds where the nested configuration names
    none (LLaVA's Llama); ``renames``: where the whole model holds the tower's tensors, and where a model of its
    own holds them (``("model.language_model.", "model.")``); ``options``: the ``spec_text`` arguments of its
    family's class (a causal LM's head)."""

    where: str
    tower: str
    prefix: str
    default: str
    renames: tuple[tuple[str, str], ...] = ()
    options: tuple[tuple[str, Any], ...] = (("head", True),)
    # words of the tower's settings written otherwise inside the whole model (Gemma 3's text model sees each
    # picture's image tokens together: its masks' ``causal`` is ``pictures``)
    words: tuple[tuple[str, str], ...] = ()
    # the family that reads the nested configuration where its model_type is the whole model's own name for it
    # (Qwen2.5-VL's qwen2_5_vl_text, alone: Qwen2's, whose rotary positions M-RoPE's are on text without pictures)
    read_as: str | None = None
    # fields of the nested configuration the whole model sets and decides itself, which the nested family reads as
    # unset (PaliGemma's use_bidirectional_attention: its text model's masks are its prefix's, ``words``)
    settled: tuple[str, ...] = ()

    def of(self, config):
        """The nested configuration of ``config``, as its family reads it (``settled`` fields unset)."""
        nested = lookup(config, self.where)
        if not self.settled or nested is None:
            return nested
        if isinstance(nested, dict):
            return {k: v for k, v in nested.items() if k not in self.settled}
        nested = copy.copy(nested)
        for key in self.settled:
            if hasattr(nested, key):
                setattr(nested, key, None)
        return nested

    def family(self, config):
        """The family of the nested configuration (refused by name where tfspec has none)."""
        nested = self.of(config)
        model_type = self.read_as or lookup(nested, "model_type") or self.default
        try:
            family = CATALOG.family_of(model_type)
        except InteropError as exc:
            raise InteropError(f"{self.where}: {exc}") from None
        if family.towers:
            raise InteropError(f"{self.where}: model_type '{model_type}' is a model of towers, not one tower")
        if dict(self.options) not in family.classes.values():  # BERT's (a pooler too): not a tower's family
            raise InteropError(f"{self.where}: model_type '{model_type}' ({family.name}) is not a language model the "
                               f"{self.tower} tower can be (its classes: {', '.join(family.classes)})")
        return family

    def tower_text(self, w: SpecWriter, config, *, padding: bool) -> str:
        """The tower ``tower NAME { ... }`` the nested configuration describes, as its family writes it; its
        ``let``s, prefixed, registered with ``w`` citing the nested fields."""
        from ..front.syntax import Let, ModelDecl, expr_to_text, parse_module

        family, nested = self.family(config), self.of(config)
        lines = self.rewritten(family.spec_text(nested, **dict(self.options), padding=padding), self.prefix)
        renamed = parse_module("\n".join(lines))
        cited = {f.name: f"{self.where}.{f.config}" for f in family.fields.fields}
        for item in renamed.items:
            if isinstance(item, Let):
                for b in item.bindings:
                    w.written(b.name, expr_to_text(b.value), cited.get(b.name[len(self.prefix):]))
        body = [item for item in renamed.items if not isinstance(item, (ModelDecl, Let))]
        inner = "\n".join(lines[body[0].span.line - 1:]).strip("\n")
        return f"tower {self.tower} {{\n" + "\n".join(f"  {line}" if line else "" for line in inner.split("\n")) + \
            "\n}\n"

    def rewritten(self, text: str, prefix: str = "") -> list[str]:
        """The lines of a spec its family wrote, each ``let`` name prefixed with ``prefix`` and each of ``words``
        written as the whole model writes it."""
        from ..front.syntax import Let, names, parse_module

        module = parse_module(text)
        lets = {b.name for item in module.items if isinstance(item, Let) for b in item.bindings}
        lines, words, values = text.split("\n"), dict(self.words), list(names(module.items))
        edits = [(b.name_span, prefix + b.name) for item in module.items if isinstance(item, Let)
                 for b in item.bindings if prefix] + \
                [(n.span, prefix + n.id) for n in values if n.id in lets and prefix] + \
                [(n.span, words[n.id]) for n in values if n.id not in lets and n.id in words] + \
                [(n.span, words[n.id]) for n in set(names(module.items, calls=True)) - set(values)
                 if n.id in words]  # (a call's name: window of window(4096))
        for span, written in sorted(edits, key=lambda e: (e[0].line, e[0].column), reverse=True):  # (one line each)
            line = lines[span.line - 1]
            lines[span.line - 1] = line[:span.column - 1] + written + line[span.end_column - 1:]
        return lines

    def as_written(self, model, family, config):
        """The tower's compiled ``model`` as ``family``'s weight functions read it: itself, or where the whole
        model writes some ``words`` otherwise, a view of it whose spec is the one the family writes for
        ``config`` (the same modules; Gemma 3's masks ``causal``)."""
        if not self.words:
            return model
        from ..ir.api import parse

        stack = model.spec.stacks[-1].role
        spec = parse(family.spec_text(config, **dict(self.options), padding=getattr(model, stack).masks_padding))
        return _Written(model, spec)

    def fields(self, own: Fields) -> "WithNested":
        """A family's own table (``own``) and the nested family's, read at ``where``."""
        return WithNested(own, self)

    def config(self, spec) -> dict:
        """The nested configuration the tower's ``spec`` is: the first family's (in export's order) whose
        configuration describes the spec exactly; an ``InteropError`` with the closest one's differences otherwise."""
        from .mapping import architecture_problems

        closest: tuple[int, str, list[str]] | None = None
        for candidate in CATALOG.families:
            if candidate.towers:
                continue
            try:
                values = candidate.hf_config(spec)
                config = CATALOG.read_config(values)
                family = CATALOG.family_of(config.model_type)
            except (InteropError, TypeError, ValueError):
                continue
            if family.unsupported(config):
                continue
            for padding in (True, False):
                expected = "\n".join(self.rewritten(family.spec_text(config, **dict(self.options), padding=padding)))
                problems = architecture_problems(spec, expected, f"{family.name}'s {self.where}")
                if not problems:
                    return values
                if closest is None or len(problems) < closest[0]:
                    closest = (len(problems), family.name, problems)
        why = ":\n" + "\n".join(f"  {p}" for p in closest[2]) if closest else ""
        raise InteropError(f"tower {self.tower} is no model a Hugging Face family describes"
                           + (f"; the closest, {closest[1]}, differs" if closest else "") + why)

    def load(self, model, reference, nested=None) -> None:
        """Copy the tower's tensors from ``reference`` (the whole Hugging Face model) into ``model`` (the tower's
        compiled model) through the nested family, each renamed as ``renames`` says (``nested``: the tower's
        configuration as a model of its own, where it is not the one at ``where`` as it is)."""
        family = self.family(reference.config)
        state = {own + key[len(theirs):]: value for key, value in reference.state_dict().items()
                 for theirs, own in self.renames if key.startswith(theirs)}
        nested = self.of(reference.config) if nested is None else nested
        view = type(f"{type(reference).__name__}'s {self.where}", (_View,), {})(nested, state, "lm_head.weight" in state)
        family.load(self.as_written(model, family, nested), view)

    def export(self, model) -> dict:
        """The tower's tensors as the whole Hugging Face model names them (``renames`` the other way)."""
        config = CATALOG.read_config(self.config(model.spec))
        family = CATALOG.family_of(config.model_type)
        state = family.export(self.as_written(model, family, config))
        out = {theirs + key[len(own):]: value for key, value in state.items()
               for theirs, own in self.renames if key.startswith(own)}
        if len(out) != len(state):
            placed = {own + key[len(theirs):] for key in out for theirs, own in self.renames if key.startswith(theirs)}
            raise InteropError(f"tower {self.tower}'s tensors {sorted(set(state) - placed)[:4]} have no place in "
                               "the whole model")
        return out


class _Written:
    """A compiled tower seen with another spec of the same modules (``Nested.as_written``)."""

    def __init__(self, model, spec):
        self._model, self.spec = model, spec

    def __getattr__(self, name: str):
        return getattr(self._model, name)


class _View:
    """A model of one as its family's ``load`` reads a reference: the nested configuration, the tensors under
    the names a model of its own has, and an LM head where they hold one."""

    def __init__(self, config, state: dict, lm: bool):
        self.config, self._state, self._lm = config, state, lm

    def state_dict(self) -> dict:
        return self._state

    def named_parameters(self):
        return iter(self._state.items())

    def get_output_embeddings(self):
        return "lm_head" if self._lm else None


class WithNested(Fields):
    """A family's table (its own fields) and, at ``nested.where``, the table of the family its nested
    configuration names: every field of it accounted for, its values refused or compared as that family's."""

    def __init__(self, own: Fields, nested: Nested):
        super().__init__(*own.entries, ignored=own.ignored)
        self.nested = nested

    def accounted(self) -> set[str]:
        where = self.nested.where
        return super().accounted() | {f"{where}.{key}"
                                      for key in CATALOG.family_of(self.nested.default).fields.accounted()}

    def unsupported(self, config) -> list[str]:
        problems = super().unsupported(config)
        try:
            family = self.nested.family(config)
        except InteropError as exc:
            return problems + [str(exc)]
        return problems + [f"{self.nested.where}: {p}" for p in family.unsupported(self.nested.of(config))]

    def differences(self, config, other) -> list[str]:
        where, out = self.nested.where, super().differences(config, other)
        mine, theirs = self.nested.of(config), self.nested.of(other)
        if lookup(mine, "model_type") != lookup(theirs, "model_type"):
            return out + [f"{where}.model_type: {lookup(mine, 'model_type')!r} in the configuration, "
                          f"{lookup(theirs, 'model_type')!r} in the spec"]
        return out + [f"{where}.{d}" for d in self.nested.family(config).fields.differences(mine, theirs)]
