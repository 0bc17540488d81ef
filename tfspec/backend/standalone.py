"""Emit: a spec -> one standalone, readable PyTorch file (``tfspec emit SPEC -o model.py``).

The file depends on torch alone. Its modules are the ones the compiler builds
(``tfspec.registry.Constructor``s: the same classes, whose source is copied, with
the same arguments; an attention's forward is the compiled one, its masks built from
the call's ``Context``), and its forwards are the compiled model's generated graphs
(``compiler.layer_graph``, ``compiler.model_graph``) printed: each stack's layer in
the order the compiled layer runs it, and the model's own forward embedding, building
each stack's ``Context``, running the layers and applying the head -- so
``Model().load_state_dict(compiled.state_dict())`` loads with ``strict=True`` and gives
the compiled model's outputs.

What it leaves out: KV caches (incremental decoding), input checks, and
initialisation (load weights, or initialise them yourself).

>>> source = emit('''
... embedding tokens { vocab 100; dim 32 }
... decoder x 2 { attention self heads=4 mask=causal; feedforward d_ff=64 }
... head tied(tokens)''')
>>> "class DecoderLayer(nn.Module):" in source
True
"""

from __future__ import annotations

import inspect
import keyword
import math
import operator
import re
import textwrap
from pathlib import Path
from typing import Any, NamedTuple

from torch import fx

from ..version import __version__
from ..front import schema as S
from .compiler import (_spec_of, connector_constructor, contrastive_constructor, embeddings_constructor,
                       head_constructor, layer_class_name, layer_graph,
                       looks_like_path, model_graph, norm_constructor, pool_reads_ids, pooler_constructor, stack_owned,
                       sublayer_constructor)
from ..ir import nodes as ir
from ..ir.towers import Connector as Connection, Contrastive
from ..ir.queries import attentions, describe_layers, layer_template
from ..nn.attention import cache_slot
from ..nn.state import state_slot
from ..nn.steps import AttentionStep
from ..nn.context import Context
from ..nn.model import picture_marks
from ..nn.embedding import default_positions
from ..nn.mtp import MultiTokenPrediction, PredictionModule
from ..nn.per_layer import CARRIED as PER_LAYER
from ..registry import LAYER, POSITIONS, Constructor, attention_inputs

HEADER = '''from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn
'''


def emit(source: S.Spec | str | Path, *, overrides: dict[str, Any] | None = None, origin: str | None = None) -> str:
    """The standalone model file for a spec (a ``Spec``, a ``.tfs`` path, or spec text), as Python source.

    ``origin``: how the header names where the spec came from (default: its path, when it has one).
    """
    spec = _spec_of(source, overrides)
    if origin is None and (isinstance(source, Path) or isinstance(source, str) and looks_like_path(source)):
        origin = str(source)
    if isinstance(spec, S.Towers):
        return _TowersWriter(spec, origin).file()
    return _Writer(spec, origin).file()


class _Writer:
    """One model's file, or (``prefix``) one tower's classes in a file of towers: ``VisionModel``,
    ``VisionEncoderLayer``; ``definitions``: the copied sources the file shares; ``reserved``: every class name the
    file defines; ``splices``: the tower takes a connector's vectors (``spliced``) among its token embeddings."""

    def __init__(self, spec: S.Spec, origin: str | None, prefix: str = "", definitions: dict | None = None,
                 reserved: frozenset[str] = frozenset(), splices: bool = False):
        self.spec, self.origin, self.prefix, self.splices = spec, origin, prefix, splices
        self.g = spec.graph()
        # class or function -> its source, in first-use order
        self.definitions: dict[Any, str] = {} if definitions is None else definitions
        self.reserved = reserved or frozenset({"Model"} | {layer_class_name(role, k) for role, info in
                                                           self.g.stacks.items() for k in range(len(info.kinds))})
        self.arguments: tuple[list[str], list[str]] = ([], [])  # the model's forward's (set by ``model_class``)
        self.memory_padding = ""  # the encoder's padding argument, which cross-attention reads
        self.reads_layer = False  # the value being written reads its layer's index (``LAYER``)
        # the stacks some of whose sublayers read their layer's index: their layer classes take ``layer``
        self.stacks_reading_layer = {role for role in self.g.stacks if self.reads_layer_index(role)}

    # ------------------------------------------------------------ values and definitions
    def need(self, obj) -> str:
        """Copy a class (with its bases from tfspec) or function into the file; return its name."""
        if isinstance(obj, _Constant):
            self.definitions.setdefault(obj, f"{obj.name} = {obj.value!r}")
            return obj.name
        if obj not in self.definitions:
            if inspect.isclass(obj):
                for base in reversed(obj.__mro__[1:]):
                    if base.__module__.startswith("tfspec."):
                        self.need(base)
            source = textwrap.dedent(inspect.getsource(obj)).rstrip()
            for helper in _helpers(obj, source):
                self.need(helper)
            taken = {getattr(other, "__name__", None) for other in self.definitions} | set(self.reserved)
            if obj.__name__ in taken:  # two runtime classes of one name would shadow each other in the file
                raise ValueError(f"{obj.__module__}.{obj.__qualname__}: another definition in the standalone "
                                 f"file is named {obj.__name__}; rename one of them")
            self.definitions[obj] = source
        return obj.__name__

    def value(self, v) -> str:
        """Python source for an argument: a constructor call, or a literal that reads back exactly."""
        if v is LAYER:  # the index of the layer being built: the layer class's argument
            self.reads_layer = True
            return "layer"
        if isinstance(v, Constructor):
            name = f"nn.{v.target}" if isinstance(v.target, str) else self.need(v.target)
            parameters = list(_signature(v).values())
            args = [self.value(a) for a in v.args]
            # arguments by name where the signature names them, and only those that differ from its defaults
            if len(v.args) > 1 and all(p.kind is p.POSITIONAL_OR_KEYWORD for p in parameters[:len(v.args)]):
                args = [f"{p.name}={self.value(a)}" for p, a in zip(parameters, v.args)
                        if p.default is inspect.Parameter.empty or not _same(p.default, a)]
            named = {p.name: p.default for p in parameters}
            args += [f"{k}={self.value(a)}" for k, a in v.kwargs.items()
                     if named.get(k, inspect.Parameter.empty) is inspect.Parameter.empty or not _same(named[k], a)]
            return f"{name}({', '.join(args)})"
        if isinstance(v, float):
            return repr(v) if math.isfinite(v) else f"float({str(v)!r})"
        if isinstance(v, (list, tuple)):
            items = ", ".join(self.value(x) for x in v)
            return f"[{items}]" if isinstance(v, list) else f"({items}{',' if len(v) == 1 else ''})"
        if isinstance(v, dict):
            return "{" + ", ".join(f"{self.value(k)}: {self.value(x)}" for k, x in v.items()) + "}"
        if inspect.isfunction(v):  # a mask's rule: copied into the file, named
            return self.need(v)
        if v is None or isinstance(v, (bool, int, str)):
            return repr(v)
        raise TypeError(f"cannot write {type(v).__name__} into a standalone file")

    # ------------------------------------------------------------ the file
    def file(self) -> str:
        layers = [self.layer_class(role, k) for role, info in self.g.stacks.items() for k in range(len(info.kinds))]
        model = self.model_class()
        article = "an" if self.spec.kind[0] in "aeiou" else "a"
        return _file(self.spec, f"{article} {self.spec.kind} Transformer", self.origin, self.definitions,
                     [*layers, model])

    # ------------------------------------------------------------ one layer of a stack
    def layer_name(self, role: str, kind: int) -> str:
        return self.prefix + layer_class_name(role, kind)

    def reads_layer_index(self, role: str) -> bool:
        """Does a sublayer of ``role``'s layers read its layer's index (``LAYER`` among its arguments)?"""
        self.reads_layer = False
        for kind in range(len(self.g.stacks[role].kinds)):
            for node in layer_graph(layer_template(self.g, role, kind))[1].values():
                self.value(sublayer_constructor(node))
        reads, self.reads_layer = self.reads_layer, False
        return reads

    def layer_class(self, role: str, kind: int) -> str:
        g, info = self.g, self.g.stacks[role]
        graph, sublayers = layer_graph(layer_template(g, role, kind))
        modules = {name: self.value(sublayer_constructor(node)) for name, node in sublayers.items()}
        arguments = ", layer: int" if role in self.stacks_reading_layer else ""  # (a variant depending on its depth)
        body = self.layer_forward(graph)
        init = "\n".join(f"        self.{name} = {code}" for name, code in modules.items()) or "        pass"
        cross = any(n.geometry.cross for n in attentions(g, role))
        memory = ", the encoder's memory" if cross else ""
        shape = _shape(g.node(info.entry).shape)
        shared = (f" (they run {info.weight_sets} set{'s' if info.weight_sets > 1 else ''} of weights)"
                  if info.weights else "")
        which = (f"One of the {role}'s {info.repeat} layers{shared}" if len(info.kinds) == 1 else
                 f"The {role}'s {describe_layers(info.kinds[kind].layers, info.repeat)} (of {info.repeat})")
        return (f"class {self.layer_name(role, kind)}(nn.Module):\n"
                f'    """{which}, as the spec wires it."""\n\n'
                f"    def __init__(self{arguments}) -> None:\n        super().__init__()\n"
                f"{init}\n\n"
                f"    def forward(self, x: Tensor, ctx: {self.need(Context)}) -> Tensor:\n"
                f'        """``x`` {shape}; ``ctx``: the call\'s positions, padding{memory} and inputs."""\n'
                f"{body}")

    def layer_forward(self, graph: fx.Graph) -> str:
        """The compiled layer's generated forward (``compiler.layer_graph``), printed with a standalone file's
        arguments (positions, masks by name, memory) for its ``ctx`` and without its cache: statements in the
        same order, a value used once, by the next statement, inlined."""
        steps = [v for v in graph.nodes if v.op in ("call_function", "call_module")
                 and v.target not in (cache_slot, state_slot)]
        entry = next(v for v in graph.nodes if v.op == "placeholder")  # x: the layer's input
        template = list(dict.fromkeys([entry.meta["ir"]] + [v.meta["ir"] for v in steps]))
        consumers = {n.id: [m.id for m in template if n.id in m.inputs] for n in template}
        names: dict[fx.Node, str] = {entry: "x"}
        expressions: dict[fx.Node, str] = {}
        stream = [entry.meta["ir"].id]  # the node whose value the variable x holds
        lines: list[str] = []
        for i, step in enumerate(steps):
            args = [expressions.pop(a) if a in expressions else names[a] for a in step.args
                    if isinstance(a, fx.Node) and (a in names or a in expressions)]
            code = self.step_expression(step, args)
            node = step.meta["ir"]
            following = next((v.meta["ir"] for v in steps[i + 1:] if v.meta["ir"] is not node), None)
            users = list(step.users)
            # used once: within its own sum (a + b + c), or by the next node
            if len(users) == 1 and users[0].op != "output" and users[0].meta["ir"] in (node, following):
                expressions[step] = f"({code})" if users[0].target is operator.mul and step.target is operator.add \
                    else code
                continue
            later = [v.meta["ir"].id for v in steps[i + 1:]]
            names[step] = target = self.variable(node, stream, consumers, later)
            lines.append(f"        {target} = {code}  # {_shape(node.shape)}")
        result = next(v for v in graph.nodes if v.op == "output").args[0]
        lines.append(f"        return {expressions.get(result, names.get(result))}")
        return "\n".join(lines)

    def step_expression(self, step: fx.Node, args: list[str]) -> str:
        if step.target is operator.add:
            return " + ".join(args)
        if step.target is operator.mul:
            return f"{args[0]} * {self.value(step.args[1])}"
        if isinstance(step.meta["ir"], ir.Sublayer):
            return f"self.{step.target}({args[0]}, ctx)"
        return f"self.{step.target}({args[0]})"

    def variable(self, node: ir.Node, stream: list[str], consumers: dict, later: list[str]) -> str:
        """Where a statement's value goes: ``x`` when it replaces the residual stream and the old ``x`` is not
        read again, else the node's own name."""
        if isinstance(node, ir.Add) and stream[0] in node.inputs and not any(c in later for c in consumers[stream[0]]):
            stream[0] = node.id
            return "x"
        local = node.local
        return local + "_" if keyword.iskeyword(local) or local in ("x", "positions", "masks", "memory",
                                                                     "self") else local

    # ------------------------------------------------------------ the model
    def model_class(self, features: bool = False) -> str:
        """The model's class (``Model``, or a tower's ``VisionModel``); ``features``: with the method a connector
        reads its vectors by."""
        spec, g = self.spec, self.g
        stacks = g.stacks
        used = [e for e in spec.embeddings if any(s.embedding == e.name for s in spec.stacks)]
        init = ["        self.embeddings = nn.ModuleDict({"]
        init += [f"            {e.name!r}: {self.value(embeddings_constructor(e, spec))}," for e in used]
        init.append("        })")
        for role, info in stacks.items():
            stack = spec.decoder if role == "decoder" else spec.encoder
            final = self.value(norm_constructor(stack.final_norm, info.width))
            # the layer each set of weights is built for (its first): a class reading its depth takes its index
            first = {info.weights_of(i): i for i in reversed(range(info.repeat))}
            indices = [first[w] for w in range(info.weight_sets)]
            reading = role in self.stacks_reading_layer
            if len(info.kinds) == 1 and not reading:
                layers = f"nn.ModuleList({self.layer_name(role, 0)}() for _ in range({info.weight_sets}))"
            elif len(info.kinds) == 1:
                over = f"range({info.weight_sets})" if indices == list(range(info.weight_sets)) else str(indices)
                layers = f"nn.ModuleList({self.layer_name(role, 0)}(layer) for layer in {over})"
            else:  # a schedule: each layer (each set of weights, where layers share them) of its kind
                classes = ", ".join(self.layer_name(role, k) for k in range(len(info.kinds)))
                kinds = {info.weights_of(i): info.kind_of(i) for i in range(info.repeat)}
                schedule = ", ".join(str(kinds[w]) for w in range(info.weight_sets))
                if reading:
                    pairs = ", ".join(f"({layer}, {kinds[w]})" for w, layer in enumerate(indices))
                    layers = f"nn.ModuleList(({classes})[kind](layer) for layer, kind in ({pairs},))"
                else:
                    layers = f"nn.ModuleList(({classes})[kind]() for kind in ({schedule},))"
            parts = [f"\"layers\": {layers}",
                     f"\"final_norm\": {final}"]
            if stack.final_dropout:
                parts.append(f"\"final_dropout\": nn.Dropout({stack.final_dropout!r})")
            owned = stack_owned(g, role)
            for attribute, modules in owned.items():
                parts.append(f"{attribute!r}: nn.ModuleDict({{" + ", ".join(
                    f"{name!r}: {self.value(c)}" for name, c in modules.items()) + "})")
            init.append(f"        self.{role} = nn.ModuleDict({{\n"
                        + "".join(f"            {part},\n" for part in parts) + "        })")
            for attribute, modules in owned.items():  # every layer reads what the stack owns for it
                for name in modules:
                    init.append(f"        for layer in self.{role}[\"layers\"]:\n"
                                f"            layer.{name}.share(self.{role}[{attribute!r}][{name!r}])")
        width = stacks[spec.stacks[-1].role].width
        init.append(f"        self.head = {self.value(head_constructor(spec.head, width))}" if spec.head else
                    "        self.head = None")
        init.append(f"        self.pooler = {self.value(pooler_constructor(spec.pooler, width))}" if spec.pooler else
                    "        self.pooler = None")
        init += self.mtp_init()
        # the compiled model's generated forward (compiler.model_graph), each step written out: its token ids and
        # padding masks are this forward's first arguments; each stack's run-time inputs follow, by name
        program = model_graph(g)
        placeholders = [n for n in program.nodes if n.op == "placeholder"]
        arguments = [str(n.target) for n in placeholders if n.args == () and not str(n.target).startswith("*")]
        padding_args = [str(n.target) for n in placeholders
                        if n.args == (None,) and str(n.target).endswith("padding_mask")]
        other_args, body = [], []
        for step in (n for n in program.nodes if n.op == "call_module"):
            if step.target == "run_stack":
                _, _, extra, lines = self.stack_forward(getattr(spec, step.args[0]))
                other_args += extra
                body += lines
            elif step.target == "train_ahead":
                other_args.append("labels")
                body += self.mtp_lines()
            elif step.target == "output":
                body += self.output_lines()
        optional = padding_args + other_args
        self.arguments = (arguments, optional)  # (a model of towers calls it by them)
        signature = ", ".join([f"{a}: Tensor" for a in arguments] + [f"{a}: Tensor | None = None" for a in optional]
                              + (["spliced: tuple[Tensor, Tensor, Tensor] | None = None"] if self.splices else []))
        outputs = g.of(ir.Output)
        returns = " and ".join(n.label for n in outputs)
        inputs = ", ".join(f"``{a}``" for a in arguments)
        spliced = " ``spliced``: (where, vectors, columns), a connector's vectors in place of the token embeddings " \
                  "where ``where`` is True, in order, each picture's a grid ``columns`` wide." if self.splices else ""
        return (f"class {self.prefix}Model(nn.Module):\n"
                f'    """{spec.name}: {inputs} -> {returns}. Padding masks are bool, True at padded positions.'
                f'{spliced}"""\n\n'
                "    def __init__(self) -> None:\n        super().__init__()\n" + "\n".join(init) + "\n\n"
                f"    def forward(self, {signature}):\n" + "\n".join(body)
                + (self.features_method() if features else ""))

    def features_method(self) -> str:
        """The method a connector reads a tower's vectors by: its stack's output, or after ``layers`` layers
        before the final norm (``TowersModel.features``)."""
        ids, padding, extra, lines = self.stack_forward(self.spec.stacks[0], stop=True)
        signature = ", ".join([f"{ids}: Tensor"] + [f"{a}: Tensor | None = None" for a in [padding] + extra]
                              + ["layers: int | None = None"])
        return (f"\n\n    def features(self, {signature}) -> Tensor:\n"
                '        """The stack\'s output, or its first ``layers`` layers\' (before its final norm): what a '
                'connector reads."""\n' + "\n".join(lines) + "\n        return x")

    def mtp_init(self) -> list[str]:
        """Multi-token prediction's modules, each with a layer of the kind it copies (numbered after the decoder's)."""
        lines = []
        for node in self.g.of(ir.MultiTokenPrediction):
            norm = self.value(norm_constructor(node.spec.norm, node.width))
            layer = self.layer_name("decoder", node.copies)
            number = f"{node.layers_from} + k" if "decoder" in self.stacks_reading_layer else ""
            lines.append(f"        self.mtp = {self.need(MultiTokenPrediction)}([  # training's; inference does not "
                         f"run them\n            {self.need(PredictionModule)}({node.width}, {norm}, {norm}, "
                         f"{layer}({number}), {norm})\n            for k in range({node.spec.depth})], "
                         f"{node.spec.weight!r}, {node.layers_from})")
        return lines

    def mtp_lines(self) -> list[str]:
        """The forward's training step of multi-token prediction: its loss into ``self.mtp.added_losses``."""
        spec = self.spec
        embedding = spec.embedding(spec.decoder.embedding)
        tied = (f"self.embeddings[{spec.head.tied_to!r}].tokens.weight" if spec.head.tied_to is not None else "None")
        return ["        # multi-token prediction's loss, when training (self.mtp.added_losses): labels, the next token's "
                "id at each position",
                f"        self.mtp(x, tokens, lambda ahead: self.embeddings[{embedding.name!r}](ahead, positions, None),",
                f"                 lambda hidden: self.head(hidden, {tied}), ctx, labels)"]

    def output_lines(self) -> list[str]:
        """The forward's last lines: the head's logits and the pooler's summary of the last stack's output."""
        spec, g = self.spec, self.g
        body = ["        hidden = x"]
        result = "hidden"
        if spec.head is not None:
            tied = (f"self.embeddings[{spec.head.tied_to!r}].tokens.weight" if spec.head.tied_to is not None
                    else "None")
            # (the last stack's token ids, where the head's pool finds its position among them)
            ids = f", {g.node(f'{list(g.stacks)[-1]}.tokens').name}" if pool_reads_ids(g) else ""
            body.append(f"        logits = self.head(hidden, {tied}{ids})  # {_shape(g.node('logits').shape)}")
            result = "logits"
        if spec.pooler is not None:
            body.append("        pooled = self.pooler(hidden)  # (batch, width): the first position's summary")
            result = f"{result}, pooled"
        body.append(f"        return {result}")
        return body

    def numbering(self, role: str) -> str | None:
        """The module path of ``role``'s first in-attention position scheme that numbers a call's positions itself
        (``AttentionStep.numbered``: M-RoPE's), as the compiled model asks it; None where none does."""
        for node in attentions(self.g, role):
            position = POSITIONS.of(node.spec.position)
            constructor = position[0].module(node.positioned, position[1]) if position[0].acts == "attention" \
                else None
            target = getattr(constructor, "target", None)
            if isinstance(target, type) and getattr(target, "numbered", None) not in (None, AttentionStep.numbered):
                layer = self.g.stacks[role].kinds[node.layer_kind].layers[0]
                return f"{node.module.at(layer if node.module.per_layer else None)}.position"
        return None

    def stack_forward(self, stack: S.Stack, stop: bool = False) -> tuple[str, str, list[str], list[str]]:
        """One stack's part of the model's forward: its arguments, and lines leaving its output in ``x``; ``stop``:
        after the argument ``layers``'s first layers, before the final norm, where it is given (a connector's
        reading)."""
        g, role = self.g, stack.role
        ids = g.node(f"{role}.tokens").name
        prefix = "" if ids == "tokens" else f"{ids}_"
        padding, positions = f"{prefix}padding_mask", f"{prefix}position_ids"
        readers = attentions(g, role)
        inputs = sorted({i.name for a in readers for i in attention_inputs(a.spec)})
        embedding = self.spec.embedding(stack.embedding)
        types = f"{prefix}token_types" if embedding.segments else None
        extra = [positions] + ([types] if types else []) + [f"{prefix}{name}" for name in inputs]
        where = f"{ids}.device"
        scheme, options = POSITIONS.of(embedding.position)
        real = scheme.counts_real_tokens(options)
        default = (f"torch.arange({ids}.shape[1], device={where})[None]" if real is None else
                   f"{self.need(default_positions)}({ids}, {padding}, {-real})")  # counting real tokens only
        features = next(iter(g.of(ir.Features, stack=role)), None)
        table = f"self.embeddings[{embedding.name!r}]"
        marks = []
        if features is not None:  # an input kind's vectors (pictures' patches and class token) are numbered, and
            # the width of their grid given where the stack reads it (pictures of any size)
            default = f"torch.arange({table}.length_of({ids}), device={where})[None]"
            marks += [f"        {prefix}{i.name} = torch.full(({ids}.shape[0],), {table}.grid_of({ids})[1], "
                      f"device={where}) if {prefix}{i.name} is None else {prefix}{i.name}"
                      for i in sorted({i for a in readers for i in attention_inputs(a.spec) if i.grid},
                                      key=lambda i: i.name)]
        given = "{" + ", ".join(f"{name!r}: {prefix}{name}" for name in inputs) + "}"
        # a connector's pictures among the tokens: the run-time inputs that mark them, unless given
        if self.splices and role == self.spec.stacks[-1].role:
            marked = {i.name: i.pictures for a in readers for i in attention_inputs(a.spec) if i.pictures}
            if marked:
                marks.append(f"        marks = {self.need(picture_marks)}(spliced[0], *spliced[2:]) if spliced is not "
                             "None else {}")
                marks += [f"        {prefix}{name} = marks.get({what!r}) if {prefix}{name} is None else {prefix}{name}"
                          for name, what in sorted(marked.items())]
        numbering = self.numbering(role)
        if numbering is not None:  # a position scheme that numbers the call's positions itself (M-RoPE's pictures)
            default = f"self.get_submodule({numbering!r}).numbered({default}, {given})"
        spliced = ", spliced=spliced" if self.splices and role == self.spec.stacks[-1].role else ""
        lines = [f"        # {role}", *marks,
                 f"        positions = {default} if {positions} is None else {positions}",
                 f"        x = self.embeddings[{embedding.name!r}]({ids}, positions, {types or 'None'}"
                 + (f", self.embeddings[{embedding.shares!r}].tokens" if embedding.shares else "")
                 + f"{spliced})  # {_shape(g.node(g.stacks[role].entry).shape)}"]
        # what every layer's sublayers read in this call (the attention builds its masks from it, once a call)
        memory = f", memory, {self.memory_padding}" if self.memory_padding and role == "decoder" else ""
        lines.append(f"        ctx = {self.need(Context)}(positions, {padding}{memory}"
                     + (f", inputs={given}" if inputs else "") + ")")
        if embedding.per_layer is not None:  # each layer's own features, which its per-layer gate reads
            lines.append(f"        ctx.carried[{PER_LAYER!r}] = self.embeddings[{embedding.name!r}].per_layer({ids}, x)")
        info = g.stacks[role]
        # later layers read a layer's keys and values (``kv_from``), and each its per-layer inputs, by its number
        numbered = any(n.keys_from is not None for n in attentions(g, role)) or embedding.per_layer is not None
        until = "[:layers]" if stop else ""
        if info.weights:  # layers sharing weights: the set each runs
            lines.append(f"        for {'ctx.layer, ' if numbered else ''}index in "
                         f"{'enumerate(' if numbered else ''}{info.weights}{until}{')' if numbered else ''}:"
                         "  # the weights each layer runs")
            lines.append(f"            x = self.{role}[\"layers\"][index](x, ctx)")
        elif numbered:
            lines.append(f"        for ctx.layer, layer in enumerate(self.{role}[\"layers\"]{until}):")
            lines.append("            x = layer(x, ctx)")
        else:
            lines.append(f"        for layer in self.{role}[\"layers\"]{until}:")
            lines.append("            x = layer(x, ctx)")
        if stop:
            lines.append("        if layers is not None:  # the connector reads that layer's output")
            lines.append("            return x")
        lines.append(f"        x = self.{role}[\"final_norm\"](x)")
        if stack.final_dropout:
            lines.append(f"        x = self.{role}[\"final_dropout\"](x)")
        if role == "encoder" and len(self.spec.stacks) == 2:
            self.memory_padding = padding
            lines.append("        memory = x")
        return ids, padding, extra, lines


def _file(spec, what: str, origin: str | None, definitions: dict, classes: list[str]) -> str:
    """The file: its docstring (``spec``'s name, ``what`` it is, where it came from), its imports, the copied
    ``definitions``, the written ``classes``, and the spec's source in comments."""
    spec_lines = "\n".join(f"#   {_printable(line)}".rstrip() for line in _source_text(spec).splitlines())
    # in the docstring: no quote, backslash or line break of a file name can end it early
    origin = " " + _printable(origin).replace("\\", "\\\\").replace('"', '\\"') if origin else ""
    doc = (f'"""{spec.name}: {what}, written by `tfspec emit{origin}` (tfspec {__version__}).\n\n'
           "Standalone: it needs torch alone. ``Model()`` has the parameters of the model tfspec compiles from\n"
           "the spec, under the same names, so ``Model().load_state_dict(compiled.state_dict())`` loads them\n"
           "(strict) and the outputs are the compiled model's. It computes whole sequences: there is no KV\n"
           "cache, no input check and no initialisation here (load weights, or initialise them yourself).\n"
           '"""')
    parts = [doc, _header(definitions).rstrip(), *definitions.values(), *classes]
    return "\n\n\n".join(parts) + f"\n\n\n# The spec it was written from:\n{spec_lines}\n"


def _header(definitions: dict) -> str:
    """The file's imports: torch's, and numpy's or ``NamedTuple`` where a copied definition reads them (BigBird's
    pattern; the contrastive head's output)."""
    header = HEADER
    if any(re.search(r"\bnp\.", source) for source in definitions.values()):
        header = header.replace("import math\n\n", "import math\n\nimport numpy as np\n")
    if any(re.search(r"\bNamedTuple\b", source) for source in definitions.values()):
        header = header.replace("import math\n", "import math\nfrom typing import NamedTuple\n")
    return header


def _source_text(spec) -> str:
    """A spec's source: each file (and ``--set`` override) it was read from."""
    sources = {name: text for name, text in (getattr(spec, "_sources", None) or {}).items() if isinstance(text, str)}
    if not sources:
        return f"model {spec.name}"
    return "\n".join(f"[{name}]\n{text.rstrip()}" for name, text in sources.items())


class _Constant(NamedTuple):
    """A module's constant that copied source reads (``ALIGNED_DEVICES``), written into the file as a literal."""
    name: str
    value: Any


def _helpers(obj, source: str) -> list:
    """The functions and classes of tfspec that ``obj``'s source calls by name (``band_chunk``,
    ``LinformerProjections``), reads an attribute of (an autograd function's ``apply``) or tests an object's class
    by (``isinstance(step, GridStep)``), and the module's constants of literal values it reads (upper-case names):
    they go into the file too."""
    scope = vars(inspect.getmodule(obj))
    names = dict.fromkeys(re.findall(r"\b([A-Za-z_]\w*)[(.]", source)
                          + re.findall(r"\bisinstance\([^,()]+,\s*([A-Za-z_]\w*)\)", source))
    found = [scope[n] for n in names if n != obj.__name__
             and (inspect.isfunction(scope.get(n)) or inspect.isclass(scope.get(n)))
             and scope[n].__module__.startswith("tfspec.")]
    constants = dict.fromkeys(re.findall(r"\b([A-Z][A-Z0-9_]+)\b", source))
    return found + [_Constant(n, frozenset(scope[n]) if isinstance(scope[n], set) else scope[n])
                    for n in constants if isinstance(scope.get(n), (set, frozenset, tuple, int, float, str))]


def _signature(constructor: Constructor) -> dict:
    from torch import nn
    target = getattr(nn, constructor.target) if isinstance(constructor.target, str) else constructor.target
    try:
        return dict(inspect.signature(target).parameters)
    except (TypeError, ValueError):
        return {}


def _same(default, value) -> bool:
    return type(default) is type(value) and default == value


def _printable(text: str) -> str:
    """``text`` with control characters (which could end a comment or a file) written as escapes."""
    return "".join(c if c.isprintable() or c == "\t" else repr(c)[1:-1] for c in text)


def _shape(shape) -> str:
    return f"({', '.join(map(str, shape))})" if shape else ""


class _TowersWriter:
    """A file of towers: each tower's classes (``_Writer``, their names prefixed by the tower's: ``VisionModel``),
    the connector's and the contrastive head's, and ``Model``, whose state dict is the compiled ``TowersModel``'s
    and whose forward takes each tower's input by the tower's name, its other inputs prefixed by it."""

    def __init__(self, towers: S.Towers, origin: str | None):
        self.towers, self.origin = towers, origin
        g = towers.graph()
        self.connectors, self.contrastive = g.of(Connection), next(iter(g.of(Contrastive)), None)
        self.definitions: dict[Any, str] = {}
        self.prefixes = {t.name: "".join(part.capitalize() for part in t.name.split("_")) for t in towers.towers}
        reserved = frozenset({"Model"} | {f"{p}Model" for p in self.prefixes.values()} | {
            self.prefixes[t.name] + layer_class_name(role, k) for t in towers.towers
            for role, info in t.spec.graph().stacks.items() for k in range(len(info.kinds))})
        targets = {c.target for c in self.connectors}
        self.writers = {t.name: _Writer(t.spec, origin, self.prefixes[t.name], self.definitions, reserved,
                                        splices=t.name in targets) for t in towers.towers}

    def file(self) -> str:
        sources = {c.source for c in self.connectors}
        layers = [w.layer_class(role, k) for w in self.writers.values() for role, info in w.g.stacks.items()
                  for k in range(len(info.kinds))]
        models = [w.model_class(features=name in sources) for name, w in self.writers.items()]
        model = self.model_class()
        names = ", ".join(self.prefixes[t.name] + "Model" for t in self.towers.towers)
        return _file(self.towers, f"a model of towers ({names})", self.origin, self.definitions,
                     [*layers, *models, model])

    def model_class(self) -> str:
        towers, writers = self.towers, self.writers
        value = next(iter(writers.values())).value  # (its definitions are the file's)
        init = ["        self.towers = nn.ModuleDict({"]
        init += [f"            {t.name!r}: {self.prefixes[t.name]}Model()," for t in towers.towers]
        init.append("        })")
        if self.connectors:
            init.append("        self.connectors = nn.ModuleDict({")
            init += [f"            {c.source!r}: {value(connector_constructor(c))}," for c in self.connectors]
            init.append("        })")
        init.append(f"        self.contrastive = {value(contrastive_constructor(self.contrastive))}"
                    if self.contrastive is not None else "        self.contrastive = None")
        signature = [f"{t.name}: Tensor" for t in towers.towers]
        calls = {}
        for t in towers.towers:  # its inputs as ``TowersModel`` names them: ``vision_padding_mask``
            arguments, optional = writers[t.name].arguments
            own = "" if arguments[0] == "tokens" else f"{arguments[0]}_"  # (its stack's names: pixel_values_...)
            outer = {a: f"{t.name}_{a[len(own):] if a.startswith(own) else a}" for a in optional}
            signature += [f"{outer[a]}: Tensor | None = None" for a in optional]
            calls[t.name] = ", ".join([t.name] + [f"{a}={outer[a]}" for a in optional])
        body = []
        if self.connectors:
            (c,) = self.connectors
            # the layers it reads after: None, the stack's normed output; 0, its input
            layers = None if c.layer is None else 0 if c.reads_layer is None else c.reads_layer + 1
            source = self.towers.tower(c.source)
            table = f"self.towers[{c.source!r}].embeddings[{source.stacks[0].embedding!r}]"
            body += [f"        columns = {table}.grid_of({c.source})[1]  # each picture's grid of patches: its width",
                     f"        vectors = self.connectors[{c.source!r}](self.towers[{c.source!r}].features("
                     f"{calls[c.source]}, layers={layers}), columns)",
                     f"        where = {c.target} == {c.image_token}  # its image tokens, each the next vector",
                     f"        columns = torch.full((len(vectors),), self.connectors[{c.source!r}].columns_after("
                     "columns), device=vectors.device)",
                     f"        return self.towers[{c.target!r}]({calls[c.target]}, spliced=(where, "
                     "vectors.flatten(0, 1), columns))"]
            returns = f"tower {c.target}'s output, {c.source}'s vectors through the connector at its image tokens"
        elif self.contrastive is not None:
            a, b = self.contrastive.inputs
            body.append(f"        return self.contrastive(self.towers[{a!r}]({calls[a]}), "
                        f"self.towers[{b!r}]({calls[b]}))")
            returns = "the contrastive head's logits and both towers' normed vectors"
        else:
            body.append("        return {" + ", ".join(f"{t.name!r}: self.towers[{t.name!r}]({calls[t.name]})"
                                               for t in towers.towers) + "}")
            returns = "each tower's output by its name"
        names = ", ".join(f"``{t.name}``" for t in towers.towers)
        return ("class Model(nn.Module):\n"
                f'    """{towers.name}: {names} (each tower\'s input; its other inputs prefixed by its name) -> '
                f'{returns}."""\n\n'
                "    def __init__(self) -> None:\n        super().__init__()\n" + "\n".join(init) + "\n\n"
                f"    def forward(self, {', '.join(signature)}):\n" + "\n".join(body))
