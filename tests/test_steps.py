"""Steps a spec adds to an attention (``steps=...``), and what one layer hands on to later ones: an input the graph
declares (an edge on port ``values`` from the first layer's attention), which validation, the diagram, the cost,
the compiled model, decoding and ``tfspec emit`` all follow."""

from __future__ import annotations

import pytest
import torch

import tfspec
from tfspec.inspect.diagram import to_graphviz
from tfspec.ir import nodes as ir
from tfspec.nn.steps import AttentionStep
from numerics import FLOAT32, assert_close


class FirstValues(AttentionStep):
    """A test step: each layer's fresh values replaced by the first layer's."""

    def __init__(self, source: str) -> None:
        super().__init__()
        self.source = source

    def fresh_values(self, v, ctx):
        return ctx.carried[self.source]


@pytest.fixture
def first_values():
    from tfspec.registry import ATTENTION_STEPS, AttentionStepKind, Constructor

    class First(AttentionStepKind):
        name = "first_values_test"
        doc = "first_values_test: every layer mixes the first layer's values"
        reads = "values"

        def module(self, shape, options, source):
            return Constructor(FirstValues, (source,))

    ATTENTION_STEPS.register(First)
    yield
    del ATTENTION_STEPS._entries["first_values_test"]


SPEC = """model reader
embedding tokens {{ vocab 30; dim 16 }}
decoder x 3 {{
  residual pre
  attention self heads=2 mask=causal + padding steps=first_values_test
  feedforward d_ff=32
  {sections}
}}
head linear(30)
"""


def test_the_first_layer_hands_on_its_values_through_a_declared_edge(first_values):
    spec = tfspec.parse(SPEC.format(sections=""))
    assert spec.decoder.schedule == (0, 1, 1)
    first, reader = spec.decoder.blocks
    assert first.sublayers[0].body.exports == ("values",) and first.sublayers[0].body.steps == ()
    assert [s.name for s in reader.sublayers[0].body.steps] == ["first_values_test"]
    g = spec.graph()
    producer, consumer = g.of(ir.Attention)
    assert consumer.values_from == producer.id and consumer.port(producer.id) == "values"
    assert "hands on its values" in producer.label
    dot = to_graphviz(spec).source
    assert 'label=values' in dot and "1× (layer 0)" in dot and "2× (layers 1–2)" in dot
    model = tfspec.compile(spec, seed=0).eval()
    assert model.decoder.layers[0].self_attn.exports == producer.id
    assert model.decoder.layers[2].self_attn.first_values_test.source == producer.id


def test_what_crosses_layers_is_exact_in_decoding_and_in_the_emitted_file(first_values):
    from test_emit import assert_emitted_equals_compiled
    from tfspec.run.decoding import Continuation
    spec = tfspec.parse(SPEC.format(sections=""))
    assert_emitted_equals_compiled(spec)
    model = tfspec.compile(spec, seed=0).eval()
    tokens = torch.randint(0, 30, (2, 9), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        cached, full = Continuation(model, use_cache=True), Continuation(model, use_cache=False)
        pairs = [(cached.feed(tokens[:, :4]), full.feed(tokens[:, :4]))]
        pairs += [(cached.feed(tokens[:, i:i + 1]), full.feed(tokens[:, i:i + 1])) for i in range(4, 9)]
    for a, b in pairs:
        assert_close(a, b, FLOAT32)


@pytest.mark.parametrize("section, message, caret", [
    ("layers 0 { self_attn = feedforward(d_ff=8) }", "layer 0 has no self_attn", "first_values_test"),
    ("layers 2 { self_attn kv_heads=1 }", "mixes the first layer's values (2 key/value heads of 8) into this layer's "
                                          "(1 of 8)", "first_values_test"),
])
def test_what_a_layer_reads_of_another_is_checked_where_it_is_written(first_values, section, message, caret):
    text = SPEC.format(sections=section)
    with pytest.raises(tfspec.SpecError) as info:
        tfspec.parse(text)
    assert message in str(info.value)
    line = text.splitlines()[info.value.line - 1]
    assert line[info.value.column - 1:].startswith(caret), str(info.value)


def test_a_reader_computes_with_the_first_layers_values(first_values):
    """Layer 2's attention with its fresh values replaced by layer 0's computes what it computes, called alone,
    with layer 0's values handed to it."""
    from tfspec.nn.context import Context
    model = tfspec.compile(SPEC.format(sections=""), seed=0).eval()
    first, third = model.decoder.layers[0].self_attn, model.decoder.layers[2].self_attn
    x0, x2 = torch.randn(2, 5, 16), torch.randn(2, 5, 16)
    ctx = Context(torch.arange(5)[None])
    with torch.no_grad():
        first(x0, ctx)
        got = third(x2, ctx)
        values = first.project(x0)[2]
        q, k, _ = third.project(x2)
        weights = torch.softmax((q @ k.transpose(-1, -2)) / 8 ** 0.5 + torch.full((5, 5), -1e9).triu(1), dim=-1)
        expected = third.out((weights @ values).transpose(1, 2).reshape(2, 5, 16))
    assert_close(got, expected, FLOAT32)
