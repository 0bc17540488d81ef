"""The compiled model: embeddings, one or two stacks of generated layers, head and pooler.

Its forward is generated from the graph IR, as each layer's is (``tfspec.backend.compiler.model_graph``;
``print(model.program.code)`` shows it). Signatures by kind (padding masks are bool, True at padded positions):

- decoder-only:    ``model(tokens, padding_mask=None, token_types=None, **inputs)``
- encoder-only:    ``model(tokens, padding_mask=None, token_types=None, **inputs)``
- encoder-decoder: ``model(src, tgt, src_padding_mask=None, tgt_padding_mask=None, **inputs)``,
  also ``model.encode(src, src_padding_mask)`` and ``model.decode(tgt, memory, src_padding_mask, tgt_padding_mask)``

``inputs``: ``position_ids`` and the run-time inputs variants read (``src_``/``tgt_``-prefixed for an
encoder-decoder). Each returns logits ``(batch, length, out)`` when the spec has a head, hidden states
``(batch, length, width)`` otherwise; a spec with a pooler returns ``(that, pooled)``.
"""

from __future__ import annotations

import torch
from torch import Tensor, fx, nn

from .checks import check_ids, check_memory, check_padding_mask, check_runtime_inputs
from .context import Context
from .embedding import Embeddings, default_positions
from .per_layer import CARRIED as PER_LAYER
from .generated import Generated
from .recompute import checkpointed
from .steps import AttentionStep


class Stack(nn.Module):
    """N generated layers (``torch.fx.GraphModule``s; print ``layer.code``) and a final norm.

    ``runs``: the index in ``layers`` of each layer the stack runs, in order; fewer ``layers`` than runs where
    layers share weights (``weight_sets``: ALBERT runs ``layers[0]`` 12 times).

    ``inputs``: the run-time inputs its variants read (``RuntimeInput``s by name), besides position ids.
    ``owned``: modules it owns for one sublayer of every layer (Linformer's layer-wise E and F, T5's relative
    bias), by attribute (``shared``, ``positions``) and sublayer name; each layer's sublayer receives its
    module through ``share`` (see ``tfspec.registry.StackOwned``).
    """

    def __init__(self, layers: list[nn.Module], final_norm: nn.Module, final_dropout: float, masks_padding: bool,
                 memory_masks_padding: bool, inputs: dict | None = None, owned: dict[str, dict] | None = None,
                 runs: list[int] | None = None):
        super().__init__()
        self.layers = nn.ModuleList(layers)
        self.runs = list(range(len(layers)) if runs is None else runs)
        self.final_norm = final_norm
        self.final_dropout = nn.Dropout(final_dropout) if final_dropout else nn.Identity()
        for attribute, modules in (owned or {}).items():
            setattr(self, attribute, nn.ModuleDict(modules))
            for layer in self.layers:
                for name, module in modules.items():
                    layer.get_submodule(name).share(module)
        self.masks_padding = masks_padding  # some self-attention or mixer reads the padding mask
        self.memory_masks_padding = memory_masks_padding  # some cross-attention reads the memory's
        self.inputs = dict(inputs or {})
        self.checkpointing = False  # each layer's activations recomputed in backward (CompiledModel.checkpoint_activations)

    def forward(self, x: Tensor, ctx: Context, cache: list[dict] | None = None, layers: int | None = None) -> Tensor:
        """``cache``: one dict per layer run (``len(runs)``; see ``tfspec.run.decoding``), filled and extended
        in place. ``layers``: run that many layers and return their output, before the final norm (the vectors a
        connector reads at a layer); None: every layer, then the final norm."""
        for i, index in enumerate(self.runs if layers is None else self.runs[:layers]):
            if self.checkpointing and cache is None and torch.is_grad_enabled():
                x = checkpointed(self.layers[index], i, x, ctx, run=self.run_layer)
            else:
                x = self.run_layer(i, x, ctx, cache[i] if cache is not None else None)
        return x if layers is not None else self.final_dropout(self.final_norm(x))

    def run_layer(self, i: int, x: Tensor, ctx: Context, cache: dict | None = None) -> Tensor:
        """Layer run ``i`` (which ``ctx`` is told, also when activation checkpointing runs it again in backward)."""
        ctx.layer, ctx.run = i, ctx.run + 1
        return self.layers[self.runs[i]](x, ctx, cache)


class CompiledModel(nn.Module):
    """The model's parts and the steps its generated forward calls (``run_stack``, ``split_inputs``,
    ``output``); ``program``: the ``torch.fx.GraphModule`` whose generated ``forward`` is the model's."""

    def __init__(self, spec, embeddings: dict[str, Embeddings], stacks: dict[str, Stack], head: nn.Module | None,
                 pooler: nn.Module | None, stack_embedding: dict[str, str], max_len: dict[str, int | None],
                 limited_by: dict[str, str], position_table: dict[str, int | None], program: fx.Graph,
                 real_positions: dict[str, int | None] | None = None, mtp: nn.Module | None = None,
                 any_picture_size: dict[str, bool] | None = None):
        super().__init__()
        self.spec = spec
        self.embeddings = nn.ModuleDict(embeddings)
        for role, stack in stacks.items():
            setattr(self, role, stack)
        self.head = head
        self.pooler = pooler
        self.mtp = mtp  # multi-token prediction's modules (``tfspec.nn.mtp``), which only training runs
        self.stack_embedding = stack_embedding
        # per stack, the embedding whose token table its own reads (BART's decoder: the encoder's), if another's
        self.shared_tokens = {role: spec.embedding(name).shares for role, name in stack_embedding.items()}
        self.max_len = max_len
        self.limited_by = limited_by  # what sets max_len ("learned positions"), for the message past it
        self.position_table = position_table  # the learned positions' size, which position ids index
        # per stack, where its default position ids count real tokens only: the offset of a pad's row below 0
        self.real_positions = real_positions or {}
        # per stack of pictures, whether it reads pictures of any size (``ir.queries.reads_any_picture_size``)
        self.any_picture_size = any_picture_size or {}
        # per stack, the position schemes that number a call's positions themselves (``AttentionStep.numbered``)
        self.numbering = {role: _numbering(stack) for role, stack in stacks.items()}
        self.tied_to = spec.head.tied_to if spec.head is not None else None
        self.check_inputs = True
        # The generated forward calls this model's steps and modules; kept out of the module tree, so its
        # references are not a second copy of the weights (nor of their names).
        forward = Generated(self, program, class_name=spec.kind.title().replace("-", "") + "Forward")
        self.__dict__["program"] = forward
        self.forward = forward.forward

    def extra_repr(self) -> str:
        return f"{self.spec.name}: {self.spec.kind}, {sum(p.numel() for p in self.parameters()):,} parameters"

    def _repr_html_(self) -> str | None:
        """What Jupyter shows: its spec's diagram and parameters."""
        return self.spec._repr_html_()

    def parts(self) -> dict[str, "CompiledModel"]:
        """The compiled models of one or two stacks it is made of, by name: itself (``TowersModel.parts``)."""
        return {self.spec.name: self}

    def checkpoint_activations(self, enabled: bool = True) -> "CompiledModel":
        """Keep only each layer's input for the backward pass and recompute the rest there: less memory for
        about a third more compute; the same gradients."""
        for role in ("encoder", "decoder"):
            stack = getattr(self, role, None)
            if stack is not None:
                stack.checkpointing = enabled
        return self

    def auxiliary_losses(self) -> dict:
        """The training losses its sublayers add, weighted by the spec's coefficients, from its last training call
        (a mixture of experts' load balancing, ``moe_balance``, and router z-loss, ``moe_z``; any module's own
        ``added_losses``, averaged over the modules that add one: DeepSeek Sparse Attention's ``dsa_index``);
        empty without."""
        from .moe import auxiliary_losses
        losses = auxiliary_losses(self.modules())
        added: dict[str, list[Tensor]] = {}
        for module in self.modules():
            for name, value in (getattr(module, "added_losses", None) or {}).items():
                added.setdefault(name, []).append(value)
        return {**losses, **{name: torch.stack(values).mean() for name, values in added.items()}}

    @property
    def device(self):
        return next(self.embeddings.parameters()).device

    def embed(self, role: str, name: str, ids: Tensor, ctx: Context, token_types: Tensor | None = None,
              spliced: tuple[Tensor, Tensor] | None = None) -> Tensor:
        embedding: Embeddings = self.embeddings[self.stack_embedding[role]]
        if self.check_inputs:
            if token_types is not None:
                if embedding.segments is None:
                    raise ValueError("token_types was given, but the embedding has no segments; "
                                     "add `segments N` to it in the spec")
                check_ids("token_types", token_types, embedding.segments.num_embeddings, self.device,
                          what="token type ids", table="the segments")
                if token_types.shape != ids.shape:
                    raise ValueError(f"token_types must have the shape of {name} {tuple(ids.shape)}, "
                                     f"got {tuple(token_types.shape)}")
        source = self.shared_tokens[role]
        x = embedding(ids, ctx.positions, token_types, self.embeddings[source].tokens if source else None,
                      **({"spliced": spliced} if spliced is not None else {}))
        if embedding.per_layer is not None:  # each layer's own features, which its per-layer gate reads
            ctx.carried[PER_LAYER] = embedding.per_layer(ids, x)
        return x

    def context(self, role: str, name: str, ids: Tensor, inputs: dict, padding: Tensor | None = None,
                offset: int = 0, memory: Tensor | None = None, memory_padding: Tensor | None = None) -> Context:
        """The call's shared inputs for ``role``'s stack, whose token ids are the argument ``name``;
        ``inputs``: keyword run-time inputs, checked by name."""
        stack = getattr(self, role)
        positions = inputs.get("position_ids")
        embedding = self.embeddings[self.stack_embedding[role]]
        sequence = ids  # what the stack's positions number: the ids, or the vectors an input kind makes
        if embedding.vocab is None:  # an input kind's tensor (pictures)
            if self.check_inputs:
                embedding.check(name, ids, self.device, self.any_picture_size.get(role, False))
            sequence = torch.zeros(ids.shape[0], embedding.length_of(ids), dtype=torch.long, device=ids.device)
            inputs = self.gridded(stack, embedding, ids, inputs)
        elif self.check_inputs and not isinstance(offset, Tensor):  # (a tensor: a compiled decode step's,
            check_ids(name, ids, embedding.vocab, self.device, self.max_len[role], offset,  # checked before)
                      limited_by=self.limited_by[role])
        if self.check_inputs and not isinstance(offset, Tensor):
            check_runtime_inputs(inputs, stack.inputs, sequence, self.device, self.position_table[role])
        if positions is None:
            real = self.real_positions.get(role)
            positions = self.numbered(role, default_positions(sequence, padding, None if real is None else -real,
                                                              offset), inputs)
        extra = {k: v for k, v in inputs.items() if k != "position_ids"}
        return Context(positions, padding, memory, memory_padding, extra, offset)

    def output(self, hidden: Tensor, ids: Tensor | None = None):
        """The head's logits and the pooler's vector of the last stack's output ``hidden``; ``ids``: its token ids
        (where the head's pool finds its position among them)."""
        out = hidden
        if self.head is not None:
            tied = self.embeddings[self.tied_to].tokens.weight if self.tied_to is not None else None
            out = self.head(hidden, tied, ids)
        if self.pooler is not None:
            return out, self.pooler(hidden)
        return out

    def extend(self, tokens: Tensor, cache: list[dict], offset: int, memory: Tensor | None = None,
               memory_padding_mask: Tensor | None = None, padding_mask: Tensor | None = None, *,
               last: bool = False, spliced: tuple[Tensor, Tensor] | None = None, **inputs):
        """Decoder logits for ``tokens`` continuing a prefix of ``offset`` positions held in ``cache``.

        ``cache`` has one dict per decoder layer (start with empty ones); each call
        appends the new positions' keys and values (and their padding, for a
        left-padded prompt). Equals running the decoder over the whole sequence when
        its attention kinds and masks are cache-exact (see ``tfspec.run.decoding.cache_supported``).
        Encoder-decoder models pass ``memory`` (from ``encode``); cross-attention
        projects it on the first call only. ``last``: the logits of the last position alone (a prompt's, which
        decoding reads: the head's work over the others is saved). ``spliced``: vectors in place of the tokens'
        at some of these positions (``run_stack``: a connector's pictures in a prompt).
        """
        inputs = self.marked(self.decoder, inputs, spliced)
        ctx = self.context("decoder", "tokens", tokens, inputs, padding_mask, offset, memory, memory_padding_mask)
        x = self.embed("decoder", "tokens", tokens, ctx, spliced=spliced)
        hidden = self.decoder(x, ctx, cache)
        if last and self.pooler is None and (self.head is None or self.head.pool is None):
            hidden = hidden[:, -1:]
        return self.output(hidden, tokens)

    @staticmethod
    def marked(stack, inputs: dict, spliced: tuple[Tensor, Tensor] | None) -> dict:
        """``inputs`` with, where pictures are ``spliced`` in, each run-time input the stack reads that marks them
        (``RuntimeInput.pictures``) unless given: ``spliced`` is (where, vectors, columns, counts), the last two
        optional (``picture_marks``)."""
        wanted = {name: declared.pictures for name, declared in stack.inputs.items()
                  if declared.pictures is not None and name not in inputs}
        if spliced is None or not wanted:
            return inputs
        marks = picture_marks(spliced[0], *spliced[2:])
        return {**inputs, **{name: marks[what] for name, what in wanted.items()}}

    @staticmethod
    def gridded(stack, embedding, given: Tensor, inputs: dict) -> dict:
        """``inputs`` with, for pictures ``given`` of another size than the spec's, each run-time input the stack
        reads of their grid of patches (``RuntimeInput.grid``) unless given: its width, each picture's. (Pictures
        of the spec's size are numbered on its grid, as the variants reading it do by default: a graph traced for
        export at that size holds no tensor of it.)"""
        wanted = [name for name, declared in stack.inputs.items() if declared.grid and name not in inputs]
        grid = embedding.grid_of(given) if wanted and tuple(given.shape[1:]) != tuple(embedding.shape) else None
        if grid is None:
            return inputs
        width = torch.full((given.shape[0],), grid[1], dtype=torch.long, device=given.device)
        return {**inputs, **{name: width for name in wanted}}

    def numbered(self, role: str, positions: Tensor, inputs: dict) -> Tensor:
        """Position ids ``positions`` as ``role``'s position schemes number them given the call's run-time
        ``inputs`` (M-RoPE's pictures at one position each); as they are for every other scheme."""
        for step in self.numbering[role]:
            positions = step.numbered(positions, inputs)
        return positions

    def check_padding(self, name: str, mask, ids: Tensor, ids_name: str, used: bool, where: str) -> None:
        if self.check_inputs:
            check_padding_mask(name, mask, ids, ids_name, used,
                               f"add `padding` to the masks of the {where} (e.g. `mask=causal + padding`)")

    # ------------------------------------------------------------ the steps of the generated forward
    def run_stack(self, role: str, name: str, ids: Tensor, padding: Tensor | None, inputs: dict,
                  token_types: Tensor | None = None, memory: Tensor | None = None,
                  memory_padding: Tensor | None = None, spliced: tuple[Tensor, Tensor] | None = None,
                  layers: int | None = None) -> Tensor:
        """``role``'s stack over ``ids`` (the argument ``name``): its inputs checked, the call's ``Context``, the
        embeddings, the layers and the final norm. ``memory``: the encoder's output, which cross-attention reads.
        ``spliced``: (where, vectors): the embeddings at the positions ``where`` is True replaced by ``vectors``, in
        order (a connector's pictures among a decoder's tokens). ``layers``: that many layers' output, before the
        final norm (``Stack.forward``)."""
        inputs = self.marked(getattr(self, role), inputs, spliced)
        ctx = self.context(role, name, ids, inputs, padding, memory=memory, memory_padding=memory_padding)
        x = self.embed(role, name, ids, ctx, token_types, spliced)
        readers = [f"{role}'s self-attention"]
        used = getattr(self, role).masks_padding
        if role == "encoder" and self.spec.decoder is not None:  # the decoder's cross-attention reads it too
            readers.append("the decoder's cross-attention")
            used = used or self.decoder.memory_masks_padding
        self.check_padding("padding_mask" if name == "tokens" else f"{name}_padding_mask", padding, ids, name, used,
                           " or ".join(readers))
        return getattr(self, role)(x, ctx, layers=layers)

    def train_ahead(self, hidden: Tensor, ids: Tensor, padding: Tensor | None, inputs: dict,
                    labels: Tensor | None = None) -> Tensor:
        """Multi-token prediction's loss on this batch when training (``mtp.added_losses``, one of
        ``auxiliary_losses``), from the decoder's output ``hidden``; ``hidden`` unchanged. ``labels``: the next
        token's id at each position, -100 where it has none (default: the next id of ``ids``)."""
        if self.check_inputs and labels is not None and (
                not isinstance(labels, Tensor) or labels.shape != ids.shape or labels.dtype != torch.long):
            got = f"{tuple(labels.shape)} {labels.dtype}" if isinstance(labels, Tensor) else type(labels).__name__
            raise ValueError(f"labels must be token ids (int64) of the shape of tokens {tuple(ids.shape)}, got {got}")
        if self.mtp is None:  # dropped
            return hidden
        if not (self.training and torch.is_grad_enabled()):
            self.mtp.added_losses = None
            return hidden
        ctx = self.context("decoder", "tokens", ids, inputs, padding)
        self.mtp(hidden, ids, lambda ahead: self.embed("decoder", "tokens", ahead, ctx), self.output, ctx, labels)
        return hidden

    def predict_ahead(self, tokens: Tensor, padding_mask: Tensor | None = None, **inputs) -> list[Tensor]:
        """The logits of each multi-token prediction module at every position: module k's at position i predict
        token i + k + 1 (speculative decoding's drafts; what its loss trains), those at the last k positions
        meaningless. The model's own logits predict token i + 1."""
        if self.mtp is None:
            raise TypeError(f"spec '{self.spec.name}' has no multi-token prediction (`mtp D`)" +
                            (" left: it was dropped" if self.spec.mtp is not None else ""))
        hidden = self.run_stack("decoder", "tokens", tokens, padding_mask, inputs)
        ctx = self.context("decoder", "tokens", tokens, inputs, padding_mask)
        embed = lambda ahead: self.embed("decoder", "tokens", ahead, ctx)  # noqa: E731
        return [self.output(h) for h in self.mtp.chain(hidden, tokens, embed, ctx)]

    def drop_multi_token_prediction(self) -> "CompiledModel":
        """Free the MTP modules: inference never runs them, and training afterwards adds no MTP loss. The model's
        state dict then lacks their ``mtp.*`` weights."""
        self.mtp = None
        return self

    def split_inputs(self, inputs: dict) -> tuple[dict, dict]:
        """An encoder-decoder's run-time inputs, named for their sequence (``src_position_ids``,
        ``tgt_prefix_lengths``, ...), as the encoder's and the decoder's."""
        unknown = [k for k in inputs if not k.startswith(("src_", "tgt_"))]
        if unknown:
            raise ValueError(f"an encoder-decoder model takes run-time inputs named src_... or tgt_..., got {unknown}")
        return ({k[4:]: v for k, v in inputs.items() if k.startswith("src_")},
                {k[4:]: v for k, v in inputs.items() if k.startswith("tgt_")})

    # ------------------------------------------------------------ an encoder-decoder's halves
    def encode(self, src: Tensor, src_padding_mask: Tensor | None = None, **inputs) -> Tensor:
        """The encoder's output (after its final norm): the decoder's memory."""
        self.needs_both_stacks("encode")
        return self.run_stack("encoder", "src", src, src_padding_mask, inputs)

    def decode(self, tgt: Tensor, memory: Tensor, src_padding_mask: Tensor | None = None,
               tgt_padding_mask: Tensor | None = None, **inputs):
        """Decoder over ``tgt`` attending to ``memory`` -> logits or hidden states."""
        self.needs_both_stacks("decode")
        if self.check_inputs:
            check_memory(memory, tgt.shape[0], self.encoder_width, self.device,
                         next(self.embeddings.parameters()).dtype)
            check_padding_mask("src_padding_mask", src_padding_mask, memory[..., 0], "memory's (batch, src_len)",
                               True, "")
        return self.output(self.run_stack("decoder", "tgt", tgt, tgt_padding_mask, inputs, memory=memory,
                                          memory_padding=src_padding_mask), tgt)

    def needs_both_stacks(self, what: str) -> None:
        if self.spec.kind != "encoder-decoder":
            raise TypeError(f"{what}() is an encoder-decoder's; '{self.spec.name}' is {self.spec.kind}: call the "
                            "model itself")

    @property
    def encoder_width(self) -> int:
        return self.embeddings[self.stack_embedding["encoder"]].width


def _numbering(stack: nn.Module) -> list[AttentionStep]:
    """The stack's attention steps that number positions themselves, one of each ``key``."""
    found: dict[str, AttentionStep] = {}
    for module in stack.modules():
        if isinstance(module, AttentionStep) and type(module).numbered is not AttentionStep.numbered:
            found.setdefault(module.key, module)
    return list(found.values())


def picture_marks(where: Tensor, columns: Tensor | None = None, counts: Tensor | None = None) -> dict[str, Tensor]:
    """What marks the pictures spliced at ``where`` (bool ``(batch, length)``), the pictures in order along the
    rows of the batch, each one's vectors a grid row by row, ``columns`` ``(pictures,)`` wide (None: square):
    ``ids``, the picture of each position (0: none; 1, 2, ... along a row); ``rows`` and ``columns``, each vector's
    in its picture's grid (0 elsewhere). ``counts`` ``(pictures,)``: each picture's vectors; None: each run of True
    one picture."""
    if counts is None:
        starts = where & ~torch.nn.functional.pad(where, (1, 0))[:, :-1]
        ids = torch.where(where, starts.long().cumsum(dim=1), 0)
        counted = where.long().cumsum(dim=1)
        before = torch.where(starts, counted - 1, 0).cummax(dim=1).values  # vectors before the picture's first
        index = torch.where(where, counted - 1 - before, 0)  # each vector's place in its picture
        pictures = starts.long().sum(dim=1)
        order = (pictures.cumsum(dim=0) - pictures)[:, None] + ids - 1  # each vector's picture in the batch
    else:  # each vector's picture in the batch by the count of vectors before it
        counts = counts.to(where.device)
        ends = counts.cumsum(dim=0)
        flat = (where.flatten().long().cumsum(dim=0) - 1).reshape(where.shape).clamp(min=0)
        # (sizes as tensors' own, never Python numbers: a traced graph keeps its batch and lengths free)
        order = (flat[..., None] >= ends).sum(dim=-1).clamp(0, counts.shape[0] - 1)  # (ONNX has no searchsorted)
        index = torch.where(where, flat - _at(ends - counts, order), 0)
        first = torch.where(where, order, counts.shape[0]).min(dim=1, keepdim=True).values  # each row's first
        ids = torch.where(where, order - first + 1, 0)
    if columns is None:
        sizes = torch.zeros(where.shape[0], int(ids.max()) + 1 if ids.numel() else 1, dtype=torch.long,
                            device=where.device).scatter_add_(1, ids, torch.ones_like(ids))
        sides = torch.sqrt(sizes.gather(1, ids).float()).round().long().clamp(min=1)
    else:
        sides = _at(columns.to(where.device), order.clamp(0, columns.shape[0] - 1)).clamp(min=1)
    return {"ids": ids, "rows": torch.where(where, index // sides, 0), "columns": torch.where(where, index % sides, 0)}


def _at(values: Tensor, index: Tensor) -> Tensor:
    """``values[index]`` for an index tensor of any shape (by ``index_select``, which export keeps shape-free)."""
    return values.index_select(0, index.flatten()).reshape(index.shape)
