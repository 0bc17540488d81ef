"""Per-layer inputs (Gemma 4's per-layer embeddings): ``embedding ... { per_layer N }`` makes N features for each
layer of its stack from the token ids and the embeddings, and a ``kind=per_layer`` feed-forward of each layer gates
its own -- equal to the formula written here; its cost and memory as measured; its located errors."""

import math

import pytest
import torch
import torch.nn.functional as F

import tfspec
from tfspec.inspect.analysis import analyse
from tfspec.inspect.measure import measure
from tfspec.run.decoding import Continuation
from numerics import FLOAT32, assert_close

SPEC = """embedding tokens {{ vocab 40; dim 16; position none; scale sqrt(16); per_layer 8 {embedding} }}
decoder x 3 {{
  position rotary
  x = x + norm(attention(norm(x), heads=2, mask=causal + padding))
  x = x + norm(feedforward(norm(x), d_ff=32, activation=geglu_tanh, bias=false))
  x = x + norm(feedforward(x, d_ff=8, activation=gelu_tanh, bias=false, kind=per_layer))
  final rmsnorm
}}
head tied(tokens)"""


def model(embedding: str = "", seed: int = 0):
    m = tfspec.compile(SPEC.format(embedding=embedding), seed=seed).eval()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in m.parameters():  # every weight off its initial value (a norm weight of 1 hides mistakes)
            p.add_(0.2 * torch.randn(p.shape, generator=g))
    return m


def rms(x, weight, eps=1e-6):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def test_each_layer_gates_its_own_features_as_the_formula_says():
    """e = (table(ids)·√8 + rms(projection(x)/√16)) / √2, split per layer; layer i adds norm(down(gelu(gate(h)) ·
    e_i)); in float64."""
    m = model().double()
    tokens = torch.randint(0, 40, (2, 7), generator=torch.Generator().manual_seed(1))
    per_layer = m.embeddings["tokens"].per_layer
    x = m.embeddings["tokens"].tokens(tokens) * 4.0
    e = (per_layer.table(tokens) * math.sqrt(8)).view(2, 7, 3, 8)
    e = (e + rms((per_layer.projection(x) / 4.0).view(2, 7, 3, 8), per_layer.norm.weight)) / math.sqrt(2)
    seen = {}
    for i, layer in enumerate(m.decoder.layers):
        layer.ffn_1.register_forward_hook(lambda module, args, out, i=i: seen.__setitem__(i, (args[0], out)))
    with torch.no_grad():
        m(tokens)
    for i, layer in enumerate(m.decoder.layers):
        h, out = seen[i]
        gate = layer.ffn_1
        expected = gate.down(F.gelu(gate.gate(h), approximate="tanh") * e[:, :, i])
        assert_close(out, expected, 1e-12)


def test_decoding_gives_the_logits_of_recomputation_and_gradients_reach_the_tables():
    m = model()
    tokens = torch.randint(0, 40, (2, 9), generator=torch.Generator().manual_seed(2))
    padding = torch.zeros(2, 5, dtype=torch.bool)
    padding[1, :2] = True
    with torch.no_grad():
        cached, full = Continuation(m, prompt_padding_mask=padding), Continuation(m, prompt_padding_mask=padding,
                                                                                  use_cache=False)
        assert_close(cached.feed(tokens[:, :5]), full.feed(tokens[:, :5]), FLOAT32)
        for i in range(5, 9):
            assert_close(cached.feed(tokens[:, i:i + 1]), full.feed(tokens[:, i:i + 1]), FLOAT32, msg=i)
    F.cross_entropy(m.train()(tokens).flatten(0, 1), tokens.flatten()).backward()
    per_layer = m.embeddings["tokens"].per_layer
    assert per_layer.table.weight.grad.abs().sum() > 0 and per_layer.projection.weight.grad.abs().sum() > 0
    assert all(p.grad is not None for p in m.parameters())


@pytest.mark.parametrize("batch, length", [(1, 7), (2, 9)])
def test_cost_and_memory_are_what_runs_and_what_autograd_keeps(batch, length):
    spec = tfspec.parse(SPEC.format(embedding=""))
    analysed, measured = analyse(spec, seq_len=length, batch=batch), measure(spec, {"decoder": length}, batch=batch)
    assert analysed.total.matmul == measured.flops
    assert analysed.total.memory == measured.saved_bytes


def test_check_counts_the_tables_and_the_diagram_draws_the_inputs():
    spec = tfspec.parse(SPEC.format(embedding="; per_layer_vocab 50"))
    plain = tfspec.parse(SPEC.format(embedding="").replace("; per_layer 8 ", " ").replace(
        "  x = x + norm(feedforward(x, d_ff=8, activation=gelu_tanh, bias=false, kind=per_layer))\n", ""))
    per_layer = 50 * 3 * 8 + 24 * 16 + 8  # table, projection, norm
    gates = 3 * (8 * 16 * 2 + 2 * 16)  # gate, down, the (layer) norm after them
    assert spec.parameter_count() == plain.parameter_count() + per_layer + gates
    from tfspec.inspect.diagram import to_graphviz
    dot = to_graphviz(spec).source
    assert "Per-Layer Inputs (3×8" in dot and "Per-Layer Gate" in dot


@pytest.mark.parametrize("embedding, change, message", [
    ("", ("d_ff=8, activation=gelu_tanh", "d_ff=6, activation=gelu_tanh"), "but its d_ff is 6"),
    ("", ("activation=gelu_tanh, bias=false, kind", "activation=geglu_tanh, bias=false, kind"),
     "not the gated unit geglu_tanh"),
    ("; per_layer_vocab 30", ("", ""), "per_layer_vocab 30 is smaller than the vocab 40"),
    ("", ("  x = x + norm(feedforward(x, d_ff=8, activation=gelu_tanh, bias=false, kind=per_layer))\n", ""),
     "per_layer 8: no layer of the decoder reads them"),
    ("", ("; per_layer 8 ", " "), "but embedding 'tokens' makes none"),
])
def test_what_does_not_fit_is_a_located_error(embedding, change, message):
    text = SPEC.format(embedding=embedding).replace(*change)
    with pytest.raises(tfspec.SpecError) as info:
        tfspec.parse(text)
    assert message in str(info.value), str(info.value)
    assert info.value.line in (1, 6), str(info.value)


def test_an_image_embedding_has_no_per_layer_inputs():
    with pytest.raises(tfspec.SpecError) as info:
        tfspec.parse("embedding pictures { input patches(8, 4); dim 16; per_layer 4 }\nencoder x 1 { attention self "
                     "heads=2; feedforward d_ff=8 }")
    assert "`per_layer` does not apply" in info.value.message


def test_verify_holds_and_emit_writes_a_file_that_computes_the_same():
    from tfspec.inspect.verify import verify
    from test_emit import assert_emitted_equals_compiled
    results = {r.name: r.status for r in verify(model(), examples=3)}
    assert results["causality"] == results["padding invariance"] == "held" and "violated" not in results.values()
    assert_emitted_equals_compiled(tfspec.parse(SPEC.format(embedding="")))


def test_activation_checkpointing_gives_the_same_gradients():
    from test_kv_sharing import assert_checkpointing_keeps_gradients
    assert_checkpointing_keeps_gradients(model)
