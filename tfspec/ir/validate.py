"""Stage 4, validate: small passes over the graph IR, each adding diagnostics.

The pass list reads top to bottom; every pass runs, so one `tfspec check`
reports every independent problem.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable

import networkx as nx

from ..front import schema as S
from ..errors import Collector, Diagnostic
from ..registry import (ACTIVATIONS, ATTENTION_KINDS, ATTENTION_STEPS, FEEDFORWARD_KINDS, INPUTS, MASKS, NORMS, POOLS,
                        POSITIONS, Problem)
from . import nodes as ir
from .graph import Graph
from .lower import lower
from .queries import length_limit


def check_acyclic(g: Graph, spec: S.Spec, errors: Collector) -> None:
    """The IR is a DAG: a repeat is an attribute of a stack, never a back-edge."""
    if not nx.is_directed_acyclic_graph(g):
        cycle = nx.find_cycle(g)
        errors.error("wiring", "the graph has a cycle: " + " -> ".join(u for u, _ in cycle), spec.span)


def check_cross_attention_memory(g: Graph, spec: S.Spec, errors: Collector) -> None:
    """Every cross-attention reads memory: the output of an encoder, from inside a decoder."""
    for node in g.of(ir.Attention):
        if node.spec.reads != "cross":
            continue
        if node.stack == "encoder":
            errors.error("structure", "cross-attention in an encoder stack has no memory to read",
                         node.span, "only a decoder attends to an encoder's output; use `attention self ...` here")
        elif node.memory is None:
            errors.error("structure", "cross-attention needs an encoder's output as memory, but this model has no encoder",
                         node.span, "remove this sublayer for a decoder-only model, or add `encoder x N { ... }`")


def check_heads_divide_width(g: Graph, spec: S.Spec, errors: Collector) -> None:
    """d_model % heads == 0 unless head_dim is given; heads % kv_heads == 0 (each kv head serves a group)."""
    for node in g.of(ir.Attention):
        body, width, heads = node.spec, node.width, node.spec.heads
        if body.head_dim is None and width % heads:
            divisors = [h for h in range(1, width + 1) if width % h == 0]
            nearest = min(divisors, key=lambda h: (abs(h - heads), h))
            errors.error("shape", f"d_model {width} is not divisible by heads={heads}",
                         body.arg_spans.get("heads", node.span),
                         f"each head needs d_model / heads dimensions; try heads={nearest}, or set head_dim")
        kv_heads = node.geometry.kv_heads
        if heads % kv_heads:
            groups = [k for k in range(1, heads + 1) if heads % k == 0]
            nearest = min(groups, key=lambda k: (abs(k - kv_heads), k))
            errors.error("shape", f"heads={heads} is not a multiple of kv_heads={kv_heads}",
                         body.arg_spans.get("kv_heads", node.span),
                         f"each key/value head serves heads / kv_heads query heads; try kv_heads={nearest}")
    for node in g.of(ir.Head):  # an attention pool's heads
        if node.spec.pool is None:
            continue
        pool, options = POOLS.of(node.spec.pool)
        heads = pool.heads(options)
        if heads and node.width % heads:
            divisors = [h for h in range(1, node.width + 1) if node.width % h == 0]
            nearest = min(divisors, key=lambda h: (abs(h - heads), h))
            errors.error("shape", f"the pool's {heads} heads do not divide the width {node.width}",
                         node.spec.pool.span or node.span, f"try {pool.name}({nearest}, ...)")


def check_variants(g: Graph, spec: S.Spec, errors: Collector) -> None:
    """Each variant's own checks where it is used, its objections to the variants it is combined with, and
    position schemes where they act: every rule is the variant's, asked here."""
    for emb in spec.embeddings:
        scheme, options = POSITIONS.of(emb.position)
        problem = scheme.misplaced("embedding", emb.position)
        if problem is None:
            grid, leading = _grid_of(emb)
            problem = scheme.embedding_problem(options, emb.dim, grid, leading > 0)
        if problem is not None:
            errors.error(problem.code, problem.message, emb.position.span or emb.span, problem.hint)
    for node in g.of(ir.Attention):
        body, shape = node.spec, node.geometry
        (position, position_options), (kind, kind_options) = POSITIONS.of(body.position), ATTENTION_KINDS.of(body.kind)
        misplaced = position.misplaced("attention", body.position)
        objections = [(misplaced, body.position)] if misplaced is not None else []
        objections += [(p, body.position) for p in position.conflicts(position_options, kind)]
        objections += [(p, body.kind) for p in kind.conflicts(kind_options, body.mask, position, body.position)]
        # a qk-norm of each head's projection, or a step norming queries and keys elsewhere: once, where it applies
        qk_norms = [body.qk_norm] * (not NORMS.of(body.qk_norm)[0].absent) + [
            c for c in body.steps if ATTENTION_STEPS[c.name].norms_queries_and_keys]
        if (problem := kind.qk_norm_problem(kind_options)) is not None:
            objections += [(problem, choice) for choice in qk_norms]
        if len(qk_norms) > 1:
            objections.append((Problem(f"the queries and keys are normed twice ({', '.join(c.name for c in qk_norms)}"
                                       "): an attention norms them once", "keep one of them"), qk_norms[-1]))
        for choice in body.steps:
            step, step_options = ATTENTION_STEPS.of(choice)
            objections += [(p, choice) for p in step.check(step_options, shape, kind)]
        if node.values_from is not None:  # what it reads of an earlier layer must fit its own values
            source = g.node(node.values_from)
            theirs, ours = source.geometry, shape
            if (theirs.kv_heads, theirs.head_dim) != (ours.kv_heads, ours.head_dim):
                reader = next(c for c in body.steps if ATTENTION_STEPS[c.name].reads == "values")
                errors.error("shape", f"{reader.name} mixes the first layer's values ({theirs.kv_heads} key/value "
                             f"heads of {theirs.head_dim}) into this layer's ({ours.kv_heads} of {ours.head_dim})",
                             reader.span or node.span, "give the layers' attentions the same kv_heads and head_dim")
        if node.keys_from is not None:
            errors.diagnostics.extend(_reading_problems(g, node, kind))
        uses = [(ATTENTION_KINDS, body.kind, shape)] + [(MASKS, m, shape) for m in body.mask]
        if misplaced is None and body.reads == "self":  # numbering its own stack's positions
            stack = next(s for s in spec.stacks if s.role == node.stack)
            grid = _grid_of(spec.embedding(stack.embedding))
            for variant, choice in [(position, body.position)] + [(MASKS[m.name], m) for m in body.mask]:
                grid_problem = variant.grid_problem(variant.options(choice.options), *grid)
                objections += [(grid_problem, choice)] if grid_problem is not None else []
        if misplaced is None:  # a scheme acting elsewhere has nothing to check here
            uses.append((POSITIONS, body.position, node.positioned))  # the part of each head it acts on
        for family, choice, geometry in uses:
            variant, options = family.of(choice)
            objections += [(p, choice) for p in variant.check(options, geometry)]
        for problem, choice in objections:
            about = problem.about if problem.about is not None else choice
            errors.error(problem.code, problem.message, about.span or node.span, problem.hint)
    for node in g.of(ir.Mixer):
        mixer, options = node.variant()
        for problem in mixer.check(options, node.width, g.stacks[node.stack].repeat):
            about = problem.about if problem.about is not None else node.spec.kind
            errors.error(problem.code, problem.message, about.span or node.span, problem.hint)


def check_per_layer(g: Graph, spec: S.Spec, errors: Collector) -> None:
    """Per-layer inputs made for one stack and read there: each ``kind=per_layer`` feed-forward reads its stack's
    embedding's, as wide as its ``d_ff``, through a function of one input; an embedding making them has a
    reader, one stack, and a row for every token id."""
    for stack in spec.stacks:
        emb = spec.embedding(stack.embedding)
        readers = [n for n in g.of(ir.FeedForward, stack=stack.role) if FEEDFORWARD_KINDS[n.spec.kind.name].reads_per_layer]
        for node in readers:
            activation = ACTIVATIONS[node.spec.activation.name]
            if emb.per_layer is None:
                errors.error("structure", f"kind=per_layer reads its layer's per-layer inputs, but embedding "
                             f"'{emb.name}' makes none", node.span, f"add `per_layer {node.spec.d_ff}` to embedding "
                             f"'{emb.name}'")
            elif node.spec.d_ff != emb.per_layer:
                errors.error("shape", f"kind=per_layer gates the layer's {emb.per_layer} per-layer inputs, but its "
                             f"d_ff is {node.spec.d_ff}", node.span, f"give d_ff={emb.per_layer}")
            if activation.up_features(node.spec.d_ff) != node.spec.d_ff:
                errors.error("value", f"kind=per_layer applies a function of one input to its gate, not the gated "
                             f"unit {node.spec.activation.name}", node.spec.activation.span or node.span,
                             "use its function alone (gelu_tanh for geglu_tanh)")
        if emb.per_layer is None:
            continue
        if sum(s.embedding == emb.name for s in spec.stacks) > 1:
            errors.error("structure", f"per_layer {emb.per_layer}: embedding '{emb.name}' feeds both stacks, and "
                         "per-layer inputs are one stack's layers'", emb.span, "give each stack its own embedding")
        elif not readers:
            errors.error("structure", f"per_layer {emb.per_layer}: no layer of the {stack.role} reads them",
                         emb.span, f"add feedforward(x, d_ff={emb.per_layer}, kind=per_layer) to its layers, or "
                         "drop per_layer")
        if emb.per_layer_vocab is not None and emb.per_layer_vocab < emb.vocab:
            errors.error("size", f"per_layer_vocab {emb.per_layer_vocab} is smaller than the vocab {emb.vocab}: ids "
                         f"from {emb.per_layer_vocab} on would have no per-layer row", emb.span,
                         f"give at least {emb.vocab}")


def check_mtp(g: Graph, spec: S.Spec, errors: Collector) -> None:
    """A multi-token prediction module's layer runs on its own, after the decoder: the kind of layer it copies
    reads nothing another layer hands on (keys and values, ``kv_from``; the first layer's values) and shares no
    module its stack owns for every layer (T5's relative bias) or borrows."""
    for node in g.of(ir.MultiTokenPrediction):
        where = f"mtp layer={node.spec.layer}"
        for part in g.of(ir.Node, stack="decoder", in_block=True):
            if part.layer_kind != node.copies:
                continue
            if isinstance(part, ir.Attention) and (part.keys_from or part.values_from) is not None:
                read = "keys and values" if part.keys_from is not None else "values"
                errors.error("structure", f"{where}: that layer's {part.name} reads the {read} an earlier layer "
                             "made, and a multi-token prediction module's layer runs with no layer before it",
                             node.span, "give layer= a decoder layer that makes its own keys and values")
            elif part.ties:
                errors.error("structure", f"{where}: that layer's {part.label} borrows weights, which a module's own "
                             "layer would not", node.span)
        if g.of(ir.StackParameters, stack="decoder"):
            errors.error("structure", f"{where}: the decoder's layers share modules it owns for all of them "
                         "(a relative bias, layer-wise projections), which a module's own layer does not",
                         node.span)


def _reading_problems(g: Graph, node: ir.Attention, kind) -> list[Diagnostic]:
    """What stops an attention attending with the keys and values an earlier layer's made (``kv_from``): a kind
    that projects otherwise, steps acting on keys or values it does not make, or keys another kind of attention
    made -- other heads, masks, positions or kind, which would score keys its own rules did not make (or keep)."""
    body, maker = node.spec, g.node(node.keys_from).spec
    where = f"kv_from={body.kv_from}"
    problems = []
    if not kind.reads_made_keys:
        problems.append(Diagnostic("structure", f"{where}: {body.kind.name} attention cannot attend with keys and "
                                   "values another layer made", body.kind.span or node.span,
                                   "use kind=dot (or same_kv) for layers sharing keys and values"))
    for step in body.steps:
        if not ATTENTION_STEPS[step.name].queries_only:
            problems.append(Diagnostic("structure", f"{where}: {step.name} acts on the keys or values an attention "
                                       f"makes, and this one reads layer {body.kv_from}'s as made", step.span or
                                       node.span, "drop it here (steps=none in its `layers` section)"))
    ours, theirs = node.geometry, g.node(node.keys_from).geometry
    differences = [what for what, a, b in (
        ("kv_heads", ours.kv_heads, theirs.kv_heads), ("head_dim", ours.head_dim, theirs.head_dim),
        ("kind", str(body.kind), str(maker.kind)), ("mask", " + ".join(map(str, body.mask)),
                                                    " + ".join(map(str, maker.mask))),
        ("position", str(body.position), str(maker.position))) if a != b]
    if differences:
        problems.append(Diagnostic("structure", f"{where}: layer {body.kv_from}'s {node.name} differs in "
                                   f"{', '.join(differences)}: its keys and values are not this attention's to read",
                                   node.span, "read a layer of the same kind of attention (the same kv_heads, "
                                   "head_dim, kind, masks and positions)"))
    return problems


def _broadcast(shapes: list[tuple]) -> tuple | None:
    rank = max(len(s) for s in shapes)
    out = []
    for dims in zip(*[(1,) * (rank - len(s)) + tuple(s) for s in shapes]):
        real = {d for d in dims if d != 1}
        if len(real) > 1:
            return None
        out.append(real.pop() if real else 1)
    return tuple(out)


def infer_shapes(g: Graph, spec: S.Spec, errors: Collector) -> None:
    """Symbolic (batch, length, width) shapes along every flow, checked at every node."""
    for node in g.ordered():
        ins = [g.node(i).shape for i in node.inputs]
        if any(s is None for s in ins):
            continue  # an earlier node already failed
        shape = node.shape
        if isinstance(node, (ir.Input, ir.StackParameters)):
            pass  # ids, or a stack's parameters (()): set when lowered
        elif isinstance(node, ir.Embedding):
            shape = (*ins[0], node.width)
        elif isinstance(node, ir.Features):
            shape = (ins[0][0], node.length, node.width)
        elif isinstance(node, ir.PositionEncoding):
            shape = (ins[0][1], node.width)  # the length of the ids, or of the patches' sequence
        elif isinstance(node, ir.Projection):
            shape = (*ins[0][:-1], node.width)
        elif isinstance(node, ir.PerLayerInputs):  # each id's features for each layer
            shape = (*ins[0], node.layers, node.width)
        elif isinstance(node, ir.Add):
            shape = _broadcast(ins)
            if shape is None:
                errors.error("shape", "cannot add tensors of shapes " + " and ".join(map(str, ins)), node.span)
        elif isinstance(node, ir.Head):  # one vector per sequence where it pools
            shape = (ins[0][0], node.spec.out) if node.spec.pool else (*ins[0][:-1], node.spec.out)
        elif isinstance(node, ir.Pooler):
            shape = (ins[0][0], ins[0][-1])
        else:
            shape = ins[0]
            if isinstance(node, (*ir.Sublayer, ir.Norm)) and shape[-1] != node.width:
                errors.error("shape", f"{node.label} expects width {node.width}, gets {shape[-1]}", node.span)
                shape = None
        g.replace(replace(node, shape=shape))


def check_tied_head(g: Graph, spec: S.Spec, errors: Collector) -> None:
    """A tied head reuses the embedding matrix (vocab x dim): its input width must be that dim."""
    if "head" not in g or spec.head is None or spec.head.tied_to is None:
        return
    head = g.node("head")
    emb = spec.embedding(spec.head.tied_to)
    if (spec.head.features or head.width) != emb.dim:  # (a transform maps into a narrower table: features)
        errors.error("shape", f"head is tied to embedding '{emb.name}' of dim {emb.dim}, "
                              f"but the last stack's width is {head.width}", head.span,
                     f"tie to an embedding of dim {head.width}, use `head linear`, or add transform=ACTIVATION "
                     f"(a dense map from {head.width} to {emb.dim} first, as ALBERT's head)")


def check_embeddings_read(g: Graph, spec: S.Spec, errors: Collector) -> None:
    """Every embedding is read by a stack: one that only a head ties to would be an untied head in disguise."""
    read = {s.embedding for s in spec.stacks}
    for emb in spec.embeddings:
        if emb.name not in read:
            errors.error("structure", f"embedding '{emb.name}' is not read by any stack", emb.span,
                         f"read it with `embedding {emb.name}` in a stack body, or remove it")


def _grid_of(emb: S.Embedding) -> tuple[int | None, int]:
    """The square grid an embedding's input kind lays its vectors in (None: tokens, or none), and how many learned
    vectors come before them."""
    if emb.input is None:
        return None, 0
    kind, options = INPUTS.of(emb.input)
    return kind.grid(options), kind.leading(options)


def check_inputs(g: Graph, spec: S.Spec, errors: Collector) -> None:
    """An input kind (pictures' patches, spectrograms) feeds an encoder (of an encoder-only model, ViT's; or of an
    encoder-decoder, Whisper's), whose positions cover the sequence it makes; a head over an encoder alone reads
    one vector per example (a class token, or the mean)."""
    for node in g.of(ir.Features):
        emb = spec.embedding(node.table)
        kind = INPUTS[node.choice.name]
        if node.stack != "encoder":
            errors.error("structure", f"embedding '{emb.name}' reads {kind.what}, which feed an encoder (ViT's, "
                         f"Whisper's); here the {node.stack} reads it", emb.span,
                         "read it with an `encoder x N` stack (a decoder reads token ids)")
        scheme, position_options = POSITIONS.of(emb.position)
        grid, leading = _grid_of(emb)
        objected = scheme.embedding_problem(position_options, emb.dim, grid, leading > 0) is not None
        limit = length_limit(g, node.stack)
        if limit is not None and limit[0] < node.length and not objected:  # (else the scheme says why: check_variants)
            before = f" and {node.leading} learned vector{'s' if node.leading > 1 else ''} before them" \
                if node.leading else ""
            errors.error("shape", f"{limit[1]} cover {limit[0]} positions, but embedding '{emb.name}' makes "
                         f"{node.length} ({node.length - node.leading} from its {kind.what}{before})",
                         emb.position.span or emb.span, f"cover {node.length} positions")
        if spec.kind == "encoder-only" and spec.head is not None and spec.head.pool is None:
            errors.error("structure", f"a head over {kind.what} needs a vector for each: pool=first reads the "
                         "first position (a class token), pool=mean the mean of the positions", spec.head.span,
                         "add pool=first (ViT's)")
        if spec.head is not None and spec.head.pool is not None and node.stack == spec.stacks[-1].role:
            pool = POOLS[spec.head.pool.name]
            if pool.reads_ids:
                errors.error("structure", f"pool={spec.head.pool.name} finds its position among token ids; the "
                             f"{node.stack} reads {kind.what}", spec.head.pool.span, "pool=first or pool=mean")


PASSES: list[Callable[[Graph, S.Spec, Collector], None]] = [
    check_acyclic,                 # the IR is a DAG
    check_cross_attention_memory,  # every cross-attention has a memory source
    check_heads_divide_width,      # d_model % heads == 0
    infer_shapes,                  # symbolic shapes along every edge
    check_tied_head,               # tied head matches its embedding
    check_embeddings_read,         # no embedding that no stack reads
    check_inputs,                  # an input kind feeds an encoder-only model whose positions cover its sequence
    check_variants,                # each variant's own checks; positions where they act
    check_per_layer,               # per-layer inputs made for one stack, read there as wide as made
    check_mtp,                     # multi-token prediction's layers run on their own
]


def lower_and_validate(spec: S.Spec, sources: dict | None = None) -> Graph:
    """Lower a spec and run every pass; raise SpecError listing all problems found. The IR's own invariants
    (``Graph.lint``) are checked before the passes and after them: a broken one is a bug, not a spec's."""
    g = lower(spec)
    g.lint()
    errors = Collector()
    for check in PASSES:
        check(g, spec, errors)
    errors.raise_if_any(sources)
    g.lint()
    return g
