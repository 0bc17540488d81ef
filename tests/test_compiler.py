"""The compiler: names, counts, forward signatures, masks, init, input errors, torch.compile."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tfspec import ir
import tfspec
from tfspec.nn.context import Context
from tfspec.inspect.analysis import parameter_table
from tfspec.backend.compiler import parameter_roles
from numerics import FLOAT32, assert_close, close

EXAMPLES = ["examples/gpt2_small.tfs", "examples/bert_base.tfs", "examples/vaswani_base.tfs",
            "examples/vaswani_big.tfs", "examples/gpt1.tfs"]

DECODER = """
embedding tokens { vocab 30; dim 16; position learned(12) }
decoder x 2 { attention self heads=4 mask=causal + padding; feedforward d_ff=32 }
head tied(tokens)
"""
ENCODER = """
embedding tokens { vocab 30; dim 16; position sinusoidal; segments 2 }
encoder x 2 { attention self heads=4 mask=padding; feedforward d_ff=32 }
pooler tanh
"""
ENC_DEC = """
embedding tokens { vocab 30; dim 16; position sinusoidal }
encoder x 2 { attention self heads=4 mask=padding; feedforward d_ff=32 }
decoder x 2 { attention self heads=4 mask=causal + padding; attention cross heads=4 mask=padding; feedforward d_ff=32 }
head tied(tokens)
"""


@pytest.mark.parametrize("path", EXAMPLES)
def test_state_dict_is_the_ir_parameter_table(path):
    model = tfspec.compile(path, device="meta")
    assert {k: tuple(v.shape) for k, v in model.state_dict().items()} == parameter_table(model.spec.graph())
    assert sum(p.numel() for p in model.parameters()) == model.spec.parameter_count()


def test_readable_parameter_names():
    names = set(tfspec.compile("examples/vaswani_base.tfs", device="meta").state_dict())
    for name in ["decoder.layers.3.self_attn.qkv.weight", "decoder.layers.3.cross_attn.q.weight",
                 "decoder.layers.3.cross_attn.kv.weight", "encoder.layers.0.ffn.up.weight",
                 "encoder.layers.5.ffn_norm.bias", "embeddings.tokens.tokens.weight"]:
        assert name in names
    assert "head.weight" not in names  # tied: the embedding owns it


def test_forward_shapes_by_kind():
    torch.manual_seed(0)
    dec = tfspec.compile(DECODER)
    assert dec(torch.randint(0, 30, (2, 7))).shape == (2, 7, 30)
    enc = tfspec.compile(ENCODER)
    hidden, pooled = enc(torch.randint(0, 30, (2, 7)), token_types=torch.randint(0, 2, (2, 7)))
    assert hidden.shape == (2, 7, 16) and pooled.shape == (2, 16)
    model = tfspec.compile(ENC_DEC)
    src, tgt = torch.randint(0, 30, (2, 9)), torch.randint(0, 30, (2, 5))
    memory = model.encode(src)
    assert memory.shape == (2, 9, 16)
    model.eval()
    assert torch.equal(model(src, tgt), model.decode(tgt, model.encode(src)))


def test_pure_causal_attention_takes_the_fused_path(monkeypatch):
    calls = []
    real = F.scaled_dot_product_attention

    def spy(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, **kw):
        calls.append((attn_mask, is_causal))
        return real(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, **kw)

    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
    model = tfspec.compile(DECODER).eval()
    model(torch.randint(0, 30, (2, 7)))
    assert calls and all(mask is None and causal for mask, causal in calls)
    calls.clear()
    pad = torch.zeros(2, 7, dtype=torch.bool)
    pad[1, 4:] = True
    model(torch.randint(0, 30, (2, 7)), pad)  # padding as well: a materialised additive mask
    assert all(mask is not None and not causal and mask.dtype == torch.float32 for mask, causal in calls)


def test_fully_padded_rows_are_finite_in_float32_and_bfloat16():
    model = tfspec.compile(ENC_DEC).eval()
    src, tgt = torch.randint(0, 30, (2, 6)), torch.randint(0, 30, (2, 5))
    src_pad = torch.zeros(2, 6, dtype=torch.bool)
    src_pad[1] = True  # a whole padded sequence
    tgt_pad = torch.zeros(2, 5, dtype=torch.bool)
    tgt_pad[1] = True
    for dtype in (torch.float32, torch.bfloat16):
        out = model.to(dtype)(src, tgt, src_pad, tgt_pad)
        assert out.dtype == dtype and torch.isfinite(out).all()


def test_padded_row_never_reads_the_future():
    """A query row that padding empties falls back to its causal row, not to every key."""
    model = tfspec.compile(DECODER).eval()
    tokens = torch.randint(0, 30, (1, 6))
    pad = torch.ones(1, 6, dtype=torch.bool)  # everything padded
    changed = tokens.clone()
    changed[0, 3:] = (changed[0, 3:] + 1) % 30
    with torch.no_grad():
        a, b = model(tokens, pad), model(changed, pad)
    assert_close(a[:, :3], b[:, :3], FLOAT32)


def test_window_mask_matches_a_naive_softmax():
    model = tfspec.compile("""
embedding tokens { vocab 30; dim 8 }
encoder x 1 { attention self heads=1 mask=window(2) bias=false; feedforward d_ff=8 residual=none norm=none }
""").eval()
    attention = model.encoder.layers[0].self_attn
    x = torch.randn(1, 5, 8)
    q, k, v = attention.qkv(x).chunk(3, -1)
    scores = q @ k.transpose(-1, -2) / 8 ** 0.5
    i = torch.arange(5)
    scores = scores.masked_fill((i[:, None] - i[None, :]).abs() >= 2, float("-inf"))
    expected = attention.out(scores.softmax(-1) @ v)
    assert_close(attention(x), expected, FLOAT32)


def test_additive_attention_matches_its_formula():
    model = tfspec.compile("""
embedding tokens { vocab 30; dim 8 }
encoder x 1 { attention self heads=2 kind=additive mask=padding; feedforward d_ff=8 }
""").eval()
    attention = model.encoder.layers[0].self_attn
    torch.nn.init.normal_(attention.score)
    x = torch.randn(1, 4, 8)
    pad = torch.tensor([[False, False, False, True]])
    q, k, v = (t.view(1, 4, 2, 4).transpose(1, 2) for t in attention.qkv(x).chunk(3, -1))
    scores = torch.einsum("bhqkd,hd->bhqk", torch.tanh(q[:, :, :, None] + k[:, :, None]), attention.score)
    scores = scores.masked_fill(pad[:, None, None, :], float("-inf"))
    expected = attention.out((scores.softmax(-1) @ v).transpose(1, 2).reshape(1, 4, 8))
    ctx = Context(positions=torch.arange(4)[None], padding=pad)
    assert_close(attention(x, ctx), expected, FLOAT32)


def test_gated_feedforward_uses_first_half_as_gate():
    model = tfspec.compile("""
embedding tokens { vocab 30; dim 8 }
encoder x 1 { feedforward d_ff=6 activation=swiglu }
""")
    ffn = model.encoder.layers[0].ffn
    x = torch.randn(3, 8)
    gate, value = ffn.up(x)[:, :6], ffn.up(x)[:, 6:]
    assert_close(ffn(x), ffn.down(F.silu(gate) * value), FLOAT32)


def test_sinusoidal_positions_follow_the_paper():
    model = tfspec.compile("embedding tokens { vocab 5; dim 6; position sinusoidal }\nencoder x 1 { feedforward d_ff=4 }")
    table = model.embeddings.tokens.positions(torch.arange(4))
    pos, i = 3, 2  # dimension 2i = 4 and 2i+1 = 5
    angle = pos / 10000 ** (2 * i / 6)
    assert table[pos, 4].item() == pytest.approx(torch.tensor(angle).sin().item(), abs=1e-6)
    assert table[pos, 5].item() == pytest.approx(torch.tensor(angle).cos().item(), abs=1e-6)


def test_init_is_reproducible_and_seed_dependent():
    def state(seed):
        torch.manual_seed(seed)
        return tfspec.compile(DECODER).state_dict()

    a, b, c = state(1), state(1), state(2)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not torch.equal(a["decoder.layers.0.ffn.up.weight"], c["decoder.layers.0.ffn.up.weight"])
    seeded = tfspec.compile(DECODER, seed=1).state_dict()
    assert all(torch.equal(a[k], seeded[k]) for k in a)


def test_gpt2_init_scales_residual_projections():
    torch.manual_seed(0)
    model = tfspec.compile("examples/gpt2_small.tfs", overrides={"layers": 8, "d_model": 256, "heads": 4,
                                                                "vocab": 1000, "context": 64})
    sd = model.state_dict()
    branches = 2 * 8
    assert sd["decoder.layers.0.self_attn.out.weight"].std().item() == pytest.approx(0.02 / branches ** 0.5, rel=0.05)
    assert sd["decoder.layers.7.ffn.down.weight"].std().item() == pytest.approx(0.02 / branches ** 0.5, rel=0.05)
    assert sd["decoder.layers.0.ffn.up.weight"].std().item() == pytest.approx(0.02, rel=0.05)
    assert sd["embeddings.tokens.tokens.weight"].std().item() == pytest.approx(0.02, rel=0.05)
    assert torch.all(sd["decoder.layers.0.ffn_norm.weight"] == 1) and torch.all(sd["decoder.layers.0.ffn.up.bias"] == 0)


def test_xavier_init_for_the_paper_model():
    torch.manual_seed(0)
    model = tfspec.compile("examples/vaswani_base.tfs", overrides={"layers": 1, "vocab": 2000})
    sd = model.state_dict()
    qkv = sd["encoder.layers.0.self_attn.qkv.weight"]
    bound = (6 / (qkv.shape[0] + qkv.shape[1])) ** 0.5
    assert qkv.abs().max().item() <= bound and qkv.abs().max().item() > 0.95 * bound
    assert sd["embeddings.tokens.tokens.weight"].std().item() == pytest.approx(512 ** -0.5, rel=0.05)
    roles = parameter_roles(model.spec.graph())
    assert roles["encoder.layers.0.self_attn.out.weight"].residual_branches == 2
    assert roles["encoder.layers.0.self_attn_norm.weight"].kind == "norm_weight"


def test_unknown_init_is_a_spec_error():
    with pytest.raises(tfspec.SpecError, match="unknown init 'kaiming'"):
        tfspec.parse("defaults { init kaiming }\nembedding t { vocab 5; dim 4 }\nencoder x 1 { feedforward d_ff=4 }")


@pytest.mark.parametrize("call, message", [
    (lambda m: m(torch.randn(2, 5)), "tokens must hold integer token ids"),
    (lambda m: m(torch.randint(0, 30, (5,))), r"tokens must be shaped \(batch, length\)"),
    (lambda m: m(torch.randint(0, 30, (2, 13))), r"length 13, but the learned positions cover 12"),
    (lambda m: m(torch.full((2, 5), 30)), r"contains id 30, outside the vocabulary of 30 \(valid ids 0..29\)"),
    (lambda m: m(torch.full((2, 5), -1)), "contains id -1"),
    (lambda m: m([[1, 2]]), "tokens must be a torch.Tensor"),
    (lambda m: m(torch.zeros(2, 0, dtype=torch.long)), "tokens is empty"),
    (lambda m: m(torch.zeros(2, 5, dtype=torch.long), torch.zeros(2, 5)), "padding_mask must be a bool tensor"),
    (lambda m: m(torch.zeros(2, 5, dtype=torch.long), torch.zeros(2, 4, dtype=torch.bool)),
     r"padding_mask must have the shape of tokens \(2, 5\)"),
    (lambda m: m(torch.zeros(2, 5, dtype=torch.long), None, torch.zeros(2, 5, dtype=torch.long)),
     "token_types was given, but the embedding has no segments"),
])
def test_bad_inputs_raise_value_errors_naming_the_argument(call, message):
    model = tfspec.compile(DECODER)
    with pytest.raises(ValueError, match=message):
        call(model)


def test_padding_mask_without_a_padding_mask_in_the_spec():
    model = tfspec.compile("examples/gpt2_small.tfs", overrides={"layers": 1, "d_model": 16, "heads": 2,
                                                                "vocab": 20, "context": 8})
    with pytest.raises(ValueError, match=r"padding_mask was given, but no attention here masks padding; "
                                         r"add `padding` to the masks of the decoder's self-attention"):
        model(torch.zeros(1, 4, dtype=torch.long), torch.zeros(1, 4, dtype=torch.bool))


def test_encoder_decoder_argument_errors():
    model = tfspec.compile(ENC_DEC)
    src = torch.randint(0, 30, (2, 6))
    with pytest.raises(ValueError, match="tgt contains id 99"):
        model(src, torch.full((2, 3), 99))
    with pytest.raises(ValueError, match=r"memory must be the encoder's output shaped \(batch=2, src_len, 16\)"):
        model.decode(torch.zeros(2, 3, dtype=torch.long), torch.randn(2, 6, 8))
    with pytest.raises(ValueError, match="token_types"):
        tfspec.compile(ENCODER)(src, None, torch.full((2, 6), 2))


def test_compile_accepts_spec_path_and_text_and_reports_spec_errors(tmp_path):
    spec = tfspec.parse(DECODER)
    assert type(tfspec.compile(spec).program).__name__ == "DecoderOnlyForward"
    path = tmp_path / "m.tfs"
    path.write_text(DECODER)
    assert tfspec.compile(str(path)).spec.model_dump(exclude={"name"}) == spec.model_dump(exclude={"name"})
    with pytest.raises(tfspec.SpecError, match="no such file"):
        tfspec.compile(str(tmp_path / "missing.tfs"))
    with pytest.raises(ValueError, match="overrides apply"):
        tfspec.compile(spec, overrides={"layers": 1})


@pytest.mark.parametrize("text, args", [
    (DECODER, lambda: (torch.randint(0, 30, (2, 7)),)),
    (ENCODER, lambda: (torch.randint(0, 30, (2, 7)), torch.zeros(2, 7, dtype=torch.bool))),
    (ENC_DEC, lambda: (torch.randint(0, 30, (2, 7)), torch.randint(0, 30, (2, 5)))),
    ("embedding t { vocab 30; dim 8 }\nencoder x 1 { attention self heads=2 kind=additive mask=window(2) }", lambda: (torch.randint(0, 30, (2, 7)),)),
])
def test_torch_compile_fullgraph_has_no_graph_breaks(text, args):
    torch._dynamo.reset()
    model = tfspec.compile(text).eval()
    inputs = args()
    compiled = torch.compile(model, fullgraph=True, backend="eager")
    with torch.no_grad():
        expected, got = model(*inputs), compiled(*inputs)
    expected = expected if isinstance(expected, tuple) else (expected,)
    got = got if isinstance(got, tuple) else (got,)
    assert all(close(a, b, FLOAT32) for a, b in zip(expected, got))


def test_wiring_form_compiles_to_the_written_dataflow():
    model = tfspec.compile("""
embedding tokens { vocab 30; dim 16 }
decoder x 1 { h = norm(x); x = x + attention(h, heads=2, mask=causal) + feedforward(h, d_ff=32) }
""").eval()
    layer = model.decoder.layers[0]
    x = torch.randn(2, 5, 16)
    h = layer.norm(x)
    assert_close(layer(x), x + layer.self_attn(h) + layer.ffn(h), FLOAT32)
    assert "self.norm(x)" in layer.code


DEEPNET = """
let layers = 6, alpha = (2 * layers) ** 0.25
embedding tokens { vocab 30; dim 16 }
decoder x layers {
  x = layernorm(alpha * x + attention(x, heads=2, mask=causal))
  x = layernorm(x * alpha + feedforward(x, d_ff=32))
}
"""


def test_a_residual_scale_in_the_wiring_form_is_deepnets_update():
    model = tfspec.compile(DEEPNET).eval()
    layer = model.decoder.layers[0]
    alpha = 12 ** 0.25  # DeepNet's decoder-only alpha = (2N)^(1/4)
    x = torch.randn(2, 5, 16)
    h = layer.norm(alpha * x + layer.self_attn(x))
    expected = layer.norm_1(alpha * h + layer.ffn(h))
    assert_close(layer(x), expected, FLOAT32)
    g = model.spec.graph()
    assert {n.label for n in g.of(ir.Scale)} == {f"Scale (×{alpha:g})"}
    residual_into = {type(n) for n in g.ordered() for src, port in zip(n.inputs, n.ports)
                     if port == "residual" and isinstance(g.node(src), ir.Scale)}
    assert residual_into == {ir.Add}  # the scaled stream is the residual branch of each sum


def test_a_residual_scale_shows_in_diff_and_two_tensors_cannot_multiply():
    from tfspec.inspect.diff import diff
    plain = tfspec.parse(DEEPNET.replace("alpha * x", "x").replace("x * alpha", "x"))
    changes = [str(c) for c in diff(plain, tfspec.parse(DEEPNET)).changes]
    assert "decoder: residual scale 1 → 1.86121 (every sublayer)" in changes
    with pytest.raises(tfspec.SpecError, match="'\\*' does not apply to tensors"):
        tfspec.parse(DEEPNET.replace("alpha * x", "x * x"))


@pytest.mark.parametrize("text, signature, steps", [
    (DECODER, "(tokens, padding_mask=None, token_types=None, **inputs)", ["self.run_stack('decoder', 'tokens'"]),
    (ENC_DEC, "(src, tgt, src_padding_mask=None, tgt_padding_mask=None, **inputs)",
     ["self.split_inputs(", "encoder = self.run_stack('encoder', 'src'",
      "self.run_stack('decoder', 'tgt', tgt, tgt_padding_mask, tgt_inputs, memory = encoder, "
      "memory_padding = src_padding_mask)", "self.output(decoder)"]),
])
def test_the_models_forward_is_generated_from_the_ir(text, signature, steps):
    import copy
    import inspect
    model = tfspec.compile(text, seed=0).eval()
    assert str(inspect.signature(model.forward)) == signature
    assert all(step in model.program.code for step in steps), model.program.code
    assert not any(name.startswith("program") for name in model.state_dict())  # its modules are the model's
    twin = copy.deepcopy(model)  # the copy runs its own weights
    with torch.no_grad():
        for p in twin.parameters():
            p.mul_(0.5)
    args = [torch.randint(0, 30, (2, 5)) for _ in model.spec.stacks]
    with torch.no_grad():
        assert not torch.equal(twin(*args), model(*args))
        twin.load_state_dict(model.state_dict())
        assert torch.equal(twin(*args), model(*args))


def test_mask_sets_share_a_mask_only_when_their_rules_are_the_same_functions():
    """The per-call memo keys a MaskSet by its rules: equal sets share one tensor, but two rules that merely
    share a name (and options) must not, or one layer would attend with another's mask."""
    from tfspec.nn.context import Context
    from tfspec.nn.masking import MaskSet

    def named(offset):
        def rule(queries, keys):
            return keys[None, :] <= queries[:, None] - offset
        return rule

    first, second = named(0), named(1)
    assert MaskSet([(first, {}, ())]).key == MaskSet([(first, {}, ())]).key
    assert MaskSet([(first, {}, ())]).key != MaskSet([(second, {}, ())]).key
    ctx = Context(torch.arange(4)[None])
    a = MaskSet([(first, {}, ())]).additive(ctx, 4, 4, torch.float32, "cpu", None)
    b = MaskSet([(second, {}, ())]).additive(ctx, 4, 4, torch.float32, "cpu", None)
    assert not torch.equal(a, b)
