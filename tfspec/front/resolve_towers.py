"""The part of the resolver that reads a model of several towers (``tower NAME { ... }``) and the joins between
them (``contrastive TEXT VISION``)."""

from __future__ import annotations

from ..errors import Collector, Span, SpecError, did_you_mean, one_of
from ..registry import POOLS
from . import schema as S
from .expr import Poisoned
from .params import Param, as_float, as_ref, optional, spec_error, word
from .syntax import ContrastiveDecl, Defaults, Let, ModelDecl, Module, TowerDecl

# what a model of towers holds at its top level besides its towers and joins: the rest lives in a tower
TOP_LEVEL = (ModelDecl, Let, Defaults, TowerDecl, ContrastiveDecl)

CONTRASTIVE_PARAMS = [Param("first", as_ref, positional=True), Param("second", as_ref, positional=True),
                      Param("loss", word("softmax", "sigmoid"), "softmax"), Param("scale", as_float, 2.6592),
                      Param("bias", optional(as_float), None)]


class Joins:
    """Reads the towers, each as a model of its own under the file's ``let``s and ``defaults``, and the joins.
    (a part of ``resolve._Resolver``)."""

    def _towers(self, model_name: str, first_span: Span) -> S.Towers:
        items = self.module.items
        for item in items:
            if not isinstance(item, TOP_LEVEL):
                self.errors.error("structure", "a model of towers holds its embeddings, stacks and heads in its "
                                  "towers", getattr(item, "span", None), "move it into a `tower NAME { ... }`")
        file_defaults = tuple(i for i in items if isinstance(i, Defaults))
        for extra in file_defaults[1:]:
            self.errors.error("duplicate", "a model has one defaults block; this is a second", extra.span)
        towers: dict[str, S.Tower] = {}
        spans: dict[str, Span] = {}
        for decl in (i for i in items if isinstance(i, TowerDecl)):
            if decl.name in spans:
                self.errors.error("duplicate", f"tower '{decl.name}' is declared twice", decl.name_span,
                                  f"first at line {spans[decl.name].line}")
                continue
            spans[decl.name] = decl.name_span
            spec = self._tower(decl, file_defaults[:1])
            if spec is not None:
                towers[decl.name] = S.Tower(name=decl.name, spec=spec, span=decl.span)
        joins = [i for i in items if isinstance(i, ContrastiveDecl)]
        for extra in joins[1:]:
            self.errors.error("duplicate", "a model has one contrastive head; this is a second", extra.span)
        contrastive = self.attempt(lambda: self._contrastive(joins[0], towers, spans)) if joins else None
        if len(spans) < 2:
            self.errors.error("structure", f"a model of towers has two or more; this has {len(spans)}",
                              next(i.span for i in items if isinstance(i, TowerDecl)),
                              "write a model of one tower without `tower`")
        self.errors.raise_if_any(self.sources)
        return S.Towers(name=model_name, params={k: v for k, v in self.env.items() if isinstance(v, (int, float))},
                        towers=tuple(towers.values()), contrastive=contrastive, span=first_span)

    def _tower(self, decl: TowerDecl, file_defaults: tuple) -> S.Spec | None:
        """One tower as a model of its own: the file's ``defaults`` first, then its own; None where it is wrong
        (its problems recorded)."""
        outer_module, outer_errors = self.module, self.errors
        self.module = Module(decl.items, outer_module.file, outer_module.sources)
        self.errors, self.inherited = Collector(), file_defaults
        try:
            spec = self._model(decl.name, decl.span)
            spec._sources = self.sources
            return spec
        except SpecError as exc:
            outer_errors.diagnostics.extend(exc.diagnostics)
            self.sources.update(exc.sources)
            return None
        finally:
            self.module, self.errors, self.inherited = outer_module, outer_errors, ()

    def _contrastive(self, decl: ContrastiveDecl, towers: dict[str, S.Tower],
                     spans: dict[str, Span]) -> S.Contrastive:
        values, arg_spans = self.bind(decl.args, CONTRASTIVE_PARAMS, "contrastive", decl.span)
        pair = (values["first"], values["second"])
        for name, key in zip(pair, ("first", "second")):
            if name not in spans:
                raise spec_error("unknown-name", f"unknown tower '{name}'", arg_spans[key],
                                 did_you_mean(name, spans) or one_of(spans))
        if pair[0] == pair[1]:
            raise spec_error("structure", f"a contrastive head joins two towers; '{pair[0]}' is named twice",
                             arg_spans["second"])
        if any(name not in towers for name in pair):  # (its own problems are reported)
            raise Poisoned
        widths = {}
        for name, key in zip(pair, ("first", "second")):
            head = towers[name].spec.head
            if head is None or head.pool is None:
                raise spec_error("structure", f"tower '{name}' makes no vector of each example, which the "
                                 "contrastive head compares", arg_spans[key],
                                 f"give tower '{name}' a pooled head: `head linear(N) bias=false pool=...` "
                                 f"({one_of(POOLS)})")
            widths[name] = head.out
        if len(set(widths.values())) > 1:
            raise spec_error("shape", "the contrastive head compares vectors of one width; " +
                             " and ".join(f"'{n}' makes {w}" for n, w in widths.items()), decl.span,
                             "give the towers' heads one width: linear(N)")
        return self.validated(S.Contrastive, {"towers": pair, "loss": values["loss"], "scale": values["scale"],
                                              "bias": values["bias"]}, arg_spans, decl.span, "contrastive",
                              {"span": decl.span})
