"""The part of the resolver that reads a model of several towers (``tower NAME { ... }``) and the joins between
them (``contrastive TEXT VISION``)."""

from __future__ import annotations

from ..errors import Collector, Span, SpecError, did_you_mean, one_of
from ..registry import CONNECTOR_STEPS, INPUTS, POOLS
from . import schema as S
from .expr import Poisoned
from .params import REQUIRED, Param, as_float, as_int, as_ref, choice, optional, spec_error, word
from .syntax import Call, ConnectDecl, ContrastiveDecl, Defaults, Let, ModelDecl, Module, Setting, TowerDecl

# what a model of towers holds at its top level besides its towers and joins: the rest lives in a tower
TOP_LEVEL = (ModelDecl, Let, Defaults, TowerDecl, ContrastiveDecl, ConnectDecl)

CONNECT_PARAMS = [Param("image_token", as_int, REQUIRED), Param("layer", optional(as_int), None),
                  Param("drop", word("none", "first"), "none")]

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
        connections = [i for i in items if isinstance(i, ConnectDecl)]
        connectors = [c for c in (self.attempt(lambda d=d: self._connector(d, towers, spans)) for d in connections)
                      if c is not None]
        if joins and connections:
            self.errors.error("structure", "a model joins its towers by a contrastive head or by connectors, not "
                              "both", connections[0].span, "keep one")
        for extra in [d for i, d in enumerate(connections) if d.source in [c.source for c in connections[:i]]]:
            self.errors.error("duplicate", f"tower '{extra.source}' is connected twice; a tower feeds one other",
                              extra.source_span)
        if len(spans) < 2:
            self.errors.error("structure", f"a model of towers has two or more; this has {len(spans)}",
                              next(i.span for i in items if isinstance(i, TowerDecl)),
                              "write a model of one tower without `tower`")
        self.errors.raise_if_any(self.sources)
        return S.Towers(name=model_name, params={k: v for k, v in self.env.items() if isinstance(v, (int, float))},
                        towers=tuple(towers.values()), contrastive=contrastive, connectors=tuple(connectors),
                        span=first_span)

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

    def _connector(self, decl: ConnectDecl, towers: dict[str, S.Tower], spans: dict[str, Span]) -> S.Connector:
        values, arg_spans = self.bind(decl.args, CONNECT_PARAMS, "connect", decl.span)
        for name, where in ((decl.source, decl.source_span), (decl.target, decl.target_span)):
            if name not in spans:
                raise spec_error("unknown-name", f"unknown tower '{name}'", where, did_you_mean(name, spans)
                                 or one_of(spans))
        if decl.source == decl.target:
            raise spec_error("structure", f"tower '{decl.source}' cannot feed itself", decl.target_span)
        steps = [self.attempt(lambda s=s: self._step(s)) for s in decl.body]
        if decl.source not in towers or decl.target not in towers or None in steps:
            raise Poisoned  # (their own problems are reported)
        source, target = towers[decl.source].spec, towers[decl.target].spec
        for name, spec, where in ((decl.source, source, decl.source_span), (decl.target, target, decl.target_span)):
            if not spec.stacks:  # (a tower of embeddings alone: nothing to read vectors from or feed them to)
                raise spec_error("structure", f"tower '{name}' has no stack for the connector to "
                                 f"{'read' if name == decl.source else 'feed'}", where,
                                 "give it an `encoder x N { ... }` or `decoder x N { ... }`")
        given = source.embedding(source.stacks[0].embedding).input
        if given is None:
            raise spec_error("structure", f"tower '{decl.source}' reads token ids; a connector carries what a tower "
                             "reads from another input (pictures) into one of tokens", decl.source_span)
        kind, options = INPUTS.of(given)
        table = target.embedding(target.stacks[-1].embedding)
        if table.vocab is None or target.decoder is None:
            raise spec_error("structure", f"tower '{decl.target}' is no decoder of token ids: a connector puts "
                             f"{kind.what} among a decoder's tokens", decl.target_span)
        if values["image_token"] >= table.vocab:
            raise spec_error("value", f"image_token {values['image_token']} is not among tower '{decl.target}''s "
                             f"{table.vocab:,} token ids", arg_spans["image_token"])
        layers = source.stacks[0].repeat
        if values["layer"] is not None and not -layers - 1 <= values["layer"] <= layers:
            raise spec_error("value", f"tower '{decl.source}' has {layers} layers: layer is one of {-layers - 1} to "
                             f"{layers} (0: its embeddings, -1: its last layer's output)", arg_spans["layer"])
        if values["drop"] == "first" and not kind.leading(options):
            raise spec_error("structure", f"drop=first leaves out a class token, which tower '{decl.source}''s "
                             f"{kind.what} do not have", arg_spans["drop"], "drop=none")
        connector = self.validated(S.Connector, {"source": decl.source, "target": decl.target, **values,
                                                 "steps": tuple(steps)}, arg_spans, decl.span, "connect",
                                   {"span": decl.span})
        length = kind.length(options) - (values["drop"] == "first")
        widths = connector.widths(source.embedding(source.stacks[0].embedding).width)
        for step, width in zip(connector.steps, widths):
            variant, step_options = CONNECTOR_STEPS.of(step)
            problem = variant.problem(width, length, step_options)
            if problem is not None:
                raise spec_error("value", problem.message, step.span)
            length = variant.length(length, step_options)
        if widths[-1] != table.dim:
            raise spec_error("shape", f"the connector gives vectors of width {widths[-1]}, but tower "
                             f"'{decl.target}''s embeddings are {table.dim} wide", decl.span,
                             f"end its steps at width {table.dim} (e.g. linear {table.dim})")
        return connector

    def _step(self, statement) -> S.Choice:
        """A connector's statement (``linear 4096``) as the step it names, its arguments bound."""
        if not isinstance(statement, Setting) or statement.body is not None:
            raise spec_error("structure", "a connector's body is a list of steps (linear 4096, activation gelu, "
                             "norm layernorm)", statement.span)
        call = Call(statement.name, statement.name_span, statement.args, statement.span)
        return choice(CONNECTOR_STEPS)(call, self)
