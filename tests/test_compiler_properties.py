"""Hypothesis over generated specs: the compiled model has the invariants its spec claims.

The property functions live in ``tfspec.inspect.verify`` (``tfspec verify`` runs them on a
user's spec); here they run over random valid specs from ``strategies.valid_specs``.
"""

from __future__ import annotations

import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import tfspec
from strategies import Generated, choice_text, kinds_for, valid_specs
from tfspec.inspect.analysis import parameter_table
from tfspec.registry import MASKS, AttentionShape, combined_reach
from tfspec.front.schema import Choice
from tfspec.inspect.verify import (check_causal, check_determinism, check_dropout_active, check_gradients, check_padding,
                           check_permutation, check_window, has_dropout, order_mixing_kinds, run)

SLOW = settings(deadline=None)


def tokens(draw, vocab: int, batch: int, length: int) -> torch.Tensor:
    rows = draw(st.lists(st.lists(st.integers(0, vocab - 1), min_size=length, max_size=length),
                         min_size=batch, max_size=batch))
    return torch.tensor(rows, dtype=torch.long)


def vocab_of(model, role: str) -> int:
    return model.embeddings[model.stack_embedding[role]].vocab


def source(draw, model, batch: int):
    if model.spec.kind != "encoder-decoder":
        return None
    return tokens(draw, vocab_of(model, "encoder"), batch, draw(st.integers(1, 8)))


@SLOW
@given(valid_specs(), st.data())
def test_every_generated_spec_compiles_runs_and_gets_finite_gradients(gen: Generated, data):
    torch.manual_seed(0)
    model = tfspec.compile(gen.text).train()
    assert {k: tuple(v.shape) for k, v in model.state_dict().items()} == parameter_table(model.spec.graph())
    assert sum(p.numel() for p in model.parameters()) == model.spec.parameter_count()
    role = model.spec.stacks[-1].role
    x = tokens(data.draw, vocab_of(model, role), 2, data.draw(st.integers(1, 8)))
    assert check_gradients(model, x, source(data.draw, model, 2)) is None


@SLOW
@given(valid_specs(kinds=("decoder-only", "encoder-decoder")), st.data())
def test_causal_decoders_never_read_the_future(gen: Generated, data):
    assume(gen.causal_decoder)
    model = tfspec.compile(gen.text).eval()
    length = data.draw(st.integers(2, 10))
    x = tokens(data.draw, vocab_of(model, "decoder"), 2, length)
    position = data.draw(st.integers(0, length - 2))
    replacement = tokens(data.draw, vocab_of(model, "decoder"), 2, length - position - 1)
    assert check_causal(model, x, position, replacement, source(data.draw, model, 2)) is None


@SLOW
@given(valid_specs(kinds=("encoder-only",), positions=("none",), windows=False, in_attention=False), st.data())
def test_encoders_without_positions_are_permutation_equivariant(gen: Generated, data):
    assume(not order_mixing_kinds(tfspec.parse(gen.text), "encoder"))  # Linformer's E, F weigh by position
    model = tfspec.compile(gen.text).eval()
    x = tokens(data.draw, vocab_of(model, "encoder"), 2, data.draw(st.integers(2, 9)))
    permutation = data.draw(st.permutations(range(x.shape[1])))
    assert check_permutation(model, x, list(permutation)) is None


@st.composite
def encoder_with_positions(draw):
    return f"""
embedding tokens {{ vocab 12; dim 16; position {draw(st.sampled_from(["sinusoidal", "learned(16)"]))} }}
defaults {{ residual {draw(st.sampled_from(["pre", "post"]))}; norm {draw(st.sampled_from(["layernorm", "rmsnorm"]))} }}
encoder x {draw(st.integers(1, 2))} {{
  attention self heads={draw(st.sampled_from([1, 2, 4]))} mask={draw(st.sampled_from(["none", "padding"]))}
  feedforward d_ff=32 activation={draw(st.sampled_from(["relu", "gelu", "swiglu"]))}
}}
"""


@settings(deadline=None, max_examples=15)
@given(encoder_with_positions(), st.integers(3, 8))
def test_positions_break_permutation_equivariance(text, length):
    """The same check fails once positions are added, so the equivariance test can fail.

    (With residual connections the position reaches the output directly; a spec of one
    residual-free attention is only approximately order-sensitive at initialisation.)
    """
    model = tfspec.compile(text).eval()
    x = torch.arange(length)[None]  # distinct tokens: reversing them is a real change
    assert check_permutation(model, x, list(reversed(range(length)))) is not None


@SLOW
@given(valid_specs(padding=True), st.data())
def test_outputs_at_real_positions_ignore_padding(gen: Generated, data):
    model = tfspec.compile(gen.text).eval()
    role = model.spec.stacks[-1].role
    x = tokens(data.draw, vocab_of(model, role), 3, data.draw(st.integers(1, 8)))
    lengths = [data.draw(st.integers(1, x.shape[1])) for _ in range(3)]
    filler = tokens(data.draw, vocab_of(model, role), 3, x.shape[1])
    src = source(data.draw, model, 3)
    src_lengths = src_filler = None
    if src is not None:
        src_lengths = [data.draw(st.integers(1, src.shape[1])) for _ in range(3)]
        src_filler = tokens(data.draw, vocab_of(model, "encoder"), 3, src.shape[1])
    assert check_padding(model, x, lengths, filler, src, src_lengths, src_filler) is None


BOUNDED = [(name, options) for name in MASKS for options in MASKS[name].examples
           if MASKS[name].structural and None not in MASKS[name].reach(MASKS[name].options(options))]


@st.composite
def bounded_reach(draw):
    """A one-layer model whose self-attention sees a bounded neighbourhood: any registered mask of bounded
    reach, alone or with causal and padding, under any attention kind that accepts the shape."""
    name, options = draw(st.sampled_from(BOUNDED))
    role = draw(st.sampled_from(["encoder", "decoder"]))
    heads = draw(st.sampled_from([1, 2, 4]))
    shape = AttentionShape(width=16, heads=heads, kv_heads=heads, head_dim=16 // heads, memory_width=16,
                           cross=False, bias=True, out_bias=True)
    others = draw(st.sampled_from([[], ["padding"]] + ([["causal"]] if role == "decoder" else [])))
    choices = [Choice(name=name, options=options)] + [Choice(name=other) for other in others]
    mask = " + ".join(choice_text(c.name, c.options) for c in choices)
    behind, ahead = combined_reach([MASKS.of(c) for c in choices])
    return max(behind, ahead), f"""
embedding tokens {{ vocab 20; dim 16; position {draw(st.sampled_from(["none", "sinusoidal", "learned(80)"]))} }}
defaults {{ residual {draw(st.sampled_from(["pre", "post"]))}; norm {draw(st.sampled_from(["layernorm", "rmsnorm"]))} }}
{role} x 1 {{
  attention self heads={heads} kind={draw(st.sampled_from(kinds_for(shape, heads, choices)))} mask={mask}
  feedforward d_ff=32 activation={draw(st.sampled_from(["relu", "swiglu"]))}
}}
head linear
"""


@settings(deadline=None, max_examples=40)
@given(bounded_reach(), st.data())
def test_attention_of_bounded_reach_is_local_with_one_layer(case, data):
    """Lengths up to 80 run the banded path (``nn.kernels.band_chunk``) as well as the dense one."""
    reach, text = case
    model = tfspec.compile(text).eval()
    for block in model.modules():  # make the additive scorer non-trivial
        if hasattr(block, "score"):
            torch.nn.init.normal_(block.score)
    length = data.draw(st.integers(1, 80))
    x = torch.randint(0, 20, (1, length), generator=torch.Generator().manual_seed(data.draw(st.integers(0, 99))))
    position = data.draw(st.integers(0, x.shape[1] - 1))
    assert check_window(model, x, position, reach, data.draw(st.integers(0, 19))) is None


def test_the_locality_check_can_fail():
    model = tfspec.compile("embedding t { vocab 20; dim 16; position none }\n"
                           "encoder x 1 { attention self heads=2 mask=window(3); feedforward d_ff=32 }").eval()
    x = torch.arange(60)[None] % 20
    assert check_window(model, x, 30, 2, 0) is None
    assert check_window(model, x, 30, 1, 0) is not None  # window(3) reaches 2 positions, not 1


@SLOW
@given(valid_specs(), st.data())
def test_eval_is_deterministic_and_train_dropout_is_random(gen: Generated, data):
    model = tfspec.compile(gen.text)
    role = model.spec.stacks[-1].role
    x = tokens(data.draw, vocab_of(model, role), 2, data.draw(st.integers(2, 8)))
    src = source(data.draw, model, 2)
    assert check_determinism(model, x, src) is None
    # At std 0.02, a residual-free chain's signal can fall below float precision next to a
    # residual stream, hiding dropout; weights at 1/sqrt(fan-in) keep every dropout's effect visible without
    # growing activations until a saturating norm (DyT's tanh) rounds every output to the same ±1.
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0, p.shape[-1] ** -0.5)
    if has_dropout(model.spec):
        assert check_dropout_active(model, x, src) is None


def test_dropout_check_can_fail():
    """A model whose dropout is switched off fails the train-mode check: the check is not vacuous."""
    model = tfspec.compile("embedding t { vocab 9; dim 8 }\nencoder x 1 { feedforward d_ff=8 act_dropout=0.5 }")
    x = torch.randint(0, 9, (2, 5))
    assert check_dropout_active(model, x) is None
    model.encoder.layers[0].ffn.dropout.p = 0.0
    assert check_dropout_active(model, x) is not None


@SLOW
@given(valid_specs(kinds=("encoder-only", "decoder-only"), positions=("none",)), st.data())
def test_specs_with_only_relative_positions_are_offset_invariant(gen: Generated, data):
    """Declared ``relative`` schemes (rotary, ALiBi, none) ignore where the sequence starts."""
    from tfspec.inspect.verify import check_offset, position_masks, position_schemes
    model = tfspec.compile(gen.text).eval()
    role = model.spec.stacks[-1].role
    # (a scheme relative only with some options -- dynamically scaled rotary -- is checked where it says so)
    assume(all(s.relative_with(options) for s, options in position_schemes(model.spec, role)))
    assume(not position_masks(model.spec, role))  # (chunks of position ids start at 0)
    x = tokens(data.draw, vocab_of(model, role), 2, data.draw(st.integers(1, 9)))
    assert check_offset(model, x, data.draw(st.integers(1, 5000))) is None
