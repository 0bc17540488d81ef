"""The part of the resolver that reads ``encoder`` and ``decoder`` stacks: their settings, sublayers, weight sets, layer
schedules and the embedding each reads."""

from __future__ import annotations

from ..errors import Collector, Span, did_you_mean, one_of
from ..registry import ACTIVATIONS, ATTENTION_STEPS, FEEDFORWARD_KINDS, ROUTER_PARTS
from . import schema as S
from .expr import Poisoned
from .params import (BLOCK_SETTINGS, FAILED, Namer, Param, SECTIONS, STACK_SETTINGS, SUBLAYERS, applications, as_int,
                     module_name, spec_error, sublayer_params)
from .syntax import Arg, Assignment, Call, EmbeddingDecl, Name, Setting, StackDecl


class Stacks:
    """Reads ``encoder`` and ``decoder`` stacks (a part of ``resolve._Resolver``)."""

    def _stacks(self, decls: list[StackDecl], defaults: dict, embeddings: dict, first_span: Span) -> dict[str, S.Stack]:
        out: dict[str, S.Stack] = {}
        roles_seen: dict[str, StackDecl] = {}
        for decl in decls:
            if decl.role in roles_seen:
                self.errors.error("duplicate", f"a model has one {decl.role} stack; this is a second", decl.role_span,
                                  f"the first is at line {roles_seen[decl.role].span.line}")
                continue
            roles_seen[decl.role] = decl
            stack = self.attempt(lambda: self._stack(decl, defaults, embeddings))
            if stack is not None:
                out[decl.role] = stack
        if not decls:
            self.errors.error("structure", "the spec defines no stack", first_span,
                              "add `encoder x N { ... }` and/or `decoder x N { ... }`")
        if not embeddings and not any(isinstance(i, EmbeddingDecl) for i in self.module.items):
            self.errors.error("structure", "the spec defines no embedding", first_span,
                              "add `embedding tokens { vocab V; dim D }`")
        return out

    def _stack(self, decl: StackDecl, defaults: dict, embeddings: dict) -> S.Stack:
        local = Collector()
        repeat = self.attempt(lambda: as_int(decl.repeat, self))
        settings = self._settings(decl.body, STACK_SETTINGS, f"the {decl.role} stack",
                                  extra_words=SUBLAYERS + SECTIONS, wiring=True)
        # A failed setting is already reported; resolve the sublayers anyway to report theirs too.
        poisoned = any(v is FAILED for v, _ in settings.values())
        settings = {k: (v, span) for k, (v, span) in settings.items() if v is not FAILED}
        valid = {k: v for k, (v, span) in settings.items() if self._in_range(k, v, span)}
        d = {**defaults, **{k: v for k, v in valid.items() if k in BLOCK_SETTINGS}}
        embedding = self._stack_embedding(decl, settings, embeddings)
        sublayer_stmts = [s for s in decl.body if isinstance(s, Setting) and s.name in SUBLAYERS]
        assignments = [s for s in decl.body if isinstance(s, Assignment)]
        if sublayer_stmts and assignments:
            local.error("wiring", "a block is written either as sublayer statements or as assignments, not both",
                        assignments[0].span, f"sublayer statement at line {sublayer_stmts[0].span.line}")
            local.raise_if_any()
        unknown = [s for s in decl.body if isinstance(s, Setting) and s.name not in STACK_SETTINGS
                   and s.name not in SUBLAYERS + SECTIONS]
        sections = [s for s in decl.body if isinstance(s, Setting) and s.name in SECTIONS]
        if not sublayer_stmts and not assignments and unknown:
            raise Poisoned  # the unknown statement is reported; "no sublayers" would only echo it
        if not sublayer_stmts and not assignments:
            raise spec_error("structure", f"the {decl.role} stack has no sublayers", decl.role_span,
                             "add e.g. `attention self heads=8` and `feedforward d_ff=2048`")
        if assignments:
            block = S.Block(wiring=self._wiring(assignments, d, decl))
        else:
            block = S.Block(sublayers=tuple(self._sublayers(sublayer_stmts, d)))
        if repeat is None or embedding is None or poisoned:
            raise Poisoned
        kinds, schedule = (), ()
        if 0 < repeat <= S.MAX_LAYERS:  # (else the stack's validation says so, before a layer is listed)
            if sections:
                block, kinds, schedule = self._schedule(decl, repeat, d, sublayer_stmts or assignments, block,
                                                        sections)
            block, kinds, schedule = self._layers_hand_on_keys(repeat, block, kinds, schedule)
            block, kinds, schedule = self._first_layer_hands_on(repeat, block, kinds, schedule)
        final = settings.get("final", (S.Choice(name="none"), None))[0]
        final_dropout, final_dropout_span = settings.get("final_dropout", (0.0, decl.span))
        weight_sets, weight_sets_span = settings.get("weight_sets", (None, None))
        if weight_sets is not None:
            self._weight_sets_fit(weight_sets, weight_sets_span, repeat, schedule)
        return self.validated(S.Stack, {"repeat": repeat, "final_dropout": final_dropout, "weight_sets": weight_sets},
                              {"repeat": decl.repeat.span, "final_dropout": final_dropout_span,
                               "weight_sets": weight_sets_span}, decl.span,
                              f"{decl.role} stack", {"role": decl.role, "embedding": embedding, "block": block,
                                                     "final_norm": final, "span": decl.role_span,
                                                     "kinds": kinds, "schedule": schedule})

    @staticmethod
    def _layers_hand_on_keys(repeat: int, block: S.Block, kinds: tuple[S.Block, ...], schedule: tuple[int, ...]
                             ) -> tuple[S.Block, tuple[S.Block, ...], tuple[int, ...]]:
        """Where a layer's attention reads the keys and values of an earlier layer's (``kv_from=j``), layer j's
        attention of that name hands them on (``exports``): a kind of layer of its own, whose attention the
        readers' take an input from. A reader of itself or of a later layer, of a layer without that attention,
        or of a layer that reads its own from another, is an error at the reader's statement."""
        blocks = (block, *kinds)
        per_layer = [blocks[schedule[i] if schedule else 0] for i in range(repeat)]
        makers: dict[int, set[str]] = {}
        for i, b in enumerate(per_layer):
            for name, body in _attentions(b):
                j = body.kv_from
                if j is None:
                    continue
                if j >= i:
                    raise spec_error("structure", f"kv_from={j}: layer {i}'s {name} would read the keys and values "
                                     f"of {'itself' if j == i else f'a later layer ({j})'}", body.span,
                                     "a layer reads those an earlier layer made: give one below its own number "
                                     "(a `layers` section can say which layers read)")
                theirs = dict(_attentions(per_layer[j]))
                maker = theirs.get(name)
                if maker is None or maker.reads != "self":
                    raise spec_error("structure", f"kv_from={j}: layer {j} has no self-attention {name} to read the "
                                     "keys and values of", body.span, "read a layer whose attention of that name "
                                     "makes its own")
                if maker.kv_from is not None:
                    raise spec_error("structure", f"kv_from={j}: layer {j}'s {name} reads its own keys and values "
                                     f"from layer {maker.kv_from}", body.span, f"read layer {maker.kv_from}'s")
                makers.setdefault(j, set()).add(name)
        if not makers:
            return block, kinds, schedule
        for j, names in makers.items():
            per_layer[j] = _with_attentions(per_layer[j], lambda name, body: body.model_copy(
                update={"exports": tuple(sorted({*body.exports, "kv"}))}) if name in names else body)
        return _as_kinds(per_layer)

    @staticmethod
    def _first_layer_hands_on(repeat: int, block: S.Block, kinds: tuple[S.Block, ...], schedule: tuple[int, ...]
                              ) -> tuple[S.Block, tuple[S.Block, ...], tuple[int, ...]]:
        """Where an attention's step reads what the same sublayer of the stack's first layer produced (value
        residual learning's first values), that layer hands it on (``exports``) instead of reading it: a kind of
        layer of its own, whose attention the readers' take an input from."""
        blocks = (block, *kinds)
        readers: dict[str, list[S.Choice]] = {}
        for b in blocks:
            for name, body in _attentions(b):
                for step in body.steps:
                    if ATTENTION_STEPS[step.name].reads is not None:
                        readers.setdefault(name, []).append(step)
        if not readers:
            return block, kinds, schedule
        per_layer = [blocks[schedule[i] if schedule else 0] for i in range(repeat)]
        first = dict(_attentions(per_layer[0]))
        for name, steps in readers.items():
            if name not in first:
                raise spec_error("structure", f"{steps[0].name} reads the {ATTENTION_STEPS[steps[0].name].reads} of "
                                 f"the first layer's {name}, but layer 0 has no {name}", steps[0].span,
                                 "the first layer makes what later layers read: give it this attention too")

        def hand_on(name: str, body: S.Attention) -> S.Attention:
            if name not in readers:
                return body
            kept = tuple(step for step in body.steps if ATTENTION_STEPS[step.name].reads is None)
            made = tuple(sorted({ATTENTION_STEPS[step.name].reads for step in readers[name]}))
            return body.model_copy(update={"steps": kept, "exports": tuple(sorted({*body.exports, *made}))})

        per_layer[0] = _with_attentions(per_layer[0], hand_on)
        return _as_kinds(per_layer)

    @staticmethod
    def _weight_sets_fit(sets: int, span: Span, repeat: int, schedule: tuple[int, ...]) -> None:
        """``weight_sets N``: at most one set per layer, and the layers running one set all of one kind."""
        if not 0 < sets <= repeat:
            raise spec_error("value", f"weight_sets {sets}: the stack has {repeat} layers", span,
                             f"give 1 (every layer runs one layer's weights) to {repeat} (each its own)")
        runs: dict[int, list[int]] = {}
        for i in range(repeat):
            runs.setdefault(i * sets // repeat, []).append(i)
        for layers in runs.values():
            kinds = {schedule[i] for i in layers} if schedule else {0}
            if len(kinds) > 1:
                raise spec_error("value", f"weight_sets {sets}: layers {layers[0]}–{layers[-1]} run one set of weights, "
                                    "but `layers` sections make them different kinds of layer (or the first layer is "
                                    "a kind of its own, handing its values on to a step that reads them)", span,
                                 "a set of weights is one kind of layer: choose weight_sets so that each run of layers "
                                 "sharing it is one kind, or drop what makes them differ")

    # --- layer schedules
    def _schedule(self, decl: StackDecl, repeat: int, d: dict, stmts: list[Setting] | list[Assignment],
                  base: S.Block, sections: list[Setting]) -> tuple[S.Block, tuple[S.Block, ...], tuple[int, ...]]:
        """The layer kinds ``layers`` sections make, in the order layers first have them (the first is the stack's
        ``block``, the others its ``kinds``), and each layer's kind; no schedule when every layer is alike.
        ``stmts``: the block's sublayer statements, or its assignments (the wiring form)."""
        if not base.wiring and len(base.sublayers) != len(stmts):
            raise Poisoned  # a sublayer failed, and is reported: its overrides would only echo that
        names = [sub.name for sub in base.sublayers] or [a.name for a in applications(base.wiring)]
        per_layer: list[S.Block] = [base] * repeat
        chosen_by: dict[int, Setting] = {}
        for section in sections:
            layers = self._layer_selection(section, repeat)
            for i in layers:
                if i in chosen_by:
                    raise spec_error("duplicate", f"layer {i} is chosen by two `layers` sections", section.span,
                                     f"the other is at line {chosen_by[i].span.line}; a layer has one kind")
                chosen_by[i] = section
            block = self._layer_kind(section, d, stmts, names, decl)
            for i in layers:
                per_layer[i] = block
        # each distinct block once, in the order layers first have it; blocks compared by their dumps, each dumped
        # once (comparing every layer's block with every kind was quadratic: 1,200 kinds took 20 s)
        kinds: list[S.Block] = []
        kind_of: dict[str, int] = {}
        dumps: dict[int, str] = {}
        order = []
        for block in per_layer:
            dump = dumps.get(id(block))
            if dump is None:
                dump = dumps[id(block)] = f"{type(block).__name__}:{block.model_dump_json()}"
            if dump not in kind_of:
                kind_of[dump] = len(kinds)
                kinds.append(block)
            order.append(kind_of[dump])
        if len(kinds) == 1:  # every layer alike (sections that change nothing, or every layer the same way)
            return kinds[0], (), ()
        return kinds[0], tuple(kinds[1:]), tuple(order)

    def _layer_selection(self, section: Setting, repeat: int) -> list[int]:
        """``layers 3``, ``layers 0 2``, ``layers range(0, 3)``, ``layers every(4, from=3)``: the indices, each
        checked against the stack's ``repeat`` layers."""
        if section.body is None:
            raise spec_error("structure", "`layers` takes a selection and a block of changes", section.span,
                             "write e.g. `layers every(2) { self_attn mask=causal }`")
        if not section.args:
            raise spec_error("structure", "`layers` needs a selection of layers", section.name_span,
                             "e.g. `layers 3`, `layers range(0, 3)`, `layers every(4, from=3)`")
        chosen: list[int] = []
        for arg in section.args:
            e = arg.value
            if arg.name is not None:
                raise spec_error("type", "a layer selection is positional", arg.span,
                                 "e.g. `layers 3`, `layers range(0, 3)`, `layers every(4, from=3)`")
            if isinstance(e, Call) and e.func in ("every", "range"):
                params = ([Param("step", as_int, positional=True), Param("from", as_int, 0, positional=True)]
                          if e.func == "every" else
                          [Param("start", as_int, positional=True), Param("stop", as_int, None, positional=True)])
                values, spans = self.bind(e.args, params, f"{e.func}()", e.span)
                if e.func == "every":
                    if values["step"] < 1:
                        raise spec_error("value", f"every() takes a step of at least 1, got {values['step']}",
                                         spans["step"])
                    indices, where = range(values["from"], repeat, values["step"]), spans.get("from", e.span)
                    if values["from"] < 0 or values["from"] >= repeat:
                        raise spec_error("value", f"layer {values['from']} is outside the stack's {repeat} layers "
                                            f"(0 to {repeat - 1})", where)
                else:
                    start, stop = (0, values["start"]) if values["stop"] is None else (values["start"], values["stop"])
                    if not 0 <= start < stop <= repeat:
                        raise spec_error("value", f"range({start}, {stop}) is not a range of the stack's {repeat} layers "
                                            f"(0 to {repeat - 1}, the end excluded)", e.span)
                    indices = range(start, stop)
                chosen += indices
            elif isinstance(e, Call):
                raise spec_error("unknown-keyword", f"unknown layer selection '{e.func}'", e.func_span,
                                 did_you_mean(e.func, ("every", "range")) or "use every(STEP, from=FIRST) or range(START, STOP)")
            else:
                i = as_int(e, self)
                if not 0 <= i < repeat:
                    raise spec_error("value", f"layer {i} is outside the stack's {repeat} layers (0 to {repeat - 1})",
                                     e.span)
                chosen.append(i)
        duplicates = sorted({i for i in chosen if chosen.count(i) > 1})
        if duplicates:
            raise spec_error("duplicate", f"layer {duplicates[0]} is selected twice in one `layers` section",
                             section.span)
        return chosen

    def _layer_kind(self, section: Setting, d: dict, stmts: list[Setting] | list[Assignment], names: list[str],
                    decl: StackDecl) -> S.Block:
        """The stack's block with a section's changes: block settings (``position none``) as this kind's
        defaults; ``SUBLAYER option=value`` overriding those options of the sublayer (or, in the wiring form, the
        call) of that name; ``SUBLAYER = attention(self, heads=8, ...)`` putting another sublayer in its place
        (a mixer's layer turned into attention), and ``SUBLAYER = none`` dropping it."""
        local = Collector()
        block_settings = [s for s in section.body if isinstance(s, Setting) and s.name in BLOCK_SETTINGS]
        values = self._settings(block_settings, BLOCK_SETTINGS, "a `layers` section")
        kind_defaults = {**d, **{k: v for k, (v, span) in values.items() if v is not FAILED}}
        changes: dict[str, list[Arg]] = {}
        replaced: dict[str, Call | None] = {}  # a sublayer's replacement (None: dropped)
        for stmt in section.body:
            if isinstance(stmt, Assignment):
                replacement = self._replacement(stmt, names, local)
                if replacement is not False:
                    replaced[stmt.target] = replacement
            elif stmt.body is not None:
                local.error("structure", "a `layers` section holds settings and sublayer changes", stmt.span,
                            "e.g. `self_attn mask=causal`, `position none` or `conv = attention(self, heads=8)`")
            elif stmt.name in BLOCK_SETTINGS:
                continue
            elif stmt.name not in names:
                local.error("unknown-name", f"no sublayer '{stmt.name}' in this stack's layers", stmt.name_span,
                            did_you_mean(stmt.name, names + list(BLOCK_SETTINGS)) or one_of(names))
            elif any(a.name is None for a in stmt.args):
                local.error("type", f"a change to {stmt.name} names its options", stmt.span,
                            f"e.g. `{stmt.name} mask=causal`")
            else:
                changes.setdefault(stmt.name, []).extend(stmt.args)
        for name in changes.keys() & replaced.keys():
            local.error("structure", f"{name} is both replaced and changed in one `layers` section",
                        changes[name][0].span, "give the options in the replacement's call")
        local.raise_if_any()
        if stmts and isinstance(stmts[0], Assignment):
            return S.Block(wiring=self._wiring(stmts, kind_defaults, decl, changes, replaced))
        changed, kept_names = [], []
        for stmt, name in zip(stmts, names):
            if name in replaced:
                call = replaced[name]
                if call is not None:
                    changed.append(Setting(call.func, call.func_span, call.args, call.span))
                    kept_names.append(None)  # named anew, for what it now is
                continue
            extra = changes.get(name, [])
            given = {a.name for a in extra}
            if "kind" in given:  # a mixture's router goes with its kind: a section changing the kind gives it anew
                given.add("router")
            args = tuple(a for a, named in zip(stmt.args, self._argument_names(stmt, d)) if named not in given) \
                + tuple(extra)
            changed.append(Setting(stmt.name, stmt.name_span, args, stmt.span))
            kept_names.append(name)
        if not changed:
            raise spec_error("structure", "this `layers` section drops every sublayer of its layers", section.span,
                             "a layer keeps one sublayer at least")
        sublayers = self._sublayers(changed, kind_defaults, kept_names)
        if len(sublayers) != len(changed):
            raise Poisoned
        return S.Block(sublayers=tuple(sublayers))

    @staticmethod
    def _replacement(stmt: Assignment, names: list[str], local: Collector):
        """What ``SUBLAYER = ...`` in a ``layers`` section puts in the sublayer's place: a call of a sublayer
        (``attention(self, heads=8)``), or None for ``none``; False where it is wrong (reported in ``local``)."""
        if stmt.target not in names:
            local.error("unknown-name", f"no sublayer '{stmt.target}' in this stack's layers", stmt.target_span,
                        did_you_mean(stmt.target, names) or one_of(names))
            return False
        value = stmt.value
        if isinstance(value, Name) and value.id == "none":
            return None
        if isinstance(value, Call) and value.func in SUBLAYERS:
            return value
        local.error("structure", f"{stmt.target} can be replaced by a sublayer or dropped", value.span,
                    f"e.g. `{stmt.target} = attention(self, heads=8, mask=causal)`, "
                    f"`{stmt.target} = mixer(shortconv(3))` or `{stmt.target} = none`")
        return False

    @staticmethod
    def _argument_names(stmt: Setting, d: dict) -> list[str | None]:
        """The parameter each of a sublayer statement's arguments gives: its name, or for one written positionally
        (``mixer shortconv(3)``, ``attention self``) the positional parameter in its place (None past them)."""
        positional = [p.name for p in sublayer_params(stmt.name, d, True) if p.positional]
        given, index = [], 0
        for arg in stmt.args:
            if arg.name is None:
                given.append(positional[index] if index < len(positional) else None)
                index += 1
            else:
                given.append(arg.name)
        return given

    def _stack_embedding(self, decl: StackDecl, settings: dict, embeddings: dict) -> str | None:
        if "embedding" in settings:
            name, span = settings["embedding"]
            if name not in embeddings:
                declared = [i.name for i in self.module.items if isinstance(i, EmbeddingDecl)]
                if name not in declared:
                    self.errors.error("unknown-name", f"unknown embedding '{name}'", span,
                                      did_you_mean(name, declared) or (one_of(declared) if declared else None))
                return None
            return name
        declared = [i.name for i in self.module.items if isinstance(i, EmbeddingDecl)]
        if len(declared) == 1:
            return declared[0] if declared[0] in embeddings else None
        if len(declared) > 1:
            self.errors.error("structure", f"the {decl.role} stack must say which embedding it reads", decl.role_span,
                              f"add `embedding NAME` to its body; embeddings: {', '.join(declared)}")
        return None

    def _sublayers(self, stmts: list[Setting], d: dict, kept: list[str | None] | None = None) -> list[S.Sublayer]:
        """``kept``: the name each statement keeps (a layer kind's sublayers as the stack's first kind names them),
        None where it is named for what it is."""
        names = Namer()
        kept = kept or [None] * len(stmts)
        for name in kept:
            if name is not None:
                names.keep(name)
        out = []
        for stmt, name in zip(stmts, kept):
            sub = self.attempt(lambda: self._sublayer(stmt, d, names, name))
            if sub is not None:
                out.append(sub)
        return out

    def _sublayer(self, stmt: Setting, d: dict, names: "Namer", name: str | None = None) -> S.Sublayer:
        values, spans = self.bind(stmt.args, sublayer_params(stmt.name, d, True), stmt.name, stmt.name_span)
        body = self._operation(stmt.name, values, spans, stmt, d)
        name = name or names.take(module_name(body))
        wrap = {k: values[k] for k in ("residual", "norm", "dropout")}
        return self.validated(S.Sublayer, {**wrap, "name": name, "body": body}, spans, stmt.span, stmt.name,
                              {"span": stmt.span})

    def _operation(self, kind: str, values: dict, spans: dict, stmt, d: dict) -> S.Attention | S.FeedForward | S.Mixer:
        if kind == "mixer":
            return self.validated(S.Mixer, {"kind": values["kind"]}, spans, stmt.span, "mixer", {"span": stmt.span})
        if kind == "attention":
            if values["memory"] is not None and values["reads"] == "self":
                raise spec_error("structure", "memory= is for cross-attention", spans["memory"],
                                 "write `attention cross ...` to read the encoder's output")
            fields = {k: values[k] for k in ("reads", "heads", "kind", "bias", "mask", "kv_heads", "head_dim",
                                             "qk_norm", "scale", "steps", "kv_from")}
            if values["kv_from"] is not None and values["reads"] == "cross":
                raise spec_error("structure", f"kv_from={values['kv_from']}: a cross-attention's keys and values are "
                                 "its memory's", spans["kv_from"], "read another layer's keys and values in a "
                                 "self-attention")
            fields["dropout"] = values["attn_dropout"]
            fields["out_bias"] = values["bias"] if values["out_bias"] is None else values["out_bias"]
            if values["key_bias"] and not values["bias"]:
                raise spec_error("value", "key_bias=true biases the keys' rows of the q/k/v projections, which have "
                                 "no bias here (bias=false)", spans["key_bias"], "give bias=true, or drop key_bias")
            fields["key_bias"] = values["bias"] if values["key_bias"] is None else values["key_bias"]
            # a stack's position scheme is for its self-attentions: a cross-attention's keys are another sequence
            fields["position"] = values["position"] or (d["position"] if values["reads"] == "self"
                                                        else S.Choice(name="none"))
            return self.validated(S.Attention, fields, {**spans, "dropout": spans.get("attn_dropout")}, stmt.span,
                                  "attention", {"span": stmt.span})
        fields = {k: values[k] for k in ("d_ff", "activation", "bias", "kind", "router")}
        fields["dropout"] = values["act_dropout"]
        kind, kind_options = FEEDFORWARD_KINDS.of(values["kind"])
        if values["router"] and not kind.routes:
            raise spec_error("value", f"a {kind.name} feed-forward has no router to make of parts", spans["router"],
                             "drop router=, or give kind=moe(experts, top)")
        names = tuple(part.name for part in values["router"])
        for part in values["router"]:
            variant, options = ROUTER_PARTS.of(part)
            for problem in variant.check(options, kind_options, names):
                raise spec_error(problem.code, problem.message, part.span, problem.hint)
        activation, activation_options = ACTIVATIONS.of(values["activation"])
        if activation.params(1, activation_options) and not FEEDFORWARD_KINDS[values["kind"].name].trains_activation:
            raise spec_error("value", f"{values['activation'].name} trains parameters of its own, which a "
                             f"{values['kind'].name} feed-forward does not hold", spans["activation"],
                             "use a fixed function (silu, gelu, swiglu, ...)")
        return self.validated(S.FeedForward, fields, {**spans, "dropout": spans.get("act_dropout")}, stmt.span,
                              "feedforward", {"span": stmt.span})


def _as_kinds(per_layer: list[S.Block]) -> tuple[S.Block, tuple[S.Block, ...], tuple[int, ...]]:
    """Each layer's block as a stack's kinds: the first layer's, the others in the order layers first have them,
    and each layer's kind (no schedule where every layer is alike)."""
    ordered: list[S.Block] = []
    for b in per_layer:
        if b not in ordered:
            ordered.append(b)
    if len(ordered) == 1:
        return ordered[0], (), ()
    return ordered[0], tuple(ordered[1:]), tuple(ordered.index(b) for b in per_layer)


def _attentions(block: S.Block) -> list[tuple[str, S.Attention]]:
    """A layer's attention sublayers (or wiring calls) by name."""
    if block.sublayers:
        return [(sub.name, sub.body) for sub in block.sublayers if isinstance(sub.body, S.Attention)]
    return [(a.name, a.body) for a in applications(block.wiring) if isinstance(a.body, S.Attention)]


def _with_attentions(block: S.Block, change) -> S.Block:
    """``block`` with each attention sublayer (or wiring call) ``change(name, body)``."""
    if block.sublayers:
        return S.Block(sublayers=tuple(sub.model_copy(update={"body": change(sub.name, sub.body)})
                                       if isinstance(sub.body, S.Attention) else sub for sub in block.sublayers))

    def tensor(t):
        if isinstance(t, S.Apply):
            body = change(t.name, t.body) if isinstance(t.body, S.Attention) else t.body
            return t.model_copy(update={"body": body, "input": tensor(t.input)})
        if isinstance(t, S.Sum):
            return t.model_copy(update={"terms": tuple(tensor(term) for term in t.terms)})
        if isinstance(t, S.Scale):
            return t.model_copy(update={"input": tensor(t.input)})
        return t

    return S.Block(wiring=tuple(a.model_copy(update={"value": tensor(a.value)}) for a in block.wiring))
