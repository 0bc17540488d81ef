"""A compiled model of several towers (``TowersModel``) and the contrastive head joining two (CLIP, SigLIP).

    model = tfspec.compile("examples/clip_digits.tfs")
    out = model(text=ids, vision=pixels, text_padding_mask=pads)   # each tower's input by its name
    out.logits        # (texts, pictures): exp(scale) · cos + bias
    model.loss(out)   # the contrastive loss of a batch of matching pairs

Each tower is a ``CompiledModel`` of its own (``model.towers["text"]``), called with its input and its
keyword inputs prefixed by its name (``text_padding_mask``, ``vision_position_ids``).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .pixel_shuffle import GridStep


class Contrasted(NamedTuple):
    """A contrastive head's output: ``logits[i, j]`` compares the first tower's example i with the second's j;
    ``first`` and ``second``: each tower's vectors, normalised to length 1."""

    logits: Tensor
    first: Tensor
    second: Tensor


class ContrastiveHead(nn.Module):
    """Two batches of vectors normalised to length 1; ``logits = exp(scale) · a bᵀ (+ bias)``. ``loss``:
    ``softmax``, the mean of the cross-entropies of the rows and of the columns, the diagonal the true pairs
    (CLIP); ``sigmoid``, each pair's own logistic loss, +1 on the diagonal and -1 off it, summed over a row and
    averaged over the rows (SigLIP). Torch only, so ``tfspec emit`` could copy it."""

    def __init__(self, loss: str, scale: float, bias: float | None):
        super().__init__()
        self.kind = loss
        self.scale = nn.Parameter(torch.tensor(float(scale)))
        self.bias = nn.Parameter(torch.tensor(float(bias))) if bias is not None else None

    def forward(self, first: Tensor, second: Tensor) -> Contrasted:
        first = first / first.norm(p=2, dim=-1, keepdim=True)
        second = second / second.norm(p=2, dim=-1, keepdim=True)
        logits = first @ second.t().to(first.dtype) * self.scale.exp().to(first.dtype)
        if self.bias is not None:
            logits = logits + self.bias.to(first.dtype)
        return Contrasted(logits, first, second)

    def loss(self, logits: Tensor) -> Tensor:
        """The loss of a batch whose example i of each tower make a pair (``logits`` square)."""
        if logits.shape[0] != logits.shape[1]:
            raise ValueError(f"the contrastive loss pairs example i of each tower: give both towers one batch, got "
                             f"{logits.shape[0]} and {logits.shape[1]}")
        if self.kind == "sigmoid":
            signs = 2 * torch.eye(logits.shape[0], device=logits.device, dtype=logits.dtype) - 1
            return -F.logsigmoid(signs * logits).sum(dim=-1).mean()
        targets = torch.arange(logits.shape[0], device=logits.device)
        return (F.cross_entropy(logits, targets) + F.cross_entropy(logits.t(), targets)) / 2

    def extra_repr(self) -> str:
        return f"loss={self.kind}, bias={self.bias is not None}"


class Connector(nn.Module):
    """One tower's vectors into another's (``connect vision -> text { ... }``): each example's vectors after
    ``layer`` layers of its source's stack (None: the stack's output), less the first where ``drop_first`` (a class
    token), through ``steps`` in order. Its target puts them among its token embeddings at the positions of
    ``image_token``."""

    def __init__(self, target: str, image_token: int, layer: int | None, drop_first: bool, steps: list[nn.Module]):
        super().__init__()
        self.target, self.image_token, self.layer, self.drop_first = target, image_token, layer, drop_first
        self.steps = nn.ModuleList(steps)

    def forward(self, x: Tensor, columns: int | None = None) -> Tensor:
        """The source's vectors ``(examples, length, width)`` -> ``(examples, length', target width)``;
        ``columns``: the width of each example's grid of patches (None: a square grid), which steps over the grid
        read."""
        if self.drop_first:
            x = x[:, 1:]
        for step in self.steps:
            if isinstance(step, GridStep):
                x = step(x, columns)
                columns = None if columns is None else columns // step.block
            else:
                x = step(x)
        return x

    def columns_after(self, columns: int) -> int:
        """The width of the grid of vectors it gives for pictures whose grid of patches is ``columns`` wide."""
        for step in self.steps:
            if isinstance(step, GridStep):
                columns //= step.block
        return columns

    def extra_repr(self) -> str:
        layer = "the output" if self.layer is None else f"layer {self.layer}"
        return f"-> {self.target} at token {self.image_token}, from {layer}" + (", less the first" * self.drop_first)


class TowersModel(nn.Module):
    """One ``CompiledModel`` per tower (``towers``, by name) and the contrastive head joining two. Its forward
    takes each tower's input by the tower's name and that tower's keyword inputs prefixed by it; it returns the
    contrastive head's ``Contrasted``, or without one each tower's output by name."""

    def __init__(self, spec, towers: dict[str, nn.Module], contrastive: nn.Module | None = None,
                 connectors: dict[str, nn.Module] | None = None):
        super().__init__()
        self.spec = spec
        self.towers = nn.ModuleDict(towers)
        self.contrastive = contrastive
        self.joined = spec.contrastive.towers if spec.contrastive is not None else ()
        self.connectors = nn.ModuleDict(connectors or {})  # by source tower

    mtp = None  # (no multi-token prediction: what the trainer asks of every model)

    def parts(self) -> dict[str, nn.Module]:
        """Each tower's compiled model by name (``CompiledModel.parts``: one of one or two stacks is its own)."""
        return dict(self.towers)

    @property
    def check_inputs(self) -> bool:
        """Are inputs' values checked (image tokens counted, ids in range)? Off while tracing for export."""
        return all(tower.check_inputs for tower in self.towers.values())

    @check_inputs.setter
    def check_inputs(self, value: bool) -> None:
        for tower in self.towers.values():
            tower.check_inputs = value

    def extra_repr(self) -> str:
        return f"{self.spec.name}: towers, {sum(p.numel() for p in self.parameters()):,} parameters"

    def auxiliary_losses(self) -> dict:
        """The towers' own training losses (a mixture's load balancing), each tower's under its name."""
        return {f"{name}.{loss}": value for name, tower in self.towers.items()
                for loss, value in tower.auxiliary_losses().items()}

    def checkpoint_activations(self, enabled: bool = True) -> "TowersModel":
        """Each tower's layers recomputed in backward (``CompiledModel.checkpoint_activations``)."""
        for tower in self.towers.values():
            tower.checkpoint_activations(enabled)
        return self

    @property
    def device(self):
        return next(self.parameters()).device

    def split(self, inputs: dict) -> dict[str, dict]:
        """The keyword inputs by tower: ``text`` and ``text_padding_mask`` are the text tower's ``tokens`` (its
        input) and ``padding_mask``."""
        by_tower: dict[str, dict] = {name: {} for name in self.towers}
        for key, value in inputs.items():
            name = key if key in self.towers else next((t for t in self.towers if key.startswith(f"{t}_")), None)
            if name is None:
                raise TypeError(f"{key!r} is no tower's input: this model's towers are {', '.join(self.towers)}; "
                                "give each its input by its name and its other inputs prefixed by it "
                                f"({next(iter(self.towers))}_padding_mask)")
            by_tower[name]["input" if key == name else key[len(name) + 1:]] = value
        return by_tower

    def tower(self, name: str, **inputs) -> Tensor:
        """One tower's output for its ``input`` and keyword inputs (its pooled head's vectors, for a contrastive
        head)."""
        inputs = dict(inputs)
        if "input" not in inputs:
            raise TypeError(f"tower {name!r} needs its input: model.tower({name!r}, input=...)")
        return self.towers[name](inputs.pop("input"), **inputs)

    def forward(self, **inputs):
        by_tower = self.split(inputs)
        missing = [name for name in (self.joined or self.towers) if "input" not in by_tower[name]]
        if missing:
            raise TypeError(f"missing the input of tower{'s' if len(missing) > 1 else ''} {', '.join(missing)} "
                            f"(model({missing[0]}=...))")
        if self.connectors:
            return self.connected(by_tower)
        if self.contrastive is None:
            return {name: self.tower(name, **given) for name, given in by_tower.items() if given}
        first, second = (self.tower(name, **by_tower[name]) for name in self.joined)
        return self.contrastive(first, second)

    def features(self, source: str, given: Tensor, **inputs) -> Tensor:
        """What tower ``source``'s connector gives for its input ``given``: ``(examples, length, target width)``."""
        connector, tower = self.connectors[source], self.towers[source]
        role = tower.spec.stacks[0].role
        layers = None if connector.layer is None else connector.layer % (len(getattr(tower, role).runs) + 1)
        argument = tower.spec.graph().node(f"{role}.tokens").name  # what its messages call it (pixel_values)
        hidden = tower.run_stack(role, argument, given, inputs.pop("padding_mask", None), inputs, layers=layers)
        return connector(hidden, self.columns(source, given))

    def columns(self, source: str, given: Tensor) -> int | None:
        """The width of the grid of patches tower ``source`` makes of each of the pictures ``given`` (of any size
        where it reads them: Qwen2.5-VL's); None: its input lays no grid."""
        tower = self.towers[source]
        grid = tower.embeddings[tower.stack_embedding[tower.spec.stacks[0].role]].grid_of(given)
        return None if grid is None else grid[1]

    def spliced(self, source: str, given: Tensor | list[Tensor], **inputs) -> tuple[Tensor, Tensor, Tensor]:
        """Tower ``source``'s vectors of its input ``given`` through its connector, every example's in order
        ``(vectors, target width)``, the width of each example's grid of them ``(examples,)`` (which M-RoPE numbers
        by) and how many each gives ``(examples,)``. ``given``: a batch, or a list of batches of pictures of
        different sizes (a tower reading any size: Qwen2.5-VL's), in the order their image tokens stand."""
        batches = list(given) if isinstance(given, (list, tuple)) else [given]
        if not batches:
            raise ValueError(f"{source} is an empty list: give a batch of pictures, or a list of batches")
        parts, columns, counts = [], [], []
        for batch in batches:
            vectors = self.features(source, batch, **inputs)
            width = self.columns(source, batch)
            after = self.connectors[source].columns_after(width) if width is not None else \
                int(round(vectors.shape[1] ** 0.5))
            parts.append(vectors.flatten(0, 1))
            # (tensors filled, not made of lists: a traced batch stays of any size)
            columns.append(torch.full(vectors.shape[:1], after, dtype=torch.long, device=vectors.device))
            counts.append(torch.full(vectors.shape[:1], vectors.shape[1], dtype=torch.long, device=vectors.device))
        return torch.cat(parts), torch.cat(columns), torch.cat(counts)

    def connected(self, by_tower: dict[str, dict]):
        """The target tower's output, its embeddings at each source's image token replaced by the source's
        vectors through its connector, in order: the first example's first vector at the first image token."""
        (source, connector), = self.connectors.items()  # (one connector: resolution refuses more for now)
        given, target = dict(by_tower[source]), dict(by_tower[connector.target])
        if "input" not in given:
            raise TypeError(f"missing the input of tower {source} (model({source}=...))")
        vectors, columns, counts = self.spliced(source, given.pop("input"), **given)
        ids = target.pop("input")
        where = ids == connector.image_token
        if self.check_inputs:  # (a traced graph checks no values)
            self.check_image_tokens(connector, source, int(where.sum()), counts)
        tower = self.towers[connector.target]
        role = tower.spec.stacks[-1].role
        padding = target.pop("padding_mask", None)
        hidden = tower.run_stack(role, "tokens", ids, padding, target, spliced=(where, vectors, columns, counts))
        return tower.output(hidden)

    @staticmethod
    def check_image_tokens(connector, source: str, count: int, counts: Tensor) -> None:
        """A ``ValueError`` unless the target's ``count`` image tokens are one per vector of the pictures (each
        picture's ``counts``)."""
        total = int(counts.sum())
        if count != total:
            each = f"{len(counts)} examples of {int(counts[0])} vectors each" if bool((counts == counts[0]).all()) \
                else f"{len(counts)} examples of {', '.join(map(str, counts.tolist()))} vectors"
            raise ValueError(f"{connector.target} holds {count} image tokens ({connector.image_token}), but "
                             f"{source} gives {each}: {total} in all, one per image token")

    def loss(self, out: Contrasted) -> Tensor:
        """The contrastive loss of a batch of matching pairs (``forward``'s output)."""
        if self.contrastive is None:
            raise TypeError(f"'{self.spec.name}' has no contrastive head to take a loss of")
        return self.contrastive.loss(out.logits)
