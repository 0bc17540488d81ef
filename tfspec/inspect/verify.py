"""Stage 6, verify: the invariants a compiled spec claims, checked on the model itself.

Each property is a plain function of a model and concrete inputs that
returns ``None`` when it holds and a description of the violation otherwise;
``verify`` draws the inputs with Hypothesis, so a violation comes back shrunk
to a minimal counterexample. The test suite calls the same functions over
generated specs.

- causality: in a decoder, changing tokens after position i never changes outputs at positions <= i
  (for a mask causal only after a prefix -- prefix-LM -- for i at or after the prefix)
- permutation equivariance: without positions or structural masks, f(P x) = P f(x)
- offset invariance: with relative positions only (rotary, ALiBi), shifting every position id by a
  constant leaves the outputs unchanged
- padding invariance: outputs at real positions ignore what padded positions contain
- window locality: with window(k) self-attention only, output i depends on tokens within reach of i
- finite gradients: every parameter gets a finite gradient from one backward pass
- determinism: in eval mode two calls agree; in train mode with dropout they differ
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st

from ..front import schema as S
from ..front.resolve_stacks import _attentions as layer_attentions, _with_attentions as with_attentions
from .analysis import mask_reach
from ..errors import SpecError
from ..ir import nodes as ir
from ..ir import queries
from ..ir.queries import attentions
from ..nn.context import Context
from ..nn.per_layer import CARRIED as PER_LAYER
from ..registry import ATTENTION_KINDS, CONNECTOR_STEPS, FEEDFORWARD_KINDS, INPUTS, MASKS, POOLS, POSITIONS

TOLERANCE = 1e-5


@dataclass
class Result:
    name: str
    status: str  # "held", "violated", "not applicable"
    detail: str


# ---------------------------------------------------------------- facts about a model
def main_output(out):
    return out[0] if isinstance(out, tuple) else out


def vocab(model, role: str) -> int:
    return model.embeddings[model.stack_embedding[role]].vocab


def max_length(model, role: str, cap: int) -> int:
    limit = model.max_len[role]
    return min(cap, limit) if limit is not None else cap


def self_attentions(spec: S.Spec, role: str) -> list[S.Attention]:
    return [node.spec for node in attentions(spec.graph(), role, reads="self")]


def run(model, tokens: torch.Tensor, padding_mask=None, src=None, src_padding_mask=None, **inputs) -> torch.Tensor:
    """The main output for ``tokens`` (for an encoder-decoder: ``tokens`` is tgt, ``src`` its source); where the
    head pools each sequence into one vector, the stack's output, whose positions the properties are about.

    ``inputs``: run-time inputs of the stack ``tokens`` enters (``position_ids``, ``prefix_lengths``, ...).
    """
    if model.spec.kind != "encoder-decoder" and model.head is not None and model.head.pool is not None:
        return model.run_stack(model.spec.stacks[0].role, "tokens", tokens, padding_mask, inputs)
    if model.spec.kind == "encoder-decoder":
        return main_output(model(src, tokens, src_padding_mask, padding_mask,
                                 **{f"tgt_{k}": v for k, v in inputs.items()}))
    return main_output(model(tokens, padding_mask, **inputs))


def _differs(a: torch.Tensor, b: torch.Tensor) -> float:
    """Largest difference beyond tolerance (relative to the output's scale), 0.0 when equal."""
    diff = (a - b).abs().max().item() if a.numel() else 0.0
    scale = 1.0 + max(a.abs().max().item() if a.numel() else 0.0, 0.0)
    return diff if diff > TOLERANCE * scale else 0.0


def _ids(t: torch.Tensor) -> list:
    return t.tolist()


# ---------------------------------------------------------------- the properties
def check_causal(model, tokens: torch.Tensor, position: int, replacement: torch.Tensor, src=None,
                 **inputs) -> str | None:
    """Tokens after ``position`` replaced by ``replacement``: outputs at <= position must not move."""
    changed = tokens.clone()
    changed[:, position + 1:] = replacement
    with torch.no_grad():
        a, b = run(model, tokens, src=src, **inputs), run(model, changed, src=src, **inputs)
    worst = _differs(a[:, : position + 1], b[:, : position + 1])
    if worst:
        return (f"changing the tokens after position {position} ({_ids(tokens)} -> {_ids(changed)}) changed the "
                f"output at positions <= {position} by up to {worst:.3g}: the decoder sees the future")
    return None


def check_permutation(model, tokens: torch.Tensor, permutation: list[int]) -> str | None:
    """f(P x) == P f(x) for a permutation of the positions."""
    order = torch.tensor(permutation)
    with torch.no_grad():
        a, b = run(model, tokens)[:, order], run(model, tokens[:, order])
    worst = _differs(a, b)
    if worst:
        return (f"permuting positions by {permutation} (tokens {_ids(tokens)}) did not permute the output "
                f"(difference up to {worst:.3g}): the model depends on position")
    return None


def check_padding(model, tokens: torch.Tensor, lengths: list[int], filler: torch.Tensor, src=None,
                  src_lengths=None, src_filler=None) -> str | None:
    """Outputs at real positions are the same whatever the padded positions hold."""
    def pad_mask(t, lens):
        return torch.arange(t.shape[1])[None, :] >= torch.tensor(lens)[:, None]

    def refill(t, mask, fill):
        return torch.where(mask, fill, t)

    mask = pad_mask(tokens, lengths) if lengths is not None else None
    src_mask = pad_mask(src, src_lengths) if src_lengths is not None else None
    other = refill(tokens, mask, filler) if mask is not None else tokens
    other_src = refill(src, src_mask, src_filler) if src_mask is not None else src
    with torch.no_grad():
        a = run(model, tokens, mask, src, src_mask)
        b = run(model, other, mask, other_src, src_mask)
    real = ~mask if mask is not None else torch.ones(tokens.shape, dtype=torch.bool)
    worst = _differs(a[real], b[real])
    if worst:
        src_text = f", src {_ids(src)} -> {_ids(other_src)} with lengths {src_lengths}" if src_mask is not None else ""
        tgt_text = f"tokens {_ids(tokens)} -> {_ids(other)} with lengths {lengths}" if mask is not None else "same tokens"
        return f"changing padded positions ({tgt_text}{src_text}) changed real outputs by up to {worst:.3g}"
    return None


def check_offset(model, tokens: torch.Tensor, shift: int, src=None) -> str | None:
    """Position ids shifted by ``shift``: the outputs must not change (relative positions only)."""
    positions = torch.arange(tokens.shape[1])[None]
    with torch.no_grad():
        a = run(model, tokens, src=src, position_ids=positions)
        b = run(model, tokens, src=src, position_ids=positions + shift)
    worst = _differs(a, b)
    if worst:
        return (f"shifting every position id by {shift} (tokens {_ids(tokens)}) changed the output by up to "
                f"{worst:.3g}: the model depends on absolute positions")
    return None


def check_window(model, tokens: torch.Tensor, position: int, reach: int, replacement: int) -> str | None:
    """Tokens farther than ``reach`` from ``position`` cannot affect output ``position``."""
    far = [j for j in range(tokens.shape[1]) if abs(j - position) > reach]
    if not far:
        return None
    changed = tokens.clone()
    changed[:, far] = replacement
    with torch.no_grad():
        a, b = run(model, tokens)[:, position], run(model, changed)[:, position]
    worst = _differs(a, b)
    if worst:
        return (f"output {position} changed by {worst:.3g} when tokens at {far} (farther than {reach}) changed "
                f"({_ids(tokens)} -> {_ids(changed)})")
    return None


def typical_inputs(model, tokens: torch.Tensor, src=None) -> dict[str, torch.Tensor]:
    """Every stack's run-time inputs as a typical call has them (each ``RuntimeInput.example``: Longformer's first
    token global), named as the model takes them, so a parameter only such a call reaches gets its gradient."""
    inputs = {}
    for role, ids in (("encoder", src if src is not None else tokens), ("decoder", tokens)):
        stack = getattr(model, role, None)
        if stack is None:
            continue
        prefix = {"encoder": "src_", "decoder": "tgt_"}[role] if model.spec.kind == "encoder-decoder" else ""
        inputs.update({prefix + name: torch.tensor([spec.example(ids.shape[1])] * ids.shape[0])
                       for name, spec in stack.inputs.items() if spec.example is not None})
    return inputs


def check_gradients(model, tokens: torch.Tensor, src=None) -> str | None:
    """One backward pass, a typical call's (``typical_inputs``), of a loss of its outputs and the losses its
    sublayers add (``auxiliary_losses``: a sparse attention's indexer learns there alone), reaches every parameter
    with a finite gradient."""
    model.zero_grad(set_to_none=True)
    inputs = typical_inputs(model, tokens, src)
    out = model(src, tokens, **inputs) if model.spec.kind == "encoder-decoder" else model(tokens, **inputs)
    loss = sum(o.float().square().mean() for o in (out if isinstance(out, tuple) else (out,)))
    (loss + sum(model.auxiliary_losses().values())).backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None and p.requires_grad]  # (frozen: none due)
    bad = [n for n, p in model.named_parameters() if p.grad is not None and not torch.isfinite(p.grad).all()]
    model.zero_grad(set_to_none=True)
    if missing or bad:
        return "; ".join(filter(None, [f"no gradient for {missing}" if missing else "",
                                       f"non-finite gradient for {bad}" if bad else ""]))
    return None


def check_determinism(model, tokens: torch.Tensor, src=None) -> str | None:
    """In eval mode two calls agree exactly."""
    was_training = model.training
    model.eval()
    with torch.no_grad():
        a, b = run(model, tokens, src=src), run(model, tokens, src=src)
    model.train(was_training)
    if not torch.equal(a, b):
        return f"two eval-mode calls on {_ids(tokens)} differ by {(a - b).abs().max().item():.3g}"
    return None


def check_dropout_active(model, tokens: torch.Tensor, src=None, calls: int = 10) -> str | None:
    """In train mode with dropout, calls differ. Several calls, since a tiny input can escape every drop once.

    An output that is exactly zero (a residual-free stack whose signal underflowed) cannot
    show dropout; that is not counted as a violation.
    """
    was_training = model.training
    model.train()
    with torch.no_grad():
        first = run(model, tokens, src=src)
        if not first.any():
            model.train(was_training)
            return None
        differs = any(not torch.equal(first, run(model, tokens, src=src)) for _ in range(calls - 1))
    model.train(was_training)
    if not differs:
        return f"the spec has dropout, but {calls} train-mode calls on {_ids(tokens)} gave identical outputs"
    return None


# ---------------------------------------------------------------- which properties apply
def has_dropout(spec: S.Spec) -> bool:
    """Any dropout at all (``tfspec.ir.queries.has_dropout``)."""
    return queries.has_dropout(spec.graph())


def window_reaches(spec: S.Spec, role: str) -> dict[int, int | None]:
    """How far one layer's self-attentions and mixers can carry information, for the first layer of each kind (one
    for a uniform stack); None for a kind whose self-attention or mixer sees unboundedly far. A kind attending with
    keys an earlier layer made (``kv_from``) runs only after that layer, so it is not a layer to run alone: it has
    no entry (the whole model's properties check it)."""
    g = spec.graph()
    info = g.stacks[role]
    reaches: dict[int, int | None] = {}
    for k, kind in enumerate(info.kinds):
        if any(n.keys_from is not None for n in g.of(ir.Attention, stack=role, in_block=True) if n.layer_kind == k):
            continue
        reach = 0
        for node in g.of(ir.Sublayer, stack=role, in_block=True):
            if node.layer_kind != k or reach is None:
                continue
            if isinstance(node, ir.Mixer):
                mixer, options = node.variant()
                far = mixer.reach(options)
                reach = None if far is None else reach + far
            elif isinstance(node, ir.Attention) and node.spec.reads == "self":
                behind, ahead = mask_reach(node.spec.mask)
                reach = None if behind is None or ahead is None else reach + max(behind, ahead)
        reaches[kind.layers[0]] = reach
    return reaches


def position_schemes(spec: S.Spec, role: str) -> list:
    """The position variants a stack uses, with their options: its embedding's and those acting inside its
    attentions."""
    schemes = [POSITIONS.of(spec.embedding(getattr(spec, role).embedding).position)]
    schemes += [POSITIONS.of(a.position) for a in self_attentions(spec, role)]
    return [(s, options) for s, options in schemes if not s.absent]


def position_masks(spec: S.Spec, role: str) -> list[str]:
    """The masks of a stack's self-attentions that compare position ids (``chunked``), not indices in the sequence."""
    return sorted({m.name for a in self_attentions(spec, role) for m in a.mask if MASKS[m.name].reads_positions})


def structural_masks(spec: S.Spec, role: str) -> list[str]:
    return sorted({m.name for a in self_attentions(spec, role) for m in a.mask if MASKS[m.name].structural})


def order_mixing_kinds(spec: S.Spec, role: str) -> list[str]:
    """What mixes positions by where they are: attention kinds (Linformer's projection along the sequence) and
    mixers (a convolution over the last positions, a recurrence), as "linformer attention", "shortconv mixer"."""
    kinds = {f"{a.kind.name} attention" for a in self_attentions(spec, role)
             if ATTENTION_KINDS[a.kind.name].mixes_by_place}
    mixers = {f"{node.spec.kind.name} mixer" for node in spec.graph().of(ir.Mixer, stack=role)}
    return sorted(kinds | mixers)


def accepts_padding(model, role: str) -> bool:
    stack = getattr(model, role)
    if role == "encoder" and model.spec.kind == "encoder-decoder":
        return stack.masks_padding or model.decoder.memory_masks_padding
    return stack.masks_padding


# ---------------------------------------------------------------- the Hypothesis runner
def _search(prop: Callable, strategy, examples: int, seed: int) -> str | None:
    """Run ``prop`` on drawn inputs; the minimal violation found, or None."""
    failures: list[str] = []

    @hypothesis_seed(seed)  # reproducible runs of `tfspec verify`
    @settings(max_examples=examples, deadline=None, database=None,
              suppress_health_check=list(HealthCheck), print_blob=False)
    @given(strategy)
    def search(case):
        message = prop(case)
        if message:
            failures.append(message)
            raise AssertionError(message)

    try:
        search()
    except Exception:  # noqa: BLE001 - Hypothesis re-raises the (shrunk) failure; the message is recorded
        if not failures:
            raise
    return failures[-1] if failures else None


def _tokens(v: int, batch: int, length: int):
    return st.lists(st.lists(st.integers(0, v - 1), min_size=length, max_size=length), min_size=batch,
                    max_size=batch).map(lambda rows: torch.tensor(rows, dtype=torch.long))


@st.composite
def _sequence(draw, v: int, max_len: int, min_len: int = 1):
    batch = draw(st.integers(1, 2))
    length = draw(st.integers(min_len, max_len))
    return draw(_tokens(v, batch, length))


@dataclass
class Subject:
    """What every property reads: the model, its main stack, the inputs' sizes and the search's budget."""

    model: object
    examples: int
    seed: int
    max_len: int

    def __post_init__(self):
        self.spec = self.model.spec
        self.kind = self.spec.kind
        self.role = "decoder" if self.spec.decoder is not None else "encoder"
        self.length = max_length(self.model, self.role, self.max_len)
        self.v = vocab(self.model, self.role)
        # pictures in place of token ids: the searches over token sequences do not apply
        self.pictures = self.model.embeddings[self.model.stack_embedding[self.role]] if self.v is None else None

    def sources(self, batch: int):
        """An encoder-decoder's source rows for a target batch (``None`` for a single stack): token ids, or an
        input kind's tensors (spectrograms), drawn from a seed."""
        if self.kind != "encoder-decoder":
            return st.just(None)
        given = self.model.embeddings[self.model.stack_embedding["encoder"]]
        if given.vocab is None:
            return st.integers(0, 2 ** 31 - 1).map(
                lambda seed: torch.randn(batch, *given.shape, generator=torch.Generator().manual_seed(seed)))
        return st.integers(1, max_length(self.model, "encoder", self.max_len)).flatmap(
            lambda n: _tokens(vocab(self.model, "encoder"), batch, n))

    def search(self, prop: Callable, strategy) -> str | None:
        return _search(prop, strategy, self.examples, self.seed)

    def fixed_inputs(self):
        """Random tokens (and source) for the properties that need no search."""
        generator = torch.Generator().manual_seed(self.seed)
        if self.pictures is not None:
            return torch.randn(2, *self.pictures.shape, generator=generator), None
        tokens = torch.randint(0, self.v, (2, self.length), generator=generator)
        src = None
        if self.kind == "encoder-decoder":
            given = self.model.embeddings[self.model.stack_embedding["encoder"]]
            src = torch.randn(2, *given.shape, generator=generator) if given.vocab is None else torch.randint(
                0, given.vocab, (2, max_length(self.model, "encoder", self.max_len)), generator=generator)
        return tokens, src


PICTURES = "the model reads pictures, whose patches come in one order and length; searched over token sequences"


def _outcome(name: str, found: str | None, held: str) -> Result:
    return Result(name, "violated" if found else "held", found or held)


def causality(s: Subject) -> Result:
    """In a decoder, changing tokens after position i never changes outputs at positions <= i (after the
    prefix, for a prefix-LM)."""
    if s.spec.decoder is None:
        return Result("causality", "not applicable", "no decoder: an encoder sees the whole sequence")
    if s.length < 2:
        return Result("causality", "not applicable", "sequences of length 1 have no future")
    prefixed = sorted((queries.causal_from(s.spec.graph()) or {"start"}) - {"start"})  # None: the search shows
    src_strategy = s.sources(1)

    @st.composite
    def case(draw):
        tokens = draw(st.integers(2, max(2, s.length)).flatmap(lambda n: _tokens(s.v, 1, n)))
        # a prefix-LM is causal after its prefix: draw the prefix, then a position at or after it
        inputs = {name: torch.tensor([draw(st.integers(0, tokens.shape[1] - 2))]) for name in prefixed}
        start = max([int(t) for t in inputs.values()], default=0)
        position = draw(st.integers(start, tokens.shape[1] - 2))
        replacement = draw(_tokens(s.v, 1, tokens.shape[1] - position - 1))
        return tokens, position, replacement, draw(src_strategy), inputs

    found = s.search(lambda c: check_causal(s.model, c[0], c[1], c[2], c[3], **c[4]), case())
    after = f" after the prefix ({', '.join(prefixed)})" if prefixed else ""
    return _outcome("causality", found, f"changing later target tokens{after} never changed earlier outputs")


def permutation_equivariance(s: Subject) -> Result:
    """Without positions, structural masks or kinds that mix positions by place: f(P x) = P f(x)."""
    name = "permutation equivariance"
    schemes, structural = position_schemes(s.spec, s.role), structural_masks(s.spec, s.role)
    if s.kind == "encoder-decoder":
        return Result(name, "not applicable", "an encoder-decoder's output positions follow the target; checked "
                                              "for single-stack models")
    if s.pictures is not None:
        return Result(name, "not applicable", PICTURES)
    if schemes or structural or order_mixing_kinds(s.spec, s.role):
        why = (f"the spec has {', '.join(dict.fromkeys(x.name for x, _ in schemes))} positions" if schemes
               else f"the spec masks with {structural}" if structural
               else f"{' and '.join(order_mixing_kinds(s.spec, s.role))} "
                    f"{'mixes' if len(order_mixing_kinds(s.spec, s.role)) == 1 else 'mix'} positions by their place")
        return Result(name, "not applicable", f"{why}, so outputs may depend on order")

    @st.composite
    def case(draw):
        tokens = draw(_sequence(s.v, s.length, 2))
        return tokens, draw(st.permutations(range(tokens.shape[1])))

    found = s.search(lambda c: check_permutation(s.model, c[0], list(c[1])), case())
    return _outcome(name, found, "f(P x) = P f(x) for every permutation tried")


def offset_invariance(s: Subject) -> Result:
    """With relative positions only, shifting every position id by a constant leaves the outputs unchanged."""
    schemes = position_schemes(s.spec, s.role)
    absolute = [x.name for x, options in schemes if not x.relative_with(options)]
    if not schemes:
        return Result("offset invariance", "not applicable", "the spec has no positions")
    if absolute:
        return Result("offset invariance", "not applicable",
                      f"{', '.join(absolute)} positions are absolute: outputs depend on where a sequence starts")
    if counted := position_masks(s.spec, s.role):
        return Result("offset invariance", "not applicable",
                      f"{', '.join(counted)} masks compare position ids: outputs depend on where a sequence starts")
    if s.pictures is not None:
        return Result("offset invariance", "not applicable", PICTURES)

    @st.composite
    def case(draw):
        tokens = draw(_sequence(s.v, s.length, 2))
        return tokens, draw(st.integers(1, 1000)), draw(s.sources(tokens.shape[0]))

    found = s.search(lambda c: check_offset(s.model, c[0], c[1], c[2]), case())
    return _outcome("offset invariance", found, "shifting every position id by a constant never changed the outputs")


def padding_invariance(s: Subject) -> Result:
    """Outputs at real positions ignore what padded positions contain."""
    target_pads = accepts_padding(s.model, s.role)
    # (a source of spectrograms has no padded positions of its own to fill)
    source_pads = s.kind == "encoder-decoder" and accepts_padding(s.model, "encoder") and vocab(s.model, "encoder")
    if not (target_pads or source_pads):
        return Result("padding invariance", "not applicable", "no attention masks padding")

    @st.composite
    def case(draw):
        tokens = draw(_sequence(s.v, s.length))
        lengths = [draw(st.integers(1, tokens.shape[1])) for _ in range(tokens.shape[0])] if target_pads else None
        filler = draw(_tokens(s.v, *tokens.shape))
        src = src_lengths = src_filler = None
        if s.kind == "encoder-decoder":
            src = draw(s.sources(tokens.shape[0]))
            if source_pads:
                src_lengths = [draw(st.integers(1, src.shape[1])) for _ in range(src.shape[0])]
                src_filler = draw(_tokens(vocab(s.model, "encoder"), *src.shape))
        return tokens, lengths, filler, src, src_lengths, src_filler

    found = s.search(lambda c: check_padding(s.model, *c), case())
    return _outcome("padding invariance", found, "outputs at real positions never depended on padded content")


def window_locality(s: Subject) -> Result:
    """With bounded self-attention only, one layer's output i depends only on tokens within its reach of i;
    each kind of layer (of a layer schedule) is checked on its own."""
    name = "window locality"
    reaches = window_reaches(s.spec, s.role) if s.kind != "encoder-decoder" else {}
    bounded = {layer: reach for layer, reach in reaches.items() if reach is not None}
    if not bounded:
        return Result(name, "not applicable", "some self-attention sees unboundedly far")
    if s.pictures is not None:
        return Result(name, "not applicable", PICTURES)
    held = []
    for layer, reach in bounded.items():
        single_length = max_length(s.model, s.role, max(s.max_len, reach + 2))
        if single_length < reach + 2:
            return Result(name, "not applicable", f"not testable: a layer reaches {reach} positions, but the model "
                                                  f"takes at most {single_length} (learned positions)")
        single = _single_layer(s.model, layer)

        @st.composite
        def case(draw, reach=reach, single_length=single_length):
            # longer than the reach, or nothing lies outside it and the check could not fail; drawn from a
            # seed, since a window of thousands of tokens is far beyond what Hypothesis generates element-wise
            n = draw(st.integers(reach + 2, single_length))
            seed = draw(st.integers(0, 2 ** 31 - 1))
            tokens = torch.randint(0, s.v, (1, n), generator=torch.Generator().manual_seed(seed))
            return tokens, draw(st.integers(0, tokens.shape[1] - 1)), draw(st.integers(0, s.v - 1))

        found = s.search(lambda c: check_window(single, c[0], c[1], reach, c[2]), case())
        if found:
            return Result(name, "violated", found if len(reaches) == 1 else f"layer {layer}: {found}")
        held.append(f"sequences of {reach + 2}-{single_length} tokens, output i depended only on tokens within "
                    f"{reach} of i" + (f" (layer {layer})" if len(reaches) > 1 else ""))
    unbounded = [layer for layer, reach in reaches.items() if reach is None]
    rest = (f"; layer{'s' if len(unbounded) > 1 else ''} {', '.join(map(str, unbounded))} (and those of "
            f"{'their kinds' if len(unbounded) > 1 else 'its kind'}) see unboundedly far") if unbounded else ""
    return Result(name, "held", "with one layer and " + "; ".join(held) + rest)


def check_feedforward_alone(module, x: torch.Tensor, row: int, position: int, replacement: torch.Tensor,
                            per_layer: torch.Tensor | None = None) -> str | None:
    """A feed-forward's output at (``row``, ``position``) is unchanged when every other position of the batch,
    in every row, becomes ``replacement``; ``per_layer``: the layer's per-layer inputs it reads (the same in both
    calls), where its kind reads them."""
    changed = replacement.clone()
    changed[row, position] = x[row, position]
    ctx = None
    if per_layer is not None:
        ctx = Context(torch.arange(x.shape[1])[None])
        ctx.carried[PER_LAYER], ctx.layer = per_layer, 0
    run = module if ctx is None else (lambda t: module(t, ctx))
    with torch.no_grad():
        a, b = run(x)[row, position], run(changed)[row, position]
    gap = _differs(a[None], b[None])
    if gap:
        return (f"replacing the other positions of the batch changed the feed-forward's output at row {row}, "
                f"position {position} by {gap:.3g}: it does not map each position by itself")
    return None


def feedforward_locality(s: Subject) -> Result:
    """Each feed-forward sublayer maps every position by itself: its output at a position does not change when the
    other positions, of its sequence and of the batch, do. A mixture of experts must route each position alone
    (dropless, with no capacity that positions compete for)."""
    name = "feedforward locality"
    g = s.model.spec.graph()
    # one module of each feed-forward node (a layer's copy), with the width it reads
    modules = {path: (s.model.get_submodule(path), node.width,
                      node.spec.d_ff if FEEDFORWARD_KINDS[node.spec.kind.name].reads_per_layer else None)
               for node in g.of(ir.FeedForward) for path in queries.module_copies(g, node)[:1]}
    if not modules:
        return Result(name, "not applicable", "no feed-forward sublayer")
    dtype = next(s.model.parameters()).dtype

    @st.composite
    def case(draw):
        path = draw(st.sampled_from(sorted(modules)))
        rows, n, seed = draw(st.integers(1, 3)), draw(st.integers(1, 9)), draw(st.integers(0, 2 ** 31 - 1))
        generator = torch.Generator().manual_seed(seed)
        x, replacement = (torch.randn(rows, n, modules[path][1], generator=generator).to(dtype) for _ in range(2))
        features = modules[path][2]  # per-layer inputs it reads, one layer's (``kind=per_layer``)
        per_layer = None if features is None else torch.randn(rows, n, 1, features, generator=generator).to(dtype)
        return path, x, draw(st.integers(0, rows - 1)), draw(st.integers(0, n - 1)), replacement, per_layer

    found = s.search(lambda c: check_feedforward_alone(modules[c[0]][0], *c[1:]), case())
    return _outcome(name, found, f"every feed-forward sublayer ({len(modules)}) mapped each position by itself")


def finite_gradients(s: Subject) -> Result:
    """Every parameter gets a finite gradient from one backward pass."""
    tokens, src = s.fixed_inputs()
    s.model.train()
    found = check_gradients(s.model, tokens, src)
    s.model.eval()
    count = sum(1 for _ in s.model.parameters())
    return _outcome("finite gradients", found, f"all {count} parameter tensors got finite gradients")


def eval_determinism(s: Subject) -> Result:
    """In eval mode two calls agree."""
    tokens, src = s.fixed_inputs()
    return _outcome("eval determinism", check_determinism(s.model, tokens, src), "eval-mode outputs repeat exactly")


def train_mode_dropout(s: Subject) -> Result:
    """In train mode with dropout, two calls differ."""
    if not has_dropout(s.spec):
        return Result("train-mode dropout", "not applicable", "the spec has no dropout")
    tokens, src = s.fixed_inputs()
    found = check_dropout_active(s.model, tokens, src)
    s.model.eval()
    return _outcome("train-mode dropout", found, "train-mode outputs differ between calls")


# The properties ``verify`` checks, in order; each says itself whether it applies.
PROPERTIES: list[Callable[[Subject], Result]] = [
    causality,
    permutation_equivariance,
    offset_invariance,
    padding_invariance,
    window_locality,
    feedforward_locality,
    finite_gradients,
    eval_determinism,
    train_mode_dropout,
]


def verify(model, *, examples: int = 25, seed: int = 0, max_len: int = 12) -> list[Result]:
    """Check every property that applies to ``model``'s spec; one ``Result`` per property (``PROPERTIES``)."""
    model.eval()
    subject = Subject(model, examples, seed, max_len)
    results = [prop(subject) for prop in PROPERTIES]
    model.eval()
    return results


def verify_towers(model, *, examples: int = 25, seed: int = 0, max_len: int = 12) -> list[Result]:
    """Every property of each tower (``verify``), named ``tower NAME: property``; and of the contrastive head, that
    a permutation of one tower's batch permutes the logits' rows (or columns) alike and nothing else."""
    results = [Result(f"tower {name}: {r.name}", r.status, r.detail) for name, tower in model.towers.items()
               for r in verify(tower, examples=examples, seed=seed, max_len=max_len)]
    if model.contrastive is not None:
        results.append(_pairs_follow_their_examples(model, seed, max_len))
    if model.connectors:
        results.append(_pictures_reach_later_positions(model, seed))
    model.eval()
    return results


def _pictures_reach_later_positions(model, seed: int) -> Result:
    """With another picture at its image tokens, a causal decoder's outputs before the first image token stay as
    they were, and after it they change."""
    import torch

    name = "pictures reach only later positions"
    (source, connector), = model.connectors.items()
    target = model.towers[connector.target]
    if queries.causal_from(target.spec.graph()) is None:
        return Result(name, "not applicable", f"tower {connector.target} is not causal: every position sees them")
    generator = torch.Generator().manual_seed(seed)
    shape = model.towers[source].embeddings[model.towers[source].stack_embedding["encoder"]].shape
    a, b = (torch.randn(1, *shape, generator=generator) for _ in range(2))
    with torch.no_grad():
        count = model.features(source, a).shape[1]
        vocab = target.embeddings[target.stack_embedding["decoder"]].vocab
        ids = torch.randint(0, vocab, (1, count + 6), generator=generator)
        ids[ids == connector.image_token] = (connector.image_token + 1) % vocab
        ids[0, 3:3 + count] = connector.image_token  # three tokens, the picture, three more
        first, second = model(**{connector.target: ids, source: a}), model(**{connector.target: ids, source: b})
    before, after = _differs(first[:, :3], second[:, :3]), _differs(first[:, 3:], second[:, 3:])
    if before:
        return Result(name, "violated", f"another picture changed the outputs before its image tokens by up to "
                                        f"{before:.3g}")
    if not after:
        return Result(name, "violated", "another picture changed nothing after its image tokens: the decoder does "
                                        "not read it")
    return Result(name, "held", f"another picture changed tower {connector.target}'s outputs from its first image "
                                "token on, and none before")


def _pairs_follow_their_examples(model, seed: int, max_len: int) -> Result:
    import torch

    name = "pairs follow their examples"
    batch, generator = 3, torch.Generator().manual_seed(seed)
    inputs = {}
    for tower in model.joined:
        s = Subject(model.towers[tower], 1, seed, max_len)
        inputs[tower] = (torch.randn(batch, *s.pictures.shape, generator=generator) if s.pictures is not None
                         else torch.randint(0, s.v, (batch, s.length), generator=generator))
    order = torch.tensor([2, 0, 1])
    with torch.no_grad():
        logits = model(**inputs).logits
        for side, tower in enumerate(model.joined):
            moved = model(**{**inputs, tower: inputs[tower][order]}).logits
            expected = logits[order] if side == 0 else logits[:, order]
            if not torch.allclose(moved, expected, rtol=1e-5, atol=1e-6 * float(logits.abs().max()) + 1e-12):
                return Result(name, "violated", f"permuting tower {tower}'s batch changed the logits otherwise "
                                                f"than permuting its {'rows' if side == 0 else 'columns'}")
    first, second = model.joined
    return Result(name, "held", f"permuting tower {first}'s examples permutes the logits' rows, tower {second}'s "
                                "their columns, and nothing else")


def _single_layer(model, layer: int = 0):
    """The same model with one layer, ``layer`` (window reach is per layer)."""
    import copy

    single = copy.deepcopy(model)
    for role in ("encoder", "decoder"):
        stack = getattr(single, role, None)
        if stack is not None:
            stack.runs = stack.runs[layer:layer + 1] if layer < len(stack.runs) else stack.runs[:1]
    return single.eval()


# ---------------------------------------------------------------- a small version of a spec
def small_version(spec: S.Spec | S.Towers, width_per_head: int = 4, max_vocab: int = 32, max_d_ff: int = 32,
                  max_layers: int = 2, max_positions: int = 16) -> tuple[S.Spec | S.Towers, list[str]]:
    """The same architecture at test size (same wiring, heads, masks, norms); and what changed. Of a model of
    towers, each tower's (``tower NAME: ...``), the heads a contrastive head compares at one width.

    Widths become lcm(heads) * ``width_per_head`` at least 8 (doubling the per-head width until
    every variant accepts it: a partial rotary needs an even number of rotated dimensions);
    vocabularies, d_ff, layers, head_dim and learned position tables are capped, and nothing
    grows beyond the spec. Window sizes are kept: they are part of the architecture.
    """
    if isinstance(spec, S.Towers):
        return _small_towers(spec, width_per_head, max_vocab, max_d_ff, max_layers, max_positions)
    while True:
        try:
            return _shrunk(spec, width_per_head, max_vocab, max_d_ff, max_layers, max_positions)
        except SpecError:
            if width_per_head >= 64:
                raise
            width_per_head *= 2


def _small_towers(towers: S.Towers, *sizes) -> tuple[S.Towers, list[str]]:
    small, changes = {}, []
    for tower in towers.towers:
        small[tower.name], changed = small_version(tower.spec, *sizes)
        changes += [f"tower {tower.name}: {c}" for c in changed]
    if towers.contrastive is not None:  # the compared vectors of one width: a pool alone's, else the narrowest
        heads = {name: small[name].head for name in towers.contrastive.towers}
        fixed = {h.out for h in heads.values() if not h.projects}
        width = fixed.pop() if len(fixed) == 1 else min(h.out for h in heads.values())
        for name, head in heads.items():
            if head.projects and head.out != width:
                small[name] = small[name].model_copy(update={"head": head.model_copy(update={"out": width})})
    connectors = []
    for c in towers.connectors:  # its linear maps into the target's smaller width, its token in the smaller table,
        # its grid steps on the smaller pictures' grid
        table = small[c.target].embedding(small[c.target].stacks[-1].embedding)
        width, token = table.dim, min(c.image_token, table.vocab - 1)
        if token != c.image_token:
            changes.append(f"image token {c.image_token} -> {token}")
        length = next(iter(small[c.source].graph().of(ir.Features))).length - (c.drop == "first")
        steps = []
        for step in c.steps:
            variant, options = CONNECTOR_STEPS.of(step)
            regridded = variant.regridded(options, length)
            if regridded != options:
                changes.append(f"connector {c.source}: {variant.label(options)} -> {variant.label(regridded)}")
            length = variant.length(length, regridded)
            changed = {k: v for k, v in regridded.model_dump().items() if v != getattr(options, k)}
            steps.append(step.model_copy(update={"options": {**step.options, **changed, **(
                {"out": width} if "out" in step.options else {})}}))
        connectors.append(c.model_copy(update={"image_token": token, "steps": tuple(steps)}))
    shrunk = towers.model_copy(update={"towers": tuple(t.model_copy(update={"spec": small[t.name]})
                                                       for t in towers.towers), "connectors": tuple(connectors)})
    shrunk._sources = towers._sources
    return shrunk, changes


def _shrunk(spec: S.Spec, width_per_head: int, max_vocab: int, max_d_ff: int, max_layers: int,
            max_positions: int) -> tuple[S.Spec, list[str]]:
    heads = [a.heads for role in ("encoder", "decoder") for a in _attentions(spec, role)] or [1]
    if spec.head is not None and spec.head.pool is not None:  # an attention pool's heads divide the width too
        pool, options = POOLS.of(spec.head.pool)
        heads += [pool.heads(options)] if pool.heads(options) else []
    windows = max([behind for role in ("encoder", "decoder") for a in _attentions(spec, role)
                   for behind in mask_reach(a.mask) if behind is not None], default=0)
    base = math.lcm(*heads) * width_per_head
    width = base * max(1, math.ceil(8 / base))
    changes: list[str] = []
    # the side of the grid of patches the smaller pictures make, which 2-D position schemes and masks number
    grids = [INPUTS[e.input.name].grid(INPUTS[e.input.name].smaller(INPUTS.of(e.input)[1]))
             for e in spec.embeddings if e.input is not None]
    grid = next((g for g in grids if g is not None), None)

    def note(what: str, old, new) -> None:
        if old != new and f"{what} {old} -> {new}" not in changes:
            changes.append(f"{what} {old} -> {new}")

    def shrink(node):
        if isinstance(node, tuple):
            return tuple(shrink(n) for n in node)
        if not isinstance(node, S.Node):
            return node
        update = {k: shrink(getattr(node, k)) for k in type(node).model_fields if k not in ("span", "arg_spans")}
        if isinstance(node, S.Embedding):
            dim = min(node.dim, width)
            note("width", node.dim, dim)
            update["dim"] = dim
            if node.input is not None:  # its input kind at its smallest size that keeps its structure
                kind, options = INPUTS.of(node.input)
                smaller = kind.smaller(options)
                note(f"input of {node.name}", kind.label(options), kind.label(smaller))
                update["input"] = node.input.model_copy(update={"options": smaller.model_dump()})
            else:
                note(f"vocab of {node.name}", node.vocab, min(node.vocab, max_vocab))
                update["vocab"] = min(node.vocab, max_vocab)
            if node.per_layer is not None:  # as wide as the per-layer gates reading them (their d_ff, capped)
                note(f"per-layer inputs of {node.name}", node.per_layer, min(node.per_layer, max_d_ff))
                update["per_layer"] = min(node.per_layer, max_d_ff)
                if node.per_layer_vocab is not None:
                    update["per_layer_vocab"] = min(node.per_layer_vocab, max_vocab)
            variant, options = POSITIONS.of(node.position)
            table = variant.max_len(options)
            if table is not None:  # keep room for the longest window, so its locality stays testable
                limit = min(table, max(max_positions, windows + 2))
                if node.input is not None:  # exactly the sequence its input makes (a 2-D scheme's grid)
                    limit = kind.length(smaller)
                note(f"{variant.name} positions", table, limit)
                update["position"] = node.position.model_copy(
                    update={"options": variant.shrunk(options, limit).model_dump()})
            if node.scale != 1.0 and abs(node.scale - math.sqrt(node.dim)) < 1e-9:
                update["scale"] = math.sqrt(dim)  # keep "scale sqrt(d_model)" meaning what it says
        elif isinstance(node, S.Attention):
            head_dim = width // node.heads
            if node.head_dim is not None:
                note("head_dim", node.head_dim, min(node.head_dim, width_per_head))
                head_dim = update["head_dim"] = min(node.head_dim, width_per_head)
            kind, options = ATTENTION_KINDS.of(node.kind)
            small_options = kind.shrunk(options, head_dim, width)
            if small_options != options:  # a kind's own widths (a latent attention's ranks)
                note(f"{kind.name} attention", kind.label(options), kind.label(small_options))
                update["kind"] = node.kind.model_copy(update={"options": small_options.model_dump()})
            position, position_options = POSITIONS.of(update["position"])
            narrowed = position.for_head_dim(position_options, head_dim)
            if narrowed != position_options:  # options counting a head's dimensions (M-RoPE's sections)
                note(position.name, position.label(position_options), position.label(narrowed))
                update["position"] = update["position"].model_copy(update={"options": narrowed.model_dump()})
            if grid is not None:  # its positions and masks on the smaller pictures' grid
                update["position"] = _regridded(POSITIONS, update["position"], grid, note)
                update["mask"] = tuple(_regridded(MASKS, m, grid, note) for m in update["mask"])
        elif isinstance(node, S.FeedForward):
            note("d_ff", node.d_ff, min(node.d_ff, max_d_ff))
            update["d_ff"] = min(node.d_ff, max_d_ff)
        elif isinstance(node, S.Stack):  # one layer of each kind at least, and each whose keys another reads
            makers = {body.kv_from for block in node.blocks for _, body in layer_attentions(block)
                      if body.kv_from is not None}
            shrunk = node.shrunk(max_layers, makers)
            note(f"{node.role} layers", node.repeat, shrunk.repeat)
            update.update(repeat=shrunk.repeat, schedule=shrunk.schedule)
            if makers:  # the readers name their makers by where they stand now
                index = {old: new for new, old in enumerate(node.kept_layers(max_layers, makers))}
                renumbered = [with_attentions(block, lambda name, body: body if body.kv_from is None else
                                               body.model_copy(update={"kv_from": index[body.kv_from]}))
                              for block in (update["block"], *update["kinds"])]
                update.update(block=renumbered[0], kinds=tuple(renumbered[1:]))
        elif isinstance(node, S.Head) and not node.projects:  # the pooled vectors: the stack's width
            update["out"] = min(node.out, width)
        elif isinstance(node, S.Head) and node.tied_to is None:
            note("head outputs", node.out, min(node.out, max_vocab))
            update["out"] = min(node.out, max_vocab)
        elif isinstance(node, S.Head):
            update["out"] = min(node.out, max_vocab)
        return node.model_copy(update=update)

    small = shrink(spec)
    if spec.mtp is not None:  # multi-token prediction's layer: a kept layer of the kind it copies
        kind = spec.decoder.kind_of(spec.mtp.layer)
        layer = next(i for i in range(small.decoder.repeat) if small.decoder.kind_of(i) == kind)
        small = small.model_copy(update={"mtp": small.mtp.model_copy(update={"layer": layer})})
    small._sources = spec._sources
    small._graph = None
    small.graph()  # validate the shrunk architecture like any other
    return small, changes


def _attentions(spec: S.Spec, role: str) -> list[S.Attention]:
    return [node.spec for node in attentions(spec.graph(), role)]


def _regridded(registry, choice, grid: int, note):
    """A position scheme's or mask's choice for pictures whose grid of patches is ``grid`` a side."""
    variant, options = registry.of(choice)
    regridded = variant.regridded(options, grid)
    if regridded == options:
        return choice
    note(variant.name, variant.label(options), variant.label(regridded))
    return choice.model_copy(update={"options": regridded.model_dump()})
