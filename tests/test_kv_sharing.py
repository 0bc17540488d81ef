"""kv_from=j: an attention attending with the keys and values an earlier layer's attention made (Gemma 4's layers
sharing keys and values), projecting and norming its queries alone -- equal to the formula written here, in cached
and compiled decoding too, with its located errors."""

import functools

import pytest
import torch
import torch.nn.functional as F

import tfspec
from tfspec import ir
from tfspec.run.decoding import Continuation, decode_step
from numerics import FLOAT32, assert_close

SPEC = """embedding tokens {{ vocab 40; dim 16; position none }}
decoder x 5 {{
  residual pre; norm rmsnorm; position rotary
  attention self heads=4 {attention} qk_norm=rmsnorm
  feedforward d_ff=32
  layers range(3, 5) {{ self_attn kv_from=2 {reader} }}
}}
head tied(tokens)"""


WINDOWED = "kv_heads=2 mask=causal + window(3) + padding"


def model(attention: str = WINDOWED, reader: str = "", seed: int = 0):
    """Five layers, the last two reading layer 2's keys and values; every weight moved off its initial value."""
    m = tfspec.compile(SPEC.format(attention=attention, reader=reader), seed=seed).eval()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in m.parameters():
            p.add_(0.2 * torch.randn(p.shape, generator=g))
    return m


def rms(x, weight, eps=1e-6):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def rotate(x, positions, theta=10000.0):
    d = x.shape[-1]
    angles = positions[:, None].double() * theta ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    cos, sin = (f(torch.cat((angles, angles), -1))[:, None] for f in (torch.cos, torch.sin))  # (n, 1, d)
    first, second = x.chunk(2, -1)
    return x * cos + torch.cat((-second, first), -1) * sin


def test_a_reader_attends_with_the_keys_and_values_the_earlier_layer_made():
    """Layer 3's queries (its own projection, norm and rotation) against layer 2's normed, rotated keys and its
    values, under the masks; in float64, against the formula."""
    m = model().double()
    inputs = {}
    for i in (2, 3):
        m.decoder.layers[i].self_attn.register_forward_pre_hook(
            lambda module, args, i=i: inputs.__setitem__(i, args[0]))
        m.decoder.layers[i].self_attn.register_forward_hook(
            lambda module, args, out, i=i: inputs.__setitem__(f"out{i}", out))
    tokens = torch.randint(0, 40, (2, 9), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        m(tokens)
    maker, reader = m.decoder.layers[2].self_attn, m.decoder.layers[3].self_attn
    assert not hasattr(reader, "qkv") and reader.k_norm is None  # queries alone
    positions = torch.arange(9)
    _, k, v = maker.qkv(inputs[2]).split((16, 8, 8), -1)
    k = rotate(rms(k.view(2, 9, 2, 4), maker.k_norm.weight), positions).transpose(1, 2)
    v = v.view(2, 9, 2, 4).transpose(1, 2)
    q = rotate(rms(reader.q(inputs[3]).view(2, 9, 4, 4), reader.q_norm.weight), positions).transpose(1, 2)
    scores = q @ k.repeat_interleave(2, 1).transpose(-1, -2) / 2.0
    i, j = positions[:, None], positions[None, :]
    scores = scores.masked_fill(~((j <= i) & (i - j < 3)), float("-inf"))
    expected = reader.out((scores.softmax(-1) @ v.repeat_interleave(2, 1)).transpose(1, 2).reshape(2, 9, 16))
    assert_close(inputs["out3"], expected, 1e-7)  # (rotary tables are computed in float32)


@pytest.mark.parametrize("attention", [WINDOWED, "kv_heads=2 mask=causal + window(3) + padding kind=same_kv",
                                       "steps=value_norm mask=causal + padding"])
def test_cached_and_compiled_decoding_give_the_logits_of_recomputation(attention):
    """A left-padded prompt then one token at a time: the reader reads the maker's whole cache (a window's
    keys trimmed after the maker attends keep what this step handed on)."""
    reader = "steps=none" if "steps" in attention else ""
    m = model(attention, reader)
    prompt = torch.randint(0, 40, (2, 6), generator=torch.Generator().manual_seed(2))
    new = torch.randint(0, 40, (2, 7), generator=torch.Generator().manual_seed(3))
    padding = torch.zeros(2, 6, dtype=torch.bool)
    padding[1, :2] = True
    with torch.no_grad():
        cached, full = Continuation(m, prompt_padding_mask=padding), Continuation(m, prompt_padding_mask=padding,
                                                                                  use_cache=False)
        static = Continuation(m, prompt_padding_mask=padding, compile="eager", max_len=13)
        static.step = functools.partial(decode_step, static)
        first = full.feed(prompt)
        for steps in (cached, static):
            assert_close(steps.feed(prompt), first, FLOAT32)
        for i in range(new.shape[1]):
            expected = full.feed(new[:, i:i + 1])
            assert_close(cached.feed(new[:, i:i + 1]), expected, FLOAT32, msg=i)
            assert_close(static.feed(new[:, i:i + 1]), expected, FLOAT32, msg=i)
    readers = [layer.get("self_attn") for layer in cached.cache[3:]]
    assert all(r is None or len(r) == 0 for r in readers)  # a reader keeps nothing of its own
    from tfspec.ir.queries import kv_cache_elements
    held = sum(c.k[:, :, :len(c)].numel() + c.v[:, :, :len(c)].numel() for layer in cached.cache
               for c in layer.values() if len(c))
    assert held == 2 * kv_cache_elements(m.spec.graph(), 13)[0]  # (a batch of two)


def test_gradients_reach_the_maker_through_its_readers():
    m = model()
    tokens = torch.randint(0, 40, (2, 7))
    m.decoder.layers[3].self_attn.out.weight.grad = None
    for p in m.parameters():
        p.grad = None
    # only the readers' outputs count: the maker's key projection learns from them alone
    logits = m(tokens)
    F.cross_entropy(logits.flatten(0, 1), tokens.flatten()).backward()
    assert m.decoder.layers[2].self_attn.qkv.weight.grad[16:].abs().sum() > 0
    assert all(p.grad is not None for p in m.parameters())


def test_check_counts_the_readers_queries_alone_and_the_diagram_draws_the_edge():
    spec = tfspec.parse(SPEC.format(attention=WINDOWED, reader=""))
    plain = tfspec.parse(SPEC.format(attention=WINDOWED, reader="").replace("kv_from=2", "heads=4"))
    # each reader drops its key and value rows (2 kv heads of 4, with biases) and its key norm
    assert plain.parameter_count() - spec.parameter_count() == 2 * (2 * 8 * 16 + 2 * 8 + 4)
    g = spec.graph()
    reader = next(n for n in g.ordered() if getattr(n, "keys_from", None))
    assert g.node(reader.keys_from).spec.exports == ("kv",)
    assert "keys and values of layer 2" in reader.label
    assert "hands on its keys and values" in g.node(reader.keys_from).label
    assert spec.decoder.schedule == (0, 0, 1, 2, 2)
    from tfspec.inspect.diagram import to_graphviz
    dot = to_graphviz(spec).source
    assert '"decoder.kind1.self_attn" -> "decoder.kind2.self_attn" [label="keys, values"' in dot
    assert "1× (layer 2)" in dot and "2× (layers 3–4)" in dot


@pytest.mark.parametrize("change, message", [
    ("layers range(3, 5) { self_attn kv_from=2 }", None),
    ("layers range(2, 5) { self_attn kv_from=2 }", "layer 2's self_attn would read the keys and values of itself"),
    ("layers 1 { self_attn kv_from=3 }", "of a later layer (3)"),
    ("layers 3 { self_attn kv_from=2 }\n  layers 4 { self_attn kv_from=3 }",
     "layer 3's self_attn reads its own keys and values from layer 2"),
    ("layers 3 { self_attn kv_from=2 kv_heads=4 }", "differs in kv_heads"),
    ("layers 3 { self_attn kv_from=2 mask=causal + padding }", "differs in mask"),
    ("layers 3 { self_attn kv_from=2 steps=value_norm }", "value_norm acts on the keys or values"),
    ("layers 3 { self_attn kv_from=2 kind=latent(8, 4) }", "latent attention cannot attend with keys and values"),
])
def test_what_a_reader_cannot_read_is_a_located_error(change, message):
    text = ("embedding tokens { vocab 40; dim 16; position none }\n"
            "decoder x 5 {\n  residual pre; norm rmsnorm; position rotary\n"
            "  attention self heads=4 kv_heads=2 mask=causal + window(3) + padding\n  feedforward d_ff=32\n"
            f"  {change}\n}}\nhead tied(tokens)")
    if message is None:
        tfspec.parse(text)
        return
    with pytest.raises(tfspec.SpecError) as info:
        tfspec.parse(text)
    assert message in str(info.value) and info.value.line >= 4, str(info.value)


def test_a_cross_attention_reads_its_memory():
    with pytest.raises(tfspec.SpecError) as info:
        tfspec.parse("embedding tokens { vocab 40; dim 16 }\nencoder x 1 { attention self heads=2; "
                     "feedforward d_ff=8 }\ndecoder x 2 { attention self heads=2 mask=causal\n"
                     "  attention cross heads=2 kv_from=0\n  feedforward d_ff=8 }")
    assert "a cross-attention's keys and values are its memory's" in info.value.message and info.value.line == 4


MEASURED = """embedding tokens {{ vocab 40; dim 16; position none }}
decoder x 3 {{
  residual pre; norm rmsnorm; position rotary
  attention self heads={heads} kv_heads={kv_heads} mask=causal + window(16) + padding {options}
  feedforward d_ff=32
  layers 2 {{ self_attn kv_from=1 {reader} }}
}}
head tied(tokens)"""


@pytest.mark.parametrize("heads, kv_heads, batch", [(2, 2, 1), (2, 2, 2), (2, 1, 1), (1, 1, 2)])
@pytest.mark.parametrize("options, reader", [("", ""), ("qk_norm=rmsnorm", ""),
                                             ("steps=full_qk_norm", ""),
                                             ("steps=rotated_qk_norm", ""),
                                             ("steps=rotated_qk_norm(weight=false)", ""),
                                             ("kind=same_kv steps=value_norm", "steps=none")])
@pytest.mark.parametrize("length", [7, 2100])  # whole, and in bands of the window (recomputed in backward)
def test_a_readers_cost_is_what_runs_and_its_memory_what_autograd_keeps(heads, kv_heads, batch, options, reader,
                                                                         length):
    """Its matmuls are its queries' and output's projections and its mix; it keeps its queries, its output and
    the mix's own tensors, sharing the keys and values (and the projection their views keep) with their maker."""
    from tfspec.inspect.analysis import analyse
    from tfspec.inspect.measure import measure
    spec = tfspec.parse(MEASURED.format(heads=heads, kv_heads=kv_heads, options=options, reader=reader))
    analysed, measured = analyse(spec, seq_len=length, batch=batch), measure(spec, {"decoder": length}, batch=batch)
    assert analysed.total.memory == measured.saved_bytes
    assert analysed.total.matmul == measured.flops


def test_a_reader_keeps_no_cache_and_summary_says_so():
    from tfspec.ir.queries import kv_cache_elements
    spec = tfspec.parse(SPEC.format(attention="kv_heads=2 mask=causal + padding", reader=""))
    plain = tfspec.parse(SPEC.format(attention="kv_heads=2 mask=causal + padding", reader="").replace(
        "kv_from=2", "heads=4"))
    assert kv_cache_elements(spec.graph(), 10)[0] == 3 * 10 * 2 * 2 * 4  # three layers keep 2 kv heads of 4, twice
    assert kv_cache_elements(plain.graph(), 10)[0] == 5 * 10 * 2 * 2 * 4


def test_verify_holds_and_emit_writes_a_file_that_computes_the_same():
    """The small version keeps the maker (and renumbers its readers); a reader is checked within the model."""
    from tfspec.inspect.verify import verify
    from test_emit import assert_emitted_equals_compiled
    spec = tfspec.parse(SPEC.format(attention=WINDOWED, reader=""))
    results = {r.name: r.status for r in verify(model(), examples=3)}
    assert results["causality"] == results["padding invariance"] == "held"
    assert "violated" not in results.values()
    assert_emitted_equals_compiled(spec)


def test_the_first_layer_hands_on_its_values_and_its_keys_alike():
    """Value residual learning's first layer may also make the keys a later layer reads: it hands on both, and
    cached decoding still gives recomputation's logits."""
    spec = tfspec.parse("embedding tokens { vocab 40; dim 16; position none }\n"
                        "decoder x 3 {\n  residual pre; norm rmsnorm; position rotary\n"
                        "  attention self heads=4 kv_heads=2 mask=causal + padding steps=value_residual(0.5)\n"
                        "  feedforward d_ff=32\n  layers 2 { self_attn kv_from=0 steps=none }\n}\nhead tied(tokens)")
    makers = [n for n in spec.graph().of(ir.Attention) if n.spec.exports]
    assert [n.spec.exports for n in makers] == [("kv", "values")]
    model = tfspec.compile(spec, seed=0).eval()
    tokens = torch.randint(0, 40, (2, 8), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        steps = Continuation(model)
        per_step = torch.stack([steps.feed(tokens[:, i:i + 1]) for i in range(8)], dim=1)
        assert_close(per_step, model(tokens), FLOAT32)


def assert_checkpointing_keeps_gradients(make_model) -> None:
    """A fresh model from ``make_model()`` gets, with activation checkpointing, exactly the gradients it gets
    without."""
    grads = []
    for checkpointed in (False, True):
        m = make_model().train()
        if checkpointed:
            m.checkpoint_activations()
        tokens = torch.randint(0, 40, (2, 9), generator=torch.Generator().manual_seed(0))
        F.cross_entropy(m(tokens).flatten(0, 1), tokens.flatten()).backward()
        grads.append({name: p.grad for name, p in m.named_parameters()})
    assert all(torch.equal(grads[0][name], grads[1][name]) for name in grads[0])


def test_activation_checkpointing_gives_the_same_gradients():
    """A reader recomputed in backward reads what the maker handed on in the forward call; the maker, recomputed
    after it, gets the readers' gradients: every gradient as without checkpointing."""
    assert_checkpointing_keeps_gradients(model)
