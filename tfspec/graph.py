"""Stage 3, lower: ``Spec`` -> the graph IR, a ``networkx.DiGraph`` (documented in docs/ir.md).

Nodes are operations from the closed set ``OPS``; edges are tensor flows. Each
stack's layer is lowered once, as a template between its ``block_input`` and
``block_output`` nodes, repeated ``graph.graph["stacks"][role]["repeat"]`` times;
there is no back-edge, so the IR stays a DAG and diagrams show the structure.

Node attributes:
  op        one of OPS
  label     what a diagram prints ("Multi-Head Attention (causal, 8 heads)")
  spec      the typed spec object it came from (Attention, FeedForward, Choice, Embedding, Head, ...)
  inputs    ordered input node ids (edges carry the same flows, unordered)
  stack     "encoder" / "decoder" / None;  in_block: part of the repeated template
  module    parameter path prefix ("decoder.layers.{i}.self_attn"); None when parameter-free
  params    {name: shape} owned by the node;  ties: {name: full name of a weight it shares}
  norm_roles  {name: "norm_weight" | "norm_bias"} for the params a norm variant declares (a norm node's,
            qk-norm's, a head transform's norm), so every init scheme sets them as norms
  width     the residual-stream width it works at;  span: where in the source it came from
  geometry  (attention, and a stack-owned score bias) the ``AttentionShape``: heads, kv heads, head dim, ...
  shape     output shape, filled in by validate.infer_shapes
Edge attributes: port ("input", "residual", "memory", "positions", "segments"), shape.
"""

from __future__ import annotations

import networkx as nx

from . import schema as S
from .registry import ACTIVATIONS, ATTENTION_KINDS, MASKS, NORMS, POSITIONS, AttentionShape, combined_reach

OPS: dict[str, str] = {
    "input": "integer ids entering the model (tokens or token types)",
    "embedding": "lookup table from ids to vectors, optionally scaled",
    "position": "positional encoding for each position of its input",
    "add": "element-wise sum: a residual connection or embeddings + positions",
    "norm": "layer/RMS normalisation over the last dimension",
    "dropout": "dropout (identity in eval mode)",
    "scale": "multiplication by a constant (a residual scale: DeepNet's alpha * x)",
    "attention": "multi-head attention: self (one input) or cross (query + memory)",
    "parameters": "parameters a stack owns and the same sublayer of each of its layers reads (Linformer's E, F)",
    "feedforward": "position-wise two-layer network (or gated unit)",
    "block_input": "entry of a stack's repeated layer: the residual stream x",
    "block_output": "exit of a stack's repeated layer",
    "head": "output projection to logits, optionally tied to an embedding",
    "pooler": "dense + activation on the first position",
    "output": "a model output: logits, hidden states or the pooled vector",
}


class _Builder:
    def __init__(self, spec: S.Spec):
        self.spec = spec
        self.g = nx.DiGraph(name=spec.name, kind=spec.kind, stacks={})
        self.counts: dict[str, int] = {}

    def node(self, node_id: str, op: str, label: str, inputs=(), ports=None, **attrs) -> str:
        assert op in OPS, op
        if node_id in self.g:  # wiring may reuse a base name: add, add_1, ...
            n = self.counts.get(node_id, 0) + 1
            self.counts[node_id] = n
            node_id = f"{node_id}_{n}"
        attrs.setdefault("stack", None)
        attrs.setdefault("in_block", False)
        attrs.setdefault("module", None)
        attrs.setdefault("params", {})
        attrs.setdefault("ties", {})
        attrs.setdefault("norm_roles", {})
        attrs.setdefault("span", None)
        self.g.add_node(node_id, op=op, label=label, inputs=list(inputs), **attrs)
        for i, src in enumerate(inputs):
            port = (ports or {}).get(i, "input")
            self.g.add_edge(src, node_id, port=port)
        return node_id

    # ----------------------------------------------------------- top level
    def build(self) -> nx.DiGraph:
        spec = self.spec
        memory: str | None = None
        last = None
        seq_names = {"encoder": "src_len", "decoder": "tgt_len"} if len(spec.stacks) == 2 else {}
        for stack in spec.stacks:
            emb = spec.embedding(stack.embedding)
            length = seq_names.get(stack.role, "seq_len")
            x = self.embed(stack, emb, length)
            entry = self.node(f"{stack.role}.block_input", "block_input", "x", [x], stack=stack.role,
                              in_block=True, width=emb.dim)
            out = self.block(stack, entry, emb.dim, memory)
            exit_ = self.node(f"{stack.role}.block_output", "block_output", f"{stack.repeat}×", [out],
                              stack=stack.role, in_block=True, width=emb.dim)
            cur = exit_
            if not NORMS[stack.final_norm.name].absent:
                cur = self.norm(f"{stack.role}.final_norm", stack.final_norm, cur, emb.dim, stack.role, False,
                                f"{stack.role}.final_norm", "Final Norm")
            cur = self.dropout(f"{stack.role}.final_dropout", stack.final_dropout, cur, stack.role, False, emb.dim)
            self.g.graph["stacks"][stack.role] = {"repeat": stack.repeat, "entry": entry, "exit": exit_,
                                                  "output": cur, "width": emb.dim, "embedding": emb.name,
                                                  "length": length}
            if stack.role == "encoder":
                memory = cur
            last = (cur, emb.dim, length)
        if last is not None:
            self.outputs(*last)
        return self.g

    def embed(self, stack: S.Stack, emb: S.Embedding, length: str) -> str:
        role = stack.role
        path = f"embeddings.{emb.name}"
        ids_name = {"encoder": "src", "decoder": "tgt"}.get(role, "tokens") if len(self.spec.stacks) == 2 else "tokens"
        tokens = self.node(f"{role}.tokens", "input", ids_name, stack=role, shape=("batch", length), dtype="int64")
        scale = f" ×{emb.scale:.4g}" if emb.scale != 1 else ""
        terms = [self.node(f"{role}.embed", "embedding", f"Embedding ({emb.vocab:,}×{emb.dim}){scale}", [tokens],
                           stack=role, module=f"{path}.tokens", params={"weight": (emb.vocab, emb.dim)},
                           spec=emb, width=emb.dim, span=emb.span)]
        variant, options = POSITIONS.of(emb.position)
        if not variant.absent and variant.acts == "embedding":  # one acting in attention is refused by validate
            params = variant.params(emb.dim, options)
            terms.append(self.node(f"{role}.position", "position", f"Positional Encoding ({variant.label(options)})",
                                   [tokens],
                                   ports={0: "positions"}, stack=role, module=f"{path}.positions" if params else None,
                                   params=params, spec=emb.position, width=emb.dim, span=emb.position.span))
        if emb.segments:
            types = self.node(f"{role}.token_types", "input", "token_types", stack=role, shape=("batch", length),
                              dtype="int64")
            terms.append(self.node(f"{role}.segments", "embedding", f"Segment Embedding ({emb.segments}×{emb.dim})",
                                   [types], ports={0: "segments"}, stack=role, module=f"{path}.segments",
                                   params={"weight": (emb.segments, emb.dim)}, width=emb.dim, span=emb.span))
        x = terms[0] if len(terms) == 1 else self.node(f"{role}.embed_sum", "add", "+", terms, stack=role, width=emb.dim)
        if not NORMS[emb.norm.name].absent:
            x = self.norm(f"{role}.embed_norm", emb.norm, x, emb.dim, role, False, f"{path}.norm", "Embedding Norm")
        return self.dropout(f"{role}.embed_dropout", emb.dropout, x, role, False, emb.dim)

    # ----------------------------------------------------------- pieces
    def norm(self, node_id, choice: S.Choice, x, width, stack, in_block, module, title="Norm") -> str:
        variant, options = NORMS.of(choice)
        params = variant.params(width, options)
        return self.node(node_id, "norm", f"{title} ({choice})", [x], stack=stack, in_block=in_block,
                         module=module if params else None, params=params, spec=choice, width=width,
                         norm_roles=variant.param_roles(width, options), span=choice.span)

    def dropout(self, node_id, p: float, x, stack, in_block, width) -> str:
        if p == 0:
            return x
        return self.node(node_id, "dropout", f"Dropout ({p:g})", [x], stack=stack, in_block=in_block,
                         spec=S.DropoutOp(p=p), width=width)

    def operation(self, role: str, name: str, body, x: str, width: int, memory: str | None) -> str:
        module = f"{role}.layers.{{i}}.{name}"
        node_id = f"{role}.{name}"
        if isinstance(body, S.Attention):
            cross = body.reads == "cross"
            memory_width = self.g.graph["stacks"].get("encoder", {}).get("width", width)
            shape = attention_shape(body, width, memory_width)
            inputs = [x, memory] if cross and memory is not None else [x]
            ports = {1: "memory"}
            position, options = POSITIONS.of(body.position)
            if position.acts == "attention" and position.per_stack:
                ports[len(inputs)] = "positions"
                inputs.append(self.stack_position(role, name, position, options, body, shape))
            kind, kind_options = ATTENTION_KINDS.of(body.kind)
            if kind.stack_params(shape, kind_options):
                ports[len(inputs)] = "shared"
                inputs.append(self.node(f"{role}.{name}_shared", "parameters", kind.stack_label(kind_options), [],
                                        stack=role, module=f"{role}.shared.{name}",
                                        params=kind.stack_params(shape, kind_options), spec=body.kind,
                                        width=shape.width, geometry=shape, shape=(), span=body.span))
            return self.node(node_id, "attention", attention_label(body, shape), inputs,
                             ports=ports, stack=role, in_block=True, module=module,
                             params=attention_params(body, shape), norm_roles=qk_norm_roles(body, shape), spec=body,
                             width=width, geometry=shape, memory=memory if cross else None, span=body.span)
        if isinstance(body, S.FeedForward):
            gated = ACTIVATIONS[body.activation.name].gated
            up = 2 * body.d_ff if gated else body.d_ff
            params = {"up.weight": (up, width), "down.weight": (width, body.d_ff)}
            if body.bias:
                params.update({"up.bias": (up,), "down.bias": (width,)})
            activation = ACTIVATIONS[body.activation.name].title or str(body.activation)
            return self.node(node_id, "feedforward", f"Feed Forward ({activation}, {body.d_ff})", [x],
                             stack=role, in_block=True, module=module, params=params, spec=body, width=width,
                             span=body.span)
        if isinstance(body, S.NormOp):
            return self.norm(node_id, body.norm, x, width, role, True, module)
        return self.dropout(node_id, body.p, x, role, True, width)

    def stack_position(self, role: str, name: str, position, options, body: S.Attention, shape) -> str:
        """The node of a position scheme whose parameters the stack owns (``Position.per_stack``): built from
        the stack's positions once per call, read by sublayer ``name`` of every layer."""
        length = self.g.nodes[f"{role}.tokens"]["shape"][-1]
        return self.node(f"{role}.{name}_position", "position",
                         f"Position Bias ({position.label(options)}, {shape.heads} heads)", [f"{role}.tokens"],
                         ports={0: "positions"}, stack=role, module=f"{role}.positions.{name}",
                         params=position.params(shape, options), spec=body.position, width=shape.width,
                         geometry=shape, shape=(shape.heads, length, length), span=body.position.span)

    def block(self, stack: S.Stack, entry: str, width: int, memory: str | None) -> str:
        role = stack.role
        if stack.block.wiring:
            return self.wiring(stack, entry, width, memory)
        x = entry
        for sub in stack.block.sublayers:
            h = x
            has_norm = not NORMS[sub.norm.name].absent and sub.residual != "none"
            norm_module = f"{role}.layers.{{i}}.{sub.name}_norm"
            if sub.residual == "pre" and has_norm:
                h = self.norm(f"{role}.{sub.name}_norm", sub.norm, x, width, role, True, norm_module)
            y = self.operation(role, sub.name, sub.body, h, width, memory)
            y = self.dropout(f"{role}.{sub.name}_dropout", sub.dropout, y, role, True, width)
            if sub.residual != "none":
                y = self.node(f"{role}.{sub.name}_add", "add", "Add",
                              [x, y], ports={0: "residual"}, stack=role, in_block=True, width=width,
                              residual=sub.residual)
            if sub.residual == "post" and has_norm:
                y = self.norm(f"{role}.{sub.name}_norm", sub.norm, y, width, role, True, norm_module)
            x = y
        return x

    def wiring(self, stack: S.Stack, entry: str, width: int, memory: str | None) -> str:
        role = stack.role
        env = {"x": entry}

        def tensor(t) -> str:
            if isinstance(t, S.Var):
                return env[t.name]
            if isinstance(t, S.Scale):
                return self.node(f"{role}.scale", "scale", f"Scale (×{t.factor:g})", [tensor(t.input)],
                                 stack=role, in_block=True, width=width, spec=t, span=t.span)
            if isinstance(t, S.Sum):
                terms = [tensor(term) for term in t.terms]
                # the residual stream enters a sum as x itself or scaled (x = alpha * x + f(x))
                residual = {env["x"]} | {n for n in terms if self.g.nodes[n]["op"] == "scale"
                                         and self.g.nodes[n]["inputs"] == [env["x"]]}
                ports = {i: "residual" for i, src in enumerate(terms) if src in residual}
                return self.node(f"{role}.add", "add", "Add", terms, ports=ports, stack=role, in_block=True,
                                 width=width, span=t.span)
            return self.operation(role, t.name, t.body, tensor(t.input), width, memory)

        for assign in stack.block.wiring:
            env[assign.target] = tensor(assign.value)
        return env["x"]

    def outputs(self, x: str, width: int, length: str) -> None:
        spec = self.spec
        if spec.head is not None:
            head = spec.head
            params, ties, norm_roles = {}, {}, {}
            if head.transform is not None:
                params.update({"transform.weight": (width, width), "transform.bias": (width,)})
                if head.transform_norm is not None and not NORMS[head.transform_norm.name].absent:
                    variant, options = NORMS.of(head.transform_norm)
                    params.update({f"transform_norm.{k}": v for k, v in variant.params(width, options).items()})
                    norm_roles = {f"transform_norm.{k}": v for k, v in variant.param_roles(width, options).items()}
            if head.tied_to is not None:
                ties["weight"] = f"embeddings.{head.tied_to}.tokens.weight"
            else:
                params["weight"] = (head.out, width)
            if head.bias:
                params["bias"] = (head.out,)
            how = f"tied to '{head.tied_to}'" if head.tied_to else "linear"
            how += f", input ×{head.scale:.4g}" if head.scale != 1.0 else ""
            node = self.node("head", "head", f"Linear ({how}, {head.out:,})", [x], module="head", params=params,
                             ties=ties, norm_roles=norm_roles, spec=head, width=width, span=head.span)
            self.node("logits", "output", "logits", [node], shape=("batch", length, head.out))
        else:
            self.node("hidden", "output", "hidden states", [x], width=width)
        if spec.pooler is not None:
            pooler = self.node("pooler", "pooler", f"Pooler ({spec.pooler.activation})", [x], module="pooler",
                               params={"dense.weight": (width, width), "dense.bias": (width,)},
                               spec=spec.pooler, width=width, span=spec.pooler.span)
            self.node("pooled", "output", "pooled", [pooler])


def attention_shape(body: S.Attention, width: int, memory_width: int) -> AttentionShape:
    """The geometry of an attention sublayer reading a ``width`` stream (and ``memory_width`` memory)."""
    return AttentionShape(width=width, heads=body.heads, kv_heads=body.kv_heads or body.heads,
                          head_dim=body.head_dim or max(1, width // body.heads),
                          memory_width=memory_width if body.reads == "cross" else width,
                          cross=body.reads == "cross", bias=body.bias, out_bias=body.out_bias,
                          causal=combined_reach([MASKS.of(m) for m in body.mask])[1] == 0)


def attention_params(body: S.Attention, shape: AttentionShape) -> dict:
    """The kind's projections and scorers, per-head query/key norms, and the position scheme's own tensors."""
    kind, options = ATTENTION_KINDS.of(body.kind)
    params = dict(kind.params(shape, options))
    norm, norm_options = NORMS.of(body.qk_norm)
    for side in ("q_norm", "k_norm"):
        params.update({f"{side}.{k}": v for k, v in norm.params(shape.head_dim, norm_options).items()})
    position, position_options = POSITIONS.of(body.position)
    if position.acts == "attention" and not position.per_stack:  # a per-stack scheme's are its own node's
        params.update({f"position.{k}": v for k, v in position.params(shape, position_options).items()})
    return params


def qk_norm_roles(body: S.Attention, shape: AttentionShape) -> dict[str, str]:
    """The initialisation roles of qk-norm's parameters (``q_norm.weight``: ``norm_weight``, ...)."""
    norm, options = NORMS.of(body.qk_norm)
    return {f"{side}.{k}": role for side in ("q_norm", "k_norm") for k, role in norm.param_roles(shape.head_dim,
                                                                                                    options).items()}


def attention_label(body: S.Attention, shape: AttentionShape) -> str:
    """"Multi-Head Attention (causal, rotary, 32 heads, 8 kv heads)": every choice that shapes the sublayer."""
    details = [MASKS.label(m) for m in body.mask] or ["no mask"]
    for family, choice, what in ((POSITIONS, body.position, ""), (NORMS, body.qk_norm, "qk-norm ")):
        variant, options = family.of(choice)
        if not variant.absent:
            details.append(what + variant.label(options))
    details.append(f"{shape.heads} heads")
    if shape.kv_heads != shape.heads:
        details.append(f"{shape.kv_heads} kv heads")
    if body.head_dim is not None:
        details.append(f"head_dim {shape.head_dim}")
    if body.scale is not None:
        details.append(f"scale {body.scale:.4g}")
    cross = "Cross-" if shape.cross else ""
    return f"{ATTENTION_KINDS.label(body.kind)} {cross}Attention ({', '.join(details)})"


def lower(spec: S.Spec) -> nx.DiGraph:
    """Lower a resolved spec to the (not yet validated) graph IR."""
    return _Builder(spec).build()


def format_graph(g: nx.DiGraph) -> str:
    """One line per node, in topological order (like torch.fx's graph printout)."""
    lines = [f"graph {g.graph['name']} ({g.graph['kind']})"]
    for role, info in g.graph["stacks"].items():
        lines.append(f"  stack {role}: {info['entry']} .. {info['exit']} repeated {info['repeat']}×")
    for n in nx.topological_sort(g):
        a = g.nodes[n]
        ins = ", ".join(a["inputs"])
        shape = a.get("shape")
        shape_text = f" -> ({', '.join(map(str, shape))})" if shape else ""
        tag = "  [×]" if a["in_block"] else ""
        lines.append(f"  {n} = {a['op']}({ins}){shape_text}  # {a['label']}{tag}")
    return "\n".join(lines)
