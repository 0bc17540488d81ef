"""Generation: the KV cache equals recomputation, beam search finds the best sequence, sampling filters."""

from __future__ import annotations

import functools
import itertools
import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import tfspec
from strategies import valid_specs
from tfspec.backend.compiler import compile
from tfspec.errors import LengthError
from tfspec.ir import nodes as ir
from tfspec.registry import ATTENTION_KINDS
from tfspec.run.decoding import (Continuation, RowProductsAsReductions, Strategy, beam_search, cache_supported,
                                 compiled_step, complete, decode_step, filter_logits, length_penalty, module_state,
                                 sample)
from numerics import FLOAT32, assert_close, close


# ---------------------------------------------------------------- KV cache
@settings(max_examples=40)
@given(valid_specs(kinds=("decoder-only", "encoder-decoder"), max_layers=2), st.data())
def test_cached_decoding_gives_the_logits_of_full_recomputation(generated, data):
    if not (generated.causal_decoder and generated.has_head):
        return
    model = compile(generated.text, seed=data.draw(st.integers(0, 100), label="seed")).eval()
    vocab = model.embeddings["tokens"].vocab
    batch = data.draw(st.integers(1, 3), label="batch")
    prompt = data.draw(st.integers(1, 6), label="prompt")
    new = data.draw(st.integers(1, 8), label="new tokens")
    rng = torch.Generator().manual_seed(data.draw(st.integers(0, 1000), label="inputs"))
    src = torch.randint(0, vocab, (batch, data.draw(st.integers(1, 9), label="src_len")), generator=rng)
    src = src if model.spec.kind == "encoder-decoder" else None
    if not cache_supported(model.spec):  # a variant whose cache could not be exact (dynamic NTK rotary): declared
        assert not Continuation(model, src).use_cache  # ... and decoding recomputes instead
        return
    tokens = torch.randint(0, vocab, (batch, prompt + new), generator=rng)
    if any(ATTENTION_KINDS.of(a.spec.kind)[0].kept_keys(ATTENTION_KINDS.of(a.spec.kind)[1], a.geometry.heads)
           is not None for a in model.spec.graph().of(ir.Attention)):
        # a kind keeping each query's best keys (top-k, DSA) changes its choice where two scores lie within
        # rounding, and cached decoding rounds its scores otherwise than recomputation: checked on inputs without
        # such near-ties (tests/test_topk.py, tests/test_dsa.py)
        return
    with torch.no_grad():
        cached, full = Continuation(model, src, use_cache=True), Continuation(model, src, use_cache=False)
        # the static cache of compiled decoding, its step run eagerly here (compiling is tested below)
        static = Continuation(model, src, compile="eager", max_len=prompt + new)
        static.step = functools.partial(decode_step, static)
        first = full.feed(tokens[:, :prompt])
        for steps in (cached, static):
            assert_close(steps.feed(tokens[:, :prompt]), first, FLOAT32)
        for i in range(prompt, prompt + new):  # one token at a time, as decoding does
            a, b, c = cached.feed(tokens[:, i:i + 1]), full.feed(tokens[:, i:i + 1]), static.feed(tokens[:, i:i + 1])
            assert_close(a, b, FLOAT32)
            assert_close(c, b, FLOAT32)
    # and the decoder's own forward over the whole sequence agrees at every position
    with torch.no_grad():
        steps = Continuation(model, src, use_cache=True)
        per_step = torch.stack([steps.feed(tokens[:, i:i + 1]) for i in range(tokens.shape[1])], dim=1)
        whole = model.decode(tokens, model.encode(src)) if src is not None else model(tokens)
        whole = whole[0] if isinstance(whole, tuple) else whole
    assert_close(per_step, whole, FLOAT32)


def test_cache_grows_by_one_position_per_token_and_memory_is_projected_once():
    model = compile("examples/vaswani_base.tfs", overrides={"layers": 2, "d_model": 32, "heads": 4, "d_ff": 32,
                                                            "vocab": 20}, seed=0).eval()
    src = torch.randint(0, 20, (2, 7))
    steps = Continuation(model, src)
    calls = []
    kv = model.decoder.layers[0].cross_attn.kv
    hook = kv.register_forward_hook(lambda *a: calls.append(1))
    with torch.no_grad():
        for i in range(5):
            steps.feed(torch.full((2, 1), 1))
            layer_cache = steps.cache[0]
            assert len(layer_cache["self_attn"]) == i + 1  # keys of every position so far
            assert len(layer_cache["cross_attn"]) == 7  # the memory's keys, once
    hook.remove()
    assert len(calls) == 1


def test_a_prompt_computes_the_logits_of_its_last_position_alone():
    """Decoding reads a prompt's last logits: the head projects that position only (a vocabulary's worth of work
    per position saved), and the logits are recomputation's."""
    model = compile("examples/gpt2_small.tfs", overrides={"layers": 2, "d_model": 32, "heads": 4, "vocab": 50,
                                                          "context": 32}, seed=0).eval()
    prompt = torch.randint(0, 50, (2, 9), generator=torch.Generator().manual_seed(0))
    projected = []
    hook = model.head.register_forward_hook(lambda module, args, out: projected.append(out.shape[1]))
    with torch.no_grad():
        logits = Continuation(model).feed(prompt)
        hook.remove()
        assert_close(logits, model(prompt)[:, -1], FLOAT32)
    assert projected == [1]


def test_a_decoder_that_looks_ahead_is_never_cached():
    model = compile("""embedding tokens { vocab 10; dim 8 }
        decoder x 1 { attention self heads=2 mask=none; feedforward d_ff=8 }
        head tied(tokens)""", seed=0).eval()
    assert not cache_supported(model.spec)
    assert Continuation(model).use_cache is False
    with pytest.raises(ValueError, match="looks ahead"):
        Continuation(model, use_cache=True)


# ---------------------------------------------------------------- beam search on a model we control
class TableModel:
    """Next-token log-probabilities from a table indexed by the tokens generated so far."""

    def __init__(self, table: dict[tuple, list[float]], vocab: int):
        self.table, self.vocab, self.rows = table, vocab, None

    def feed(self, tokens):
        self.rows = [()] * tokens.shape[0] if self.rows is None else [r + (t,) for r, t in zip(self.rows, tokens[:, 0].tolist())]
        return torch.tensor([self.table.get(r, [0.0] * self.vocab) for r in self.rows]).log()

    def reorder(self, rows):
        self.rows = [self.rows[i] for i in rows.tolist()]


def brute_force_best(table, vocab: int, eos: int, max_new: int, alpha: float):
    best = (-math.inf, None)
    for n in range(1, max_new + 1):
        for seq in itertools.product(range(vocab), repeat=n):
            if eos in seq[:-1] or (n < max_new and seq[-1] != eos):
                continue
            log_prob = sum(math.log(table[seq[:i]][t]) if table[seq[:i]][t] > 0 else -math.inf
                           for i, t in enumerate(seq))
            tokens = list(seq[:-1]) if seq[-1] == eos else list(seq)
            score = log_prob / length_penalty(n, alpha)
            best = max(best, (score, tokens), key=lambda x: x[0])
    return best


def test_beam_search_finds_what_greedy_misses():
    # token 0 is the end. Greedy takes 1 (p 0.6) and is then stuck with a flat 1/3 each;
    # 2 (p 0.4) leads to a certain end: 0.4 * 1.0 beats 0.6 * 1/3.
    eos = 0
    table = {(): [0.0, 0.6, 0.4], (1,): [1 / 3, 1 / 3, 1 / 3], (2,): [1.0, 0.0, 0.0]}
    for prefix in list(table):
        for t in range(3):
            table.setdefault(prefix + (t,), [1.0, 0.0, 0.0])
    start = torch.zeros(1, 1, dtype=torch.long)
    greedy = sample(TableModel(table, 3), start, 2, eos)[0]
    best = beam_search(TableModel(table, 3), start, 2, eos, beam=2, alpha=0.0)[0][0]
    assert greedy == [1]
    assert best.tokens == [2] and math.isclose(best.log_prob, math.log(0.4), rel_tol=1e-6)


@settings(max_examples=40)
@given(st.integers(2, 3), st.integers(1, 3), st.sampled_from([0.0, 0.6, 1.0]), st.data())
def test_wide_beam_search_returns_the_true_best_sequence(vocab, max_new, alpha, data):
    eos = 0
    table = {}
    for n in range(max_new):
        for prefix in itertools.product(range(vocab), repeat=n):
            weights = data.draw(st.lists(st.integers(1, 20), min_size=vocab, max_size=vocab), label=str(prefix))
            table[prefix] = [w / sum(weights) for w in weights]
    score, tokens = brute_force_best(table, vocab, eos, max_new, alpha)
    found = beam_search(TableModel(table, vocab), torch.zeros(1, 1, dtype=torch.long), max_new, eos,
                        beam=vocab ** max_new, alpha=alpha)[0][0]
    assert math.isclose(found.score, score, rel_tol=1e-5)
    ended = len(found.tokens) < max_new or tokens == found.tokens  # ties aside, the same sequence
    sequence = tuple(found.tokens) + ((eos,) if ended and len(found.tokens) < max_new else ())
    exact = sum(math.log(table[sequence[:i]][t]) for i, t in enumerate(sequence)) / length_penalty(len(sequence), alpha)
    assert math.isclose(exact, score, rel_tol=1e-5)  # what it returned really scores the best


def test_beam_results_are_sorted_and_scored_by_the_length_penalty():
    table = {(): [0.5, 0.3, 0.2], (1,): [0.9, 0.05, 0.05], (2,): [0.9, 0.05, 0.05]}
    out = beam_search(TableModel(table, 3), torch.zeros(1, 1, dtype=torch.long), 2, 0, beam=3, alpha=0.6)[0]
    assert [h.score for h in out] == sorted((h.score for h in out), reverse=True)
    for h in out:
        n = len(h.tokens) + 1  # the end token counts
        assert math.isclose(h.score, h.log_prob / ((5 + n) / 6) ** 0.6)


def test_beam_search_on_a_compiled_model_agrees_with_and_without_cache():
    model = compile("examples/vaswani_base.tfs", overrides={"layers": 1, "d_model": 16, "heads": 2, "d_ff": 16,
                                                            "vocab": 12}, seed=3).eval()
    src = torch.randint(5, 12, (2, 6), generator=torch.Generator().manual_seed(0))
    start = torch.ones(2, 1, dtype=torch.long)
    a = beam_search(Continuation(model, src, use_cache=True), start, 6, 2, beam=3)
    b = beam_search(Continuation(model, src, use_cache=False), start, 6, 2, beam=3)
    assert [[h.tokens for h in r] for r in a] == [[h.tokens for h in r] for r in b]
    for ra, rb in zip(a, b):
        for ha, hb in zip(ra, rb):
            assert math.isclose(ha.score, hb.score, rel_tol=1e-5)


# ---------------------------------------------------------------- sampling
def test_top_k_keeps_exactly_the_k_largest():
    logits = torch.tensor([[0.1, 2.0, -1.0, 1.5, 0.7]])
    kept = filter_logits(logits, top_k=2).isfinite()
    assert kept.tolist() == [[False, True, False, True, False]]


@given(st.lists(st.floats(-5, 5), min_size=2, max_size=12), st.floats(0.05, 0.99))
def test_top_p_keeps_the_smallest_set_reaching_p(values, p):
    logits = torch.tensor([values])
    probs = logits.softmax(-1)[0]
    kept = filter_logits(logits, top_p=p).isfinite()[0]
    assert kept.any()
    kept_mass = probs[kept].sum().item()
    assert kept_mass >= p - 1e-6 or kept.all()
    # dropping the least likely kept token would fall short of p
    smallest = probs[kept].min().item()
    assert kept_mass - smallest < p + 1e-6
    assert probs[~kept].max().item() <= smallest + 1e-7 if (~kept).any() else True


def test_sampling_is_reproducible_from_a_seed_and_follows_temperature():
    model = compile("examples/gpt2_small.tfs", overrides={"layers": 1, "d_model": 16, "heads": 2, "vocab": 30},
                    seed=0).eval()
    prompt = torch.tensor([[3, 4, 5]])

    def draw(seed, **kw):
        return sample(Continuation(model), prompt, 12, generator=torch.Generator().manual_seed(seed), **kw)

    assert draw(1, temperature=1.0) == draw(1, temperature=1.0)
    assert draw(1, temperature=1.0) != draw(2, temperature=1.0)
    greedy = sample(Continuation(model), prompt, 12)
    assert draw(5, temperature=1e-4) == greedy  # a vanishing temperature is greedy
    assert all(draw(s, temperature=1.0, top_k=1) == greedy for s in range(3))  # top-1 sampling is greedy too


def test_complete_refuses_text_outside_the_vocabulary_and_prompts_without_room():
    from tfspec.run.data import Vocabulary

    model = compile("examples/gpt2_small.tfs", overrides={"layers": 1, "d_model": 16, "heads": 2, "vocab": 40,
                                                          "context": 8}, seed=0).eval()
    vocab = Vocabulary.letters(10)
    with pytest.raises(ValueError, match="not in this model's vocabulary"):
        complete(model, vocab, ["abz"], prompted=True, max_new=4)
    with pytest.raises(ValueError, match="leave no room"):
        complete(model, vocab, ["abcdefghij"], prompted=True, max_new=4)
    out = complete(model, vocab, ["abc"], prompted=False, max_new=100, strategy=Strategy())
    assert len(out[0].output) == 8 - 3 + 1  # positions end at 8; the last token is never fed back


class _Constant:
    """Steps whose next-token logits always prefer token 7."""

    def feed(self, tokens):
        logits = torch.zeros(tokens.shape[0], 10)
        logits[:, 7] = 1.0
        return logits

    def reorder(self, rows):
        pass


def test_forced_first_and_last_tokens_as_transformers_forces_them():
    from tfspec.run.decoding import Forced, sample
    start = torch.zeros(2, 1, dtype=torch.long)
    assert sample(Forced(_Constant(), 3, 5, budget=4), start, max_new=4) == [[3, 7, 7, 5]] * 2
    assert sample(Forced(_Constant(), None, 5, budget=3), start, max_new=3) == [[7, 7, 5]] * 2
    assert sample(Forced(_Constant(), 3, 5, budget=1), start, max_new=1) == [[5]] * 2  # ForcedEOS applies last


# ---------------------------------------------------------------- compiled decoding
COMPILED = """
embedding tokens {{ vocab 50; dim 32; position none }}
decoder x 4 {{
  position rotary
  attention self heads=4 mask=causal + padding {kind}
  feedforward d_ff=64 activation=swiglu
  layers every(2) {{ self_attn mask=causal + window(5) + padding }}
}}
head tied(tokens)
"""


@pytest.mark.parametrize("kind", ["kv_heads=2", "kind=latent(8, 4)"])
def test_a_compiled_step_gives_the_logits_of_eager_decoding_without_recompiling(kind, no_recompiles):
    """Windowed layers keep rings of their look-back (5 slots), the others max_len; a left-padded prompt."""
    model = compile(COMPILED.format(kind=kind), seed=0).eval()
    with torch.no_grad():
        for p in model.parameters():  # away from the initialisation (norm weights of exactly 1 hide mistakes)
            p.add_(torch.randn_like(p) * 0.05)
    prompt = torch.randint(0, 50, (2, 7), generator=torch.Generator().manual_seed(0))
    padding = torch.zeros(2, 7, dtype=torch.bool)
    padding[1, :3] = True
    new = torch.randint(0, 50, (2, 20), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        eager = Continuation(model, prompt_padding_mask=padding)
        compiled = Continuation(model, prompt_padding_mask=padding, compile="eager", max_len=27)
        assert_close(compiled.feed(prompt), eager.feed(prompt), FLOAT32)
        for i in range(new.shape[1]):
            a, b = compiled.feed(new[:, i:i + 1]), eager.feed(new[:, i:i + 1])
            assert_close(a, b, FLOAT32, msg=i)
    capacities = {kv.capacity for layer in compiled.cache for kv in layer.values()}
    assert capacities == {5, 27}  # window(5) with causal: 4 keys back and the new one
    assert no_recompiles["stats"]["unique_graphs"] == 1


def test_compiled_decoding_of_an_encoder_decoder_and_beam_search(no_recompiles):
    model = compile("examples/vaswani_base.tfs", overrides={"layers": 2, "d_model": 32, "heads": 4, "d_ff": 32,
                                                            "vocab": 20}, seed=0).eval()
    src = torch.randint(0, 20, (2, 7), generator=torch.Generator().manual_seed(0))
    start = torch.zeros(2, 1, dtype=torch.long)
    with torch.no_grad():
        eager = sample(Continuation(model, src), start, max_new=12)
        assert sample(Continuation(model, src, compile="eager", max_len=13), start, max_new=12) == eager
        torch._dynamo.reset()  # beam search decodes a batch of another size: a graph of its own
        expected = beam_search(Continuation(model, src[:1]), start[:1], max_new=8, eos=3, beam=3)
        got = beam_search(Continuation(model, src[:1], compile="eager", max_len=9), start[:1], max_new=8, eos=3,
                          beam=3)
    assert [(h.tokens, round(h.score, 4)) for h in got[0]] == [(h.tokens, round(h.score, 4)) for h in expected[0]]


def test_inductor_compiles_the_step_once_and_follows_changed_weights():
    """The default backend (inductor): tokens as eager decoding's, for weights changed between two decodings
    that share the compiled graph. A batch of one: its linear maps run as reductions (``RowProductsAsReductions``)."""
    import torch._dynamo
    torch._dynamo.reset()
    model = compile(COMPILED.format(kind="kv_heads=2"), seed=0).eval()
    prompt = torch.randint(0, 50, (1, 5), generator=torch.Generator().manual_seed(0))
    with torch.no_grad(), torch._dynamo.config.patch(error_on_recompile=True):
        assert sample(Continuation(model, compile=True, max_len=25), prompt, 20) == \
            sample(Continuation(model), prompt, 20)
        for p in model.parameters():
            p.mul_(1.5)
        assert sample(Continuation(model, compile=True, max_len=25), prompt, 20) == \
            sample(Continuation(model), prompt, 20)
    torch._dynamo.reset()


def test_each_model_gets_its_own_step_and_a_changed_model_a_new_one(no_recompiles):
    """A compiled step skips Dynamo's guards on the model's modules (``compiled_step``): two models alike but for
    a constant, and a model whose constant changes between decodings, still decode as eagerly."""
    first, second = (compile(COMPILED.format(kind="kv_heads=2"), seed=0).eval() for _ in range(2))
    norms = [[m for m in model.modules() if isinstance(getattr(m, "eps", None), float)] for model in (first, second)]
    assert len(norms[0]) == 8  # two a layer
    for norm in norms[1]:
        norm.eps = 3.0  # the same weights and shapes: a graph for the first would pass every other guard
    tokens = torch.randint(0, 50, (2, 17), generator=torch.Generator().manual_seed(0))

    def decode(model, **compiled):  # the logits of a 5-token prompt and 12 steps
        steps = Continuation(model, **compiled)
        return torch.stack([steps.feed(tokens[:, :5])] + [steps.feed(tokens[:, i:i + 1]) for i in range(5, 17)])
    with torch.no_grad():
        expected = [decode(model) for model in (first, second)]
        assert not close(expected[0], expected[1], 1e-3)
        for model, logits in zip((first, second), expected):
            assert_close(decode(model, compile="eager", max_len=17), logits, FLOAT32)
        step = compiled_step(first, "eager")
        assert compiled_step(first, "eager") is step
        assert_close(decode(first, compile="eager", max_len=17), expected[0], FLOAT32)
        for norm in norms[0]:
            norm.eps = 3.0
        assert compiled_step(first, "eager") is not step
        assert_close(decode(first, compile="eager", max_len=17), expected[1], FLOAT32)
    assert no_recompiles["stats"]["unique_graphs"] == 3


def test_decoding_leaves_every_variant_as_it_found_it():
    """A model's compiled step is kept while ``module_state`` stays the same: no variant may change it by
    decoding (a table cached in a plain attribute would), or every decoding would compile anew."""
    from test_variants import ENTRIES, choice_text, spec_text
    tried = []
    for family, name, options in ENTRIES:
        text = spec_text(family, name, options).replace("encoder x 2", "decoder x 2")  # (kinds and masks: encoders)
        text = text.replace(f"mask={choice_text(name, options)}", f"mask=causal + {choice_text(name, options)}")
        try:
            spec = tfspec.parse(text.replace("mask=padding", "mask=causal + padding"))
        except tfspec.SpecError:  # a kind that takes no causal mask (BigBird's, Linformer's): nothing to decode
            continue
        if spec.head is None or spec.head.pool is not None or not cache_supported(spec):  # (nothing to decode)
            continue
        model = compile(spec, seed=0).eval()
        before = module_state(model)
        src = torch.randint(0, 10, (1, 5)) if spec.kind == "encoder-decoder" else None
        with torch.no_grad():
            sample(Continuation(model, src), torch.zeros(1, 3, dtype=torch.long), 4)
        assert module_state(model) == before, (family, name)
        tried.append(name)
    assert {"rotary", "alibi", "t5", "latent", "window", "sink"} <= set(tried)


def test_compiled_decoding_refuses_what_it_cannot_do():
    model = compile(COMPILED.format(kind="kv_heads=2"), seed=0).eval()
    with pytest.raises(ValueError, match="give max_len"):
        Continuation(model, compile="eager")
    with pytest.raises(ValueError, match="KV cache"):
        Continuation(model, compile="eager", use_cache=False, max_len=9)
    with torch.no_grad():
        steps = Continuation(model, compile="eager", max_len=9)
        steps.step = functools.partial(decode_step, steps)  # (eagerly: what is refused does not depend on compiling)
        steps.feed(torch.zeros(1, 7, dtype=torch.long))
        with pytest.raises(ValueError, match="one token a step"):
            steps.feed(torch.zeros(1, 2, dtype=torch.long))
        steps.feed(torch.zeros(1, 1, dtype=torch.long))
        steps.feed(torch.zeros(1, 1, dtype=torch.long))
        with pytest.raises(LengthError, match="holds 9 positions"):
            steps.feed(torch.zeros(1, 1, dtype=torch.long))
        with pytest.raises(LengthError, match="the prompt has 10 positions, but the compiled decoder's cache holds 9"):
            Continuation(model, compile="eager", max_len=9).feed(torch.zeros(1, 10, dtype=torch.long))


@pytest.mark.parametrize("shape", [(1, 1, 32), (2, 1, 32), (8, 32), (4, 16, 32), (65, 32), (3, 0, 32)])
@pytest.mark.parametrize("bias", [False, True])
def test_a_few_rows_of_logits_are_the_linear_map_and_its_gradients(shape, bias):
    """``logits_of`` computes decoding's few rows of vocabulary-wide logits as (W·xᵀ)ᵀ: the values and
    gradients of ``F.linear``, whichever way it takes."""
    from tfspec.nn.head import logits_of
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(shape, generator=generator, requires_grad=True)
    weight = torch.randn(1500, 32, generator=generator, requires_grad=True)
    b = torch.randn(1500, generator=generator, requires_grad=True) if bias else None
    grad = torch.randn(*shape[:-1], 1500, generator=generator)
    ours = logits_of(x, weight, b)
    theirs = torch.nn.functional.linear(x, weight, b)
    rows = math.prod(shape[:-1])
    assert ours.shape == theirs.shape and close(ours, theirs, FLOAT32)
    assert ours.is_contiguous() == (not 1 < rows <= 64)  # the transposed product over 2 to 64 rows
    inputs = [t for t in (x, weight, b) if t is not None]
    for g, h in zip(torch.autograd.grad(ours, inputs, grad), torch.autograd.grad(theirs, inputs, grad)):
        assert_close(g, h, 1e-4)


def test_one_rows_linear_maps_as_reductions_compute_the_linear_map():
    """``RowProductsAsReductions`` (what a compiled decode step on the CPU runs a batch of one with): one float32
    row's ``F.linear`` as a product and a sum, equal to it up to the order of the sum; anything else untouched."""
    g = torch.Generator().manual_seed(0)
    weight, bias = torch.randn(300, 64, generator=g), torch.randn(300, generator=g)
    one, two = torch.randn(1, 1, 64, generator=g), torch.randn(2, 1, 64, generator=g)
    seen = []

    class Watch(torch.overrides.TorchFunctionMode):  # which functions the mode calls on to
        def __torch_function__(self, func, types, args=(), kwargs=None):
            seen.append(func)
            return func(*args, **(kwargs or {}))

    with Watch(), RowProductsAsReductions():
        reduced = [F.linear(one, weight, bias), F.linear(one, weight), F.linear(one[0, 0], weight, bias=bias)]
    assert F.linear not in seen and torch.Tensor.sum in seen  # a product and a sum, never the BLAS's map
    seen.clear()
    with Watch(), RowProductsAsReductions():
        untouched = [F.linear(two, weight, bias), F.linear(one.double(), weight.double(), bias.double()),
                     F.linear(one.bfloat16(), weight.bfloat16())]
    assert seen.count(F.linear) == 3
    for got, expected in zip(reduced, [F.linear(one, weight, bias), F.linear(one, weight),
                                       F.linear(one[0, 0], weight, bias)]):
        assert got.shape == expected.shape and close(got, expected, FLOAT32)
    for got, expected in zip(untouched, [F.linear(two, weight, bias), F.linear(one.double(), weight.double(),
                                         bias.double()), F.linear(one.bfloat16(), weight.bfloat16())]):
        assert torch.equal(got, expected)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_a_token_outside_the_vocabulary_is_refused_by_name_and_decoding_goes_on(compiled):
    """A step fed an id the embedding has no row for is a ValueError naming it (a compiled step's used to fail
    inside its generated kernel), and leaves the sequence as it was: the next step computes what it would have."""
    model = tfspec.compile("examples/gpt2_small.tfs", seed=0,
                           overrides={"layers": 1, "d_model": 32, "heads": 2, "context": 32, "vocab": 50}).eval()
    prompt = torch.randint(0, 50, (1, 4), generator=torch.Generator().manual_seed(0))
    steps, fresh = (Continuation(model, use_cache=True, compile=compiled, max_len=16) for _ in range(2))
    with torch.no_grad():
        steps.feed(prompt)
        with pytest.raises(ValueError, match="tokens contains id 70, outside the vocabulary of 50"):
            steps.feed(torch.tensor([[70]]))
        assert steps.length == 4
        fresh.feed(prompt)
        assert torch.equal(steps.feed(torch.tensor([[7]])), fresh.feed(torch.tensor([[7]])))
