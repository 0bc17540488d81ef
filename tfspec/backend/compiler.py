"""Stage 5, compile: the validated graph IR -> a trainable ``nn.Module``.

Structure is resolved here, once: each stack's layer template becomes a
``torch.fx.GraphModule`` whose generated ``forward`` calls the sublayer modules
in the IR's order (``print(model.decoder.layers[0].code)`` shows it), so a
forward pass never consults the graph and ``torch.compile(model,
fullgraph=True)`` sees plain tensor code. Module names come from the IR's
``module`` attribute, so ``model.state_dict()`` has exactly the names and
shapes of ``tfspec.inspect.analysis.parameter_table``. Every module is made from a
``tfspec.registry.Constructor`` (``embeddings_constructor``, ``sublayer_constructor``,
...), the same calls ``tfspec emit`` writes into a standalone file.

>>> model = compile('''
... embedding tokens { vocab 100; dim 32 }
... decoder x 2 { attention self heads=4 mask=causal; feedforward d_ff=64 }
... head tied(tokens)''')
>>> import torch; model(torch.randint(0, 100, (2, 10))).shape
torch.Size([2, 10, 100])
"""

from __future__ import annotations

import math
import operator
import os
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import fx, nn

from ..front import schema as S
from ..ir.api import load, parse
from ..ir import nodes as ir
from ..ir import towers as tower_ir
from ..ir.graph import Graph
from ..ir.queries import (layer_template, length_limit, module_copies, reads_any_picture_size,
                          sublayers, weight_repeat)
from ..errors import Diagnostic, SpecError
from ..nn.attention import cache_slot, kv_keep
from ..nn.state import state_slot
from ..nn.embedding import Embeddings
from ..nn.per_layer import PerLayerInputs
from ..nn.generated import Generated
from ..nn.head import Head, Pooler
from ..nn.model import CompiledModel, Stack
from ..nn.towers import Connector, ContrastiveHead, TowersModel
from ..nn.mtp import MultiTokenPrediction, PredictionModule
from ..registry import (ACTIVATIONS, ATTENTION_KINDS, ATTENTION_STEPS, CONNECTOR_STEPS, FEEDFORWARD_KINDS, INITS, INPUTS,
                        MASKS, NORMS,
                        POOLS, POSITIONS, AttentionConfig, Constructor, Role, attention_inputs)
from ..nn.kernels import attention_band, flex_attention_applies, fused_causal_kernel

DEFAULT_INIT = S.Choice(name="normal", options={"std": 0.02})


def compile(source: S.Spec | S.Towers | str | Path, *, overrides: dict[str, Any] | None = None, device=None,
            dtype=None, seed: int | None = None) -> CompiledModel | TowersModel:
    """Compile a spec (a ``Spec``, a ``.tfs`` path, or spec text) to an initialised ``nn.Module``; a model of
    several towers to a ``TowersModel`` of one compiled model per tower, initialised in the towers' order.

    ``device="meta"`` builds without allocating (for counting); ``seed`` seeds the
    initialisation (otherwise it draws from torch's global generator, so
    ``torch.manual_seed`` makes it reproducible). ``dtype``: a floating-point
    ``torch.dtype`` or its name (``"bfloat16"``). An argument out of its range is a
    ``ValueError`` (``TypeError`` for the wrong kind of value) naming it.
    """
    device, dtype = _device_argument(device), _dtype_argument(dtype)
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2 ** 63):
        raise ValueError(f"seed must be a whole number from 0 to 2**63 - 1, got {seed!r}")
    spec = _spec_of(source, overrides)
    check_fits(spec, device, dtype)
    where = device if device is not None else torch.empty(0).device  # torch's default device, where it builds
    with torch.device(device) if device is not None else nullcontext():
        if where.type == "meta":  # nothing to draw
            model = _build_and_initialise(spec, None, where)
        elif seed is not None:
            # a generator of this call's own: another thread drawing meanwhile (another compile, a data loader)
            # cannot change the weights; the modules' own draws, which initialise overwrites, leave torch's
            # global generator as it was
            with torch.random.fork_rng(devices=[where] if where.type == "cuda" else []):
                model = _build_and_initialise(spec, torch.Generator(where).manual_seed(seed), where)
        else:  # from where torch's global generator stands, as after torch.manual_seed(seed): the same weights
            model = _build_and_initialise(spec, _global_generator_copy(where), where)
    if dtype is not None:
        model = model.to(dtype=dtype)
    return model


FLOAT_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
                "float64": torch.float64}


def _dtype_argument(dtype) -> torch.dtype | None:
    if dtype is None:
        return None
    if isinstance(dtype, str):
        if dtype.removeprefix("torch.") not in FLOAT_DTYPES:
            raise ValueError(f"dtype {dtype!r} is not one a model's weights can have ({', '.join(FLOAT_DTYPES)})")
        return FLOAT_DTYPES[dtype.removeprefix("torch.")]
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"dtype must be a torch.dtype or its name, not {type(dtype).__name__}")
    if dtype not in FLOAT_DTYPES.values():
        raise ValueError(f"dtype {dtype} is not one a model's weights can have ({', '.join(FLOAT_DTYPES)})")
    return dtype


def _device_argument(device) -> torch.device | None:
    """``device`` as a ``torch.device`` that exists here: a bad name or a CUDA device without CUDA is a ValueError."""
    if device is None:
        return None
    try:
        device = torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(f"device {device!r} is not a device name (cpu, cuda, cuda:1, mps, meta)") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device {str(device)!r}: this torch sees no CUDA device (torch.cuda.is_available() "
                             "is False)")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ValueError(f"device {str(device)!r}: there are {torch.cuda.device_count()} CUDA devices")
    elif device.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"device {str(device)!r}: MPS is not available here")
    return device


def available_memory_bytes(device=None) -> int:
    """Memory that new weights could still take on ``device``: free GPU memory, or the host's MemAvailable."""
    device = torch.device(device) if device is not None else torch.get_default_device()
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 1 << 40


def check_fits(spec: S.Spec | S.Towers, device=None, dtype=None) -> None:
    """Refuse, before allocating, weights that will not fit in the memory available (a SpecError, code ``size``).

    Only materialising a model is refused for its size: ``check``, ``summary``,
    ``render`` and ``diff`` read the same spec without allocating anything.
    """
    if device is not None and torch.device(device).type == "meta":
        return
    params = spec.parameter_count()  # (of towers, the joins' too)
    # initialisation happens in the default dtype, before any ``dtype=`` conversion
    need = params * torch.empty((), dtype=torch.get_default_dtype(), device="meta").element_size()
    have = available_memory_bytes(device)
    if need > have:  # the node holding the most weights, in whichever tower, is named
        _, biggest = max(((sum(math.prod(p.shape) for p in n.params.values()) * weight_repeat(g, n), n)
                          for g in spec.graph().parts().values() for n in g.ordered() if n.params),
                         key=lambda pair: pair[0])
        raise SpecError([Diagnostic("size", f"the model's {params:,} parameters need {need / 2**30:,.1f} GiB "
                                            f"({torch.get_default_dtype()}), but only {have / 2**30:,.1f} GiB of "
                                            "memory is available", biggest.span or spec.span,
                                    "shrink it (e.g. with --set), or inspect it without weights: "
                                    "check, summary and render need no memory for them")], spec._sources)


def _spec_of(source, overrides) -> S.Spec | S.Towers:
    if isinstance(source, S.Model):
        if overrides:
            raise ValueError("overrides apply when compiling text or a path; a parsed Spec is already resolved")
        return source
    if isinstance(source, Path):
        return load(source, overrides=overrides)
    if isinstance(source, str):
        return load(source, overrides=overrides) if looks_like_path(source) else parse(source, overrides=overrides)
    raise TypeError(f"compile() takes a Spec, a path or spec text, not {type(source).__name__}")


def looks_like_path(source: str) -> bool:
    """Is this string a spec file's path rather than spec text? (one line, no braces, a .tfs or existing file)"""
    return "\n" not in source and "{" not in source and (source.endswith(".tfs") or Path(source).is_file())


def _global_generator_copy(device: torch.device) -> torch.Generator:
    """A generator in the state of torch's global one for ``device``: the weights drawn from it do not depend on
    how many numbers building the modules drew meanwhile."""
    generator = torch.Generator(device)
    state = torch.cuda.get_rng_state(device) if device.type == "cuda" else torch.get_rng_state()
    generator.set_state(state)
    return generator


def _build_and_initialise(spec: S.Spec | S.Towers, generator: torch.Generator | None = None,
                          where: torch.device | None = None) -> CompiledModel | TowersModel:
    if isinstance(spec, S.Towers):  # each tower from the one generator, in order; then the joins' own values
        g = spec.graph()
        towers = {t.name: _build_and_initialise(t.spec, generator, where) for t in spec.towers}
        connectors = {c.source: connector_constructor(c).build() for c in g.of(tower_ir.Connector)}
        contrastive = next((contrastive_constructor(j).build() for j in g.of(tower_ir.Contrastive)), None)
        model = TowersModel(spec, towers, contrastive, connectors)
        initialise_connectors(model, g, generator)
        return model
    model = build_model(spec)
    initialise(model, spec, generator)
    return model


def connector_constructor(connector: tower_ir.Connector) -> Constructor:
    """A connector's module: its steps' modules, each at the width it reads."""
    steps = [CONNECTOR_STEPS[step.choice.name].module(step.width, CONNECTOR_STEPS.of(step.choice)[1])
             for step in connector.steps]
    return Constructor(Connector, (connector.target, connector.image_token, connector.layer, connector.drop_first,
                                   steps))


def initialise_connectors(model, g: tower_ir.TowersGraph, generator: torch.Generator | None = None) -> None:
    """The connectors' parameters by the roles their steps declare, as the default scheme initialises a tower's."""
    variant = INITS[DEFAULT_INIT.name]
    options = variant.options(DEFAULT_INIT.options)
    for connector in g.of(tower_ir.Connector):
        declared = {f"steps.{i}.{name}": (p, step.width) for i, step in enumerate(connector.steps)
                    for name, p in step.params.items()}
        with torch.no_grad():
            variant.initialise([(name, p, ParamRole(declared[name][0].role, width=declared[name][1]))
                                for name, p in model.connectors[connector.source].named_parameters()],
                               options, generator)


def contrastive_constructor(join: tower_ir.Contrastive) -> Constructor:
    """The contrastive head's module, its scale and bias at their declared values (which no scheme draws)."""
    return Constructor(ContrastiveHead, (join.loss, join.scale, join.bias))


# ---------------------------------------------------------------- building
def build_model(spec: S.Spec) -> CompiledModel:
    """Modules for every IR node, uninitialised; ``compile`` also initialises them."""
    g = spec.graph()
    used = {s.embedding for s in spec.stacks}
    used |= {e.shares for e in spec.embeddings if e.name in used and e.shares}  # a table another reads
    embeddings = {e.name: embeddings_constructor(e, spec).build() for e in spec.embeddings if e.name in used}
    stacks, max_len, limited_by, table, real_positions = {}, {}, {}, {}, {}
    for role, info in g.stacks.items():
        templates = [layer_template(g, role, k) for k in range(len(info.kinds))]
        first_runner = {info.weights_of(i): i for i in reversed(range(info.repeat))}  # a layer running each set
        layers = [_layer(templates[info.kind_of(i)], role, info.kind_of(i), i) for _, i in sorted(first_runner.items())]
        stack = spec.decoder if role == "decoder" else spec.encoder
        attentions = [n.spec for n in g.of(ir.Attention, stack=role)]

        def reads_padding(reads: str) -> bool:
            return any(MASKS[m.name].reads_padding for a in attentions if a.reads == reads for m in a.mask)

        inputs = {i.name: i for a in attentions for i in attention_inputs(a)}
        mixers_read_padding = any(n.variant()[0].reads_padding for n in g.of(ir.Mixer, stack=role))
        stacks[role] = Stack(layers, _norm(stack.final_norm, info.width), stack.final_dropout,
                             runs=[info.weights_of(i) for i in range(info.repeat)],
                             masks_padding=reads_padding("self") or mixers_read_padding,
                             memory_masks_padding=reads_padding("cross"), inputs=inputs,
                             owned={attribute: {name: c.build() for name, c in modules.items()}
                                    for attribute, modules in stack_owned(g, role).items()})
        position, options = POSITIONS.of(spec.embedding(info.embedding).position)
        table[role] = position.max_len(options)
        real_positions[role] = position.counts_real_tokens(options)
        limit = length_limit(g, role)
        max_len[role], limited_by[role] = limit if limit is not None else (None, "")
    width = g.stacks[spec.stacks[-1].role].width
    head = head_constructor(spec.head, width).build() if spec.head is not None else None
    pooler = pooler_constructor(spec.pooler, width).build() if spec.pooler is not None else None
    stack_embedding = {s.role: s.embedding for s in spec.stacks}
    mtp = next((multi_token_prediction(g, node) for node in g.of(ir.MultiTokenPrediction)), None)
    any_size = {role: reads_any_picture_size(g, role) for role in g.stacks}
    return CompiledModel(spec, embeddings, stacks, head, pooler, stack_embedding, max_len, limited_by, table,
                         model_graph(g), real_positions, mtp, any_size)


def multi_token_prediction(g: Graph, node: ir.MultiTokenPrediction) -> MultiTokenPrediction:
    """The MTP modules, each with a layer of its own of the kind it copies, numbered after the decoder's."""
    norm = norm_constructor(node.spec.norm, node.width)
    template = layer_template(g, "decoder", node.copies)
    return MultiTokenPrediction([PredictionModule(node.width, norm.build(), norm.build(),
                                                  _layer(template, "decoder", node.copies, node.layers_from + k),
                                                  norm.build()) for k in range(node.spec.depth)],
                                node.spec.weight, node.layers_from)


def _norm(choice: S.Choice, width: int) -> nn.Module:
    return norm_constructor(choice, width).build()


def norm_constructor(choice: S.Choice, width: int) -> Constructor:
    variant, options = NORMS.of(choice)
    return variant.module(width, options)


def embeddings_constructor(e: S.Embedding, spec: S.Spec) -> Constructor:
    """An embedding's module: token table (or its input kind's, which makes vectors of pictures), positions added
    to it, segments, norm, dropout, and the per-layer inputs of the stack of ``spec`` that reads it."""
    variant, options = POSITIONS.of(e.position)
    if e.input is not None:
        kind, kind_options = INPUTS.of(e.input)
        return kind.module(e.dim, kind_options, variant.module(e.dim, options), norm_constructor(e.norm, e.dim),
                           e.dropout, e.project)
    per_layer = None
    if e.per_layer is not None:  # (validation: one stack reads it)
        layers = next(s.repeat for s in spec.stacks if s.embedding == e.name)
        per_layer = Constructor(PerLayerInputs, (e.per_layer_vocab or e.vocab, layers, e.per_layer, e.width,
                                                 norm_constructor(e.per_layer_norm, e.per_layer)))
    return Constructor(Embeddings, (e.vocab, e.dim, e.scale, variant.module(e.dim, options), e.segments,
                                    norm_constructor(e.norm, e.dim), e.dropout, e.shares is not None, e.project,
                                    per_layer))


def attention_config(node: ir.Attention) -> AttentionConfig:
    """What an attention node's runtime module is built from (its variants resolved, ``none``s dropped)."""
    body = node.spec
    position, position_options = POSITIONS.of(body.position)
    norm, norm_options = NORMS.of(body.qk_norm)
    masks = tuple(MASKS.of(m) for m in body.mask)
    kind = ATTENTION_KINDS[body.kind.name]
    fused = fused_causal_kernel([variant for variant, _ in masks], kind, position)
    band = attention_band(masks, kind, position, node.geometry.cross)
    flex = flex_attention_applies(masks, kind, position, node.geometry.cross)
    # what its steps read of an earlier layer, and what it hands on, by the handing attention's id
    steps = tuple((*ATTENTION_STEPS.of(c), node.values_from if ATTENTION_STEPS[c.name].reads else None)
                  for c in body.steps)
    return AttentionConfig(shape=node.geometry, positioned=node.positioned, dropout=body.dropout, masks=masks,
                           position=None if position.absent else (position, position_options),
                           qk_norm=None if norm.absent else (norm, norm_options), scale=body.scale,
                           fused_causal=fused, band=band, flex=flex, steps=steps, exports=node.id if "values" in body.exports else None,
                           hands_on_kv=node.id if "kv" in body.exports else None,
                           kv_source=f"{node.keys_from}@{body.kv_from}" if node.keys_from is not None else None)


def stack_owned(g: Graph, role: str) -> dict[str, dict[str, Constructor]]:
    """The modules ``role``'s stack owns for a sublayer of every layer (``registry.StackOwned``), by the
    stack's attribute that holds them and the sublayer's name: ``{"shared": {"self_attn": ...}}``."""
    owned: dict[str, dict[str, Constructor]] = {}
    for node in g.of(ir.StackParameters, stack=role):
        variant, options = node.variant()
        owned.setdefault(variant.stack_attribute, {})[node.module.name] = variant.stack_module(node.geometry, options)
    return owned


def head_constructor(head: S.Head, width: int) -> Constructor:
    transform = ACTIVATIONS[head.transform.name].module() if head.transform is not None else None
    features = head.features or width
    pool = None if head.pool is None else POOLS[head.pool.name].module(width, POOLS.of(head.pool)[1])
    norm = (norm_constructor(head.transform_norm, features)
            if head.transform is not None and head.transform_norm else None)
    return Constructor(Head, (width, head.out, head.bias, head.tied_to is not None, transform, norm, head.scale,
                              head.softcap, head.features, pool, head.transform_bias, head.projects))


def pooler_constructor(pooler: S.Pooler, width: int) -> Constructor:
    return Constructor(Pooler, (width, ACTIVATIONS[pooler.activation.name].module()))


def sublayer_constructor(node: ir.Node) -> Constructor:
    """The module of a feed-forward, mixer, norm or dropout node of a layer; for attention, its kind's torch-only
    core (the compiled model builds the kind's runtime module instead, see ``_sublayer_module``)."""
    if isinstance(node, ir.Attention):
        kind, options = ATTENTION_KINDS.of(node.spec.kind)
        return kind.core(attention_config(node), options)
    if isinstance(node, ir.FeedForward):
        kind, options = FEEDFORWARD_KINDS.of(node.spec.kind)
        return kind.module(node.width, node.spec, options)
    if isinstance(node, ir.Mixer):
        mixer, options = node.variant()
        return mixer.module(node.width, options)
    if isinstance(node, ir.Norm):
        return norm_constructor(node.choice, node.width)
    if isinstance(node, ir.Dropout):
        return Constructor("Dropout", (node.p,))
    raise AssertionError(f"no module for a {node.kind} node")


def _sublayer_module(node: ir.Node, layer: int) -> nn.Module:
    """The module of a node of layer ``layer``'s template (its index, for a variant that reads it)."""
    if isinstance(node, ir.Attention):
        kind, options = ATTENTION_KINDS.of(node.spec.kind)
        return kind.build(attention_config(node), options, layer)
    return sublayer_constructor(node).build(layer)


def sublayer_name(node: ir.Node) -> str:
    """A layer's attribute for a node of its template ("self_attn", "ffn_dropout"): its module's name, or for a
    parameter-free node its id within the stack."""
    name = node.module.name if node.module is not None else node.local
    assert name.isidentifier(), name  # names come from the IR's own naming, never from spec text
    return name


def _layer(template: list[ir.Node], role: str, kind: int = 0, layer: int = 0) -> fx.GraphModule:
    """Layer ``layer`` of ``role``'s stack: fresh sublayer modules, and the generated forward (``layer_graph``)
    wiring them."""
    graph, modules = layer_graph(template)
    for value in graph.nodes:
        value.meta.pop("ir", None)  # the running layer needs no IR (and copies of the model carry none)
    root = nn.Module()
    for name, node in modules.items():
        root.add_module(name, _sublayer_module(node, layer))
    return Generated(root, graph, class_name=layer_class_name(role, kind))


def layer_graph(template: list[ir.Node]) -> tuple[fx.Graph, dict[str, ir.Node]]:
    """A layer's forward, generated once from its IR template for both back ends: ``forward(x, ctx=None,
    cache=None)`` as a ``torch.fx.Graph`` calling each sublayer in the IR's order, and the sublayers it calls
    by attribute name (the node each module is built from). The compiled layer runs the graph; ``tfspec
    emit`` prints it with a standalone file's arguments. Each value's ``meta["ir"]`` is the node it computes
    (a sum of three terms is two additions of one node).
    """
    graph = fx.Graph()
    x = graph.placeholder("x")
    # the call's shared inputs (tfspec.nn.context.Context); None: positions 0.., no padding (a layer on its own)
    ctx = graph.placeholder("ctx", default_value=None)
    # incremental decoding: {sublayer: KVCache for attention, RecurrentState for a mixer}
    cache = graph.placeholder("cache", default_value=None)
    modules: dict[str, ir.Node] = {}
    values: dict[str, fx.Node] = {}
    for node in template:
        if isinstance(node, ir.BlockInput):
            values[node.id] = x
            x.meta["ir"] = node
            continue
        inputs = [values[i] for i in node.inputs if i in values]
        if isinstance(node, ir.BlockOutput):
            graph.output(inputs[0])
            break
        if isinstance(node, ir.Scale):
            value = graph.call_function(operator.mul, (inputs[0], node.factor))
        elif isinstance(node, ir.Add):
            value = inputs[0]
            for term in inputs[1:]:
                value = graph.call_function(operator.add, (value, term))
                value.meta["ir"] = node
        else:
            name = sublayer_name(node)
            modules.setdefault(name, node)
            if isinstance(node, ir.Attention):
                slot = graph.call_function(cache_slot, (cache, name, kv_keep(attention_config(node).masks)))
                value = graph.call_module(name, (inputs[0], ctx), {"cache": slot})
            elif isinstance(node, ir.Mixer):  # its state while decoding, beside attention's keys and values
                slot = graph.call_function(state_slot, (cache, name))
                value = graph.call_module(name, (inputs[0], ctx), {"state": slot})
            elif isinstance(node, ir.FeedForward):  # the call's padding: a mixture's statistics leave it out
                value = graph.call_module(name, (inputs[0], ctx))
            else:
                value = graph.call_module(name, (inputs[0],))
        value.meta["ir"] = node
        values[node.id] = value
    return graph, modules


def model_graph(g: Graph) -> fx.Graph:
    """The model's forward, generated from the IR as a layer's is, for both back ends: its arguments (each
    stack's token ids and padding mask, a single stack's token types, run-time inputs by name), one step per
    stack (``CompiledModel.run_stack``; the encoder's output is the decoder's memory), then the head and
    pooler (``output``). The compiled model runs it (``print(model.program.code)``); ``tfspec emit`` prints
    it with each step written out.
    """
    graph = fx.Graph()
    roles = list(g.stacks)  # the encoder first
    names = {role: g.node(f"{role}.tokens").name for role in roles}  # tokens, or src and tgt
    ids = {role: graph.placeholder(names[role]) for role in roles}
    padding = {role: graph.placeholder("padding_mask" if names[role] == "tokens" else f"{names[role]}_padding_mask",
                                       default_value=None) for role in roles}
    types = graph.placeholder("token_types", default_value=None) if len(roles) == 1 else None
    ahead = g.of(ir.MultiTokenPrediction)
    # the next token's id at each position, which multi-token prediction's modules train on, shifted
    labels = graph.placeholder("labels", default_value=None) if ahead else None
    inputs = graph.placeholder("**inputs")
    per_stack = {roles[0]: inputs}
    if len(roles) == 2:
        split = graph.call_module("split_inputs", (inputs,))
        per_stack = {role: graph.create_node("call_function", operator.getitem, (split, i), name=f"{names[role]}_inputs")
                     for i, role in enumerate(roles)}
    hidden = memory = None
    for role in roles:
        options = {"token_types": types} if types is not None else {}
        if memory is not None:
            options.update(memory=memory, memory_padding=padding[roles[0]])
        hidden = memory = graph.create_node("call_module", "run_stack", (role, names[role], ids[role], padding[role],
                                                                         per_stack[role]), options, name=role)
    if ahead:  # (training only: the loss it adds is ``mtp.added_losses``'s)
        hidden = graph.create_node("call_module", "train_ahead", (hidden, ids["decoder"], padding["decoder"],
                                                                  per_stack["decoder"], labels), name="trained_ahead")
    # (the last stack's token ids, where the head's pool finds its position among them)
    read = (ids[roles[-1]],) if pool_reads_ids(g) else ()
    graph.output(graph.create_node("call_module", "output", (hidden, *read), name="out"))
    return graph


def pool_reads_ids(g: Graph) -> bool:
    """Does the head's pool find its position among the token ids (CLIP's end of text)?"""
    heads = g.of(ir.Head)
    return bool(heads) and heads[0].spec.pool is not None and POOLS[heads[0].spec.pool.name].reads_ids


def layer_class_name(role: str, kind: int) -> str:
    """``DecoderLayer`` for a stack's first layer kind, ``DecoderLayer1`` for its second, ..."""
    return f"{role.capitalize()}Layer{kind or ''}"


# ---------------------------------------------------------------- initialisation
@dataclass(frozen=True)
class ParamRole:
    """A parameter as an initialisation scheme sees it: its declared ``registry.Param`` and where it stands.

    kind: the declared role (``matrix``, ``unembedding``, ``embedding``, ``position_table``, ``vector``,
    ``bias``, ``norm_weight``, ``norm_bias``). residual_branches: for a projection declared as writing into
    the residual stream, how many such branches its stack has in all (0 otherwise). width: the residual
    stream's width where it acts. query_rows, head_dim, value, std, uniform, log: as declared.
    """

    kind: Role
    residual_branches: int = 0
    width: int = 0
    query_rows: int = 0
    head_dim: int = 0
    value: float | None = None
    std: float | None = None
    uniform: tuple[float, float] | None = None
    log_spaced: bool = False
    floor: float | None = None
    stored: str = "value"
    ramp: bool = False


def parameter_roles(g: Graph) -> dict[str, ParamRole]:
    """Full parameter name -> role: what each node's variant declared, with its stack's residual branch count."""
    branches = {role: info.repeat * len(sublayers(g, role)) for role, info in g.stacks.items()}
    roles: dict[str, ParamRole] = {}
    for node in g.ordered():
        for module in module_copies(g, node):
            for name, p in node.params.items():
                roles.setdefault(f"{module}.{name}", ParamRole(
                    p.role, branches.get(node.stack, 0) if p.residual else 0, node.width, p.query_rows,
                    p.head_dim, p.value, p.std, p.uniform, p.log_spaced, p.floor,
                    p.stored, p.ramp))
    return roles


def initialise(model: CompiledModel, spec: S.Spec, generator: torch.Generator | None = None) -> None:
    """Fill every parameter by the spec's ``init`` scheme, in state-dict order (so seeds reproduce), drawing from
    ``generator`` (None: torch's global one)."""
    roles = parameter_roles(spec.graph())
    choice = spec.init or DEFAULT_INIT
    variant = INITS[choice.name]
    with torch.no_grad():
        variant.initialise([(name, p, roles[name]) for name, p in model.named_parameters()],
                           variant.options(choice.options), generator)
