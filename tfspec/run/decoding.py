"""Generation: greedy, temperature / top-k / top-p sampling, and beam search, over a KV cache.

A ``Continuation`` hands out next-token logits for a batch of growing
sequences. Built on a compiled model it keeps a KV cache (each new token costs
O(n): one query against the cached keys, the encoder's memory projected once);
with ``use_cache=False`` it recomputes the whole prefix each step, which is the
reference the cache is tested against. The search functions only need
``feed`` and ``reorder``, so a test can drive them with a toy model whose
probabilities it controls.

>>> import torch; from tfspec.backend.compiler import compile
>>> model = compile('''embedding tokens { vocab 12; dim 16 }
... decoder x 2 { attention self heads=2 mask=causal; feedforward d_ff=32 }
... head tied(tokens)''', seed=0).eval()
>>> out = sample(Continuation(model), torch.tensor([[1, 2, 3]]), max_new=5)
>>> len(out[0])
5
"""

from __future__ import annotations

import contextlib
import functools
import math
import types
import weakref
from dataclasses import dataclass
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.overrides import TorchFunctionMode

from ..errors import LengthError
from ..nn.checks import check_ids
from ..nn.state import StaticCache
from ..ir.queries import attentions, causal_from
from ..registry import POSITIONS



class Steps(Protocol):
    def feed(self, tokens: Tensor) -> Tensor:
        """Append ``tokens`` (batch, n) to every sequence; logits (batch, vocab) for the next token."""

    def reorder(self, rows: Tensor) -> None:
        """Keep (and duplicate) batch rows ``rows``."""


def cache_supported(spec) -> bool:
    """Does caching keys and values reproduce full recomputation? Only if every decoder self-attention stops
    looking ahead -- from the start (causal) or after a prefix fed whole in the first step (prefix-LM) -- and
    encodes a key's position once for all later queries (not dynamically scaled rotary frequencies)."""
    g = spec.graph()
    positions = [POSITIONS.of(a.spec.position) for a in attentions(g, "decoder", reads="self")]
    return causal_from(g) is not None and all(scheme.cacheable(options) for scheme, options in positions)


def decode_step(steps: Continuation, tokens: Tensor, offset: Tensor, padding: Tensor | None, step: dict,
                inputs: dict, reductions: bool = False) -> Tensor:
    """One compiled decode step of ``steps``: next-token logits for ``tokens`` (batch, 1) at position ``offset``
    (0-d), over its static cache; ``reductions``: one row's linear maps as ``RowProductsAsReductions`` does."""
    with RowProductsAsReductions() if reductions and tokens.shape[0] == 1 else contextlib.nullcontext():
        out = steps.model.extend(tokens, steps.cache, offset, steps.memory, steps.memory_padding_mask,
                                 padding_mask=padding, **step, **inputs)
    return (out[0] if isinstance(out, tuple) else out)[:, -1]


class RowProductsAsReductions(TorchFunctionMode):
    """In a decode step inductor compiles for the CPU: a linear map of one float32 row as a product and a sum
    over the input features, which inductor fuses into one reduction reading each weight once, on every
    thread. The BLAS's matrix-vector product reads the weights on one thread, and decoding a batch of one is
    all reading weights: the step takes 0.35-0.5x the time (``benchmarks/bench_generate.py``). The sum's
    order is not the BLAS's: the logits agree to rounding (~1e-7 relative)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.linear:
            x, weight, *rest = args
            bias = rest[0] if rest else kwargs.get("bias")
            if x.device.type == "cpu" and x.dtype == weight.dtype == torch.float32 and x.numel() == x.shape[-1]:
                y = (x.unsqueeze(-1) * weight.t()).sum(-2)
                return y if bias is None else y + bias
        return func(*args, **kwargs)


_COMPILED_STEPS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> (backend, state, step)


def compiled_step(model, backend: bool | str):
    """``decode_step`` compiled for ``model`` (``True``: inductor; else a ``torch.compile`` backend's name), made
    once and kept while the model's modules stay as they were.

    Each model's step compiles its own copy of ``decode_step``'s code, so Dynamo's cache for it only ever holds
    graphs of that model. So the step leaves out Dynamo's guards on the model's modules -- about a thousand
    checks before every token, a tenth of a small model's step on the CPU -- and what they check is compared
    here instead, once per decoding (``module_state``): a module replaced, a parameter replaced, train or eval,
    an attribute or a hook changed, all get a step compiled anew. Weights changed in place need none: the graph
    reads them where they are. A decoding runs on the model as it was when it began."""
    state = module_state(model)
    held = _COMPILED_STEPS.get(model)
    if held is not None and held[0] == backend and held[1] == state:
        return held[2]
    own = types.FunctionType(decode_step.__code__.replace(), decode_step.__globals__, decode_step.__name__,
                             decode_step.__defaults__)
    options = {"guard_filter_fn": torch.compiler.skip_guard_on_all_nn_modules_unsafe}
    if backend is True:  # on the CPU, inductor's wrapper in C++ rather than Python: a twentieth of a small step
        on_cpu = all(p.device.type == "cpu" for p in model.parameters())
        step = torch.compile(own, dynamic=False, options={**options, "cpp_wrapper": on_cpu})
        if on_cpu:  # (only where inductor fuses them: elsewhere the products would be made whole)
            step = functools.partial(step, reductions=True)
    else:
        step = torch.compile(own, dynamic=False, backend=backend, options=options)
    _COMPILED_STEPS[model] = (backend, state, step)
    return step


def module_state(model) -> tuple:
    """What Dynamo's guards on ``model``'s modules check, as one comparable value: each module's name, type and
    attributes (parameters and buffers by identity, shape, dtype, device and ``requires_grad``; hooks, flags
    and options by value or identity)."""
    return tuple((name, type(module), _state_of(vars(module)))
                 for name, module in model.named_modules(remove_duplicate=False))


def _state_of(value, depth: int = 0):
    if isinstance(value, (type(None), bool, int, float, complex, str, bytes, torch.dtype, torch.device)):
        return value
    if isinstance(value, torch.nn.Module):  # (its own attributes are its own entry)
        return type(value), id(value)
    if isinstance(value, Tensor):
        return id(value), tuple(value.shape), value.stride(), value.dtype, value.device, value.requires_grad
    if depth == 4:  # deep enough for the options objects modules hold
        return type(value), id(value)
    if isinstance(value, (list, tuple)):
        return type(value), tuple(_state_of(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return type(value), tuple((k, _state_of(v, depth + 1)) for k, v in value.items())
    if hasattr(value, "__dict__") and not isinstance(value, (type, types.FunctionType, types.MethodType)):
        return type(value), id(value), _state_of(vars(value), depth + 1)
    return type(value), id(value)


class Continuation:
    """Next-token logits of a compiled decoder-only or encoder-decoder model for a batch of sequences.

    For an encoder-decoder model give ``src`` (and its padding mask): it is
    encoded once. ``use_cache=None`` caches whenever that is exact
    (``cache_supported``), ``False`` always recomputes. A model whose attention
    is bidirectional over a prefix (prefix-LM) takes the first ``feed`` as that prefix.

    ``compile=True`` (or a ``torch.compile`` backend's name) keeps the cache in preallocated buffers of
    ``max_len`` positions (``StaticKVCache``; a layer with a bounded look-back keeps its window) and runs each
    step after the prompt, one token at a time, through ``torch.compile`` once: every step has the same shapes,
    so it compiles at the first and never again. ``max_len`` defaults to the decoder's longest sequence. On a
    GPU a compiled step does not read its token ids back (each step would wait for the GPU): an id outside the
    vocabulary fails there in the embedding's kernel, not with a ``ValueError`` naming it.
    """

    @classmethod
    def of(cls, model, **inputs) -> "Continuation":
        """The decoding steps of a compiled model (``Continuation(model, **inputs)``), or of a model of towers joined
        by a connector: those of the tower the connector feeds, its prompt's image tokens read as the pictures
        given (``sample(Continuation.of(model, vision=pixels), prompt, 8)``). ``inputs``: the sources' inputs by
        tower, and the options (``use_cache``, ``compile``, ``max_len``, ``prompt_padding_mask``)."""
        if getattr(model.spec, "kind", None) != "towers":
            return cls(model, **inputs)
        if not model.connectors:
            raise TypeError(f"'{model.spec.name}' has no connector: continue with the tower that decodes "
                            "(Continuation(model.towers[NAME]))")
        (source, connector), = model.connectors.items()
        options = {k: inputs.pop(k) for k in ("use_cache", "compile", "max_len", "prompt_padding_mask") if k in inputs}
        given = model.split(inputs)[source]
        if "input" not in given:
            raise TypeError(f"missing the input of tower {source} (Continuation.of(model, {source}=...))")
        vectors, columns, counts = model.spliced(source, given.pop("input"), **given)
        return cls(model.towers[connector.target], pictures=(connector.image_token, vectors, columns, counts),
                   **options)

    def __init__(self, model, src: Tensor | None = None, src_padding_mask: Tensor | None = None,
                 use_cache: bool | None = None, prompt_padding_mask: Tensor | None = None,
                 compile: bool | str = False, max_len: int | None = None,
                 pictures: tuple | None = None):
        """``pictures``: (image token, vectors ``(batch, k, width)``): each row's k vectors in place of the
        prompt's image tokens; or (image token, vectors ``(n, width)``, the width of each picture's grid of them
        ``(pictures,)``, each picture's count of them ``(pictures,)``): the pictures in order along the rows (a
        connector's, ``Continuation.of``). Generated tokens are never replaced."""
        spec = model.spec
        if getattr(spec, "kind", None) == "towers":
            raise ValueError(f"{spec.name} cannot generate: it is a model of towers; generate with the tower that "
                             "decodes (model.towers[NAME])")
        if spec.kind == "encoder-only" or spec.head is None:
            raise ValueError(f"{spec.name} cannot generate: generation needs a decoder and a head "
                             f"(this is {'an encoder-only model' if spec.kind == 'encoder-only' else 'a model without a head'})")
        if spec.head.pool is not None:
            raise ValueError(f"{spec.name} cannot generate: its head pools each sequence into one vector "
                             f"(pool={spec.head.pool}), which predicts no next token")
        if (spec.kind == "encoder-decoder") != (src is not None):
            raise ValueError("give src exactly when the model is encoder-decoder")
        supported = cache_supported(spec)
        if use_cache and not supported:
            raise ValueError(f"{spec.name}: a decoder self-attention looks ahead, so cached decoding would differ "
                             "from recomputation; use use_cache=False")
        if prompt_padding_mask is not None and not model.decoder.masks_padding:
            raise ValueError("prompt_padding_mask was given, but no decoder self-attention masks padding; "
                             "add `padding` to its masks (e.g. `mask=causal + padding`)")
        self.model = model
        self.use_cache = supported if use_cache is None else use_cache
        self.memory = model.encode(src, src_padding_mask) if src is not None else None
        self.memory_padding_mask = src_padding_mask
        self.cache = [{} for _ in model.decoder.runs] if self.use_cache else None
        self.step = None  # the compiled decode step (``compile``)
        self.step_offset: Tensor | None = None  # its position, on the model's device, set in place each step
        if compile:
            if not self.use_cache:
                raise ValueError("compile=True decodes over a KV cache, which this model's decoder cannot use "
                                 "exactly (or use_cache=False was given)")
            limit = model.max_len.get("decoder")  # (no position past the learned ones is ever fed)
            max_len = limit if max_len is None else max_len if limit is None else min(max_len, limit)
            if max_len is None:
                raise ValueError(f"{spec.name}'s decoder takes sequences of any length: give max_len, the longest "
                                 "sequence (prompt and new tokens) the compiled decoder's cache must hold")
            self.cache = [StaticCache(max_len) for _ in model.decoder.runs]
            self.max_len = max_len
            self.step = functools.partial(compiled_step(model, compile), self)
        self.tokens: Tensor | None = None  # everything fed so far, (batch, length)
        self.prefix_inputs = sorted((causal_from(spec.graph()) or set()) - {"start"})  # e.g. prefix_lengths
        self.inputs: dict[str, Tensor] = {}
        # a left-padded prompt: True at its pads; positions then count real tokens only (as HF generate does)
        self.prompt_padding = prompt_padding_mask
        if pictures is not None and pictures[1].dim() == 3:  # one picture a row, k vectors each
            token, vectors = pictures[:2]
            pictures = (token, vectors.flatten(0, 1), None,
                        torch.full((vectors.shape[0],), vectors.shape[1], device=vectors.device))
        self.pictures = pictures
        self.by_row: list[tuple] | None = None  # each row's pictures (vectors, columns, counts), from its prompt
        self.prompt_length = 0  # the prompt's positions: where pictures may stand
        self.padding: Tensor | None = None  # (batch, length) so far, when the prompt was padded
        self.next_position: Tensor | None = None  # (batch, 1) position id of each row's next token
        # every position id fed so far, where they are given (a padded prompt's, or one holding pictures)
        self.positions: Tensor | None = None

    @property
    def length(self) -> int:
        return 0 if self.tokens is None else self.tokens.shape[1]

    def feed(self, tokens: Tensor) -> Tensor:
        offset = self.length
        if self.step is not None and offset == 0 and tokens.shape[1] > self.max_len:
            raise LengthError(f"the prompt has {tokens.shape[1]} positions, but the compiled decoder's cache holds "
                              f"{self.max_len} (max_len)")
        if self.step is not None and offset > 0:  # (refused before anything is kept)
            if tokens.shape[1] != 1:
                raise ValueError(f"a compiled decoder takes one token a step after the prompt, not {tokens.shape[1]}")
            if offset + 1 > self.max_len:
                raise LengthError(f"the compiled decoder's cache holds {self.max_len} positions (max_len); this "
                                  f"token would be position {offset + 1}")
            if tokens.device.type == "cpu":  # (free here; on a GPU reading the ids back makes every step wait)
                vocab = self.model.embeddings[self.model.stack_embedding["decoder"]].vocab
                check_ids("tokens", tokens, vocab, self.model.device)
        kept = self.tokens, self.padding, self.next_position, self.positions, self.inputs
        try:
            return self._extend(tokens, offset)
        except ValueError:  # an input refused before any layer ran (an id outside the vocabulary): as it was
            self.tokens, self.padding, self.next_position, self.positions, self.inputs = kept
            raise

    def _extend(self, tokens: Tensor, offset: int) -> Tensor:
        new_padding = positions = None
        if offset == 0:  # the first chunk is the prompt: a prefix-LM sees it bidirectionally
            self.prompt_length = tokens.shape[1]
            lengths = torch.full((tokens.shape[0],), tokens.shape[1], dtype=torch.long, device=tokens.device)
            self.inputs = {name: lengths for name in self.prefix_inputs}
            new_padding = self.prompt_padding
        elif self.padding is not None:
            new_padding = torch.zeros(tokens.shape, dtype=torch.bool, device=tokens.device)
        if new_padding is not None:
            positions = self._positions(new_padding)
            self.padding = new_padding if self.padding is None else torch.cat((self.padding, new_padding), dim=1)
        self.tokens = tokens if self.tokens is None else torch.cat((self.tokens, tokens), dim=1)
        prompted = self._spliced(tokens) if offset == 0 else None  # the prompt's pictures, where it has some
        if prompted is not None:
            positions = self._numbered(tokens, positions, prompted)
        elif positions is None and self.next_position is not None:  # (after a prompt of pictures)
            positions = self._positions(torch.zeros(tokens.shape, dtype=torch.bool, device=tokens.device))
        if positions is not None:
            self.positions = positions if offset == 0 else torch.cat((self.positions, positions), dim=1)
        step = {} if positions is None else {"position_ids": positions}
        if self.step is not None and offset > 0:
            if self.step_offset is None or self.step_offset.device != tokens.device:
                self.step_offset = torch.zeros((), dtype=torch.long, device=tokens.device)
            # set in place: a tensor made anew from a host number is copied from pageable memory, which on a GPU
            # waits for every kernel launched so far
            offset = self.step_offset.fill_(offset)
            # the model's own checks read values back, and its compiled graph takes none: the ids are checked
            # above on the CPU, the rest with the prompt
            checked, self.model.check_inputs = self.model.check_inputs, False
            try:
                return self.step(tokens, offset, new_padding, step, self.inputs)
            finally:
                self.model.check_inputs = checked
        if self.use_cache:
            out = self.model.extend(tokens, self.cache, offset, self.memory, self.memory_padding_mask,
                                    padding_mask=new_padding, last=True, **step, **self.inputs,
                                    **({"spliced": prompted} if prompted is not None else {}))
        else:
            every = {} if self.positions is None else {"position_ids": self.positions}
            spliced = self._spliced(self.tokens)
            if spliced is not None:  # (the prompt's pictures again, at their places, over everything so far)
                out = self.model.output(self.model.run_stack("decoder", "tokens", self.tokens, self.padding,
                                                             {**every, **self.inputs}, spliced=spliced))
            elif self.memory is not None:
                out = self.model.decode(self.tokens, self.memory, self.memory_padding_mask, self.padding,
                                        **every, **self.inputs)
            else:
                out = self.model(self.tokens, self.padding, **every, **self.inputs)
        return (out[0] if isinstance(out, tuple) else out)[:, -1]

    def _spliced(self, tokens: Tensor) -> tuple | None:
        """Where the pictures' vectors go among ``tokens`` (the prompt's image tokens), the vectors, the width of
        each picture's grid of them (None: square) and each one's count (``picture_marks``)."""
        if self.pictures is None:
            return None
        image_token = self.pictures[0]
        where = tokens == image_token
        where[:, self.prompt_length:] = False  # (a generated image token is a token)
        if self.by_row is None:
            self.by_row = self._rows(where.sum(dim=1))
        vectors, columns, counts = (torch.cat(parts) if parts[0] is not None else None for parts in zip(*self.by_row))
        return where, vectors, columns, counts

    def _rows(self, held: Tensor) -> list[tuple]:
        """The pictures split by the prompt's rows, which hold ``held`` image tokens each: each row's (vectors,
        columns, counts); a ``ValueError`` where the rows do not hold whole pictures' tokens."""
        image_token, vectors, columns, counts = self.pictures
        ends, bounds = counts.cumsum(dim=0).tolist(), held.cumsum(dim=0).tolist()
        if bounds[-1] != len(vectors) or any(b not in ends and b != 0 for b in bounds):
            if bool((counts == counts[0]).all()) and len(counts) == len(held):
                raise ValueError(f"each prompt row holds {int(counts[0])} image tokens ({image_token}), one per "
                                 f"vector of its picture; these hold {held.tolist()}")
            raise ValueError(f"the prompt's rows hold {held.tolist()} image tokens ({image_token}), but the pictures "
                             f"give {counts.tolist()} vectors, in order along the rows")
        rows, start, first = [], 0, 0
        for bound in bounds:  # the pictures whose vectors end at or before the row's last image token
            last = ends.index(bound) + 1 if bound else first
            part = slice(first, max(first, last))
            rows.append((vectors[start:bound], None if columns is None else columns[part], counts[part]))
            start, first = bound, max(first, last)
        return rows

    def _positions(self, padding: Tensor) -> Tensor:
        """Position ids of new tokens that count only real ones (pads repeat their neighbour's, never read)."""
        start = self.next_position if self.next_position is not None else torch.zeros(
            padding.shape[0], 1, dtype=torch.long, device=padding.device)
        positions = (start + (~padding).long().cumsum(dim=1) - 1).clamp(min=0)
        self.next_position = positions[:, -1:] + 1
        return positions

    def _numbered(self, prompt: Tensor, positions: Tensor | None, spliced: tuple[Tensor, Tensor]) -> Tensor:
        """The prompt's position ids as the decoder numbers them around its pictures (M-RoPE's: a picture's
        vectors at one position, the picture advancing the count by its side): from ``positions`` (a padded
        prompt's, counting real tokens) or 0, 1, 2, ...; later tokens continue after the last. ``spliced``:
        where its pictures stand, and their vectors."""
        if positions is None:
            positions = torch.arange(prompt.shape[1], device=prompt.device)[None].expand(prompt.shape[0], -1)
        marks = self.model.marked(self.model.decoder, {}, spliced)
        positions = self.model.numbered("decoder", positions, marks)
        self.next_position = positions.max(dim=1, keepdim=True).values + 1
        return positions

    def reorder(self, rows: Tensor) -> None:
        self.tokens = self.tokens.index_select(0, rows) if self.tokens is not None else None
        if self.by_row is not None:
            self.by_row = [self.by_row[i] for i in rows.tolist()]
        self.inputs = {k: v.index_select(0, rows) for k, v in self.inputs.items()}
        if self.padding is not None:
            self.padding = self.padding.index_select(0, rows)
        if self.next_position is not None:
            self.next_position = self.next_position.index_select(0, rows)
            self.positions = self.positions.index_select(0, rows)
        if self.memory is not None:
            self.memory = self.memory.index_select(0, rows)
            if self.memory_padding_mask is not None:
                self.memory_padding_mask = self.memory_padding_mask.index_select(0, rows)
        for layer in self.cache or []:
            for kv in layer.values():
                kv.reorder(rows)


class Restricted:
    """Steps whose logits are -inf outside ``allowed`` (bool per id): a model whose spec has more ids than
    its data (or specials that mean nothing as output) never generates them."""

    def __init__(self, steps: Steps, allowed: Tensor):
        self.steps, self.allowed = steps, allowed

    def feed(self, tokens: Tensor) -> Tensor:
        logits = self.steps.feed(tokens)
        return logits.masked_fill(~self.allowed[: logits.shape[-1]].to(logits.device), float("-inf"))

    def reorder(self, rows: Tensor) -> None:
        self.steps.reorder(rows)


class Forced:
    """Steps that force the first new token (``first``: mBART's language id, BART's <s>) and the last one a budget
    allows (``last``: the end token), as transformers' ForcedBOS/ForcedEOS logits processors do; None: free."""

    def __init__(self, steps: Steps, first: int | None, last: int | None, budget: int):
        self.steps, self.first, self.last, self.budget, self.made = steps, first, last, budget, 0

    def feed(self, tokens: Tensor) -> Tensor:
        logits = self.steps.feed(tokens)
        # where both apply (a budget of one token), the last wins, as transformers applies ForcedEOS after ForcedBOS
        forced = self.last if self.made == self.budget - 1 and self.last is not None else \
            self.first if self.made == 0 else None
        self.made += 1
        if forced is None:
            return logits
        only = torch.full_like(logits, float("-inf"))
        only[..., forced] = 0.0
        return only

    def reorder(self, rows: Tensor) -> None:
        self.steps.reorder(rows)


# ---------------------------------------------------------------- sampling
def filter_logits(logits: Tensor, top_k: int | None = None, top_p: float | None = None) -> Tensor:
    """Set logits outside the top ``k`` and outside the smallest set holding ``top_p`` of the mass to -inf.

    >>> filter_logits(torch.tensor([[3.0, 1.0, 2.0]]), top_k=2).tolist()
    [[3.0, -inf, 2.0]]
    """
    if top_k is not None and top_k < logits.shape[-1]:
        kth = logits.topk(top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None and top_p < 1.0:
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        probs = sorted_logits.softmax(dim=-1)
        before = probs.cumsum(dim=-1) - probs  # mass of the tokens ranked above each one
        drop = before >= top_p  # the top token always stays (its 'before' is 0)
        logits = logits.masked_fill(drop.scatter(-1, order, drop), float("-inf"))
    return logits


@torch.no_grad()
def sample(steps: Steps, start: Tensor, max_new: int, eos: int | None = None, temperature: float = 0.0,
           top_k: int | None = None, top_p: float | None = None, generator: torch.Generator | None = None
           ) -> list[list[int]]:
    """Extend each row of ``start`` by up to ``max_new`` tokens; stop a row at ``eos`` (not returned).

    ``temperature`` 0 is greedy decoding; otherwise logits are divided by it,
    filtered by ``top_k`` / ``top_p``, and a token drawn from ``generator``.
    An argument out of its range is a ``ValueError`` naming it.
    """
    check_choice(max_new=max_new, temperature=temperature, top_k=top_k, top_p=top_p)
    logits = steps.feed(start)
    batch = start.shape[0]
    done = torch.zeros(batch, dtype=torch.bool, device=start.device)
    # without an eos no row ends early, so the loop never reads the device: on a GPU each read waits for every
    # kernel launched so far, which leaves the GPU idle while the next step's kernels are launched
    may_end = eos is not None or batch == 0
    out: list[Tensor] = []
    for _ in range(max_new):
        logits = logits.float()
        if temperature == 0.0:
            token = logits.argmax(dim=-1)
        else:
            scaled = logits / temperature
            if temperature < 1e-3 and not torch.isfinite(scaled[logits.isfinite()]).all():  # overflowed: the limit,
                top = logits == logits.amax(dim=-1, keepdim=True)  # the most likely tokens share all the mass
                scaled = torch.zeros_like(logits).masked_fill(~top, float("-inf"))
            probs = filter_logits(scaled, top_k, top_p).softmax(dim=-1)
            token = torch.multinomial(probs.cpu(), 1, generator=generator).squeeze(1).to(logits.device)
        if eos is not None:
            token = token.masked_fill(done, eos)
            done |= token == eos
        out.append(token)
        if len(out) == max_new or (may_end and bool(done.all())):
            break
        logits = steps.feed(token[:, None])
    rows = torch.stack(out, dim=1).tolist() if out else [[] for _ in range(batch)]
    return [row[: row.index(eos)] if eos is not None and eos in row else row for row in rows]


def check_choice(*, max_new: int, temperature: float = 0.0, top_k: int | None = None, top_p: float | None = None,
                 beam: int = 1, alpha: float = 0.0) -> None:
    """A ``ValueError`` naming the first decoding argument outside its range (``temperature=nan``, ``top_p=0``).

    >>> check_choice(max_new=-1)
    Traceback (most recent call last):
    ...
    ValueError: max_new must be a whole number >= 0, got -1
    """
    def whole(name, value, low):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{name} must be a whole number >= {low}, got {value!r}")
    whole("max_new", max_new, 0)
    whole("beam", beam, 1)
    if top_k is not None:
        whole("top_k", top_k, 1)
    if not isinstance(temperature, (int, float)) or not 0 <= temperature < math.inf:
        raise ValueError(f"temperature must be a finite number >= 0 (0: greedy), got {temperature!r}")
    if top_p is not None and (not isinstance(top_p, (int, float)) or not 0 < top_p <= 1):
        raise ValueError(f"top_p must be a probability in (0, 1], got {top_p!r}")
    if not isinstance(alpha, (int, float)) or not 0 <= alpha < math.inf:
        raise ValueError(f"alpha must be a finite number >= 0, got {alpha!r}")


# ---------------------------------------------------------------- beam search
def length_penalty(length: int, alpha: float) -> float:
    """GNMT's lp(Y) = ((5 + |Y|) / 6)^alpha (Wu et al. 2016), which the Transformer paper used with alpha 0.6."""
    return ((5 + length) / 6) ** alpha


@dataclass(frozen=True)
class Hypothesis:
    tokens: list[int]  # without the end token
    log_prob: float  # sum of the tokens' log-probabilities, the end token's included
    score: float  # log_prob / length_penalty(generated tokens, end token included)


@torch.no_grad()
def beam_search(steps: Steps, start: Tensor, max_new: int, eos: int, beam: int = 4, alpha: float = 0.6
                ) -> list[list[Hypothesis]]:
    """For each row of ``start``, the ``beam`` best continuations, best first.

    Hypotheses end at ``eos`` or after ``max_new`` tokens, scored by
    log-probability / length_penalty. A row stops when it has ``beam`` finished
    hypotheses and no live one can still beat them: log-probabilities only
    fall as a hypothesis grows, so its best reachable score is its current one
    divided by the largest penalty ahead.
    """
    check_choice(max_new=max_new, beam=beam, alpha=alpha)
    batch = start.shape[0]
    logits = steps.feed(start)
    rows = torch.arange(batch, device=start.device).repeat_interleave(beam)
    steps.reorder(rows)
    logits = logits.index_select(0, rows)
    scores = torch.full((batch, beam), float("-inf"), device=start.device)
    scores[:, 0] = 0.0  # the copies start identical: expand only the first
    sequences = torch.empty(batch * beam, 0, dtype=torch.long, device=start.device)
    finished: list[list[Hypothesis]] = [[] for _ in range(batch)]
    active = [True] * batch
    for t in range(1, max_new + 1):
        log_probs = logits.float().log_softmax(dim=-1)
        vocab = log_probs.shape[-1]
        candidates = (scores[:, :, None] + log_probs.view(batch, beam, vocab)).view(batch, -1)
        candidates = candidates.nan_to_num(nan=float("-inf"))  # a dead row's (or an impossible) continuation
        values, index = candidates.topk(min(2 * beam, beam * vocab), dim=-1)
        values, index = values.tolist(), index.tolist()
        keep_rows, keep_tokens, keep_scores = [], [], []
        for b in range(batch):
            alive = []
            for rank, (value, i) in enumerate(zip(values[b], index[b])):
                if len(alive) == beam or value == float("-inf"):
                    break
                row, token = b * beam + i // vocab, i % vocab
                if token == eos or t == max_new:
                    if active[b] and (token != eos or rank < beam):
                        tokens = sequences[row].tolist() + ([] if token == eos else [token])
                        finished[b].append(Hypothesis(tokens, value, value / length_penalty(t, alpha)))
                    if token == eos:
                        continue
                alive.append((row, token, value))
            alive += [(b * beam, eos, float("-inf"))] * (beam - len(alive))  # dead padding rows
            for row, token, value in alive:
                keep_rows.append(row)
                keep_tokens.append(token)
                keep_scores.append(value)
            if active[b] and len(finished[b]) >= beam:
                best_finished = sorted(h.score for h in finished[b])[-beam]
                best_alive = max(v for _, _, v in alive)
                largest_penalty = max(length_penalty(t + 1, alpha), length_penalty(max_new, alpha))
                reachable = best_alive / largest_penalty  # log-probabilities are <= 0
                active[b] = reachable > best_finished
        if t == max_new or not any(active):
            break
        rows = torch.tensor(keep_rows, device=start.device)
        tokens = torch.tensor(keep_tokens, device=start.device)
        scores = torch.tensor(keep_scores, device=start.device).view(batch, beam)
        for b in range(batch):
            if not active[b]:
                scores[b] = float("-inf")
        sequences = torch.cat((sequences.index_select(0, rows), tokens[:, None]), dim=1)
        steps.reorder(rows)
        logits = steps.feed(tokens[:, None])
    return [sorted(f, key=lambda h: -h.score)[:beam] for f in finished]


# ---------------------------------------------------------------- text in, text out
@dataclass(frozen=True)
class Strategy:
    """How to choose tokens: greedy (temperature 0), sampling, or beam search (``beam`` set)."""

    temperature: float = 0.0
    top_k: int | None = None
    top_p: float | None = None
    beam: int | None = None
    alpha: float = 0.6


@dataclass(frozen=True)
class Completion:
    input: str
    output: str
    score: float | None = None  # beam search: length-normalised log-probability
    cut_at: int | None = None  # the output stopped here, short of max_new, where the learned positions end


def room(model, prompt_length: int) -> int:
    """How many tokens the decoder's learned positions leave after a prompt (a large number without a table)."""
    limit = model.max_len.get("decoder")
    return 1 << 30 if limit is None else limit - prompt_length + 1


@torch.no_grad()
def complete(model, vocab, texts: list[str], *, prompted: bool, max_new: int, strategy: Strategy = Strategy(),
             generator: torch.Generator | None = None, use_cache: bool | None = None,
             strict: bool = False, compile: bool | str = False) -> list[Completion]:
    """Decode from text: encoder-decoder models map each text to an output; decoder-only models continue it.

    ``prompted``: the model learned "source SEP target EOS" sequences (a task),
    so a text becomes "text SEP" and decoding stops at EOS; otherwise the text
    is a prompt to continue for ``max_new`` tokens (or to a tokenizer's end
    token). ``vocab`` is a ``tfspec.run.data`` vocabulary: it encodes the texts as
    model inputs and names the start and end ids.

    Past the learned positions: no room at all is a ``LengthError``; with ``strict``, so is less room than
    ``max_new`` (checked for every text before any is decoded); otherwise the output stops where the positions
    end and its ``cut_at`` says so. ``compile``: decode through a compiled step (``Continuation``).
    """
    check_choice(max_new=max_new, temperature=strategy.temperature, top_k=strategy.top_k, top_p=strategy.top_p,
                 beam=strategy.beam or 1, alpha=strategy.alpha)
    encoded = [vocab.encode_input(text) for text in texts]
    for ids in encoded:
        room_left = room(model, 1 if model.spec.kind == "encoder-decoder" else len(ids) + prompted)
        if room_left <= 0 or strict and room_left < max_new:
            tokens = f"the prompt has {len(ids) + prompted} tokens; " if model.spec.kind != "encoder-decoder" else ""
            leave = "leave no room to generate" if room_left <= 0 else f"leave room for {room_left} new tokens"
            raise LengthError(f"{tokens}the learned positions ({model.max_len['decoder']}) {leave}"
                              + (f", not {max_new}" if room_left > 0 else ""))
    device = model.device
    results = []
    for text, ids in zip(texts, encoded):  # one at a time: prompts need not share a length
        if model.spec.kind == "encoder-decoder":
            if not ids:
                raise ValueError("an encoder-decoder model needs a non-empty input")
            if vocab.start is None:
                raise ValueError(f"{vocab.describe()} names no token to start the decoder with "
                                 "(a Hugging Face config.json's decoder_start_token_id)")
            src = torch.tensor([ids], device=device)
            padding = torch.zeros_like(src, dtype=torch.bool) if _reads_src_padding(model) else None
            start, eos, budget = torch.tensor([[vocab.start]], device=device), vocab.eos, min(max_new, room(model, 1))
            steps = Continuation(model, src, padding, use_cache, compile=compile, max_len=1 + budget)
        else:
            prompt = ids + [vocab.sep] if prompted else ids
            if not prompt:
                raise ValueError("give a prompt (--input TEXT) to continue")
            start, eos = torch.tensor([prompt], device=device), (vocab.eos if prompted else vocab.ends_text)
            budget = min(max_new, room(model, len(prompt)))
            steps = Continuation(model, use_cache=use_cache, compile=compile, max_len=len(prompt) + budget)
        steps = Restricted(steps, vocab.output_ids(model.spec.head.out, end=eos is not None))
        first = getattr(vocab, "first", None) if model.spec.kind == "encoder-decoder" else None  # (HF: at length 1)
        if first is not None or getattr(vocab, "last", None) is not None:
            steps = Forced(steps, first, getattr(vocab, "last", None), budget)
        if strategy.beam:
            best = beam_search(steps, start, budget, eos if eos is not None else -1, strategy.beam, strategy.alpha)[0][0]
            out, score = best.tokens, best.score
        else:
            out = sample(steps, start, budget, eos, strategy.temperature, strategy.top_k, strategy.top_p, generator)[0]
            score = None
        cut = budget if budget < max_new and len(out) == budget else None
        results.append(Completion(text, vocab.decode(out), score, cut))
    return results


def _reads_src_padding(model) -> bool:
    return model.encoder.masks_padding or model.decoder.memory_masks_padding
