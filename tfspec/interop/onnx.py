"""ONNX export (``tfspec export RUN --to onnx``, ``tfspec.export(..., to="onnx")``), checked with onnxruntime.

The graph takes what the model's forward takes, as named tensors: the token ids (``tokens``, or ``src`` and
``tgt``; an image model's ``pixel_values``), the padding masks its attentions read (bool, True at padded
positions) and ``token_types`` where the embedding has segments. Batch and every length are dynamic axes of
their own: an encoder-decoder's source and target lengths are independent. Position ids and the inputs other
masks read take their defaults.

A model of towers takes each tower's input by the tower's name (``text``, ``vision``) and its padding mask as
``text_padding_mask``, as ``TowersModel`` does; each tower's batch and length are axes of their own. It gives a
contrastive head's ``logits`` and both towers' normed vectors, or (a connector's) the target tower's outputs, its
prompts' image tokens read as the pictures given in order. Pictures are of the spec's size.

The export runs ``torch.onnx.export`` (the dynamo exporter: needs ``onnx`` and ``onnxscript``), then, with
``onnxruntime`` installed, runs the file on two batches of other shapes than those traced and compares with
PyTorch: the export is refused rather than written wrong.

Needs ``pip install 'tfspec[onnx]'``.
"""

from __future__ import annotations

import importlib.util
import inspect
import logging
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

TOLERANCE = 1e-4  # of the largest output's magnitude (at least 1): what "the same logits" means here


class OnnxError(RuntimeError):
    """The model cannot be exported, or the export does not compute what the model does."""


@dataclass(frozen=True)
class OnnxInput:
    name: str  # the forward's argument, and the graph's input
    kind: str  # "ids", "padding", "token_types", "pixels"
    role: str  # the stack that reads it
    tower: str | None = None  # of a model of towers: the tower whose stack it is


@dataclass(frozen=True)
class OnnxExport:
    path: Path
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    max_difference: float | None  # onnxruntime against PyTorch, on shapes other than the traced ones; None: unchecked


def missing_packages(verify: bool = True) -> list[str]:
    needed = ["onnx", "onnxscript"] + (["onnxruntime"] if verify else [])
    return [name for name in needed if importlib.util.find_spec(name) is None]


def graph_inputs(model) -> list[OnnxInput]:
    """What the exported graph takes, in the forward's order."""
    kind = model.spec.kind
    if kind == "towers":
        return _tower_inputs(model)
    parameters = list(inspect.signature(model.forward).parameters)
    ids = [p for p in parameters if p not in ("token_types", "inputs") and not p.endswith("padding_mask")]
    roles = dict(zip(ids, ("encoder", "decoder") if kind == "encoder-decoder" else
                     ("encoder" if kind == "encoder-only" else "decoder",)))
    out = []
    for name in ids:
        role = roles[name]
        embedding = model.embeddings[model.stack_embedding[role]]
        pictures = embedding.vocab is None
        out.append(OnnxInput(name, "pixels" if pictures else "ids", role))
        if pictures:
            continue
        readers = [getattr(model, role).masks_padding]
        if role == "encoder" and kind == "encoder-decoder":
            readers.append(model.decoder.memory_masks_padding)
        mask = f"{name}_padding_mask" if kind == "encoder-decoder" else "padding_mask"
        if any(readers) and mask in parameters:
            out.append(OnnxInput(mask, "padding", role))
    if "token_types" in parameters:
        role = out[0].role
        if model.embeddings[model.stack_embedding[role]].segments is not None:
            out.append(OnnxInput("token_types", "token_types", role))
    return out


def _tower_inputs(model) -> list[OnnxInput]:
    """A model of towers' inputs: each tower's by its name, then its padding mask where its stack reads one."""
    out = []
    for name, tower in model.towers.items():
        if len(tower.spec.stacks) > 1:
            raise OnnxError(f"tower {name} has an encoder and a decoder; export --to onnx writes towers of one stack "
                            "each (--to torch writes every model of towers)")
        role = tower.spec.stacks[0].role
        pictures = tower.embeddings[tower.stack_embedding[role]].vocab is None
        out.append(OnnxInput(name, "pixels" if pictures else "ids", role, name))
        if not pictures and getattr(tower, role).masks_padding:
            out.append(OnnxInput(f"{name}_padding_mask", "padding", role, name))
    return out


def graph_outputs(model) -> tuple[str, ...]:
    """The names of the exported graph's outputs, in order."""
    if model.spec.kind != "towers":
        return ("logits" if model.head is not None else "hidden",) + (("pooled",) if model.pooler is not None else ())
    if model.contrastive is not None:
        first, second = model.joined
        return "logits", f"{first}_vectors", f"{second}_vectors"
    if model.connectors:
        (connector,) = model.connectors.values()
        return graph_outputs(model.towers[connector.target])
    return tuple(f"{name}_{output}" for name, tower in model.towers.items() for output in graph_outputs(tower))


class _Named(nn.Module):
    """The model with the graph's inputs as positional arguments, in order (the exporter's signature)."""

    def __init__(self, model, inputs: list[OnnxInput]):
        super().__init__()
        self.model = model
        self.names = [i.name for i in inputs]
        # (a model of towers takes every input by name)
        self.positional = [i.name for i in inputs if i.kind in ("ids", "pixels") and i.tower is None]

    def forward(self, *tensors):
        given = dict(zip(self.names, tensors))
        ids = [given.pop(n) for n in self.positional]
        out = self.model(*ids, **given)
        if isinstance(out, dict):  # (towers without a join: each one's outputs, in order)
            out = tuple(part for value in out.values() for part in (value if isinstance(value, tuple) else (value,)))
        return tuple(out) if isinstance(out, tuple) else (out,)


def _owner(model, i: OnnxInput):
    """The compiled model (a tower's, for a model of towers) whose stack reads input ``i``."""
    return model.towers[i.tower] if i.tower is not None else model


def example_inputs(model, inputs: list[OnnxInput], batch: int, lengths: dict[str, int],
                   generator: torch.Generator) -> tuple[torch.Tensor, ...]:
    """Inputs of the given shapes: random ids, a padding mask with the last rows' ends padded; a connector's
    target, each row a picture's image tokens after its first token (``lengths``: by role, or by tower)."""
    out = []
    images = _image_tokens(model)
    for i in inputs:
        owner = _owner(model, i)
        embedding = owner.embeddings[owner.stack_embedding[i.role]]
        if i.kind == "pixels":
            out.append(torch.rand(batch, *embedding.shape, generator=generator))
            continue
        length = lengths[i.tower or i.role] + images.get(i.tower, (0, 0))[1]
        if i.kind == "ids" and i.tower in images:
            token, count = images[i.tower]
            ids = torch.randint(1, embedding.vocab, (batch, length), generator=generator)
            ids[ids == token] = 1 + (token == 1)
            ids[:, 1:1 + count] = token
            out.append(ids)
            continue
        if i.kind == "ids":
            low = 1 if embedding.vocab > 1 else 0  # id 0 is often the pad
            out.append(torch.randint(low, embedding.vocab, (batch, length), generator=generator))
        elif i.kind == "padding":
            mask = torch.zeros(batch, length, dtype=torch.bool)
            mask[batch - 1, max(length - 2, 1):] = True  # the last row padded at its end, its first token real
            out.append(mask)
        else:
            out.append(torch.randint(0, embedding.segments.num_embeddings, (batch, length), generator=generator))
    return tuple(out)


def _image_tokens(model) -> dict[str, tuple[int, int]]:
    """A model of towers' connector's target by name: its image token and a picture's count of them (the IR's)."""
    if getattr(model.spec, "kind", None) != "towers":
        return {}
    from ..ir import Connector
    return {c.target: (c.image_token, c.vectors) for c in model.spec.graph().of(Connector)}


def _lengths(model, wanted: dict[str, int]) -> dict[str, int]:
    """``wanted`` lengths, each cut to what its stack reads (learned positions) and at least 2 (a dynamic axis
    traced at 1 would be fixed at 1); of a model of towers, by tower (``wanted``'s ``decoder`` for a decoder's,
    its ``encoder`` for an encoder's), less a connector's image tokens."""
    if getattr(model.spec, "kind", None) != "towers":
        return {role: max(2, min(length, model.max_len.get(role) or length)) for role, length in wanted.items()}
    images = _image_tokens(model)
    out = {}
    for name, tower in model.towers.items():
        role = tower.spec.stacks[0].role
        limit = (tower.max_len.get(role) or 1 << 30) - images.get(name, (0, 0))[1]
        out[name] = max(2, min(wanted.get(role, wanted.get("decoder", 5)), limit))
    return out


def export_onnx(model, path: str | Path, verify: bool = True) -> OnnxExport:
    """Write ``model`` (a compiled tfspec model) to ``path`` as ONNX; with ``verify``, run it with onnxruntime.

    Raises ``OnnxError`` with the reason when the exporter cannot write the model or the file computes something
    else than the model.
    """
    missing = missing_packages(verify)
    if missing:
        raise OnnxError(f"ONNX export needs {', '.join(missing)}: pip install 'tfspec[onnx]'")
    path = Path(path)
    inputs = graph_inputs(model)
    towers = model.spec.kind == "towers"
    pictures = any(i.kind == "pixels" for i in inputs) and not towers
    outputs = graph_outputs(model)
    axis = torch.export.Dim.DYNAMIC  # the exporter finds each axis's range; _name_axes names them after
    dynamic = {i.name: ({0: axis} if i.kind == "pixels" else {0: axis, 1: axis}) for i in inputs}
    generator = torch.Generator().manual_seed(0)
    traced = example_inputs(model, inputs, 2, _lengths(model, {"encoder": 7, "decoder": 5}), generator)
    was_training, was_checking = model.training, model.check_inputs
    model.eval()
    model.check_inputs = False  # value checks on inputs are no part of a graph
    try:
        with warnings.catch_warnings(), _quiet_exporter():
            warnings.simplefilter("ignore")
            program = torch.onnx.export(_Named(model, inputs), traced, dynamo=True, verbose=False,
                                        input_names=[i.name for i in inputs], output_names=list(outputs),
                                        dynamic_shapes=(tuple(dynamic[i.name] for i in inputs),), report=False)
            _name_axes(program.model, inputs, model.spec.kind)
            program.save(str(path))
    except OSError:
        raise
    except Exception as exc:  # the exporter's own errors: an operator it cannot write, a guard it cannot keep
        raise OnnxError(f"torch.onnx.export could not write this model: {str(exc).strip().splitlines()[0]}") from None
    finally:
        model.check_inputs = was_checking
        model.train(was_training)
    difference = None
    if verify:
        shapes = [(3, {"encoder": 4, "decoder": 9}), (1, {"encoder": 11, "decoder": 3})]
        if pictures:  # an input kind's tensors have their one shape; a decoder of tokens beside them its lengths
            shapes = [(3, {"decoder": 9}), (1, {"decoder": 3})]
        try:
            difference = max(compare(model, path, inputs, outputs, batch, _lengths(model, lengths), generator)
                             for batch, lengths in shapes)
        except OnnxError:
            path.unlink(missing_ok=True)
            raise
    return OnnxExport(path, tuple(i.name for i in inputs), outputs, difference)


def _name_axes(graph_model, inputs: list[OnnxInput], kind: str) -> None:
    """Give the graph's symbolic axes readable names (``batch``, ``src_length``; a tower's ``text_batch``,
    ``text_length``), wherever they appear."""
    names = {}
    for i, value in zip(inputs, graph_model.graph.inputs):
        length = (f"{i.name}_length" if kind == "encoder-decoder" else "length") if i.kind != "pixels" else None
        batch = "batch"
        if i.tower is not None:  # (each tower's axes its own)
            batch, length = f"{i.tower}_batch", (f"{i.tower}_length" if i.kind != "pixels" else None)
        for axis, label in zip(value.shape, (batch, length)):
            if label is not None and not isinstance(axis, int) and axis.value not in names:
                names[axis.value] = label
    import onnx_ir

    def renamed(axis):
        return onnx_ir.SymbolicDim(names[axis.value]) if not isinstance(axis, int) and axis.value in names else axis

    for value in {id(v): v for v in [*graph_model.graph.inputs, *graph_model.graph.outputs,
                                     *(v for node in graph_model.graph.all_nodes() for v in node.outputs)]}.values():
        if value.shape is not None and any(not isinstance(a, int) and a.value in names for a in value.shape):
            value.shape = onnx_ir.Shape([renamed(a) for a in value.shape])


def compare(model, path: Path, inputs: list[OnnxInput], outputs, batch: int, lengths: dict[str, int],
            generator: torch.Generator) -> float:
    """The largest difference between onnxruntime's outputs and PyTorch's on one batch; ``OnnxError`` past
    ``TOLERANCE``."""
    import onnxruntime

    tensors = example_inputs(model, inputs, batch, lengths, generator)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            expected = _Named(model, inputs)(*tensors)
    finally:
        model.train(was_training)
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    got = session.run(list(outputs), {i.name: t.numpy() for i, t in zip(inputs, tensors)})
    worst = 0.0
    for name, want, have in zip(outputs, expected, got):
        if tuple(have.shape) != tuple(want.shape):
            raise OnnxError(f"the ONNX graph's {name} has shape {tuple(have.shape)}, PyTorch's {tuple(want.shape)} "
                            f"(batch {batch}, lengths {lengths})")
        scale = max(1.0, float(want.abs().max()))
        difference = float((torch.from_numpy(have) - want.float()).abs().max()) / scale
        if not difference <= TOLERANCE:
            raise OnnxError(f"the ONNX graph's {name} differs from PyTorch's by {difference:.3g} (relative; batch "
                            f"{batch}, lengths {lengths}); the file is not written")
        worst = max(worst, difference)
    return worst


class _quiet_exporter:
    """The exporter logs its progress and notes about packages that are not installed (torchvision); a command
    prints its own result instead."""

    NAMES = ("torch.onnx", "torch.export", "torch._dynamo", "onnxscript", "torch.fx.experimental.symbolic_shapes")

    def __enter__(self):
        self.levels = {name: logging.getLogger(name).level for name in self.NAMES}
        for name in self.NAMES:
            logging.getLogger(name).setLevel(logging.ERROR)

    def __exit__(self, *exc):
        for name, level in self.levels.items():
            logging.getLogger(name).setLevel(level)
