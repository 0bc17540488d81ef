"""The registry contract, checked for every registered variant with the option values it declares.

A new variant file is covered here without editing this test: each family has a
template spec that uses the variant, and ``Variant.examples`` supplies options.
What a variant declares (parameters, FLOPs, reach, relative positions, label)
must agree with what its runtime module does.
"""

from __future__ import annotations

from typing import Literal

import pytest
import torch
import torch.nn.functional as F

import tfspec
from tfspec.inspect.analysis import analyse, mask_pairs, parameter_table
from tfspec.inspect.diff import diff
from tfspec.inspect.measure import measure
from tfspec.ir.queries import fixed_length
from tfspec.front.schema import Choice
from tfspec.registry import (ACTIVATIONS, ATTENTION_KINDS, ATTENTION_STEPS, FEEDFORWARD_KINDS, INITS, INPUTS, MASKS,
                             MIXERS, NORMS, POOLS, POSITIONS, ROUTER_PARTS, AttentionShape)
from numerics import FLOAT32, assert_close, close

FAMILIES = {"attention kind": ATTENTION_KINDS, "mask": MASKS, "position": POSITIONS, "norm": NORMS,
            "activation": ACTIVATIONS, "feed-forward kind": FEEDFORWARD_KINDS, "mixer": MIXERS,
            "attention step": ATTENTION_STEPS, "init": INITS, "input": INPUTS, "pool": POOLS,
            "router part": ROUTER_PARTS}
EMBEDDING = "embedding tokens {{ vocab 40; dim 16; position {position} }}\n"


def choice_text(name: str, options: dict) -> str:
    if not options:
        return name
    values = ", ".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in options.items())
    return f"{name}({values})"


def spec_text(family: str, name: str, options: dict) -> str:
    """A small model that uses the variant where its family is used."""
    c = choice_text(name, options)
    variant = FAMILIES[family][name]
    if family == "position" and variant.acts == "embedding":
        return EMBEDDING.format(position=c) + \
            "decoder x 2 { attention self heads=2 mask=causal; feedforward d_ff=32 }\nhead linear(40)"
    if family == "input":  # an encoder of what it reads, classified
        return (f"embedding given {{ input {c}; dim 16; norm layernorm; position none }}\n"
                "encoder x 2 { attention self heads=2; feedforward d_ff=32 }\nhead linear(10) pool=mean")
    if family == "pool":  # an encoder of tokens, classified from one vector of each sequence
        return (EMBEDDING.format(position="learned(80)") + "encoder x 2 { attention self heads=2 mask=padding; "
                f"feedforward d_ff=32 }}\nhead linear(10) pool={c}")
    body = {"attention kind": f"attention self heads=2 kind={c} mask=padding; feedforward d_ff=32",
            "mask": f"attention self heads=2 mask={c}; feedforward d_ff=32",
            "position": f"position {c}; attention self heads=2 mask=causal; feedforward d_ff=32",
            "norm": f"residual pre; norm {c}; attention self heads=2 mask=causal; feedforward d_ff=32",
            "activation": f"attention self heads=2 mask=causal; feedforward d_ff=32 activation={c}",
            "feed-forward kind": f"attention self heads=2 mask=causal; feedforward d_ff=32 activation=swiglu kind={c}",
            "mixer": f"residual pre; mixer {c}; attention self heads=2 mask=causal + padding; feedforward d_ff=32",
            "attention step": f"residual pre; attention self heads=2 mask=causal + padding steps={c}; "
                              "feedforward d_ff=32",
            # a mixture of 4 experts in 2 groups, each position choosing 2 of them (the sparse mixer's number)
            "router part": f"attention self heads=2 mask=causal + padding; feedforward d_ff=32 activation=swiglu "
                           f"kind=moe(4, 2) router={c}",
            "init": "attention self heads=2 mask=causal; feedforward d_ff=32"}[family]
    defaults = f"defaults {{ init {c} }}\n" if family == "init" else ""
    stack = "encoder" if family in ("attention kind", "mask") else "decoder"
    text = defaults + EMBEDDING.format(position="none") + f"{stack} x 2 {{ {body} }}\nhead linear(40)"
    if family == "attention kind" and refused(text):  # a kind for causal attention alone: a decoder's
        text = text.replace("encoder x 2", "decoder x 2").replace("mask=padding", "mask=causal + padding")
    if family == "feed-forward kind" and variant.reads_per_layer:  # its stack's embedding makes them
        text = text.replace("position none }", "position none; per_layer 32 }").replace("activation=swiglu",
                                                                                     "activation=gelu")
    return text


def refused(text: str) -> bool:
    try:
        tfspec.parse(text)
    except tfspec.SpecError:
        return True
    return False


ENTRIES = [(family, name, options) for family, registry in FAMILIES.items() for name in registry
           for options in registry[name].examples]
IDS = [f"{family}:{choice_text(name, options)}" for family, name, options in ENTRIES]


@pytest.mark.parametrize("family, name, options", ENTRIES, ids=IDS)
def test_declared_parameters_are_the_built_modules_state_dict(family, name, options):
    spec = tfspec.parse(spec_text(family, name, options))
    model = tfspec.compile(spec, seed=0)
    declared = parameter_table(spec.graph())
    built = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    assert built == declared
    assert all(torch.isfinite(p).all() for p in model.parameters())


@pytest.mark.parametrize("family, name, options", ENTRIES, ids=IDS)
def test_the_emitted_standalone_file_computes_what_the_compiled_model_does(family, name, options):
    from test_emit import assert_emitted_equals_compiled
    assert_emitted_equals_compiled(tfspec.parse(spec_text(family, name, options)))


IN_ATTENTION = [e for e in ENTRIES if e[0] == "attention kind" and not ATTENTION_KINDS[e[1]].mixes_positions
                and not ATTENTION_KINDS[e[1]].own_pattern
                or e[0] == "position" and POSITIONS[e[1]].acts == "attention"]


@pytest.mark.parametrize("family, name, options", IN_ATTENTION, ids=[IDS[ENTRIES.index(e)] for e in IN_ATTENTION])
def test_attention_of_bounded_reach_runs_in_bands_that_equal_dense_attention(family, name, options):
    from test_sparse import output_and_gradients
    text = spec_text(family, name, options).replace("mask=padding", "mask=window(3) + padding") \
        .replace("mask=causal", "mask=causal + window(3)")
    spec = tfspec.parse(text)
    role = spec.stacks[0].role
    model = tfspec.compile(spec, seed=0)
    attention = model.get_submodule(f"{role}.layers.0.self_attn")
    kind = ATTENTION_KINDS[name] if family == "attention kind" else ATTENTION_KINDS["dot"]
    blocks = kind.runs_in_blocks and not (family == "position" and (POSITIONS[name].biases_scores
                                                                    or POSITIONS[name].mixes_values))
    assert (attention.band is not None) == blocks
    tokens = torch.randint(0, 40, (2, 75), generator=torch.Generator().manual_seed(0))
    extra = {"padding_mask": torch.arange(75)[None].expand(2, -1) < torch.tensor([[0], [30]])} \
        if "padding" in text else {}
    banded, dense = (output_and_gradients(model, tokens, extra, band) for band in (True, False))
    for a, b in zip(banded, dense):
        assert_close(a, b, 1e-4)
    analysed, measured = analyse(spec, seq_len=75, batch=2), measure(spec, {role: 75}, batch=2)
    assert (measured.flops, measured.saved_bytes) == (analysed.total.matmul, analysed.total.memory)


@pytest.mark.parametrize("family, name, options", [e for e in ENTRIES if e[0] in ("attention kind", "position")],
                         ids=[i for e, i in zip(ENTRIES, IDS) if e[0] in ("attention kind", "position")])
def test_declared_kernel_properties_are_the_runtime_modules(family, name, options):
    """A kind that declares ``fuses_causal`` computes causal attention from ``is_causal`` alone; a position
    scheme's module does what the scheme declares (the compiler and ``tfspec emit`` decide kernels from that):
    it biases the scores if and only if ``biases_scores``, and attends in place of the kind's mix if and only
    if ``mixes_values``; one its stack owns reaches every layer's attention as the stack's module."""
    variant = FAMILIES[family][name]
    if family == "position":
        if variant.acts == "attention":
            model = tfspec.compile(spec_text(family, name, options), seed=0)
            role = model.spec.stacks[0].role
            attention = model.get_submodule(f"{role}.layers.0.self_attn")
            scheme = attention.position
            owned = f"{role}.{variant.stack_attribute}.self_attn"
            if variant.stack_params(attention_shape_of(model, role), variant.options(options)):
                assert scheme is model.get_submodule(owned)
                assert not any(n.startswith(f"{role}.layers.0.self_attn.position") for n, _ in model.named_parameters())
            positions = torch.arange(6)[None]
            assert (scheme.score_bias(positions, positions) is not None) == variant.biases_scores
            q, k, v = (torch.randn(1, attention.heads, 6, attention.head_dim) for _ in range(3))
            marker = torch.zeros(1, attention.heads, 6, attention.head_dim)
            mixed = scheme.attend(lambda *args: marker, q, k, v, None, positions, positions, None, lambda w: w)
            assert (mixed is not marker) == variant.mixes_values
        return
    causal = [Choice(name="causal")]
    refusals = variant.conflicts(variant.options(options), causal, POSITIONS["none"], None)
    if variant.mixes_positions or variant.own_pattern or refusals:  # refused with a causal mask, as a spec error
        with pytest.raises(tfspec.SpecError, match="mixes all positions" if variant.mixes_positions
                           else "decides itself which keys" if variant.own_pattern else refusals[0].message):
            tfspec.parse(spec_text(family, name, options).replace("mask=padding", "mask=causal"))
        return
    text = spec_text(family, name, options).replace("mask=padding", "mask=causal")
    model = tfspec.compile(text, seed=0).eval()
    attention = model.get_submodule(f"{model.spec.stacks[0].role}.layers.0.self_attn")
    assert attention.fused_causal == variant.fuses_causal
    if variant.fuses_causal:
        q, k, v = (torch.randn(2, 2, 5, 8, generator=torch.Generator().manual_seed(i)) for i in range(3))
        causal = torch.full((5, 5), torch.finfo(torch.float32).min).triu(1)
        assert_close(attention.mix(q, k, v, None, True), attention.mix(q, k, v, causal, False), FLOAT32)


@pytest.mark.parametrize("family, name, options", ENTRIES, ids=IDS)
def test_declared_costs_are_what_the_flop_counter_and_autograd_see(family, name, options):
    spec = tfspec.parse(spec_text(family, name, options))
    role = spec.stacks[0].role
    fixed = fixed_length(spec.graph(), role)  # (an input's: the pictures' patches)
    for length in (12, 75) if family == "mask" else (fixed or 12,):  # 75: masks of bounded reach run in bands
        analysed = analyse(spec, seq_len=length, batch=2)
        measured = measure(spec, {role: length}, batch=2)
        assert measured.flops == analysed.total.matmul, length
        assert measured.saved_bytes == analysed.total.memory, length


@pytest.mark.parametrize("family, name", [(f, n) for f, r in FAMILIES.items() for n in r])
def test_every_variant_is_documented_and_its_options_are_checked_where_written(family, name):
    variant = FAMILIES[family][name]
    assert variant.doc, f"{family} {name} has no doc"
    assert all(variant.options(o) is not None for o in variant.examples)
    if len(variant.Options.model_fields) > 0:
        assert len(variant.examples) >= 2, "show an option change reaching every stage"
    text = spec_text(family, name, {"no_such_option": 1})
    with pytest.raises(tfspec.SpecError) as info:
        tfspec.parse(text)
    line = text.splitlines()[info.value.line - 1]
    assert line[info.value.column - 1:].startswith(("no_such_option", name)), str(info.value)


CHANGED = [(family, name) for family, registry in FAMILIES.items() for name in registry
           if len(registry[name].examples) >= 2]


@pytest.mark.parametrize("family, name", CHANGED)
def test_an_option_change_reaches_the_label_and_the_diff(family, name):
    registry = FAMILIES[family]
    first, second = registry[name].examples[:2]
    labels = [registry[name].label(registry[name].options(o)) for o in (first, second)]
    assert labels[0] != labels[1]
    before, after = (tfspec.parse(spec_text(family, name, o)) for o in (first, second))
    changes = [f"{c.what}: {c.before} → {c.after}" for c in diff(before, after).changes]
    assert changes, "diff reports no difference for an option change"
    assert any(labels[1] in c or choice_text(name, second) in c for c in changes), changes


@pytest.mark.parametrize("name", [n for n in MASKS if MASKS[n].structural])
@pytest.mark.parametrize("n", [1, 2, 5, 9, 13])
def test_a_structural_masks_reach_agrees_with_what_it_allows(name, n):
    variant = MASKS[name]
    for example in variant.examples:
        options = variant.options(example)
        index = torch.arange(n)
        allowed = variant.allowed(index, index, options, {})
        if allowed.dim() == 3:  # a rule of the batch: no inputs given here, so one row of it
            allowed = allowed[0]
        behind, ahead = variant.reach(options)
        offset = index[None, :] - index[:, None]  # key - query
        for i in range(n):
            row_behind, row_ahead = variant.reach_at(options, i)
            assert (row_behind is None or behind is not None and row_behind <= behind) and \
                (row_ahead is None or ahead is not None and row_ahead <= ahead), "reach_at exceeds reach"
            band = torch.ones(n, dtype=torch.bool)
            if row_behind is not None:
                band &= offset[i] >= -row_behind
            if row_ahead is not None:
                band &= offset[i] <= row_ahead
            assert not (allowed[i] & ~band).any(), f"query {i} sees keys beyond its declared reach"
            declared = torch.zeros(n, dtype=torch.bool)
            for start, stop in variant.keys_at(options, i, n):
                declared[start:stop] = True
            if not variant.inputs:  # decided by positions alone: the declared keys are exactly the allowed
                assert torch.equal(allowed[i], declared), f"query {i}: keys_at {variant.keys_at(options, i, n)}"
            else:  # the run-time inputs narrow it: the declared keys bound what they allow
                assert not (allowed[i] & ~declared).any(), f"query {i} sees keys outside keys_at"
        if not variant.inputs:  # decided by positions alone: the reach is exact
            choice = Choice(name=name, options=example)
            assert int(allowed.sum()) == mask_pairs(n, [choice])


@pytest.mark.parametrize("name, options", [(n, o) for n in POSITIONS for o in POSITIONS[n].examples])
def test_relative_position_schemes_are_offset_invariant_and_absolute_ones_are_not(name, options):
    spec = tfspec.parse(spec_text("position", name, options))
    model = tfspec.compile(spec, seed=0).eval()
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():  # weights far from their small initial values: scores that positions change visibly
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=generator) * 0.3)
    tokens = torch.randint(0, 40, (2, 7), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        plain = model(tokens)
        shifted = model(tokens, position_ids=torch.arange(5, 12)[None])
    scheme = POSITIONS[name]
    assert close(plain, shifted, FLOAT32) == scheme.relative_with(scheme.options(options))


def test_attention_shape_widths():
    shape = AttentionShape(width=48, heads=8, kv_heads=2, head_dim=16, memory_width=48, cross=False, bias=False,
                           out_bias=False)
    assert (shape.q_width, shape.kv_width) == (128, 32)


NORM_PLACES = ("defaults {{ init {init} }}\n"
               "embedding tokens {{ vocab 40; dim 16; position none; norm {norm} }}\n"
               "decoder x 2 {{ residual pre; norm {norm}; attention self heads=2 mask=causal qk_norm={norm}; "
               "feedforward d_ff=32; final {norm} }}\n"
               "head tied(tokens) transform=gelu norm={norm}")
PRESENT_NORMS = [(n, o) for n in NORMS if not NORMS[n].absent for o in NORMS[n].examples]


@pytest.mark.parametrize("init, init_options", [(n, o) for n in INITS for o in INITS[n].examples])
@pytest.mark.parametrize("norm, norm_options", PRESENT_NORMS)
def test_every_norm_initialises_as_a_norm_wherever_it_stands_under_every_init(init, init_options, norm,
                                                                             norm_options):
    """Embedding norm, sublayer norms, qk-norm, final norm and the head transform's norm: scales start at 1
    (T5's at its factor), shifts at 0, declared constants at their value, under every scheme (qk-norm's used
    to be drawn like a matrix)."""
    spec = tfspec.parse(NORM_PLACES.format(init=choice_text(init, init_options),
                                           norm=choice_text(norm, norm_options)))
    model = tfspec.compile(spec, seed=0)
    norm_type = type(NORMS[norm].build(4, NORMS[norm].options(norm_options)))
    scale = init_options.get("factor", 1.0) if init == "t5" else 1.0
    places = set()
    for path, module in model.named_modules():
        if type(module) is not norm_type:
            continue
        places.add(path.rsplit(".", 1)[-1])
        weight = getattr(module, "weight", None)  # (none where the norm has no scale: rmsnorm(weight=false))
        declared = NORMS[norm].params(weight.shape[0] if weight is not None else 1, NORMS[norm].options(norm_options))
        for name, p in module.named_parameters():
            role = declared[name]
            expected = (role.value if role.value is not None else 0.0 if role.role == "norm_bias"
                        else scale if role.role == "norm_weight" else None)
            assert expected is not None, (norm, name, "a norm's parameter is a scale, a shift or a constant")
            assert torch.equal(p, torch.full_like(p, expected)), (path, name, p.flatten()[:4])
    assert places == {"norm", "self_attn_norm", "q_norm", "k_norm", "ffn_norm", "final_norm", "transform_norm"}


SCHEMES = [(n, INITS[n].examples[-1]) for n in INITS]  # every scheme, with options that differ from defaults


@pytest.mark.parametrize("family, name, options", ENTRIES, ids=IDS)
def test_every_parameter_starts_as_its_declaration_says_under_every_scheme(family, name, options):
    """What a variant declares for each parameter is what the compiled model holds after initialisation:
    declared constants (biases and shifts 0, scales 1 -- T5's at its factor --, a ``Param.value``) exactly,
    under every scheme; every drawn parameter drawn (finite, not constant)."""
    from tfspec.backend.compiler import parameter_roles
    text = spec_text(family, name, options)
    schemes = [(name, options)] if family == "init" else SCHEMES
    for scheme, scheme_options in schemes:
        spec = tfspec.parse(f"defaults {{ init {choice_text(scheme, scheme_options)} }}\n"
                            + text.split("\n", 1)[1] if text.startswith("defaults") else
                            f"defaults {{ init {choice_text(scheme, scheme_options)} }}\n" + text)
        roles = parameter_roles(spec.graph())
        model = tfspec.compile(spec, seed=0)
        norm_scale = scheme_options.get("factor", 1.0) if scheme == "t5" else 1.0
        for full_name, p in model.named_parameters():
            role = roles[full_name]
            constant = (role.value if role.value is not None else 0.0 if role.kind in ("bias", "norm_bias")
                        else norm_scale if role.kind == "norm_weight" else None)
            where = (scheme, full_name, role.kind, p.flatten()[:4].tolist())
            if constant is not None:
                assert torch.equal(p, torch.full_like(p, constant)), where
            else:
                assert torch.isfinite(p).all() and (p.numel() == 1 or p.std() > 0), where


# ---------------------------------------------------------------- option types a variant may declare
@pytest.fixture
def window_with_optional_and_enumerated_options():
    """A mask declaring an ``int | None`` option and an enumeration, registered for one test only."""
    from pydantic import BaseModel, ConfigDict

    from tfspec.registry import Mask

    class Optional(Mask):
        name = "optional_test"
        doc = "optional_test(k=none, side=left)"
        structural = False

        class Options(BaseModel):
            model_config = ConfigDict(extra="forbid", frozen=True)
            k: int | None = None
            side: Literal["left", "both"] = "left"

    MASKS.register(Optional)
    yield
    del MASKS._entries["optional_test"]


def test_options_may_be_optional_or_enumerated(window_with_optional_and_enumerated_options):
    def options(text):
        spec = tfspec.parse(f"embedding tokens {{ vocab 40; dim 16 }}\nencoder x 1 {{ attention self heads=2 "
                            f"mask={text} }}")
        return spec.encoder.block.sublayers[0].body.mask[0]

    assert options("optional_test").options == {"k": None, "side": "left"}  # every option filled in
    assert options("optional_test(k=4, side=both)").options == {"k": 4, "side": "both"}
    chosen = options("optional_test(k=none)")
    assert chosen.options == {"k": None, "side": "left"} and MASKS.label(chosen) == "optional_test"
    assert MASKS.label(options("optional_test(k=4, side=both)")) == "optional_test(k=4, side=both)"
    assert str(chosen) == "optional_test(k=none, side=left)"  # as a spec writes it, and reads back
    assert options(str(chosen)) == chosen
    for text, message in (("optional_test(k=1.5)", "expected a whole number"),
                          ("optional_test(side=right)", "expected left or both, got 'right'")):
        with pytest.raises(tfspec.SpecError) as info:
            options(text)
        assert message in info.value.message and info.value.line == 2  # located, never a KeyError


def test_every_declared_option_type_can_be_written_in_a_spec():
    from tfspec.front.resolve import converter_for
    for family, registry in FAMILIES.items():
        for name in registry:
            for option, info in registry[name].Options.model_fields.items():
                assert converter_for(info.annotation), (family, name, option)


def decoder_text(family: str, name: str, options: dict) -> str | None:
    """A causal decoder that uses the variant, for cached decoding (None: the variant has no place in one)."""
    c = choice_text(name, options)
    variant = FAMILIES[family][name]
    if family == "attention kind":
        body = f"attention self heads=2 kind={c} mask=causal"
    elif family == "mask":
        if not variant.structural or variant.causal_from(variant.options(options)) == "start":
            body = f"attention self heads=2 mask={c}" if variant.structural else \
                f"attention self heads=2 mask=causal + {c}" if not variant.absent else None
        else:
            body = f"attention self heads=2 mask=causal + {c}"
    elif family == "position" and variant.acts == "attention":
        body = f"position {c}; attention self heads=2 mask=causal"
    elif family == "position":
        return EMBEDDING.format(position=c) + "decoder x 2 { attention self heads=2 mask=causal; feedforward d_ff=32 }\n" \
            "head linear(40)"
    elif family in ("feed-forward kind", "mixer", "attention step", "router part"):
        return spec_text(family, name, options)
    else:
        return None
    if body is None:
        return None
    return EMBEDDING.format(position="none") + f"decoder x 2 {{ residual pre; {body}; feedforward d_ff=32 }}\n" \
        "head linear(40)"


CACHED = [(f, n, o) for f, n, o in ENTRIES if f in ("attention kind", "mask", "position", "mixer", "attention step")]


@pytest.mark.parametrize("family, name, options", CACHED, ids=[f"{f}:{choice_text(n, o)}" for f, n, o in CACHED])
def test_cached_decoding_equals_recomputation_at_a_realistic_weight_scale(family, name, options):
    """Every variant a causal decoder can use: decoding with the KV cache gives the logits of recomputing the
    whole sequence, with weights drawn at std 0.5 (at 0.02, attention is nearly uniform and hides an inexact
    cache); where the cache cannot be exact, decoding does not use it."""
    from tfspec.run.decoding import Continuation, cache_supported
    text = decoder_text(family, name, options)
    if text is None:
        pytest.skip(f"{name} has no place in a causal decoder")
    try:
        spec = tfspec.parse(text)
    except tfspec.SpecError as exc:
        pytest.skip(f"{name} refuses a causal decoder: {exc.message}")
    model = tfspec.compile(spec, seed=0).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.5, generator=torch.Generator().manual_seed(p.numel()))
    if not cache_supported(spec):
        assert not Continuation(model).use_cache
        return
    tokens = torch.randint(0, 40, (2, 11), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():  # the first feed is a prompt (a prefix-LM's bidirectional prefix), then one at a time
        cached, full = Continuation(model, use_cache=True), Continuation(model, use_cache=False)
        first = 3
        logits = [(cached.feed(tokens[:, :first]), full.feed(tokens[:, :first]))]
        logits += [(cached.feed(tokens[:, i:i + 1]), full.feed(tokens[:, i:i + 1])) for i in range(first, 11)]
    for a, b in logits:
        assert_close(a, b, 1e-4)


def attention_shape_of(model, role):
    """The ``AttentionShape`` of ``role``'s first self-attention, as the IR has it."""
    from tfspec.ir import nodes as ir
    return next(iter(model.spec.graph().of(ir.Attention, stack=role))).geometry


# ---------------------------------------------------------------- every kind where decoders use it
RICH = ("embedding tokens {{ vocab 40; dim 16; position none }}\n"
        "decoder x 2 {{ residual pre; attn_dropout 0.1; {position}"
        "attention self heads=4 {kv_heads}kind={kind} mask={mask}; feedforward d_ff=32 }}\nhead linear(40)")
KINDS = [(name, options) for name in ATTENTION_KINDS for options in ATTENTION_KINDS[name].examples]


def rich_text(name: str, options: dict) -> tuple[str, list[str]]:
    """A decoder using the kind with rotary positions, grouped heads, a causal mask over padding and attention
    dropout, less the fewest features the kind refuses (each refusal a located spec error), and those features."""
    import itertools
    given = {"kv_heads": "kv_heads=2 ", "position": "position rotary; ", "mask": "causal + padding"}
    without = {"kv_heads": "", "position": "", "mask": "padding"}
    for count in range(len(given) + 1):
        for dropped in itertools.combinations(given, count):
            features = {k: without[k] if k in dropped else v for k, v in given.items()}
            text = RICH.format(kind=choice_text(name, options), **features)
            if "mask" in dropped:  # bidirectional: an encoder's
                text = text.replace("decoder x 2", "encoder x 2")
            try:
                tfspec.parse(text)
            except tfspec.SpecError as exc:
                assert exc.line is not None and exc.message, exc  # a refusal says where and why
                continue
            return text, list(dropped)
    raise AssertionError(f"{name} accepts none of the placements tried")


@pytest.mark.parametrize("name, options", KINDS, ids=[choice_text(n, o) for n, o in KINDS])
def test_every_kind_runs_with_positions_grouped_heads_a_causal_mask_and_dropout(name, options):
    """Not only in a padded encoder: each kind beside rotary positions, grouped-query heads and a causal mask, training
    with attention dropout over a left-padded batch, as decoders use it (less what it refuses, by a spec error):
    finite gradients for every parameter, and the FLOPs and saved bytes it declares are what runs."""
    text, _ = rich_text(name, options)
    spec = tfspec.parse(text)
    model = tfspec.compile(spec, seed=0).train()
    tokens = torch.randint(0, 40, (2, 13), generator=torch.Generator().manual_seed(0))
    padding = torch.zeros(2, 13, dtype=torch.bool)
    padding[1, :4] = True
    from tfspec.inspect.verify import typical_inputs
    torch.manual_seed(0)  # (run-time inputs as a typical call has them: Longformer's global first token)
    loss = model(tokens, padding, **typical_inputs(model, tokens)).float().pow(2).mean()
    (loss + sum(model.auxiliary_losses().values())).backward()  # (those a sublayer adds: DSA's indexer learns there)
    for parameter_name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), parameter_name
    role = spec.stacks[0].role
    analysed, measured = analyse(spec, seq_len=13, batch=2), measure(spec, {role: 13}, batch=2)
    assert measured.flops == analysed.total.matmul
    assert measured.saved_bytes == analysed.total.memory


@pytest.mark.parametrize("name, options", KINDS, ids=[choice_text(n, o) for n, o in KINDS])
def test_every_kind_meets_what_cudas_fused_attention_kernels_assume(name, options, monkeypatch):
    """What CUDA's fused attention kernels assume of their callers, checked on the CPU, where breaking it fails
    nowhere: every q, k and v reaching SDPA starts on a 16-byte boundary, and SDPA's output is read whatever its
    memory layout (CUDA's kernels return (batch, length, heads, dim) in memory). Both broke on an H200: latent
    attention's values split off at an odd offset ('misaligned address'), BigBird's middle blocks viewed."""
    from tfspec.nn import attention
    text, _ = rich_text(name, options)
    model = tfspec.compile(text.replace("attn_dropout 0.1; ", ""), seed=0).eval()
    tokens = torch.randint(0, 40, (2, 30), generator=torch.Generator().manual_seed(0))  # BigBird: sparse
    padding = torch.zeros(2, 30, dtype=torch.bool)
    padding[1, :7] = True
    from tfspec.inspect.verify import typical_inputs
    extra = typical_inputs(model, tokens)
    expected = model(tokens, padding, **extra)
    plain, misaligned = F.scaled_dot_product_attention, []

    def as_on_cuda(q, k, v, **options):
        misaligned.extend(t.shape for t in (q, k, v) if t.data_ptr() % 16)
        return plain(q, k, v, **options).transpose(1, 2).contiguous().transpose(1, 2)

    monkeypatch.setattr(attention, "ALIGNED_DEVICES", {"cuda", "cpu"})
    monkeypatch.setattr(F, "scaled_dot_product_attention", as_on_cuda)
    got = model(tokens, padding, **extra)
    assert not misaligned, misaligned
    assert_close(got, expected, 1e-6)


def test_aligning_sdpas_inputs_traces_under_torch_compile(monkeypatch):
    """Where ``torch.compile`` runs attention on CUDA (training, compiled decoding), the alignment check is not
    traced (a pointer is no tensor; inductor aligns SDPA's inputs itself): no graph break."""
    from tfspec.nn import attention
    monkeypatch.setattr(attention, "ALIGNED_DEVICES", {"cuda", "cpu"})
    q, k = torch.randn(2, 1, 3, 5, 4).unbind(0)
    values = torch.randn(1, 3, 5, 14)[..., 6:]  # 24 bytes in: copied when run eagerly
    compiled = torch.compile(attention.sdpa, fullgraph=True, backend="eager")
    assert_close(compiled(q, k, values, is_causal=True), F.scaled_dot_product_attention(q, k, values, is_causal=True))


def test_grouped_float32_attention_on_cuda_reaches_sdpa_with_a_head_per_query_head(monkeypatch):
    """On CUDA, float32 attention with fewer key/value heads than query heads has no fused kernel, and SDPA's math
    path keeps every score (memory quadratic in the length): a grouped-query model hands SDPA one key/value head per
    query head there, computing the same; bfloat16 (flash, cuDNN) stays grouped. Dry run: "cpu" stands for CUDA."""
    from tfspec.nn import attention
    model = tfspec.compile(tfspec.parse(
        "model gqa\nembedding tokens { vocab 40; dim 32; position none }\n"
        "decoder x 2 { position rotary; attention self heads=4 kv_heads=2 mask=causal + padding; "
        "feedforward d_ff=48 }\nhead tied(tokens)\n"))
    tokens = torch.randint(0, 40, (2, 9), generator=torch.Generator().manual_seed(0))
    padding = torch.zeros(2, 9, dtype=torch.bool)
    padding[1, :3] = True
    expected = model(tokens, padding)
    plain, calls = F.scaled_dot_product_attention, []

    def recorded(q, k, v, **options):
        calls.append((q.shape[1], k.shape[1], v.shape[1], bool(options.get("enable_gqa")), q.dtype))
        return plain(q, k, v, **options)

    monkeypatch.setattr(attention, "UNGROUPED_FLOAT32_DEVICES", {"cuda", "cpu"})
    monkeypatch.setattr(F, "scaled_dot_product_attention", recorded)
    assert_close(model(tokens, padding), expected, 1e-6)
    assert calls and all(c[:4] == (4, 4, 4, False) for c in calls), calls
    calls.clear()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        model(tokens, padding)
    assert calls and all(c[:4] == (4, 2, 2, True) for c in calls), calls


@pytest.mark.parametrize("name, options", KINDS, ids=[choice_text(n, o) for n, o in KINDS])
def test_a_kinds_declared_cache_size_is_what_decoding_keeps(name, options):
    """What ``AttentionKind.cache_elements`` declares per token (``kv_cache_elements``, which ``summary`` prints) is
    what a KV cache holds after a prompt and a few steps: its keys, values and the steps' extras per key."""
    from tfspec.ir.queries import kv_cache_elements
    from tfspec.nn.attention import KVCache
    from tfspec.run.decoding import Continuation, cache_supported
    text, _ = rich_text(name, options)
    spec = tfspec.parse(text.replace("attn_dropout 0.1; ", ""))
    if spec.decoder is None or not cache_supported(spec):
        pytest.skip(f"{name} decodes by recomputing (it refuses a causal mask)")
    model = tfspec.compile(spec, seed=0).eval()
    steps = Continuation(model, use_cache=True)
    with torch.no_grad():
        steps.feed(torch.randint(0, 40, (1, 5)))
        for token in range(3):
            steps.feed(torch.tensor([[token]]))
    held = 0
    for layer in steps.cache:
        for cache in layer.values():
            if isinstance(cache, KVCache):
                held += (cache.k[:, :, :len(cache)].numel() + cache.v[:, :, :len(cache)].numel()
                         + sum(t.numel() for t in cache.extras.values()))
    assert held == kv_cache_elements(spec.graph(), 8)[0]
