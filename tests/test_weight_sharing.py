"""Layers sharing weights (``weight_sets N``, ALBERT's cross-layer sharing): the stack's layers run N sets of
weights, each by a run of consecutive layers. The model equals one whose layers hold copies of those weights;
parameters count each set once while FLOPs count every layer run; caches, training, the standalone file,
the diagram and ``check`` all see the true structure."""

import pytest
import torch

import tfspec
from tfspec.backend.standalone import emit
from tfspec.inspect.analysis import analyse
from tfspec.inspect.diagram import to_graphviz
from tfspec.inspect.measure import measure
from tfspec.inspect.summary import summary_line
from tfspec.ir.queries import parameter_table
from tfspec.run.decoding import Continuation, sample
from numerics import FLOAT32, close

SPEC = """embedding tokens {{ vocab 40; dim 16; position learned(32) }}
decoder x 5 {{
  residual pre
  {sets}
  attention self heads=2 mask=causal + padding
  feedforward d_ff=24 activation=gelu
  final layernorm
  {sections}
}}
head tied(tokens)"""
SHARED = SPEC.format(sets="weight_sets 2", sections="")  # layers 0-2 run set 0, layers 3-4 set 1


def unshared_copy(model) -> torch.nn.Module:
    """The same spec without sharing, each layer given a copy of the weights its shared counterpart runs."""
    plain = tfspec.compile(SPEC.format(sets="", sections=""), seed=1)
    state = {k: v for k, v in model.state_dict().items() if not k.startswith("decoder.layers.")}
    for i, index in enumerate(model.decoder.runs):
        state.update({f"decoder.layers.{i}.{k}": v for k, v in model.decoder.layers[index].state_dict().items()})
    plain.load_state_dict(state, strict=True)
    return plain


def test_layers_run_the_weights_of_their_set_and_equal_an_unshared_copy():
    spec = tfspec.parse(SHARED)
    assert [spec.decoder.weights_of(i) for i in range(5)] == [0, 0, 0, 1, 1]  # ALBERT's int(i / (5 / 2))
    model = tfspec.compile(spec, seed=0)
    assert model.decoder.runs == [0, 0, 0, 1, 1] and len(model.decoder.layers) == 2
    assert {k: tuple(v.shape) for k, v in model.state_dict().items()} == parameter_table(spec.graph())
    plain = unshared_copy(model)
    per_layer = sum(p.numel() for p in plain.decoder.layers[0].parameters())
    assert spec.parameter_count() == sum(p.numel() for p in model.parameters())
    assert spec.parameter_count() == sum(p.numel() for p in plain.parameters()) - 3 * per_layer
    tokens, padding = torch.randint(0, 40, (2, 9)), torch.zeros(2, 9, dtype=torch.bool)
    padding[1, 6:] = True
    model.eval(), plain.eval()
    with torch.no_grad():
        assert torch.equal(model(tokens, padding_mask=padding), plain(tokens, padding_mask=padding))
    # training: a set's gradient is the sum of what its layers would get separately
    model.train(), plain.train()
    model(tokens).sum().backward()
    plain(tokens).sum().backward()
    shared = model.decoder.layers[0].ffn.up.weight.grad
    separate = sum(plain.decoder.layers[i].ffn.up.weight.grad for i in (0, 1, 2))
    assert close(shared, separate, FLOAT32) and not close(shared, separate / 3, FLOAT32)


def test_cost_counts_each_set_once_and_every_run_of_it():
    shared, plain = tfspec.parse(SHARED), tfspec.parse(SPEC.format(sets="", sections=""))
    a, b = analyse(shared, seq_len=8), analyse(plain, seq_len=8)
    measured = measure(shared, a.lengths)
    assert a.total.matmul == b.total.matmul == measured.flops
    assert a.total.memory == b.total.memory == measured.saved_bytes  # every run keeps its own activations
    assert a.total.params == shared.parameter_count() < plain.parameter_count()
    rows = {r.node: r for r in a.rows}
    assert rows["decoder.ffn"].repeat == 5
    assert rows["decoder.ffn"].cost.params == 2 * {r.node: r for r in b.rows}["decoder.ffn"].cost.params // 5
    assert "5 layers on 2 weight sets" in summary_line("x.tfs", shared)
    assert 'label="5×, 2 sets of weights"' in to_graphviz(shared).source
    expanded = to_graphviz(shared, expand=True).source
    assert 'label="layer 3 (weights 1)"' in expanded and 'label="layer 2 (weights 0)"' in expanded
    assert "repeated 5×, running 2 sets of weights" in shared.graph().format()


def test_cached_decoding_keeps_a_cache_per_layer_run_and_equals_recomputation():
    model = tfspec.compile(SPEC.format(sets="weight_sets 1", sections=""), seed=0).eval()
    prompt = torch.randint(0, 40, (2, 3))
    cached, recomputed = Continuation(model), Continuation(model, use_cache=False)
    assert cached.use_cache and len(cached.cache) == 5
    assert sample(cached, prompt, max_new=10) == sample(recomputed, prompt, max_new=10)


def test_emit_runs_each_set_where_the_spec_says():
    from test_emit import assert_emitted_equals_compiled
    text = SPEC.format(sets="weight_sets 2", sections="layers 3 4 { self_attn mask=causal + window(2) + padding }")
    source = emit(text)
    assert "for index in (0, 0, 0, 1, 1):" in source and "(DecoderLayer, DecoderLayer1)[kind]() for kind in (0, 1,)" \
        in source
    assert_emitted_equals_compiled(tfspec.parse(text))


@pytest.mark.parametrize("sets, sections, message, column", [
    ("weight_sets 6", "", "weight_sets 6: the stack has 5 layers", 15),
    ("weight_sets 0", "", "weight_sets 0: the stack has 5 layers", 15),
    ("weight_sets 2", "layers 2 { ffn d_ff=8 }",
     "weight_sets 2: layers 0–2 run one set of weights, but `layers` sections make them different kinds", 15),
    ("weight_sets 1.5", "", "expected a whole number, got 1.5", 15),
])
def test_a_bad_weight_sets_is_a_located_error(sets, sections, message, column):
    with pytest.raises(tfspec.SpecError) as info:
        tfspec.parse(SPEC.format(sets=sets, sections=sections))
    assert message in info.value.message
    assert (info.value.line, info.value.column) == (4, column), info.value.message
