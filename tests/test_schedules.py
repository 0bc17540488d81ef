"""Layer schedules: stacks whose layers differ (`layers SELECTION { changes }`), from the spec to Hugging Face.

Qwen2 with `layer_types` (3 sliding-window layers and a full one) and SmolLM3 (no rotary every 4th layer) are
written as schedules and equal Hugging Face's models on a left-padded batch, with every weight perturbed.
"""

from __future__ import annotations

import pytest
import torch

import tfspec
from tfspec import ir
from tfspec.inspect.analysis import analyse
from tfspec.run.decoding import Continuation, sample
from tfspec.inspect.diagram import to_graphviz
from tfspec.inspect.diff import diff
from tfspec.interop.families.hf_llama import WEIGHTS as _rules
from tfspec.interop.mapping import load_state
from tfspec.ir.queries import count_parameters, parameter_table
from tfspec.inspect.measure import measure
from tfspec.backend.standalone import emit
from numerics import assert_close

BASE = """embedding tokens {{ vocab 64; dim 32 }}
decoder x 4 {{
  residual pre; norm rmsnorm(eps=1e-6); bias false
  position rotary(theta=10000)
  attention self heads=4 kv_heads=2 mask=causal + window(4) + padding bias=true out_bias=false
  feedforward d_ff=48 activation=swiglu
  final rmsnorm(eps=1e-6)
  {sections}
}}
head linear(64) bias=false
"""
QWEN2 = BASE.format(sections="layers 3 { self_attn mask=causal + padding }")  # layer_types: 3 sliding, 1 full


def test_a_schedule_resolves_to_layer_kinds():
    stack = tfspec.parse(QWEN2).decoder
    assert stack.repeat == 4 and stack.schedule == (0, 0, 0, 1) and len(stack.kinds) == 1
    assert [m.name for m in stack.kinds[0].sublayers[0].body.mask] == ["causal", "padding"]
    assert [m.name for m in stack.block.sublayers[0].body.mask] == ["causal", "window", "padding"]
    # a section that changes nothing, or one covering every layer, leaves a uniform stack
    assert tfspec.parse(BASE.format(sections="layers 0 { }")).decoder.schedule == ()
    every = tfspec.parse(BASE.format(sections="layers range(4) { ffn d_ff=16 }")).decoder
    assert every.schedule == () and every.block.sublayers[1].body.d_ff == 16
    first = tfspec.parse(BASE.format(sections="layers 0 { ffn d_ff=16 }")).decoder  # kinds in order of first use
    assert first.schedule == (0, 1, 1, 1) and first.block.sublayers[1].body.d_ff == 16
    alternating = tfspec.parse(BASE.format(sections="layers every(2, from=1) { position none }")).decoder
    assert alternating.schedule == (0, 1, 0, 1)
    assert alternating.kinds[0].sublayers[0].body.position.name == "none"


@pytest.mark.parametrize("section, message, column", [
    ("layers 4 { self_attn mask=causal }", "layer 4 is outside the stack's 4 layers (0 to 3)", 10),
    ("layers every(0) { position none }", "every() takes a step of at least 1, got 0", 16),
    ("layers range(2, 6) { position none }", "range(2, 6) is not a range of the stack's 4 layers", 10),
    ("layers 1 { selfattn mask=causal }", "no sublayer 'selfattn' in this stack's layers", 14),
    ("layers 1 { self_attn causal }", "a change to self_attn names its options", 14),
    ("layers 1 2 { position none }\n  layers 2 { position none }", "layer 2 is chosen by two `layers` sections", 3),
    ("layers 1 1 { position none }", "layer 1 is selected twice in one `layers` section", 3),
    ("layers foo(1) { position none }", "unknown layer selection 'foo'", 10),
    ("layers 1", "`layers` takes a selection and a block of changes", 3),
    ("layers { position none }", "`layers` needs a selection of layers", 3),
    ("layers 1 { self_attn heads=3 kv_heads=3 }", "d_model 32 is not divisible by heads=3", 30),
    ("layers 1 { self_attn mask=sideways }", "unknown mask 'sideways'", 29),
])
def test_a_bad_schedule_is_a_located_error(section, message, column):
    with pytest.raises(tfspec.SpecError) as info:
        tfspec.parse(BASE.format(sections=section))
    assert message in info.value.message
    assert (info.value.line, info.value.column) == (8 + section.count("\n"), column), info.value.message


def test_layers_sections_belong_in_a_stack_written_as_sublayers():
    with pytest.raises(tfspec.SpecError) as info:
        tfspec.parse("embedding tokens { vocab 64; dim 32 }\ndefaults { layers 1 { position none } }\n"
                     "decoder x 2 { attention self heads=4 }")
    assert "'layers' takes no block in defaults" in info.value.message


WIRED = """embedding tokens {{ vocab 64; dim 32; position none }}
decoder x 4 {{
  position rotary
  norm gemma_rmsnorm
  x = x + norm(attention(norm(x), heads=4, kv_heads=2, mask=causal + window(3) + padding, bias=false))
  x = x + norm(feedforward(norm(x), d_ff=48, activation=geglu_tanh, bias=false))
  {sections}
}}
head tied(tokens)
"""


def test_a_stack_written_as_assignments_takes_a_schedule_by_its_calls_names():
    spec = tfspec.parse(WIRED.format(sections="layers every(2, from=1) { self_attn mask=causal + padding }"))
    stack = spec.decoder
    assert stack.schedule == (0, 1, 0, 1) and len(stack.kinds) == 1
    attentions = [a for a in spec.graph().of(ir.Attention)]
    assert [[m.name for m in a.spec.mask] for a in attentions] == [["causal", "window", "padding"],
                                                                   ["causal", "padding"]]
    model = tfspec.compile(spec, seed=0).eval()
    assert [type(layer).__name__ for layer in model.decoder.layers] == ["DecoderLayer", "DecoderLayer1"] * 2
    assert model.decoder.layers[0].self_attn.band == (2, 0) and model.decoder.layers[1].self_attn.band is None
    namespace: dict = {}
    exec(compile(emit(spec), "<emitted>", "exec"), namespace)  # the emitted file, as a user would import it
    standalone = namespace["Model"]().eval()
    standalone.load_state_dict(model.state_dict(), strict=True)
    ids = torch.randint(0, 64, (2, 12))
    with torch.no_grad():
        assert torch.equal(standalone(ids), model(ids))


def test_a_dropped_norm_call_passes_its_input_on():
    """ModernBERT's first layer has no norm before its attention (the embeddings' serves): `norm = none` in a
    section leaves that call out of the layer, its input going on; the layer's other norm stays."""
    spec = tfspec.parse("""model first_unnormed
embedding tokens { vocab 30; dim 16; position none; norm layernorm }
encoder x 2 {
  x = x + attention(norm(x), heads=2, mask=padding)
  x = x + feedforward(norm(x), d_ff=32)
  layers 0 { norm = none }
}""")
    model = tfspec.compile(spec, seed=0).eval()
    first, second = model.encoder.layers
    assert not hasattr(first, "norm") and hasattr(first, "norm_1") and hasattr(second, "norm")
    from tfspec.nn.context import Context
    x, ctx = torch.randn(2, 5, 16), Context(torch.arange(5)[None])
    with torch.no_grad():
        h = x + first.self_attn(x, ctx)
        assert torch.allclose(first(x, ctx), h + first.ffn(first.norm_1(h)), atol=1e-6)
    assert spec.parameter_count() == sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("section, message, column", [
    ("layers 1 { attn mask=causal }", "no sublayer 'attn' in this stack's layers", 14),
    ("layers 1 { norm_1 eps=1e-5 }", "norm() has no argument 'eps'", 21),
    ("layers 1 { ffn activation=mish }", "unknown activation 'mish'", 29),
])
def test_a_bad_change_to_a_wired_call_is_a_located_error(section, message, column):
    with pytest.raises(tfspec.SpecError) as info:
        tfspec.parse(WIRED.format(sections=section))
    assert message in info.value.message
    assert (info.value.line, info.value.column) == (7, column), info.value.message


def test_the_ir_holds_one_template_per_kind_and_counts_each_layer_once():
    spec = tfspec.parse(QWEN2)
    g = spec.graph()
    g.lint()
    info = g.stacks["decoder"]
    assert [k.layers for k in info.kinds] == [(0, 1, 2), (3,)]
    assert [a.label for a in g.of(ir.Attention)] == [
        "Multi-Head Attention (causal, window(4), padding, rotary, 4 heads, 2 kv heads)",
        "Multi-Head Attention (causal, padding, rotary, 4 heads, 2 kv heads)"]
    table = parameter_table(g)
    assert [k for k in table if k.endswith("self_attn.qkv.weight")] == [
        f"decoder.layers.{i}.self_attn.qkv.weight" for i in range(4)]
    uniform = tfspec.parse(BASE.format(sections=""))
    assert count_parameters(g) == count_parameters(uniform.graph())  # the same weights, scheduled differently
    model = tfspec.compile(spec, seed=0)
    assert dict((k, tuple(v.shape)) for k, v in model.state_dict().items()) == table
    assert [type(layer).__name__ for layer in model.decoder.layers] == ["DecoderLayer"] * 3 + ["DecoderLayer1"]
    assert "kind 1: decoder.kind1.block_input .. decoder.kind1.block_output: layer 3" in g.format()


def test_check_reports_the_true_layer_count(tfspec_cli, tmp_path):
    path = tmp_path / "qwen2.tfs"
    path.write_text(QWEN2)
    result = tfspec_cli("check", str(path))
    assert result.returncode == 0, result.stderr
    assert "decoder-only, 4 layers (2 kinds)" in result.stdout


def test_cost_per_kind_equals_the_flop_counter_and_a_full_layer_costs_more():
    spec = tfspec.parse(QWEN2)
    analysis = analyse(spec, seq_len=16)
    rows = {r.node: r for r in analysis.rows}
    assert rows["decoder.self_attn"].repeat == 3 and rows["decoder.kind1.self_attn"].repeat == 1
    per_layer = (rows["decoder.self_attn"].cost.matmul_mask_aware / 3, rows["decoder.kind1.self_attn"].cost.matmul_mask_aware)
    assert per_layer[1] > per_layer[0]  # the full layer scores every earlier key, the sliding ones 4
    measured = measure(spec, {"decoder": 16})
    assert measured.flops == analysis.total.matmul


def test_emit_writes_a_class_per_kind_and_computes_what_the_compiled_model_does():
    model = tfspec.compile(QWEN2, seed=0).eval()
    source = emit(QWEN2)
    assert "class DecoderLayer1(nn.Module):" in source and "(DecoderLayer, DecoderLayer1)[kind]()" in source
    namespace: dict = {}
    exec(compile(source, "<emitted>", "exec"), namespace)  # the emitted file, as a user would import it
    standalone = namespace["Model"]().eval()
    standalone.load_state_dict(model.state_dict(), strict=True)
    ids = torch.randint(0, 64, (2, 12))
    with torch.no_grad():
        assert torch.equal(standalone(ids), model(ids))


def test_the_diagram_draws_each_kind_once_and_the_expanded_one_every_layer_in_order():
    spec = tfspec.parse(QWEN2)
    dot = to_graphviz(spec).source
    assert 'label="3× (layers 0–2)"' in dot and 'label="1× (layer 3)"' in dot
    assert dot.count("Multi-Head Attention") == 2
    expanded = to_graphviz(spec, expand=True).source
    assert all(f'label="layer {i}"' in expanded for i in range(4))
    assert '"decoder.ffn_add@2" -> "decoder.kind1.block_input@3"' in expanded  # layer 3 reads layer 2
    assert '"decoder.kind1.ffn_add@3" -> "decoder.final_norm"' in expanded  # the last layer, into the final norm


def test_diff_reports_a_schedule_change_in_one_line():
    uniform, scheduled = tfspec.parse(BASE.format(sections="")), tfspec.parse(QWEN2)
    changes = [str(c) for c in diff(uniform, scheduled).changes]
    assert changes == ["decoder: added schedule layer 3: self_attn mask causal + padding"]


def test_cached_decoding_keeps_each_layers_own_window_and_equals_recomputation():
    model = perturbed(tfspec.compile(QWEN2, seed=0)).eval()
    keeps = [layer.self_attn.keep for layer in model.decoder.layers]
    assert keeps == [3, 3, 3, None]  # sliding layers keep their window's keys, the full layer every key
    prompt = torch.randint(0, 64, (2, 3))
    cached, recomputed = Continuation(model), Continuation(model, use_cache=False)
    assert cached.use_cache
    assert sample(cached, prompt, max_new=12) == sample(recomputed, prompt, max_new=12)


# ---------------------------------------------------------------- against Hugging Face
T = pytest.importorskip("transformers")


def perturbed(module, seed: int = 0, scale: float = 0.2):
    """Every parameter moved off its initial value (an RMSNorm weight of exactly 1 would hide mistakes)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(scale * torch.randn(p.shape, generator=g))
    return module


def left_padded(vocab: int, length: int = 13, pads: int = 4, seed: int = 0):
    ids = torch.randint(0, vocab, (2, length), generator=torch.Generator().manual_seed(seed))
    attention_mask = torch.ones(2, length, dtype=torch.long)
    attention_mask[1, :pads] = 0
    return ids, attention_mask, (attention_mask.cumsum(-1) - 1).clamp(min=0)


def assert_equal_to(reference, text: str):
    reference = perturbed(reference.eval())
    ours = tfspec.compile(text, seed=0).eval()
    rules, aliases = _rules(ours, "model.", reference.state_dict(), True)
    load_state(ours, reference.state_dict(), rules, reference=type(reference).__name__, aliases=aliases)
    ids, attention_mask, positions = left_padded(64)
    with torch.no_grad():
        expected = reference(ids, attention_mask=attention_mask, position_ids=positions).logits
        got = ours(ids, padding_mask=attention_mask == 0, position_ids=positions)
    real = attention_mask.bool()
    assert expected[real].abs().max() > 1e-2
    assert_close(got[real], expected[real], 2e-5)
    return ours


def test_qwen2_with_layer_types_equals_hugging_face():
    config = T.Qwen2Config(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=4,
                           num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-6, use_sliding_window=True,
                           sliding_window=4, layer_types=["sliding_attention"] * 3 + ["full_attention"],
                           tie_word_embeddings=False, attn_implementation="eager")
    ours = assert_equal_to(T.Qwen2ForCausalLM(config), QWEN2)
    # without the schedule (every layer sliding) the last layer differs: the schedule is what makes it equal
    uniform = tfspec.compile(BASE.format(sections=""), seed=0).eval()
    uniform.load_state_dict(ours.state_dict())
    ids = torch.randint(0, 64, (1, 13))
    with torch.no_grad():
        assert (uniform(ids) - ours(ids)).abs().max() > 1e-3


SMOLLM3 = """embedding tokens { vocab 64; dim 32 }
decoder x 4 {
  residual pre; norm rmsnorm(eps=1e-6); bias false
  position rotary(theta=2000000)
  attention self heads=4 kv_heads=2 mask=causal + padding
  feedforward d_ff=48 activation=swiglu
  final rmsnorm(eps=1e-6)
  layers every(4, from=3) { position none }  # NoPE: no rotary in every 4th layer
}
head tied(tokens)
"""


def test_smollm3_without_rotary_every_fourth_layer_equals_hugging_face():
    config = T.SmolLM3Config(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=4,
                             num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-6, rope_theta=2000000.0,
                             pad_token_id=0, bos_token_id=1, eos_token_id=2, attn_implementation="eager")
    assert config.no_rope_layers == [1, 1, 1, 0]  # Hugging Face's: layer 3 has no rotary
    ours = assert_equal_to(T.SmolLM3ForCausalLM(config), SMOLLM3)
    assert [layer.self_attn.position is None for layer in ours.decoder.layers] == [False, False, False, True]


GEMMA2 = """embedding tokens { vocab 64; dim 32; position none; scale sqrt(32) }
decoder x 4 {
  position rotary(theta=10000)
  norm gemma_rmsnorm(eps=1e-6)
  x = x + norm(attention(norm(x), heads=4, kv_heads=2, head_dim=16, mask=causal + window(3) + padding, scale=8 ** -0.5, bias=false))
  x = x + norm(feedforward(norm(x), d_ff=48, activation=geglu_tanh, bias=false))
  final gemma_rmsnorm(eps=1e-6)
  layers every(2, from=1) { self_attn mask=causal + padding }  # Gemma 2: sliding, full, sliding, full
}
head tied(tokens)
"""


def test_gemma2_alternating_sliding_and_full_layers_equals_hugging_face():
    """Sandwich norms in the wiring form, a layer schedule alternating a window of 3 with full attention, and
    Gemma's (1 + w) RMSNorm; soft-capping is off (``attn_logit_softcapping``, ``final_logit_softcapping``: None)."""
    from tfspec.interop.families.hf_gemma2 import WEIGHTS as gemma2_rules
    config = T.Gemma2Config(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=4,
                            num_attention_heads=4, num_key_value_heads=2, head_dim=16, sliding_window=3,
                            query_pre_attn_scalar=8, attn_logit_softcapping=None, final_logit_softcapping=None,
                            attn_implementation="eager")
    assert config.layer_types == ["sliding_attention", "full_attention"] * 2
    reference = perturbed(T.Gemma2ForCausalLM(config).eval())
    ours = tfspec.compile(GEMMA2, seed=0).eval()
    rules, aliases = gemma2_rules(ours, "model.", reference.state_dict(), True)
    load_state(ours, reference.state_dict(), rules, reference="Gemma2ForCausalLM", aliases=aliases)
    ids, attention_mask, positions = left_padded(64)
    with torch.no_grad():
        expected = reference(ids, attention_mask=attention_mask, position_ids=positions).logits
        got = ours(ids, padding_mask=attention_mask == 0, position_ids=positions)
    real = attention_mask.bool()
    assert_close(got[real], expected[real], 2e-5)
    assert [layer.self_attn.keep for layer in ours.decoder.layers] == [2, None, 2, None]
    # the schedule is what makes it equal: with every layer sliding, the full layers differ
    uniform = tfspec.compile(GEMMA2.replace("layers every(2, from=1)", "# "), seed=0).eval()
    uniform.load_state_dict(ours.state_dict())
    with torch.no_grad():
        assert (uniform(ids) - ours(ids)).abs().max() > 1e-3
    check = tfspec.parse(GEMMA2)
    assert check.decoder.repeat == 4 and check.decoder.schedule == (0, 1, 0, 1)


def test_verify_checks_each_kind_of_layer_at_test_size():
    from tfspec.inspect.verify import small_version, verify
    spec = tfspec.parse(BASE.format(sections="layers every(2, from=1) { self_attn mask=causal + padding "
                                             "position=none }").replace("x 4", "x 6"))
    small, changes = small_version(spec)
    assert small.decoder.repeat == 2 and small.decoder.schedule == (0, 1)  # one layer of each kind
    assert "decoder layers 6 -> 2" in ", ".join(changes)
    results = {r.name: r.status for r in verify(tfspec.compile(small, seed=0), examples=3)}
    assert results["causality"] == "held" and results["padding invariance"] == "held"
    assert "violated" not in results.values()


def test_fmt_keeps_a_section_and_its_meaning():
    from tfspec.front.fmt import format_text as format_source
    text = ("embedding tokens { vocab 64; dim 32 }\ndecoder x 4 {\n  attention self heads=4 mask=causal\n"
            "  layers   every(2,from=1)  {  self_attn mask=causal+padding   # full attention\n position none }\n}\n")
    formatted = format_source(text)
    assert "  layers every(2, from=1) {  # full attention\n    self_attn mask=causal + padding\n    position none\n  }" \
        in formatted
    assert tfspec.parse(formatted) == tfspec.parse(text) and format_source(formatted) == formatted


def test_qwen2_and_smollm3_import_as_schedules_and_export_their_layer_types(tmp_path):
    """Through tfspec.interop: a saved Qwen2 (and SmolLM3) becomes the scheduled spec written above, computes
    Hugging Face's logits, and exports back with the same layer_types (no_rope_layers) and tensors."""
    from tfspec.interop.families import export_pretrained, import_config
    from tfspec.interop.mapping import architecture_problems
    qwen2 = T.Qwen2Config(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=4,
                          num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-6, use_sliding_window=True,
                          sliding_window=4, layer_types=["sliding_attention"] * 3 + ["full_attention"],
                          tie_word_embeddings=False)
    smollm3 = T.SmolLM3Config(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=4,
                              num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-6, rope_theta=2000000.0,
                              pad_token_id=0, bos_token_id=1, eos_token_id=2)
    for config, cls, written in ((qwen2, T.Qwen2ForCausalLM, QWEN2), (smollm3, T.SmolLM3ForCausalLM, SMOLLM3)):
        torch.manual_seed(0)
        reference = perturbed(cls(config)).eval()
        reference.save_pretrained(tmp_path / cls.__name__)
        imported = tfspec.parse(import_config(tmp_path / cls.__name__))
        assert architecture_problems(tfspec.parse(written), import_config(tmp_path / cls.__name__), "it") == []
        assert imported.decoder.schedule == (0, 0, 0, 1)  # the fourth layer differs in both
        model = tfspec.from_pretrained(tmp_path / cls.__name__).eval()
        ids, attention_mask, positions = left_padded(64)
        with torch.no_grad():
            expected = reference(ids, attention_mask=attention_mask, position_ids=positions).logits
            got = model(ids, padding_mask=attention_mask == 0, position_ids=positions)
        real = attention_mask.bool()
        assert_close(got[real], expected[real], 2e-5)
        assert export_pretrained(model, tmp_path / f"{cls.__name__}_exported") == cls.__name__
        back = cls.from_pretrained(tmp_path / f"{cls.__name__}_exported")
        assert back.config.layer_types == config.layer_types
        assert getattr(back.config, "no_rope_layers", None) == getattr(config, "no_rope_layers", None)
        assert all(torch.equal(v, back.state_dict()[k]) for k, v in reference.state_dict().items())


def test_window_locality_is_checked_for_each_kind_of_layer_at_its_own_reach():
    from tfspec.inspect.verify import PROPERTIES, verify
    spec = tfspec.parse("embedding tokens { vocab 32; dim 16 }\n"
                        "encoder x 2 { attention self heads=2 mask=window(2); feedforward d_ff=16\n"
                        "  layers 1 { self_attn mask=window(4) } }")
    results = verify(tfspec.compile(spec, seed=0), examples=4)
    assert [r.name for r in results] == [p.__name__.replace("_", " ").replace("train mode", "train-mode")
                                         for p in PROPERTIES]
    window = next(r for r in results if r.name == "window locality")
    assert window.status == "held"
    assert "within 1 of i (layer 0)" in window.detail and "within 3 of i (layer 1)" in window.detail
