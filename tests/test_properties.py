"""Hypothesis: every generated valid spec parses, validates and lowers; damaged specs only raise SpecError."""

import networkx as nx
from hypothesis import given, settings
from hypothesis import strategies as st

from tfspec import ir
import tfspec
from strategies import Generated, mutated, valid_specs
from tfspec.inspect.analysis import count_parameters, parameter_table
from tfspec.errors import SpecError
from tfspec.front.syntax import parse_module


@given(valid_specs())
def test_generated_specs_parse_validate_and_lower(gen: Generated):
    spec = tfspec.parse(gen.text, file="gen.tfs")
    assert spec.kind == gen.kind
    g = spec.graph()
    assert nx.is_directed_acyclic_graph(g)
    g.lint()
    assert {role: info.repeat for role, info in g.stacks.items()} == gen.layers
    # every node has an inferred shape, whose last dim is the model width inside the stacks
    for node in g.ordered():
        assert node.shape is not None
        if node.in_block:
            assert node.shape[-1] == gen.width
    # one template per kind of layer (one for a uniform stack), not one copy per layer
    assert len(g.of(ir.BlockInput)) == sum(len(info.kinds) for info in g.stacks.values())
    assert all(len(info.kinds) == len(getattr(spec, role).blocks) for role, info in g.stacks.items())
    table = parameter_table(g)
    tied = spec.head is not None and spec.head.tied_to is not None
    assert sum(_numel(s) for s in table.values()) == count_parameters(g) == spec.parameter_count()
    assert ("logits" in g) == gen.has_head and ("hidden" in g) != gen.has_head
    if tied:
        assert "head.weight" not in table


def _numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


@given(valid_specs())
def test_parse_is_deterministic_and_span_free_equality(gen: Generated):
    a = tfspec.parse(gen.text, file="a.tfs")
    b = tfspec.parse("\n\n# moved down two lines\n" + gen.text, file="b.tfs")
    assert a == b  # positions are for messages, not meaning
    assert a.model_dump() == b.model_dump()


@settings(max_examples=150)
@given(mutated())
def test_damaged_specs_raise_only_spec_errors(text: str):
    try:
        spec = tfspec.parse(text, file="m.tfs")
    except SpecError as exc:
        rendered = str(exc)
        assert rendered
        lines = text.split("\n")
        for d in exc.diagnostics:
            if d.span is not None and d.span.file == "m.tfs":
                assert 1 <= d.span.line <= len(lines) + 1
                assert d.span.column >= 1
    else:
        spec.graph()  # a mutation can still be valid; then it must lower too


@given(st.text(max_size=200))
def test_arbitrary_text_raises_only_spec_errors(text: str):
    try:
        parse_module(text, "t.tfs")
        tfspec.parse(text, file="t.tfs")
    except SpecError:
        pass
