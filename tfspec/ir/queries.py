"""Questions several stages ask of the IR, answered once: a stack's layer, its parameters, its length
limit, where its attentions stop looking ahead, and how each sublayer meets the residual stream.

>>> from tfspec import parse
>>> g = parse('''embedding tokens { vocab 100; dim 32 }
... decoder x 2 { residual pre; attention self heads=4 mask=causal; feedforward d_ff=64 }''').graph()
>>> [n.id for n in sublayers(g, "decoder")], residual_placement(g, g.node("decoder.ffn")).placement
(['decoder.self_attn', 'decoder.ffn'], 'pre-norm')
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..registry import ATTENTION_KINDS, FEEDFORWARD_KINDS, MASKS, POSITIONS, combined_reach
from .graph import Graph
from .nodes import (Add, Attention, BlockOutput, Dropout, FeedForward, Mixer, MultiTokenPrediction, Node, Norm,
                    Features, PositionEncoding, Scale, Sublayer, describe_layers)

__all__ = ["describe_layers"]  # beside the queries defined here; it lives with the node types it describes


# ---------------------------------------------------------------- layers and parameters
def layer_repeat(g: Graph, node: Node) -> int:
    """How many copies of ``node`` the model has: the number of layers of its kind inside a layer, else 1."""
    return len(layers_of(g, node)) if node.in_block else 1


def layers_of(g: Graph, node: Node) -> tuple[int, ...]:
    """The layers (of its stack) holding a copy of a layer's node."""
    return g.stacks[node.stack].kinds[node.layer_kind].layers


def weight_copies(g: Graph, node: Node) -> tuple[int, ...]:
    """The sets of weights (``{role}.layers.{index}``) holding a copy of a layer's node: one per layer of its
    kind, fewer where layers share weights (``weight_sets``)."""
    info = g.stacks[node.stack]
    return tuple(sorted({info.weights_of(i) for i in layers_of(g, node)}))


def weight_repeat(g: Graph, node: Node) -> int:
    """How many copies of ``node``'s parameters the model holds (``layer_repeat`` counts how often it runs)."""
    return len(weight_copies(g, node)) if node.in_block else 1


def layer_template(g: Graph, role: str, kind: int = 0) -> list[Node]:
    """The nodes of one kind of ``role``'s layers (a uniform stack has one), in the order its forward runs them."""
    return [n for n in g.of(Node, stack=role, in_block=True) if n.layer_kind == kind]


def sublayers(g: Graph, role: str, kind: int | None = None) -> list[Attention | FeedForward | Mixer]:
    """The attention, feed-forward and mixer nodes of ``role``'s layers (of one kind, or of every kind), in order."""
    return [n for n in g.of(Sublayer, stack=role, in_block=True) if kind is None or n.layer_kind == kind]


def attentions(g: Graph, role: str | None = None, *, reads: str | None = None) -> list[Attention]:
    """Attention nodes (of one stack; only self- or cross-attentions)."""
    return [n for n in g.of(Attention, stack=role) if reads is None or n.spec.reads == reads]


def parameter_table(g: Graph) -> dict[str, tuple[int, ...]]:
    """Every parameter tensor by its full name (the compiled module's state-dict name).

    Shared weights appear once, under their owner's name; a template layer's
    tensors are listed once per set of weights (``decoder.layers.0.ffn.up.weight``, ...).
    A model of towers' (``TowersGraph``): each tower's under ``towers.NAME``, then the joins'.
    """
    if not isinstance(g, Graph):
        return g.parameter_table()
    table: dict[str, tuple[int, ...]] = {}
    for node in g.ordered():
        for module in module_copies(g, node):
            for name, param in node.params.items():
                table.setdefault(f"{module}.{name}", tuple(param.shape))
    return table


def module_copies(g: Graph, node: Node) -> list[str]:
    """The dotted module prefix of each copy of ``node``'s parameters (one per layer inside a layer)."""
    if not node.params:
        return []
    return [node.module.at(i) for i in (weight_copies(g, node) if node.in_block else [None])]


def count_parameters(g: Graph) -> int:
    """Total parameters, shared (tied) weights counted once."""
    seen, total = set(), 0
    for node in g.ordered():
        if node.params and (key := weights_key(g, node)) not in seen:
            seen.add(key)
            total += sum(math.prod(p.shape) for p in node.params.values()) * weight_repeat(g, node)
    return total


def training_only_parameters(g: Graph) -> int:
    """The parameters only training runs: multi-token prediction's modules (DeepSeek-V3's 14B beside its 671B);
    0 without them. ``count_parameters`` counts them too, as the compiled model holds them."""
    return sum(math.prod(p.shape) for node in g.of(MultiTokenPrediction) for p in node.params.values())


def active_parameters(g: Graph) -> int:
    """The parameters one position's computation reads at inference: every one, less the experts a mixture does
    not choose (``FeedForwardKind.active_params``) and those only training runs (``training_only_parameters``).
    Equal to ``count_parameters`` for a model without either."""
    unused, seen = 0, set()
    for node in g.of(FeedForward):
        if (key := weights_key(g, node)) in seen:
            continue
        seen.add(key)
        kind, options = FEEDFORWARD_KINDS.of(node.spec.kind)
        total = sum(math.prod(p.shape) for p in node.params.values())
        unused += (total - kind.active_params(node.width, node.spec, options)) * weight_repeat(g, node)
    return count_parameters(g) - unused - training_only_parameters(g)


def kv_cache_elements(g: Graph, length: int) -> tuple[int, int]:
    """Elements a decoder's KV cache holds per sequence after ``length`` tokens, summed over its self-attentions
    (a layer whose masks bound its look-back keeps that many): as each attention's kind caches them
    (``AttentionKind.cache_elements``: a latent attention's latent; none where a layer reads an earlier one's,
    ``kv_from``), and as multi-head attention of the same heads would (each head of each layer its own key and
    value). (0, 0): the model has no decoder.

    >>> from tfspec import parse
    >>> kv_cache_elements(parse("embedding t { vocab 9; dim 16 }\\n"
    ...                         "decoder x 2 { attention self heads=4 kv_heads=1 mask=causal; feedforward d_ff=8 }"
    ...                         ).graph(), 10)
    (160, 640)
    """
    ours = multi_head = 0
    for node in attentions(g, "decoder", reads="self"):
        kind, options = ATTENTION_KINDS.of(node.spec.kind)
        shape, repeat = node.geometry, layer_repeat(g, node)
        behind, ahead = combined_reach([MASKS.of(m) for m in node.spec.mask])
        kept = min(length, behind) if behind is not None and ahead == 0 else length
        if node.keys_from is None:  # (one reading an earlier layer's keys and values keeps none of its own)
            ours += repeat * kept * kind.cache_elements(shape, options)
        multi_head += repeat * kept * shape.heads * (shape.head_dim + kind.value_dim(shape, options))
    return ours, multi_head


def attention_everywhere_elements(g: Graph, length: int) -> int:
    """What a hybrid decoder's KV cache would hold per sequence after ``length`` tokens were every layer with a
    mixer one with its stack's first self-attention (its kind's cache, its masks' look-back): the all-attention
    model of the same shape a hybrid is measured against; 0 without a mixer or a self-attention."""
    mixed = sum(layer_repeat(g, node) for node in g.of(Mixer, stack="decoder"))
    first = next(iter(attentions(g, "decoder", reads="self")), None)
    if not mixed or first is None:
        return 0
    kind, options = ATTENTION_KINDS.of(first.spec.kind)
    behind, ahead = combined_reach([MASKS.of(m) for m in first.spec.mask])
    kept = min(length, behind) if behind is not None and ahead == 0 else length
    return kv_cache_elements(g, length)[0] + mixed * kept * kind.cache_elements(first.geometry, options)


def state_bytes(g: Graph, element_bytes: int) -> int:
    """Bytes a decoder's mixers keep per sequence while decoding with activations of ``element_bytes``
    (``TokenMixer.state_bytes``: a float32 state stays so), summed over its layers; 0 without a mixer."""
    total = 0
    for node in g.of(Mixer, stack="decoder"):
        mixer, options = node.variant()
        total += layer_repeat(g, node) * mixer.state_bytes(node.width, options, element_bytes)
    return total


def state_elements(g: Graph) -> int:
    """Elements a decoder's mixers keep per sequence while decoding, whatever the length (``TokenMixer.state_elements``:
    a short convolution's last inputs), summed over its layers; 0 without a mixer."""
    total = 0
    for node in g.of(Mixer, stack="decoder"):
        mixer, options = node.variant()
        total += layer_repeat(g, node) * mixer.state_elements(node.width, options)
    return total


def weights_key(g: Graph, node: Node) -> tuple[str, ...]:
    """What identifies a node's weights: the modules of its copies. Two nodes with one key share them (an
    embedding both stacks read); a layer kind's nodes are other layers' modules than another kind's."""
    return tuple(module_copies(g, node))


def owner_of(g: Graph, full_name: str) -> list[Node]:
    """The nodes owning the module of parameter ``full_name`` (two for an embedding both stacks read)."""
    module = full_name.rsplit(".", 1)[0]
    return [n for n in g.ordered() if n.module is not None and str(n.module) == module]


# ---------------------------------------------------------------- lengths
def length_limit(g: Graph, role: str) -> tuple[int, str] | None:
    """The longest sequence a stack accepts and what sets it: ``(512, "learned positions")`` from a table of
    learned positions, or a self-attention kind's (a Linformer projection's) ``max_len``; None: unbounded."""
    limits = []
    for node in g.of(PositionEncoding, stack=role):
        variant, options = POSITIONS.of(node.choice)
        limits.append((variant.max_len(options), f"{variant.name} positions"))
    for node in attentions(g, role, reads="self"):
        variant, options = ATTENTION_KINDS.of(node.spec.kind)
        limits.append((variant.max_len(options), f"{variant.name} attention's projections"))
    limits = [(limit, source) for limit, source in limits if limit is not None]
    return min(limits) if limits else None


def max_length(g: Graph, role: str) -> int | None:
    """The longest sequence a stack accepts, or None (see ``length_limit``)."""
    limit = length_limit(g, role)
    return limit[0] if limit is not None else None


def fixed_length(g: Graph, role: str) -> int | None:
    """The one length a stack runs at, where its input fixes it (an input kind's: pictures' patches and class
    token)."""
    return next((node.length for node in g.of(Features, stack=role)), None)


def reads_any_picture_size(g: Graph, role: str) -> bool:
    """Does a stack of pictures' patches mean the same on pictures of other sizes than its spec's, square or not?
    Where nothing in it numbers a picture but by each patch's row and column in its own grid (of the width a tower
    fills, ``RuntimeInput.grid``: ``rotary_2d``'s and ``tiles``'): no table of positions, no length limit,
    no token mixer, and each self-attention's position scheme and each mask reading positions reading the grid.
    (Qwen2.5-VL's and Pixtral's vision towers do; ViT's and CLIP's, whose learned table numbers one grid, do not.)"""
    if fixed_length(g, role) is None or g.of((PositionEncoding, Mixer), stack=role) or length_limit(g, role):
        return False

    def reads_grid(variant) -> bool:
        return any(i.grid for i in variant.inputs)

    for node in attentions(g, role):
        position = POSITIONS.of(node.spec.position)[0]
        if not (position.absent or reads_grid(position)):
            return False
        if any(MASKS[m.name].reads_positions and not reads_grid(MASKS[m.name]) for m in node.spec.mask):
            return False
    return True


def default_length(g: Graph) -> int:
    """The length analyses use by default for the stacks whose input does not fix theirs: the shortest limit of
    theirs, else 512; a model whose every stack's input fixes it (pictures'): the shortest of those."""
    fixed = [n for role in g.stacks if (n := fixed_length(g, role)) is not None]
    free = [role for role in g.stacks if fixed_length(g, role) is None]
    if not free:
        return min(fixed)
    limits = [m for role in free if (m := max_length(g, role)) is not None]
    return min(limits) if limits else 512


# ---------------------------------------------------------------- masks and dropout
def causal_from(g: Graph) -> set[str] | None:
    """Where the decoder's self-attentions and mixers stop looking ahead: {"start"} when causal throughout, the
    names of run-time inputs that end a bidirectional prefix (prefix-LM), or None when something looks ahead."""
    if "decoder" not in g.stacks:
        return None
    if not all(node.variant()[0].causal for node in g.of(Mixer, stack="decoder")):
        return None
    points: set[str] = set()
    for node in attentions(g, "decoder", reads="self"):
        found = {MASKS.of(m)[0].causal_from(MASKS.of(m)[1]) for m in node.spec.mask} - {None}
        if not found:
            return None
        if "start" not in found:  # masks combine by intersection: one causal mask makes the whole causal
            points |= found
    return points or {"start"}


def has_dropout(g: Graph) -> bool:
    """Any dropout at all: the IR has a dropout node only where p > 0, and sublayers carry their own rates."""
    return bool(g.of(Dropout)) or any(n.spec.dropout > 0 for n in g.of(Sublayer))


# ---------------------------------------------------------------- residual placement
@dataclass(frozen=True)
class Placement:
    """How a sublayer meets the residual stream, read from the wiring around it (not from how it was written).

    placement: "pre-norm", "post-norm", "no norm", "none" (no residual) or "parallel (...)"; norm: the norm's
    choice (None: none); dropout: the rate on the sublayer's output; scale: the residual stream's factor.
    """

    placement: str
    norm: object | None
    dropout: float
    scale: float
    add: Add | None  # the residual sum it flows into
    merged_norm: Norm | None = None  # post-norm: the norm right after the sum (drawn with it)


def residual_placement(g: Graph, node: Node) -> Placement:
    """Pre-norm: a norm feeds the sublayer, the sum follows; post-norm: a norm right after the sum (its only
    reader); parallel: one sum of several sublayers."""
    before = g.node(node.inputs[0])
    add, dropout = _residual_add(g, node)
    norm_before = before.choice if isinstance(before, Norm) else None
    if add is None:
        return Placement("none", norm_before, dropout, 1.0, None)
    scales = [g.node(src).factor for src, port in zip(add.inputs, add.ports)
              if port == "residual" and isinstance(g.node(src), Scale)]
    scale = scales[0] if scales else 1.0
    after = post_norm(g, add)
    if len(add.inputs) > 2:
        return Placement("parallel (one sum of several sublayers)", norm_before, dropout, scale, add)
    if after is not None:
        return Placement("post-norm", after.choice, dropout, scale, add, after)
    return Placement("pre-norm" if norm_before is not None else "no norm", norm_before, dropout, scale, add)


def post_norm(g: Graph, add: Node) -> Norm | None:
    """The norm a residual sum feeds alone (post-norm's "Add & Norm"), if any."""
    if not isinstance(add, Add) or not add.in_block or "residual" not in add.ports:
        return None
    readers = g.consumers(add.id)
    return readers[0] if len(readers) == 1 and isinstance(readers[0], Norm) and readers[0].in_block else None


def _residual_add(g: Graph, node: Node) -> tuple[Add | None, float]:
    """The residual sum a sublayer's output flows into (through its dropout, and a constant scaling the branch --
    Granite's ``x + m * attention(...)`` --, if any), and that dropout's rate."""
    out, dropout = node, 0.0
    readers = g.consumers(out.id)
    while len(readers) == 1 and isinstance(readers[0], (Dropout, Scale)):
        out = readers[0]
        dropout = out.p if isinstance(out, Dropout) else dropout
        readers = g.consumers(out.id)
    adds = [r for r in readers if isinstance(r, Add) and "residual" in r.ports]
    return (adds[0] if adds else None), dropout


def source(g: Graph, node: Node) -> Node:
    """The node whose tensor ``node`` passes on unchanged (a layer's exit is its last node)."""
    while isinstance(node, BlockOutput):
        node = g.node(node.inputs[0])
    return node
