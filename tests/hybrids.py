"""Checks every stateful mixer passes: a mixer continuing from its state computes what the whole sequence does; its
hybrid decodes from the layers' states (eager, compiled over static buffers) as recomputation does, and a left-padded
row computes what it does unpadded."""

from __future__ import annotations

import torch

from hypothesis import strategies as st

import tfspec
from tfspec.inspect.analysis import analyse
from tfspec.inspect.measure import measure
from tfspec.nn.context import Context
from tfspec.nn.state import RecurrentState
from tfspec.run.decoding import Continuation, beam_search
from numerics import FLOAT32, assert_close


def assert_continues_from_its_state(mixer, x: torch.Tensor, data) -> RecurrentState:
    """``mixer`` over ``x`` (batch ≥ 2, length, width) in calls continuing from one ``RecurrentState`` -- a drawn
    prompt, its second row left-padded by a drawn number of positions, then calls of one to three positions --
    computes what it computes over the whole sequence at once; the state it ends with."""
    batch, length, _ = x.shape
    padding = torch.zeros(batch, length, dtype=torch.bool)
    prompt = data.draw(st.integers(1, length), label="prompt")
    padding[1, :data.draw(st.integers(0, prompt - 1), label="pads")] = True
    with torch.no_grad():
        whole = mixer(x, Context(torch.arange(length)[None], padding))
        state, outputs, start = RecurrentState(), [], 0
        while start < length:
            end = prompt if start == 0 else min(length, start + data.draw(st.integers(1, 3), label="step"))
            outputs.append(mixer(x[:, start:end], Context(torch.arange(start, end)[None], padding[:, start:end]),
                                 state))
            start = end
    assert_close(torch.cat(outputs, dim=1), whole, FLOAT32)
    return state


def assert_decodes_like_recomputation(model, vocab: int, prompt_length: int, steps: int = 6) -> None:
    """Greedy decoding and beam search over the layers' own states (a mixer's, keys and values), eager, compiled
    into one graph over static buffers, and recomputed from scratch, with a left-padded prompt."""
    prompt = torch.randint(0, vocab, (2, prompt_length), generator=torch.Generator().manual_seed(1))
    padding = torch.zeros(2, prompt_length, dtype=torch.bool)
    padding[1, :2] = True
    capacity = prompt_length + steps + 2
    with torch.no_grad():
        cached = Continuation(model, prompt_padding_mask=padding)
        assert cached.use_cache
        recomputed = Continuation(model, use_cache=False, prompt_padding_mask=padding)
        compiled = Continuation(model, prompt_padding_mask=padding, compile="eager", max_len=capacity)
        outputs = [(cached.feed(prompt), recomputed.feed(prompt), compiled.feed(prompt))]
        for _ in range(steps):
            token = outputs[-1][1].argmax(-1, keepdim=True)
            outputs.append((cached.feed(token), recomputed.feed(token), compiled.feed(token)))
        for eager, again, static in outputs:
            assert_close(eager, again, 1e-4)
            assert_close(static, again, 1e-4)
        beams = [beam_search(Continuation(model, **options), prompt[:1], max_new=5, eos=0, beam=3)
                 for options in ({}, {"use_cache": False}, {"compile": "eager", "max_len": prompt_length + 7})]
    assert [h.tokens for h in beams[0][0]] == [h.tokens for h in beams[1][0]] == [h.tokens for h in beams[2][0]]


def assert_left_padding_is_invisible(model, vocab: int) -> None:
    """A row left-padded by three positions (its position ids counting real tokens) computes what it does alone."""
    tokens = torch.randint(0, vocab, (2, 9), generator=torch.Generator().manual_seed(4))
    padding = torch.zeros(2, 9, dtype=torch.bool)
    padding[1, :3] = True
    positions = ((~padding).long().cumsum(1) - 1).clamp(min=0)
    with torch.no_grad():
        assert_close(model(tokens, padding, position_ids=positions)[1, 3:], model(tokens[1:, 3:])[0], FLOAT32)


def perturbed(module, shift: float = 0.05):
    """``module`` in eval mode with every weight moved from its initial value (a norm weight of exactly 1, or a
    zero bias, hides mistakes): each scaled by 1 + N(0, 0.2²) and shifted by N(0, shift²), from torch's generator."""
    with torch.no_grad():
        for p in module.parameters():
            p.mul_(1 + 0.2 * torch.randn_like(p)).add_(shift * torch.randn_like(p))
    return module.eval()


def assert_cost_is_measured(text: str, length: int, batch: int = 2) -> None:
    """The analysis's matmul FLOPs and saved bytes for a decoder ``text`` at ``length`` are what ``FlopCounterMode``
    and autograd's saved tensors see in one training forward."""
    spec = tfspec.parse(text)
    analysed, measured = analyse(spec, seq_len=length, batch=batch), measure(spec, {"decoder": length}, batch=batch)
    assert measured.flops == analysed.total.matmul
    assert measured.saved_bytes == analysed.total.memory
