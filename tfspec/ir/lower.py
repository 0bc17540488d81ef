"""Stage 3, lower: ``Spec`` -> the graph IR (``tfspec.ir.Graph`` of typed nodes; docs/ir.md).

Each stack's layer is lowered once, as a template between its ``BlockInput`` and
``BlockOutput`` nodes, repeated ``g.stacks[role].repeat`` times; there is no
back-edge, so the IR stays a DAG and diagrams show the structure.
"""

from __future__ import annotations

from ..front import schema as S
from ..registry import (ATTENTION_KINDS, ATTENTION_STEPS, FEEDFORWARD_KINDS, INPUTS, MASKS, MIXERS, NORMS, POOLS,
                        POSITIONS, AttentionShape, Param, combined_reach, linear_params)
from . import nodes as ir
from .graph import Graph
from .nodes import ModulePath


class _Builder:
    def __init__(self, spec: S.Spec):
        self.spec = spec
        self.g = Graph()
        self.stacks: dict[str, ir.StackInfo] = {}
        self.counts: dict[str, int] = {}
        self.kind = 0  # the layer kind whose template is being lowered
        self.stack_owned: dict[ModulePath, str] = {}  # a stack's score bias or parameters, one node per module
        self.handed_on: dict[tuple[str, str], str] = {}  # (stack, sublayer) -> the attention handing on its values
        # (stack, layer kind, sublayer) -> the attention handing on its keys and values (``kv_from``)
        self.keys_made: dict[tuple[str, int, str], str] = {}
        self.per_layer: dict[str, str] = {}  # stack -> its per-layer inputs (``PerLayerInputs``), where it has them

    def add(self, cls: type[ir.Node], node_id: str, label: str, inputs=(), ports=None, **fields) -> str:
        """Add a node; ``ports`` maps input positions to ports other than ``input``. A layer's node id names its
        kind after the stack from the second kind on (``decoder.kind1.self_attn``)."""
        if fields.get("in_block") and self.kind:
            role, local = node_id.split(".", 1)
            node_id = f"{role}.kind{self.kind}.{local}"
            fields["layer_kind"] = self.kind
        if node_id in self.g:  # wiring may reuse a base name: add, add_1, ...
            n = self.counts.get(node_id, 0) + 1
            self.counts[node_id] = n
            node_id = f"{node_id}_{n}"
        ports = tuple((ports or {}).get(i, "input") for i in range(len(inputs)))
        return self.g.add(cls(id=node_id, label=label, inputs=tuple(inputs), ports=ports, **fields))

    # ----------------------------------------------------------- top level
    def build(self) -> Graph:
        spec = self.spec
        memory: str | None = None
        last = None
        seq_names = {"encoder": "src_len", "decoder": "tgt_len"} if len(spec.stacks) == 2 else {}
        self.g.set_stacks(spec.name, spec.kind, self.stacks)
        for stack in spec.stacks:
            emb = spec.embedding(stack.embedding)
            length = seq_names.get(stack.role, "seq_len")
            x = self.embed(stack, emb, length)
            # one template per layer kind, chained in the order the kinds first appear; the schedule says
            # which kind each layer is
            kinds: list[ir.LayerKind] = []
            for self.kind, block in enumerate(stack.blocks):
                layers = stack.layers_of(self.kind)
                entry = self.add(ir.BlockInput, f"{stack.role}.block_input", "x", [x], stack=stack.role,
                                 in_block=True, width=emb.width)
                # the stack is known (its template is being built) before its exit is
                self.stacks[stack.role] = ir.StackInfo(stack.role, stack.repeat, entry, "", "", emb.width, emb.name,
                                                       length, (*kinds, ir.LayerKind(entry, "", layers)))
                out = self.block(stack, block, entry, emb.width, memory)
                x = self.add(ir.BlockOutput, f"{stack.role}.block_output", f"{len(layers)}×", [out],
                             stack=stack.role, in_block=True, width=emb.width)
                kinds.append(ir.LayerKind(entry, x, layers))
            self.kind = 0
            exit_ = cur = x
            if not NORMS[stack.final_norm.name].absent:
                cur = self.norm(f"{stack.role}.final_norm", stack.final_norm, cur, emb.width, stack.role, False,
                                ModulePath((stack.role, "final_norm")), "Final Norm")
            cur = self.dropout(f"{stack.role}.final_dropout", stack.final_dropout, cur, stack.role, False, emb.width)
            shared = (stack.weight_sets or stack.repeat) < stack.repeat  # (a set per layer is no sharing)
            weights = tuple(stack.weights_of(i) for i in range(stack.repeat)) if shared else ()
            self.stacks[stack.role] = ir.StackInfo(stack.role, stack.repeat, kinds[0].entry, exit_, cur, emb.width,
                                                   emb.name, length, tuple(kinds), weights)
            if stack.role == "encoder":
                memory = cur
            last = (cur, emb.width, length)
        if last is not None:
            self.outputs(*last)
        return self.g

    def embed(self, stack: S.Stack, emb: S.Embedding, length: str) -> str:
        role = stack.role
        path = ("embeddings", emb.name)
        if emb.input is not None:  # what an input kind makes (pictures' patches): positions number its sequence
            positioned = self.features(role, emb, path)
            terms = [positioned]
        else:
            ids_name = {"encoder": "src", "decoder": "tgt"}.get(role, "tokens") if len(self.spec.stacks) == 2 \
                else "tokens"
            tokens = self.add(ir.Input, f"{role}.tokens", ids_name, name=ids_name, stack=role,
                              shape=("batch", length))
            scale = f" ×{emb.scale:.4g}" if emb.scale != 1 else ""
            table = emb.shares or emb.name  # an embedding that reads another's table owns no weight
            own = {"weight": Param((emb.vocab, emb.dim), "embedding")} if emb.shares is None else {}
            ties = {} if emb.shares is None else {"weight": f"embeddings.{emb.shares}.tokens.weight"}
            shared = f", {emb.shares}'s table" if emb.shares else ""
            terms = [self.add(ir.Embedding, f"{role}.embed", f"Embedding ({emb.vocab:,}×{emb.dim}{shared}){scale}",
                              [tokens], stack=role, module=ModulePath((*path, "tokens")), params=own, ties=ties,
                              table=table, scale=emb.scale, width=emb.dim, span=emb.span)]
            positioned = tokens
        variant, options = POSITIONS.of(emb.position)
        if not variant.absent and variant.misplaced("embedding", emb.position) is None:  # (else refused by validate)
            params = variant.params(emb.dim, options)
            terms.append(self.add(ir.PositionEncoding, f"{role}.position",
                                  f"Positional Encoding ({variant.label(options)})", [positioned],
                                  ports={0: "positions"},
                                  stack=role, module=ModulePath((*path, "positions")) if params else None,
                                  params=params, choice=emb.position, width=emb.dim, span=emb.position.span))
        if emb.segments:
            types = self.add(ir.Input, f"{role}.token_types", "token_types", name="token_types", stack=role,
                             shape=("batch", length))
            terms.append(self.add(ir.Embedding, f"{role}.segments", f"Segment Embedding ({emb.segments}×{emb.dim})",
                                  [types], ports={0: "segments"}, stack=role, module=ModulePath((*path, "segments")),
                                  params={"weight": Param((emb.segments, emb.dim), "embedding")}, table=emb.name,
                                  segments=True,
                                  width=emb.dim, span=emb.span))
        x = terms[0] if len(terms) == 1 else self.add(ir.Add, f"{role}.embed_sum", "+", terms, stack=role,
                                                       width=emb.dim)
        if not NORMS[emb.norm.name].absent:
            x = self.norm(f"{role}.embed_norm", emb.norm, x, emb.dim, role, False, ModulePath((*path, "norm")),
                          "Embedding Norm")
        x = self.dropout(f"{role}.embed_dropout", emb.dropout, x, role, False, emb.dim)
        if emb.project is not None:
            x = self.add(ir.Projection, f"{role}.embed_project", f"Linear ({emb.dim} → {emb.project})", [x],
                         stack=role, module=ModulePath((*path, "project")), features=emb.dim, width=emb.project,
                         params={"weight": Param((emb.project, emb.dim), "matrix"),
                                 "bias": Param((emb.project,), "bias")}, span=emb.span)
        readers = [s for s in self.spec.stacks if s.embedding == emb.name]
        if emb.per_layer is not None and len(readers) == 1:  # (two stacks' would be refused by validation)
            self.per_layer[role] = self.per_layer_inputs(stack, emb, path, tokens, x, length)
        return x

    def per_layer_inputs(self, stack: S.Stack, emb: S.Embedding, path: tuple, tokens: str, x: str, length: str
                         ) -> str:
        """Per-layer inputs from the token ids and the embeddings ``x`` (``PerLayerInputs``)."""
        width, layers = emb.per_layer, stack.repeat
        norm, norm_options = NORMS.of(emb.per_layer_norm)
        params = {"table.weight": Param((emb.per_layer_vocab or emb.vocab, layers * width), "embedding"),
                  "projection.weight": Param((layers * width, emb.width), "matrix"),
                  **{f"norm.{k}": v for k, v in norm.params(width, norm_options).items()}}
        return self.add(ir.PerLayerInputs, f"{stack.role}.per_layer",
                        f"Per-Layer Inputs ({layers}×{width}, {emb.per_layer_norm})", [tokens, x], ports={0: "ids"},
                        stack=stack.role, module=ModulePath((*path, "per_layer")), params=params,
                        norm=emb.per_layer_norm, layers=layers, width=width, shape=("batch", length, layers, width),
                        span=emb.span)

    def features(self, role: str, emb: S.Embedding, path: tuple) -> str:
        """An input kind's tensor (``pixel_values``) and the vectors it makes of it (pictures' patches)."""
        kind, options = INPUTS.of(emb.input)
        given = self.add(ir.Input, f"{role}.tokens", kind.argument, name=kind.argument, stack=role,
                         shape=("batch", *kind.shape(options)))
        return self.add(ir.Features, f"{role}.embed", f"{kind.describe(options)} → {emb.dim}", [given], stack=role,
                        module=ModulePath(path), params=kind.params(emb.dim, options), table=emb.name,
                        choice=emb.input, length=kind.length(options), leading=kind.leading(options), width=emb.dim,
                        span=emb.input.span or emb.span)

    # ----------------------------------------------------------- pieces
    def norm(self, node_id, choice: S.Choice, x, width, stack, in_block, module: ModulePath, title="Norm") -> str:
        variant, options = NORMS.of(choice)
        params = variant.params(width, options)
        return self.add(ir.Norm, node_id, f"{title} ({choice})", [x], stack=stack, in_block=in_block,
                        module=module if params else None, params=params, choice=choice, title=title, width=width,
                        span=choice.span)

    def dropout(self, node_id, p: float, x, stack, in_block, width) -> str:
        if p == 0:
            return x
        return self.add(ir.Dropout, node_id, f"Dropout ({p:g})", [x], stack=stack, in_block=in_block, p=p,
                        width=width)

    def operation(self, role: str, name: str, body, x: str, width: int, memory: str | None) -> str:
        module = ModulePath.in_layer(role, name)
        node_id = f"{role}.{name}"
        if isinstance(body, S.Attention):
            cross = body.reads == "cross"
            encoder = self.stacks.get("encoder")
            shape = attention_shape(body, width, encoder.width if encoder is not None else width)
            inputs = [x, memory] if cross and memory is not None else [x]
            ports = {1: "memory"}
            positioned = position_shape(body, shape)
            for family, choice, geometry in ((ATTENTION_KINDS, body.kind, shape),
                                             (POSITIONS, body.position, positioned)):
                variant, options = family.of(choice)
                owned = variant.stack_params(geometry, options)
                if owned:  # the stack's, read by this sublayer of every layer
                    ports[len(inputs)] = "shared"
                    inputs.append(self.stack_owned_node(
                        ModulePath((role, variant.stack_attribute, name)), f"{role}.{name}_{variant.stack_attribute}",
                        variant.stack_label(options), stack=role, params=owned, family=family, choice=choice,
                        width=shape.width, geometry=geometry, span=choice.span or body.span))
            source = self.handed_on.get((role, name))
            if source is not None and any(ATTENTION_STEPS[s.name].reads == "values" for s in body.steps):
                ports[len(inputs)] = "values"  # the first layer's values, which its steps read
                inputs.append(source)
            if body.kv_from is not None:  # the keys and values of an earlier layer's (a kind lowered before)
                stack = next(s for s in self.spec.stacks if s.role == role)
                ports[len(inputs)] = "kv"
                inputs.append(self.keys_made[(role, stack.kind_of(body.kv_from), name)])
            node = self.add(ir.Attention, node_id, attention_label(body, shape), inputs,
                            ports=ports, stack=role, in_block=True, module=module,
                            params=attention_params(body, shape), spec=body,
                            width=width, geometry=shape, positioned=positioned, memory=memory if cross else None,
                            span=body.span)
            if "values" in body.exports:
                self.handed_on[(role, name)] = node
            if "kv" in body.exports:
                self.keys_made[(role, self.kind, name)] = node
            return node
        if isinstance(body, S.FeedForward):
            kind, options = FEEDFORWARD_KINDS.of(body.kind)
            inputs, ports = [x], {}
            if kind.reads_per_layer and role in self.per_layer:  # its layer's inputs (without: validation says)
                inputs, ports = [x, self.per_layer[role]], {1: "per_layer"}
            return self.add(ir.FeedForward, node_id, kind.describe(body, options), inputs, ports=ports,
                            stack=role, in_block=True, module=module, params=kind.params(width, body, options),
                            spec=body, width=width, span=body.span)
        if isinstance(body, S.Mixer):
            mixer, options = MIXERS.of(body.kind)
            return self.add(ir.Mixer, node_id, mixer.describe(options), [x], stack=role, in_block=True, module=module,
                            params=mixer.params(width, options), spec=body, width=width, span=body.span)
        if isinstance(body, S.NormOp):
            return self.norm(node_id, body.norm, x, width, role, True, module)
        return self.dropout(node_id, body.p, x, role, True, width)

    def stack_owned_node(self, module: ModulePath, node_id: str, label: str, **fields) -> str:
        """A stack's own node for a sublayer of its layers: one per module, whatever layer kinds read it (when
        two kinds differ on it, validation says so)."""
        if module not in self.stack_owned:
            self.stack_owned[module] = self.add(ir.StackParameters, node_id, label, [], module=module, shape=(),
                                                **fields)
        return self.stack_owned[module]

    def block(self, stack: S.Stack, block: S.Block, entry: str, width: int, memory: str | None) -> str:
        role = stack.role
        if block.wiring:
            return self.wiring(stack, block, entry, width, memory)
        x = entry
        for sub in block.sublayers:
            h = x
            has_norm = not NORMS[sub.norm.name].absent and sub.residual != "none"
            norm_module = ModulePath.in_layer(role, f"{sub.name}_norm")
            if sub.residual == "pre" and has_norm:
                h = self.norm(f"{role}.{sub.name}_norm", sub.norm, x, width, role, True, norm_module)
            y = self.operation(role, sub.name, sub.body, h, width, memory)
            y = self.dropout(f"{role}.{sub.name}_dropout", sub.dropout, y, role, True, width)
            if sub.residual != "none":
                y = self.add(ir.Add, f"{role}.{sub.name}_add", "Add", [x, y], ports={0: "residual"}, stack=role,
                             in_block=True, width=width, residual=sub.residual)
            if sub.residual == "post" and has_norm:
                y = self.norm(f"{role}.{sub.name}_norm", sub.norm, y, width, role, True, norm_module)
            x = y
        return x

    def wiring(self, stack: S.Stack, block: S.Block, entry: str, width: int, memory: str | None) -> str:
        role = stack.role
        env = {"x": entry}

        def tensor(t) -> str:
            if isinstance(t, S.Var):
                return env[t.name]
            if isinstance(t, S.Scale):
                return self.add(ir.Scale, f"{role}.scale", f"Scale (×{t.factor:g})", [tensor(t.input)],
                                stack=role, in_block=True, width=width, factor=t.factor, span=t.span)
            if isinstance(t, S.Sum):
                terms = [tensor(term) for term in t.terms]
                # the residual stream enters a sum as x itself or scaled (x = alpha * x + f(x))
                residual = {env["x"]} | {n for n in terms if isinstance(self.g.node(n), ir.Scale)
                                         and self.g.node(n).inputs == (env["x"],)}
                ports = {i: "residual" for i, src in enumerate(terms) if src in residual}
                return self.add(ir.Add, f"{role}.add", "Add", terms, ports=ports, stack=role, in_block=True,
                                width=width, span=t.span)
            return self.operation(role, t.name, t.body, tensor(t.input), width, memory)

        for assign in block.wiring:
            env[assign.target] = tensor(assign.value)
        return env["x"]

    def outputs(self, x: str, width: int, length: str) -> None:
        spec = self.spec
        if spec.head is not None:
            head = spec.head
            params, ties = {}, {}
            features = head.features or width  # what the transform writes: the tied table's width
            if head.transform is not None:
                params.update(linear_params("transform", features, width, head.transform_bias))
                if head.transform_norm is not None and not NORMS[head.transform_norm.name].absent:
                    variant, options = NORMS.of(head.transform_norm)
                    params.update({f"transform_norm.{k}": v for k, v in variant.params(features, options).items()})
            if head.pool is not None:  # the pool's own (an attention pool's probe and projections)
                pool, pool_options = POOLS.of(head.pool)
                params.update({f"pool.{k}": v for k, v in pool.params(width, pool_options).items()})
            if head.tied_to is not None:
                ties["weight"] = f"embeddings.{head.tied_to}.tokens.weight"
            elif head.projects:
                params["weight"] = Param((head.out, width), "unembedding")
            if head.bias:
                params["bias"] = Param((head.out,), "bias")
            how = f"tied to '{head.tied_to}'" if head.tied_to else "linear"
            how += f", input ×{head.scale:.4g}" if head.scale != 1.0 else ""
            how += f", capped ±{head.softcap:g}" if head.softcap is not None else ""
            how += f", of {POOLS[head.pool.name].describe(POOLS.of(head.pool)[1])}" if head.pool else ""
            label = f"Linear ({how}, {head.out:,})" if head.projects else \
                f"Pool ({POOLS.label(head.pool)}, {head.out:,})"
            node = self.add(ir.Head, "head", label, [x], module=ModulePath(("head",)),
                            params=params, ties=ties, spec=head, width=width, span=head.span)
            self.add(ir.Output, "logits", "logits", [node], name="logits", shape=("batch", length, head.out))
        else:
            self.add(ir.Output, "hidden", "hidden states", [x], name="hidden", width=width)
        if spec.mtp is not None:
            self.multi_token_prediction(x, width)
        if spec.pooler is not None:
            pooler = self.add(ir.Pooler, "pooler", f"Pooler ({spec.pooler.activation})", [x],
                              module=ModulePath(("pooler",)),
                              params=linear_params("dense", width, width, True),
                              spec=spec.pooler, width=width, span=spec.pooler.span)
            self.add(ir.Output, "pooled", "pooled", [pooler], name="pooled")

    def multi_token_prediction(self, x: str, width: int) -> None:
        """The MTP modules: each an embedding norm, a hidden-state norm, a projection of both joined, a layer of
        the kind of decoder layer ``layer`` (its template's parameters, under ``{k}.layer``) and the norm before
        the shared head."""
        mtp, info = self.spec.mtp, self.stacks["decoder"]
        kind = info.kind_of(mtp.layer)
        norm, norm_options = NORMS.of(mtp.norm)
        template = [self.g.node(n) for n in self.g.nodes if self.g.node(n).stack == "decoder"
                    and self.g.node(n).in_block and self.g.node(n).layer_kind == kind]
        layer = {f"layer.{n.module.name}.{name}": p for n in template if n.params for name, p in n.params.items()}
        one = {**{f"enorm.{k}": v for k, v in norm.params(width, norm_options).items()},
               **{f"hnorm.{k}": v for k, v in norm.params(width, norm_options).items()},
               **linear_params("proj", width, 2 * width, False), **layer,
               **{f"norm.{k}": v for k, v in norm.params(width, norm_options).items()}}
        params = {f"{k}.{name}": p for k in range(mtp.depth) for name, p in one.items()}
        ahead = "1 token" if mtp.depth == 1 else f"{mtp.depth} tokens"
        self.add(ir.MultiTokenPrediction, "mtp", f"Multi-Token Prediction ({ahead} further, λ {mtp.weight:g}; training only)", [x],
                 stack="decoder", module=ModulePath(("mtp",)), params=params, spec=mtp, copies=kind,
                 embedding="decoder.embed", layers_from=info.repeat, width=width, span=mtp.span)


def attention_shape(body: S.Attention, width: int, memory_width: int) -> AttentionShape:
    """The geometry of an attention sublayer reading a ``width`` stream (and ``memory_width`` memory)."""
    return AttentionShape(width=width, heads=body.heads, kv_heads=body.kv_heads or body.heads,
                          head_dim=body.head_dim or max(1, width // body.heads),
                          memory_width=memory_width if body.reads == "cross" else width,
                          cross=body.reads == "cross", bias=body.bias, out_bias=body.out_bias,
                          key_bias=body.bias and body.key_bias, reads_keys=body.kv_from is not None,
                          causal=combined_reach([MASKS.of(m) for m in body.mask])[1] == 0)


def position_shape(body: S.Attention, shape: AttentionShape) -> AttentionShape:
    """The geometry the sublayer's in-attention position scheme acts on, as its kind says (``position_shape``)."""
    kind, options = ATTENTION_KINDS.of(body.kind)
    return kind.position_shape(shape, options)


def attention_params(body: S.Attention, shape: AttentionShape) -> dict:
    """The kind's projections and scorers, per-head query/key norms, and the position scheme's own tensors; an
    attention reading another layer's keys and values (``kv_from``) projects and norms its queries alone."""
    kind, options = ATTENTION_KINDS.of(body.kind)
    reads_keys = body.kv_from is not None
    params = dict(kind.reader_params(shape, options) if reads_keys else kind.params(shape, options))
    norm, norm_options = NORMS.of(body.qk_norm)
    for side in ("q_norm",) if reads_keys else ("q_norm", "k_norm"):
        params.update({f"{side}.{k}": v for k, v in norm.params(shape.head_dim, norm_options).items()})
    position, position_options = POSITIONS.of(body.position)
    if position.misplaced("attention", body.position) is None:  # (one acting elsewhere is refused by validate)
        params.update({f"position.{k}": v for k, v in position.params(position_shape(body, shape),
                                                                        position_options).items()})
    for choice in body.steps:  # each step's, under its name
        step, step_options = ATTENTION_STEPS.of(choice)
        params.update({f"{step.name}.{k}": v for k, v in step.params(shape, step_options).items()})
    return params


def attention_label(body: S.Attention, shape: AttentionShape) -> str:
    """"Multi-Head Attention (causal, rotary, 32 heads, 8 kv heads)": every choice that shapes the sublayer."""
    details = [MASKS.label(m) for m in body.mask] or ["no mask"]
    for family, choice, what in ((POSITIONS, body.position, ""), (NORMS, body.qk_norm, "qk-norm ")):
        variant, options = family.of(choice)
        if not variant.absent:
            details.append(what + variant.label(options))
    details += [ATTENTION_STEPS.label(step) for step in body.steps]
    details += [{"values": "hands on its values", "kv": "hands on its keys and values"}[what] for what in body.exports]
    if body.kv_from is not None:
        details.append(f"keys and values of layer {body.kv_from}")
    details.append(f"{shape.heads} heads")
    if shape.kv_heads != shape.heads:
        details.append(f"{shape.kv_heads} kv heads")
    if body.head_dim is not None:
        details.append(f"head_dim {shape.head_dim}")
    if body.scale is not None:
        details.append(f"scale {body.scale:.4g}")
    cross = "Cross-" if shape.cross else ""
    return f"{ATTENTION_KINDS.label(body.kind)} {cross}Attention ({', '.join(details)})"


def lower(spec: S.Spec) -> Graph:
    """Lower a resolved spec to the (not yet validated) graph IR."""
    return _Builder(spec).build()
