"""Stage 6, analyse: what a spec costs, read from the graph IR without building a model.

- parameters: ``parameter_table`` / ``count_parameters`` (tied weights once);
- forward FLOPs per component: multiply-adds count 2. ``matmul`` is what
  ``torch.utils.flop_counter.FlopCounterMode`` counts on the compiled model
  (every query-key pair is scored, masked scores computed then discarded, except
  where masks of bounded reach let attention run in bands of blocks, which score
  ``length · (chunk + reach)`` pairs: ``nn.kernels.attention_band``);
  ``elementwise`` (bias, norms, softmax, activations, residual sums) is by the
  conventions in each variant's ``flops_per_element``; the *mask-aware* figures
  count only the query-key pairs the masks allow, which is what causal
  attention needs from a kernel that skips masked blocks;
- activation memory for training: the bytes autograd keeps for the backward
  pass (each saved tensor once, as measured with ``saved_tensors_hooks`` in the
  tests), plus the logits the loss keeps;
- complexity classes per layer type, as in Table 1 of "Attention Is All You
  Need", derived from each sublayer's attention kind and masks.

Multi-token prediction's modules (``mtp D``), which training runs beside the model and inference drops: their
parameters are in the totals (``training_only_parameters`` says how many), their forward FLOPs apart
(``Analysis.training_only``, which ``training()`` adds); the activations they keep are not counted.

>>> from tfspec import load
>>> a = analyse(load("examples/gpt2_small.tfs"), seq_len=1024)
>>> a.total.params, round(a.total.matmul / 1e9, 1)
(124439808, 291.6)
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields, replace

from ..ir import nodes as ir
from ..ir.graph import Graph
from ..ir.queries import (active_parameters, count_parameters, default_length, fixed_length,  # noqa: F401
                         attention_everywhere_elements, kv_cache_elements, layer_repeat, layer_template,
                         state_bytes, length_limit, max_length, parameter_table, source,
                         weight_repeat, weights_key)
from ..nn.kernels import attention_band, band_chunk, fused_causal_kernel
from ..registry import (ACTIVATIONS, ATTENTION_KINDS, ATTENTION_STEPS, FEEDFORWARD_KINDS, INPUTS, MASKS, NORMS,
                        POOLS, POSITIONS, AttentionRun, combined_reach, qk_norm_saved)

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
ID_BYTES = 8  # token ids are int64
STAT_BYTES = 4  # norm statistics and log-sum-exps stay float32


# ------------------------------------------------------------------ masks


def mask_reach(masks) -> tuple[int | None, int | None]:
    """Keys behind and ahead a query may see under all of ``masks`` (``Choice``s; ``None``: unbounded)."""
    return combined_reach([MASKS.of(choice) for choice in masks])


def mask_pairs(n: int, masks) -> int:
    """Query-key pairs a self-attention over ``n`` positions scores under ``masks`` (``Choice``s).

    From each mask's reach: one closed form when every query's reach is the same,
    else a sum over the queries of the keys all masks let them see (``Mask.keys_at``: one band, or several
    ranges apart).
    """
    bound = [MASKS.of(choice) for choice in masks]
    if all(variant.uniform_reach for variant, _ in bound):
        return allowed_pairs(n, *combined_reach(bound))
    total = 0
    for i in range(n):
        seen: tuple[tuple[int, int], ...] = ((0, n),)
        for variant, options in bound:
            seen = _intersection(seen, _merged(variant.keys_at(options, i, n)))
        total += sum(stop - start for start, stop in seen)
    return total


def _merged(ranges) -> tuple[tuple[int, int], ...]:
    """Ranges ``[start, stop)`` sorted, with those that overlap or touch joined."""
    out: list[list[int]] = []
    for start, stop in sorted(r for r in ranges if r[0] < r[1]):
        if out and start <= out[-1][1]:
            out[-1][1] = max(out[-1][1], stop)
        else:
            out.append([start, stop])
    return tuple((start, stop) for start, stop in out)


def _intersection(a, b) -> tuple[tuple[int, int], ...]:
    """The ranges ``[start, stop)`` in both of two sorted lists of disjoint ranges."""
    out = []
    for start, stop in a:
        for other_start, other_stop in b:
            lo, hi = max(start, other_start), min(stop, other_stop)
            if lo < hi:
                out.append((lo, hi))
    return tuple(sorted(out))


def allowed_pairs(n: int, behind: int | None, ahead: int | None) -> int:
    """Query-key pairs a self-attention over ``n`` positions scores under a reach.

    >>> allowed_pairs(4, None, None), allowed_pairs(4, None, 0), allowed_pairs(4, 1, 1)
    (16, 10, 10)
    """
    def one_side(r):  # sum over positions i < n of min(i, r)
        if r is None or r >= n - 1:
            return n * (n - 1) // 2
        return r * (r + 1) // 2 + (n - 1 - r) * r

    return n + one_side(behind) + one_side(ahead)


# ------------------------------------------------------------------ costs


@dataclass
class Cost:
    """What one component costs for a whole batch; FLOPs are forward only."""

    params: int = 0
    matmul: int = 0  # as executed by the compiled model (what FlopCounterMode counts)
    elementwise: int = 0
    matmul_mask_aware: int = 0  # only the query-key pairs the masks allow
    elementwise_mask_aware: int = 0
    memory: int = 0  # bytes kept for the backward pass

    @property
    def flops(self) -> int:
        return self.matmul + self.elementwise

    @property
    def flops_mask_aware(self) -> int:
        return self.matmul_mask_aware + self.elementwise_mask_aware

    def __add__(self, other: "Cost") -> "Cost":
        return Cost(*(getattr(self, k) + getattr(other, k) for k in COST_FIELDS))  # asdict's deep copy is slow

    def to_dict(self) -> dict[str, int]:
        return {**asdict(self), "flops": self.flops, "flops_mask_aware": self.flops_mask_aware}


COST_FIELDS = tuple(f.name for f in fields(Cost))


@dataclass
class Row:
    """One IR node's share: ``cost`` covers every repeat of a template node."""

    node: str
    label: str
    op: str  # the node type's name, for reports (``ir.Attention.kind``)
    stack: str | None
    repeat: int
    cost: Cost
    node_type: type = field(default=object, repr=False, compare=False)  # the IR node class, for code

    def to_dict(self) -> dict:
        return {"node": self.node, "label": self.label, "op": self.op, "stack": self.stack, "repeat": self.repeat,
                **self.cost.to_dict()}


@dataclass
class Complexity:
    """A row of the paper's Table 1 for one kind of sublayer in this spec."""

    layer: str
    per_layer: str
    sequential: str
    path: str
    note: str = ""


@dataclass
class Analysis:
    name: str
    kind: str
    batch: int
    lengths: dict[str, int]
    dtype: str
    fused_attention: bool
    rows: list[Row]
    complexity: list[Complexity] = field(default_factory=list)
    active_params: int = 0  # what one position's computation reads (fewer than the total in a mixture of experts)
    # a decoder's KV cache after its length, for the batch: as its attentions keep it, and as multi-head attention
    # of the same heads would (0: no decoder)
    kv_cache_bytes: int = 0
    kv_cache_multi_head_bytes: int = 0
    state_bytes: int = 0  # what a decoder's mixers keep while decoding, for the batch, whatever the length
    # a hybrid's KV cache had every mixer's layer its first self-attention: the all-attention model of its shape
    all_attention_bytes: int = 0
    # the forward FLOPs of what only training runs beside the model (multi-token prediction's modules; its memory
    # is not counted): not in the rows
    training_only: Cost = field(default_factory=Cost)

    @property
    def total(self) -> Cost:
        return sum((r.cost for r in self.rows), Cost())

    def cost_of(self, node_type: type) -> Cost:
        """What the nodes of one IR type cost together (``a.cost_of(ir.Attention)``)."""
        return sum((r.cost for r in self.rows if issubclass(r.node_type, node_type)), Cost())

    def to_dict(self) -> dict:
        return {"name": self.name, "kind": self.kind, "batch": self.batch, "lengths": self.lengths,
                "dtype": self.dtype, "fused_attention": self.fused_attention,
                "components": [r.to_dict() for r in self.rows], "total": self.total.to_dict(),
                "active_params": self.active_params, "kv_cache_bytes": self.kv_cache_bytes,
                "kv_cache_multi_head_bytes": self.kv_cache_multi_head_bytes, "state_bytes": self.state_bytes,
                "all_attention_bytes": self.all_attention_bytes,
                "training": self.training(), "training_only": self.training_only.to_dict(),
                "complexity": [asdict(c) for c in self.complexity]}

    def training(self) -> dict[str, int]:
        """Rough training figures: backward costs two matmuls per forward matmul; Adam keeps two moments; the
        forward is the model's and what only training runs beside it (``training_only``)."""
        total = self.total
        return {"flops_forward_backward": 3 * (total.flops + self.training_only.flops),
                "weights_grads_adam_bytes": total.params * (2 * DTYPE_BYTES[self.dtype] + 2 * 4),
                "activation_bytes": total.memory}


class AnalysisError(ValueError):
    """A setting the spec cannot be analysed at (a length beyond learned positions, a bad dtype)."""


def analyse(spec_or_graph, *, seq_len: int | None = None, src_len: int | None = None, tgt_len: int | None = None,
            batch: int = 1, dtype: str = "float32", fused_attention: bool = False) -> Analysis:
    """Parameters, forward FLOPs and training activation memory per component, plus complexity classes.

    ``seq_len`` sets every stack's length (default: the learned positions' size,
    else 512); ``src_len``/``tgt_len`` set an encoder-decoder's two lengths.
    ``fused_attention``: assume a kernel that never materialises the
    probabilities (flash / memory-efficient SDPA) when counting memory.
    """
    g = _graph_of(spec_or_graph)
    if dtype not in DTYPE_BYTES:
        raise AnalysisError(f"dtype must be one of {', '.join(DTYPE_BYTES)}, got {dtype!r}")
    if batch <= 0:
        raise AnalysisError(f"batch must be positive, got {batch}")
    lengths = stack_lengths(g, seq_len, src_len, tgt_len)
    counter = _Counter(g, lengths, batch, DTYPE_BYTES[dtype], fused_attention)
    rows = [row for node in g.ordered() if (row := counter.row(node)) is not None]
    order = {role: i for i, role in enumerate(g.stacks)}
    rows.sort(key=lambda r: order.get(r.stack, len(order)))  # stack by stack, each in data-flow order
    cached, multi_head = kv_cache_elements(g, lengths.get("decoder", 0))
    element = batch * DTYPE_BYTES[dtype]
    return Analysis(g.name, g.kind, batch, lengths, dtype, fused_attention, rows,
                    complexity_classes(g), active_parameters(g), cached * element, multi_head * element,
                    state_bytes(g, DTYPE_BYTES[dtype]) * batch, training_only=counter.training_only(),
                    all_attention_bytes=attention_everywhere_elements(g, lengths.get("decoder", 0)) * element)


def _graph_of(spec_or_graph) -> Graph:
    return spec_or_graph if isinstance(spec_or_graph, Graph) else spec_or_graph.graph()


def stack_lengths(g: Graph, seq_len=None, src_len=None, tgt_len=None) -> dict[str, int]:
    roles = list(g.stacks)
    if (src_len is not None or tgt_len is not None) and g.kind != "encoder-decoder":
        raise AnalysisError("src_len/tgt_len apply to encoder-decoder specs; use seq_len")
    base = seq_len if seq_len is not None else default_length(g)
    chosen = {"encoder": src_len, "decoder": tgt_len}
    # a stack whose input fixes its length (spectrograms) runs at it beside another stack, whatever seq_len says
    fixed = {role: fixed_length(g, role) if len(roles) > 1 else None for role in roles}
    lengths = {role: chosen[role] if chosen[role] is not None else fixed[role] or base for role in roles}
    for role, n in lengths.items():
        if n <= 0:
            raise AnalysisError(f"the {role}'s length must be positive, got {n}")
        fixed = fixed_length(g, role)
        if fixed is not None and n != fixed:
            what = INPUTS[next(iter(g.of(ir.Features, stack=role))).choice.name].what
            raise AnalysisError(f"the {role} reads {what}, which make {fixed} positions; analyse at that length, "
                                f"not {n}")
        limit = length_limit(g, role)
        if limit is not None and n > limit[0]:
            raise AnalysisError(f"the {role} sees {n} positions, but its {limit[1]} cover {limit[0]}; "
                                f"use a length <= {limit[0]}")
    return lengths


class _Counter:
    """Per-node cost rules. Memory: each saved tensor once, keyed by the node that made it."""

    def __init__(self, g: Graph, lengths, batch, element_bytes, fused):
        self.g, self.lengths, self.batch, self.s, self.fused = g, lengths, batch, element_bytes, fused
        self.seen_modules: set = set()
        self.kept: set[tuple] = set()
        self.rules = {ir.Embedding: self.cost_embedding, ir.Features: self.cost_features,
                      ir.Projection: self.cost_projection,
                      ir.PositionEncoding: self.cost_position, ir.PerLayerInputs: self.cost_per_layer,
                      ir.StackParameters: self.cost_parameters,
                      ir.Add: self.cost_add, ir.Scale: self.cost_scale, ir.Norm: self.cost_norm,
                      ir.Dropout: self.cost_dropout, ir.Attention: self.cost_attention,
                      ir.FeedForward: self.cost_feedforward, ir.Mixer: self.cost_mixer, ir.Head: self.cost_head,
                      ir.Pooler: self.cost_pooler, ir.MultiTokenPrediction: self.cost_training_only}

    # -- helpers
    def keep(self, key: tuple, nbytes: int) -> int:
        if key in self.kept:
            return 0
        self.kept.add(key)
        return nbytes

    def keep_input(self, node: ir.Node, producer: str, nbytes: int, repeat: int) -> int:
        """A saved input; the encoder's output read by every cross-attention is one tensor, kept once."""
        p = source(self.g, self.g.node(producer))
        per_layer = p.in_block and p.stack == node.stack
        return self.keep(("input", p.id), nbytes) * (repeat if per_layer else 1)

    def params(self, node: ir.Node) -> int:
        if not node.params or (key := weights_key(self.g, node)) in self.seen_modules:
            return 0
        self.seen_modules.add(key)
        return sum(math.prod(p.shape) for p in node.params.values())

    # -- rows
    def row(self, node: ir.Node) -> Row | None:
        rule = self.rules.get(type(node))
        if rule is None:
            return None
        repeat = layer_repeat(self.g, node)
        n = self.lengths[node.stack] if node.stack else self.lengths[next(reversed(self.lengths))]
        cost = rule(node, n, repeat)
        cost.params = self.params(node) * weight_repeat(self.g, node)  # shared layers hold one copy per set
        return Row(node.id, node.label, node.kind, node.stack, repeat, cost, type(node))

    def scaled(self, cost: Cost, repeat: int) -> Cost:
        """Per-sequence FLOPs of one instance -> the whole batch, every repeat (memory is already done)."""
        k = self.batch * repeat
        return replace(cost, matmul=cost.matmul * k, elementwise=cost.elementwise * k,
                       matmul_mask_aware=cost.matmul_mask_aware * k,
                       elementwise_mask_aware=cost.elementwise_mask_aware * k)

    def dense(self, matmul: int, elementwise: int, memory: int, repeat: int) -> Cost:
        return self.scaled(Cost(0, matmul, elementwise, matmul, elementwise, memory), repeat)

    def cost_embedding(self, node: ir.Embedding, n, repeat):
        scale = n * node.width if node.scale != 1 else 0
        memory = self.keep_input(node, node.inputs[0], self.batch * n * ID_BYTES, repeat)
        return self.dense(0, scale, memory, repeat)

    def cost_features(self, node: ir.Features, n, repeat):
        """What an input kind makes of its tensor (pictures' patches through a linear map): its FLOPs and what it
        keeps, per example, as it declares them."""
        kind, options = INPUTS.of(node.choice)
        matmul, elementwise = kind.flops(node.width, options)
        memory = self.keep(("own", node.id), self.batch * kind.kept(node.width, options) * self.s)
        return self.dense(matmul, elementwise, memory, repeat)

    def cost_projection(self, node: ir.Projection, n, repeat):
        """The embeddings' map into the stack's width: a matmul and its bias; it keeps its input."""
        memory = self.keep_input(node, node.inputs[0], self.batch * n * node.features * self.s, repeat)
        return self.dense(2 * n * node.features * node.width, n * node.width, memory, repeat)

    def cost_per_layer(self, node: ir.PerLayerInputs, n, repeat):
        """Per-layer inputs: a table lookup (it keeps the ids), the embeddings' projection (it keeps its input),
        scalings and sums, and the norm of each layer's features, which keeps its own tensors; the inputs
        themselves are kept once, by the layers' products that read them (a view each)."""
        features = node.layers * node.width
        norm, options = NORMS.of(node.norm)
        kept, stats = norm.saved(node.width, options)
        rows = self.batch * n * node.layers
        memory = self.keep_input(node, node.inputs[0], self.batch * n * ID_BYTES, repeat)
        # the embeddings, which the projection keeps: the first layer's input, kept there too by a sublayer or
        # norm reading it (counted with that layer's)
        entry = self.g.stacks[node.stack].kinds[0].entry
        if not any(isinstance(c, (ir.Norm, ir.Attention, ir.FeedForward, ir.Mixer)) for c in self.g.consumers(entry)):
            memory += self.keep_input(node, node.inputs[1], self.batch * n * self.g.node(node.inputs[1]).width
                                      * self.s, repeat)
        memory += self.keep(("own", node.id), rows * (kept * self.s + stats * STAT_BYTES))
        if any(node.id in reader.inputs for reader in self.g.of(ir.FeedForward)):
            memory += self.keep(("per_layer", node.id), self.batch * n * features * self.s)
        width = self.g.node(node.inputs[1]).width
        elementwise = (4 + norm.flops_per_element) * n * features  # two scalings, the norm, the sum, 2^-1/2
        return self.dense(2 * n * width * features, elementwise, memory, repeat)

    def cost_position(self, node: ir.PositionEncoding, n, repeat):
        memory = self.keep(("positions", node.id), n * ID_BYTES) if node.params else 0  # learned: index lookup
        return self.dense(0, 0, memory, repeat)

    def cost_parameters(self, node: ir.StackParameters, n, repeat):
        """Parameters a stack owns for its layers (Linformer's E, F; T5's bias table): what their module computes
        once per call keeps what the variant says (a mask joining T5's bias in ``where`` keeps its bool condition
        too: the bias, unlike a mask alone, needs gradients); the readers count their use."""
        variant, options = node.variant()
        # a reader whose kind adds trained terms of its own builds its mask, with this bias, in each layer, and
        # counts what that keeps itself (``cost_attention``); the others share one build a call
        readers = [r for r in self.g.consumers(node.id) if not ATTENTION_KINDS.of(r.spec.kind)[0].trains_score_terms]
        if not readers:
            return self.dense(0, 0, 0, 1)
        masked = any(MASKS[m.name].structural for reader in readers for m in reader.spec.mask)
        memory = variant.stack_saved(options, node.geometry, n, n, masked, self.s)  # default ids: (1, n, n)
        return self.dense(0, 0, self.keep(("own", node.id), memory), 1)

    def cost_add(self, node: ir.Add, n, repeat):
        return self.dense(0, (len(node.inputs) - 1) * n * node.width, 0, repeat)

    def cost_scale(self, node: ir.Scale, n, repeat):
        return self.dense(0, n * node.width, 0, repeat)  # a product with a constant keeps nothing for backward

    def cost_norm(self, node: ir.Norm, n, repeat):
        variant, options = NORMS.of(node.choice)
        return self.dense(0, variant.flops_per_element * n * node.width,
                          self.norm_memory(node, node.inputs[0], variant, options, node.width, n, repeat), repeat)

    def norm_memory(self, node, producer, variant, options, width, n, repeat):
        kept, stats = variant.saved(width, options)
        if not kept and not stats:
            return 0
        rows = self.batch * n
        own = ((kept - width) * rows * self.s + stats * rows * STAT_BYTES) * repeat
        return self.keep_input(node, producer, rows * width * self.s, repeat) + self.keep(("own", node.id), own)

    def cost_dropout(self, node: ir.Dropout, n, repeat):
        # CPU dropout multiplies by a mask of the input's dtype (CUDA's fused kernel keeps a byte mask)
        memory = self.keep(("own", node.id), self.batch * n * node.width * self.s * repeat)
        return self.dense(0, n * node.width, memory, repeat)

    def cost_attention(self, node: ir.Attention, n, repeat):
        spec, shape = node.spec, node.geometry
        kind, options = ATTENTION_KINDS.of(spec.kind)
        cross = shape.cross
        m = self.lengths["encoder"] if cross else n
        heads, head_dim = shape.heads, shape.head_dim
        # an attention reading another layer's keys and values (``kv_from``) projects, norms and rotates queries
        # alone, and shares those keys and values (the same storages) with the layer that made them
        reads = spec.kv_from is not None
        projections, bias = kind.reader_projection_flops(shape, options, n) if reads else \
            kind.projection_flops(shape, options, n, m)  # q; k and v; the output
        norm, norm_options = NORMS.of(spec.qk_norm)
        bias += norm.flops_per_element * head_dim * (n * heads + (0 if reads else m * shape.kv_heads))
        position, position_options = POSITIONS.of(spec.position)
        positioned = node.positioned  # where the scheme acts (part of each head, for some kinds)
        bias += position.attention_flops(position_options, positioned, n, m) - (
            position.key_flops(position_options, positioned, m) if reads else 0)
        projections += position.attention_matmul_flops(position_options, positioned, n, m)
        shared = self.keep(("position", node.stack, POSITIONS.label(spec.position), positioned.head_dim),
                           position.call_saved(position_options, positioned, n) * self.s)  # default ids: (1, n)
        shared += self.keep(("kind", node.stack, ATTENTION_KINDS.label(spec.kind), POSITIONS.label(spec.position)),
                            kind.call_saved(options, position, positioned, n) * self.s)
        # the compiled model adds a T x T mask unless a lone causal mask takes SDPA's is_causal path (a score
        # bias such as ALiBi's carries the mask with it, and is counted by the position scheme)
        masks = [MASKS.of(c) for c in spec.mask]
        structural = any(variant.structural for variant, _ in masks)
        fused = fused_causal_kernel([variant for variant, _ in masks], kind, position)
        mask_add = position.mask_adds(position_options, positioned, n, m, structural and not fused)
        pairs = n * m if cross else mask_pairs(n, spec.mask)
        # as executed: every pair, or, where attention runs in bands, each block's queries against its span
        band = attention_band(masks, kind, position, cross)
        chunk = band_chunk(n, band) if band is not None else None
        rows, seen = n, m
        if chunk is not None:
            blocks, span = -(-n // chunk), chunk + sum(band)
            rows, seen = blocks * chunk, span
            mask_add = heads * rows * seen
        recomputed = chunk is not None or kind.recomputes(options, n)
        # where recomputed, a scheme acting in attention can only rotate q and k; it, or a qk-norm, makes them anew
        remade = position.acts == "attention" or not norm.absent or any(
            ATTENTION_STEPS[c.name].norms_queries_and_keys for c in spec.steps)
        if recomputed:
            # bands, or a kind's own blocks, recomputed in backward: what they keep is their inputs and output
            kept, stats = kind.recomputed_saved(shape, options, self.batch, n, remade), 0
            if reads:  # its queries and output are its own
                kept -= kind.shared_recomputed(shape, options, self.batch, n, remade)
        else:
            kept, stats = position.mix_saved(position_options, shape, kind, options, self.batch, n, m, spec.dropout,
                                             self.fused)
        projected, projected_words = kind.projection_saved(shape, options, self.batch, n, m)
        kept, stats = kept + projected, stats + projected_words
        if reads and not recomputed:
            kept -= kind.shared_saved(shape, options, self.batch, n, m, self.fused)
        # a step making the values anew: the mix keeps them, not a view of the projection that keeps it whole
        made = any(ATTENTION_STEPS[c.name].makes_values for c in spec.steps)
        through_values = not recomputed and kind.keeps_projection(shape, options, self.batch)
        if made and through_values:  # (the projection's key rows, and its value rows where it has its own)
            kept -= self.batch * (heads * head_dim * m if cross else m * (shape.kv_width + kind.value_rows(shape, options)))
        if made and recomputed and not reads:  # in bands: no view of the values keeps the projection's q and k rows
            values = kind.value_rows(shape, options)
            kept -= self.batch * n * (shape.q_width + values) if remade else \
                -self.batch * n * values  # (unrotated, q's and k's views keep it whole)
        run = AttentionRun(recomputed, position.mix_keeps_projection(position_options, shape, kind, options,
                                                                      self.batch), made,
                           position.rotates, kind.value_rows(shape, options))
        for choice in spec.steps:  # the steps the spec adds: their own work and what they keep
            step, step_options = ATTENTION_STEPS.of(choice)
            step_matmul, step_elementwise = step.flops(shape, step_options, n, m)
            projections, bias = projections + step_matmul, bias + step_elementwise
            step_kept, step_words = step.saved(shape, step_options, self.batch, n, m, run)
            kept, stats = kept + step_kept, stats + step_words
        executed = rows * seen
        matmul, elementwise = kind.core_flops(shape, options, rows, seen, executed)
        matmul_aware, elementwise_aware = kind.core_flops(shape, options, n, min(m, -(-pairs // n)), pairs)
        if spec.dropout:
            elementwise, elementwise_aware = elementwise + heads * executed, elementwise_aware + heads * pairs
        if not norm.absent:  # each head's qk-norm: its own tensors, and the projections its inputs are views of
            rows = self.batch * (n * heads + (0 if reads else m * shape.kv_heads))
            norm_kept, norm_stats = qk_norm_saved(norm, norm_options, ((head_dim, rows),), shape, self.batch, n, m, run)
            kept, stats = kept + norm_kept, stats + norm_stats
        # score terms with parameters (KERPLE's bias, FoX's gates) riding on a mask of structure: its where keeps
        # the bool condition for their gradient, one for all of them
        condition = n * m if structural and (position.trains_score_terms or kind.trains_score_terms) else 0
        # a stack's score bias (T5's) joining this layer's own trained terms is built anew in each layer's mask
        rebuilt = position.stack_saved(position_options, positioned, n, m, False, self.s) \
            if kind.trains_score_terms and position.stack_params(positioned, position_options) else 0
        own = kept * self.s + stats * STAT_BYTES + position.layer_saved(position_options, positioned, n, m) \
            + condition + rebuilt
        memory = self.keep(("own", node.id), own * repeat) + shared
        memory += self.keep_input(node, node.inputs[0], self.batch * n * shape.width * self.s, repeat)
        if cross:
            memory += self.keep_input(node, node.inputs[1], self.batch * m * shape.memory_width * self.s, repeat)
        k = self.batch * repeat
        return Cost(0, (projections + matmul) * k, (bias + mask_add + elementwise) * k,
                    (projections + matmul_aware) * k, (bias + elementwise_aware) * k, memory)

    def cost_feedforward(self, node: ir.FeedForward, n, repeat):
        kind, options = FEEDFORWARD_KINDS.of(node.spec.kind)
        matmul, elementwise = kind.flops(node.width, node.spec, options)  # per position
        kept, words = kind.saved(node.width, node.spec, options)
        raw = kind.saved_bytes(node.width, node.spec, options)
        memory = self.keep(("own", node.id), (kept * self.s + words * STAT_BYTES + raw) * self.batch * n * repeat
                           + kind.call_saved(node.width, node.spec, options, self.s) * repeat)
        memory += self.keep_input(node, node.inputs[0], self.batch * n * node.width * self.s, repeat)
        return self.dense(matmul * n, elementwise * n, memory, repeat)

    def cost_mixer(self, node: ir.Mixer, n, repeat):
        mixer, options = node.variant()
        matmul, elementwise = mixer.flops(node.width, options, n)  # per sequence
        memory = self.keep(("own", node.id), mixer.saved(node.width, options, self.batch, n) * self.s * repeat)
        memory += self.keep_input(node, node.inputs[0], self.batch * n * node.width * self.s, repeat)
        return self.dense(matmul, elementwise, memory, repeat)

    def cost_head(self, node: ir.Head, n, repeat):
        spec, d = node.spec, node.width
        e = spec.features or d  # the transform's output, which the projection reads
        whole = self.batch * n  # the positions of its input
        memory = 0
        pool = POOLS.of(spec.pool) if spec.pool is not None else None
        pooling = elementwise = 0
        if pool is not None:  # one vector per sequence: the pool's own work and tensors
            pooling, elementwise = pool[0].flops(d, n, pool[1])
            memory += self.keep(("pool", node.id), self.batch * pool[0].saved(d, n, pool[1], self.s))
            if spec.projects and not pool[0].view:  # (a mean, a gather, an attention pool) the projection keeps it
                memory += self.keep(("pooled", node.id), self.batch * d * self.s)
            n = 1
        rows = self.batch * n
        matmul = pooling + (2 * n * e * spec.out if spec.projects else 0)
        elementwise += n * spec.out if spec.bias else 0
        if spec.scale != 1.0:  # a product with a constant keeps nothing; what reads it keeps the product
            elementwise += n * d
            memory += self.keep(("scaled", node.id), rows * d * self.s)
        elif pool is None or pool[0].keeps_input:  # all its input (a position's vector is a view of it)
            memory += self.keep_input(node, node.inputs[0], whole * d * self.s, repeat)
        if spec.transform is not None:  # dense (+bias), activation, norm, then the projection's input
            activation = ACTIVATIONS[spec.transform.name]
            norm_flops, (kept, stats) = 0, (0, 0)
            if spec.transform_norm is not None:
                norm, norm_options = NORMS.of(spec.transform_norm)
                norm_flops, (kept, stats) = norm.flops_per_element, norm.saved(e, norm_options)
            matmul += 2 * n * d * e
            elementwise += (n * e if spec.transform_bias else 0) + (activation.flops_per_element + norm_flops) * n * e
            # the activation keeps its input or its output; the next step keeps the activation's output
            elements = e * (2 if activation.saves == "input" else 1)
            if kept or stats:  # the norm's own tensors beyond its input, then its output for the projection
                elements += kept
            memory += self.keep(("transform", node.id), rows * (elements * self.s + stats * STAT_BYTES))
        if spec.softcap is not None:  # divide, tanh, multiply; tanh's output is kept for its gradient
            elementwise += 3 * n * spec.out
            memory += self.keep(("capped", node.id), rows * spec.out * self.s)
        if spec.projects or not pool[0].view:  # (a view of its input the input's storage holds)
            memory += self.keep(("logits", node.id), rows * spec.out * self.s)  # the output, kept by the loss
        return self.dense(matmul, elementwise, memory, repeat)

    def cost_training_only(self, node: ir.MultiTokenPrediction, n, repeat):
        """Multi-token prediction's modules in the rows: their parameters (``row``); their compute is training's
        alone (``training_only``)."""
        return self.dense(0, 0, 0, 1)

    def training_only(self) -> Cost:
        """Multi-token prediction's forward FLOPs: per module, the embedding of the tokens ahead, three norms, the
        projection of both joined, a layer of the kind it copies, and the shared head (its loss's element-wise
        work aside); memory not counted."""
        total = Cost()
        for node in self.g.of(ir.MultiTokenPrediction):
            d, n = node.width, self.lengths["decoder"]
            apart = _Counter(self.g, self.lengths, self.batch, self.s, self.fused)  # (its own tensors)
            parts = [apart.rules[type(t)](t, n, 1) for t in layer_template(self.g, "decoder", node.copies)
                     if type(t) in apart.rules]
            parts.append(apart.cost_embedding(self.g.node(node.embedding), n, 1))
            norm, _ = NORMS.of(node.spec.norm)
            parts.append(apart.dense(2 * n * 2 * d * d, 3 * norm.flops_per_element * n * d, 0, 1))
            parts.append(apart.cost_head(self.g.node("head"), n, 1))
            one = sum(parts, Cost())
            total += Cost(0, *(getattr(one, k) * node.spec.depth for k in COST_FIELDS[1:-1]), 0)
        return total

    def cost_pooler(self, node: ir.Pooler, n, repeat):
        d = node.width
        activation = ACTIVATIONS[node.spec.activation.name]
        # x[:, 0] is a view: the dense layer keeps the whole last hidden state alive
        memory = self.keep_input(node, node.inputs[0], self.batch * n * d * self.s, repeat)
        memory += self.keep(("own", node.id), self.batch * d * self.s)
        return self.dense(2 * d * d, d + activation.flops_per_element * d, memory, 1)  # one position


# ------------------------------------------------------------------ complexity


def complexity_classes(g: Graph) -> list[Complexity]:
    """Table 1 of the paper for the sublayer kinds this spec uses, from attention kinds and masks.

    n: sequence length, m: source length (cross-attention), d: width, r: window size.
    """
    rows: dict[str, Complexity] = {}
    for node in g.ordered():
        if isinstance(node, ir.Attention):
            spec = node.spec
            kind, options = ATTENTION_KINDS.of(spec.kind)
            masks = "+".join(MASKS.label(m) for m in spec.mask) if spec.mask else "none"
            cross = spec.reads == "cross"
            layer = f"{'Cross' if cross else 'Self'}-attention ({kind.label(options)}, mask {masks})"
            c = kind.complexity(options, cross, mask_reach(spec.mask))
            rows.setdefault(layer, Complexity(layer, c.per_layer, c.sequential, c.path, c.note))
        elif isinstance(node, ir.Mixer):
            mixer, options = node.variant()
            c = mixer.complexity(options)
            layer = f"Mixer ({mixer.label(options)})"
            rows.setdefault(layer, Complexity(layer, c.per_layer, c.sequential, c.path, c.note))
        elif isinstance(node, ir.FeedForward):
            rows.setdefault("ffn", Complexity("Feed-forward (position-wise)", "O(n·d·d_ff)", "O(1)", "none",
                                              "mixes no positions"))
    return list(rows.values())


# ------------------------------------------------------------------ sweeps


def sweep_lengths(g: Graph, lengths: list[int] | None = None) -> list[int]:
    """The sequence lengths a sweep covers: powers of two from 64 up to 8192, within learned positions; the one
    length of a model of pictures alone (a stack whose input fixes its length stays at it beside another's)."""
    free = [role for role in g.stacks if fixed_length(g, role) is None]
    if not free:
        return [fixed_length(g, next(iter(g.stacks)))]
    limits = [m for role in free if (m := max_length(g, role)) is not None]
    limit = min(limits) if limits else None
    chosen = lengths if lengths else [2 ** k for k in range(6, 14)]
    return [n for n in chosen if limit is None or n <= limit]


def sweep(spec_or_graph, lengths: list[int] | None = None, **options) -> list[Analysis]:
    """One analysis per sequence length (every stack at that length)."""
    g = _graph_of(spec_or_graph)
    return [analyse(g, seq_len=n, **options) for n in sweep_lengths(g, lengths)]
