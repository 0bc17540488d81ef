"""The graph IR: closed op set, one template per stack, residual wiring, sharing, shapes."""

from dataclasses import replace
from pathlib import Path

import pytest

import tfspec
from tfspec.inspect.analysis import count_parameters, parameter_table
from tfspec import ir
from tfspec.ir import OPS
from tfspec.registry import ATTENTION_KINDS, POSITIONS

EMB = "embedding tokens { vocab 50; dim 16 }\n"


def graph(text):
    return tfspec.parse(text).graph()


def test_template_not_copies_and_repeat_attribute():
    g = graph(EMB + "decoder x 5 { attention self heads=2 mask=causal; feedforward d_ff=32 }")
    assert g.stacks["decoder"].repeat == 5
    assert len(g.of(ir.Attention)) == 1
    assert all(type(node) in ir.NODE_TYPES and node.kind in OPS for node in g.ordered())
    table = parameter_table(g)
    assert {f"decoder.layers.{i}.self_attn.qkv.weight" for i in range(5)} <= set(table)
    assert table["decoder.layers.4.ffn.up.weight"] == (32, 16)


def test_post_and_pre_norm_are_wired_differently():
    post = graph(EMB + "encoder x 1 { residual post; attention self heads=2 }")
    pre = graph(EMB + "encoder x 1 { residual pre; attention self heads=2 }")
    inputs = lambda g, n: list(g.node(n).inputs)  # noqa: E731
    # post: x = Norm(x + Attn(x))
    assert inputs(post, "encoder.block_output") == ["encoder.self_attn_norm"]
    assert inputs(post, "encoder.self_attn_norm") == ["encoder.self_attn_add"]
    assert inputs(post, "encoder.self_attn_add") == ["encoder.block_input", "encoder.self_attn"]
    assert inputs(post, "encoder.self_attn") == ["encoder.block_input"]
    # pre: x = x + Attn(Norm(x)); the residual edge bypasses norm and attention
    assert inputs(pre, "encoder.block_output") == ["encoder.self_attn_add"]
    assert inputs(pre, "encoder.self_attn_add") == ["encoder.block_input", "encoder.self_attn"]
    assert inputs(pre, "encoder.self_attn") == ["encoder.self_attn_norm"]
    assert inputs(pre, "encoder.self_attn_norm") == ["encoder.block_input"]
    assert pre.node("encoder.self_attn_add").port("encoder.block_input") == "residual"
    assert post.node("encoder.self_attn_add").residual == "post"


def test_residual_none_has_no_add():
    g = graph(EMB + "encoder x 1 { attention self heads=2 residual=none }")
    assert not g.of(ir.Add, in_block=True)


def test_parallel_block_in_wiring_form():
    g = graph(EMB + "decoder x 2 {\n h = norm(x)\n x = x + attention(h, heads=2, mask=causal) + feedforward(h, d_ff=32)\n}")
    (add,) = g.of(ir.Add, in_block=True)
    assert add.inputs == ("decoder.block_input", "decoder.self_attn", "decoder.ffn")
    assert g.node("decoder.self_attn").inputs == g.node("decoder.ffn").inputs == ("decoder.norm",)
    same_as_sequential_sizes = graph(EMB + "decoder x 2 { residual pre; attention self heads=2; feedforward d_ff=32 }")
    # the parallel block has one norm where the sequential pre-norm block has two: 2 layers x 32 fewer
    assert count_parameters(same_as_sequential_sizes) - count_parameters(g) == 2 * 32


def test_cross_attention_reads_encoder_output_after_final_norm():
    g = graph(EMB + "encoder x 2 { attention self heads=2; final layernorm }\n"
                    "decoder x 2 { attention self heads=2 mask=causal; attention cross heads=2 }")
    assert g.node("decoder.cross_attn").inputs[1] == "encoder.final_norm"
    assert g.node("decoder.cross_attn").port("encoder.final_norm") == "memory"
    assert g.stacks["encoder"].length == "src_len"
    assert g.node("decoder.cross_attn").shape == ("batch", "tgt_len", 16)


def test_shared_embedding_and_tied_head_counted_once():
    text = EMB + "encoder x 1 { attention self heads=2 }\ndecoder x 1 { attention self heads=2 mask=causal }\n"
    tied = graph(text + "head tied(tokens)")
    untied = graph(text + "head linear")
    assert count_parameters(untied) - count_parameters(tied) == 50 * 16 + 50  # weight + default bias
    assert tied.node("head").ties == {"weight": "embeddings.tokens.tokens.weight"}
    # both stacks apply the same embedding module
    assert tied.node("encoder.embed").module == tied.node("decoder.embed").module


def test_separate_embeddings_and_cross_width():
    g = graph("embedding src { vocab 30; dim 16 }\nembedding tgt { vocab 40; dim 8 }\n"
              "encoder x 1 { embedding src; attention self heads=2 }\n"
              "decoder x 1 { embedding tgt; attention cross heads=2 }\nhead tied(tgt)")
    assert g.node("decoder.cross_attn").params["kv.weight"].shape == (16, 16)  # 2 x width(8) from memory width 16
    assert g.node("logits").shape == ("batch", "tgt_len", 40)


def test_gated_and_additive_parameter_shapes():
    g = graph(EMB + "encoder x 1 { attention self heads=4 kind=additive bias=false; feedforward d_ff=8 activation=swiglu }")
    attn = {name: p.shape for name, p in g.node("encoder.self_attn").params.items()}
    assert attn == {"qkv.weight": (48, 16), "out.weight": (16, 16), "score": (4, 4)}
    assert g.node("encoder.ffn").params["up.weight"].shape == (16, 16)  # two halves of d_ff=8


def test_embedding_parts_and_shapes():
    g = graph("embedding tokens { vocab 50; dim 16; position learned(20); segments 2; norm layernorm; dropout 0.1 }\n"
              "encoder x 1 { attention self heads=2 }\npooler tanh")
    assert g.node("encoder.embed_sum").inputs == ("encoder.embed", "encoder.position", "encoder.segments")
    assert g.node("encoder.position").shape == ("seq_len", 16)
    assert g.node("pooled").shape == ("batch", 16)
    assert parameter_table(g)["embeddings.tokens.positions.weight"] == (20, 16)


def test_format_graph_one_line_per_node():
    g = graph(EMB + "decoder x 2 { attention self heads=2 mask=causal }")
    text = g.format()
    assert text.splitlines()[0] == "graph model (decoder-only)"
    assert "decoder.self_attn = attention(decoder.block_input) -> (batch, seq_len, 16)" in text
    assert len(text.splitlines()) == 2 + g.number_of_nodes()


HUGE = ("let d = 1000000\nembedding tokens { vocab 1000000; dim d }\n"
        "decoder x 4000 { attention self heads=8; feedforward d_ff=1000000 }\n")


def test_a_huge_spec_checks_summarises_and_draws_without_allocating(tmp_path):
    import time
    from tfspec.inspect.diagram import to_graphviz
    from tfspec.inspect.analysis import analyse
    from tfspec.inspect.summary import format_summary
    start = time.perf_counter()
    spec = tfspec.parse(HUGE)
    assert count_parameters(spec.graph()) == 24_001_040_000_000_000
    assert "24,001,040,000,000,000" in format_summary(analyse(spec))
    assert to_graphviz(spec).source
    assert time.perf_counter() - start < 5


def test_only_materialising_weights_is_refused_for_size(monkeypatch):
    import tfspec.backend.compiler as c
    monkeypatch.setattr(c, "available_memory_bytes", lambda device=None: 10 * 2**20)
    with pytest.raises(tfspec.SpecError) as info:
        c.compile(EMB + "decoder x 1 { attention self heads=2; feedforward d_ff=1000000 }")
    assert info.value.codes == ["size"]
    assert "need 0.1 GiB" in info.value.message and "only 0.0 GiB of memory is available" in info.value.message
    assert info.value.line == 2 and info.value.column == 39  # the feedforward that holds most of the weights
    c.compile(EMB + "decoder x 1 { attention self heads=2; feedforward d_ff=1000000 }", device="meta")
    # a model of towers: all its weights counted (the joins' too), the node holding most of them named in its tower
    towers = ("model two\ntower small { embedding t { vocab 10; dim 8 }\n encoder x 1 { attention self heads=2 }\n"
              " head linear(8) pool=first }\ntower big { embedding t { vocab 10; dim 8 }\n"
              " encoder x 1 { attention self heads=2; feedforward d_ff=1000000 }\n head linear(8) pool=first }\n"
              "contrastive small big")
    with pytest.raises(tfspec.SpecError) as info:
        c.compile(towers)
    assert info.value.codes == ["size"] and "only 0.0 GiB of memory is available" in info.value.message
    assert (info.value.line, info.value.column) == (6, 40)  # the big tower's feedforward




def test_an_embedding_position_and_a_stack_score_bias_are_distinct_node_types():
    g = graph("embedding tokens { vocab 50; dim 16; position sinusoidal }\n"
              "encoder x 2 { attention self heads=2 position=t5 }")
    assert sorted(type(n).__name__ for n in g.of((ir.PositionEncoding, ir.StackParameters))) == [
        "PositionEncoding", "StackParameters"]
    bias = g.node("encoder.self_attn_positions")
    assert bias.variant()[0] is POSITIONS["t5"] and str(bias.module) == "encoder.positions.self_attn"
    assert list(bias.params) == ["weight"] and bias.params["weight"].shape == (32, 2)
    assert g.node("encoder.self_attn").port(bias.id) == "shared"
    assert not any(k.startswith("position") for k in g.node("encoder.self_attn").params)  # the stack's, not each layer's


def test_a_stack_owns_a_kinds_and_a_schemes_parameters_by_one_mechanism():
    g = graph("embedding tokens { vocab 50; dim 16 }\n"
              "encoder x 2 { attention self heads=2 kind=linformer(k=4, max_len=16, shared_layers=true) }")
    shared = g.node("encoder.self_attn_shared")
    assert isinstance(shared, ir.StackParameters) and shared.variant()[0] is ATTENTION_KINDS["linformer"]
    assert str(shared.module) == "encoder.shared.self_attn" and g.node("encoder.self_attn").port(shared.id) == "shared"


def test_module_paths_are_structured():
    g = graph(EMB + "decoder x 3 { attention self heads=2 mask=causal; feedforward d_ff=32 }")
    ffn = g.node("decoder.ffn")
    assert ffn.module.name == "ffn" and ffn.module.per_layer and ffn.module.at(2) == "decoder.layers.2.ffn"
    assert not g.node("decoder.embed").module.per_layer
    with pytest.raises(ValueError, match="say which layer"):
        ffn.module.at(None)


def test_norm_nodes_keep_their_title_and_declared_roles():
    g = graph(EMB + "decoder x 1 { residual pre; attention self heads=2 mask=causal; final layernorm }")
    roles = lambda n: {name: p.role for name, p in n.params.items()}  # noqa: E731
    assert [(n.title, roles(n)) for n in g.of(ir.Norm)] == [
        ("Norm", {"weight": "norm_weight", "bias": "norm_bias"}),
        ("Final Norm", {"weight": "norm_weight", "bias": "norm_bias"})]


def test_every_parameter_is_declared_with_its_role():
    g = graph("embedding tokens { vocab 50; dim 16; position learned(32) }\n"
              "decoder x 2 { attention self heads=2 mask=causal qk_norm=rmsnorm; feedforward d_ff=32 }\nhead linear")
    declared = {f"{n.id}:{name}": (p.role, p.residual, p.query_rows) for n in g.ordered()
                for name, p in n.params.items()}
    assert declared["decoder.self_attn:qkv.weight"] == ("matrix", False, 16)  # its first 16 rows are queries
    assert declared["decoder.self_attn:out.weight"] == ("matrix", True, 0)  # a branch into the residual stream
    assert declared["decoder.ffn:down.weight"] == ("matrix", True, 0)
    assert declared["decoder.ffn:up.weight"] == ("matrix", False, 0)
    assert declared["decoder.self_attn:q_norm.weight"][0] == "norm_weight"
    assert declared["decoder.embed:weight"][0] == "embedding"
    assert declared["decoder.position:weight"][0] == "position_table"
    assert declared["head:weight"][0] == "unembedding" and declared["head:bias"][0] == "bias"


@pytest.mark.parametrize("break_it, message", [
    (lambda g: g.add_edge("decoder.embed", "decoder.ffn"), "differ from inputs"),
    (lambda g: g.replace(replace(g.node("decoder.ffn"), ports=())), "1 inputs but 0 ports"),
    (lambda g: g.replace(replace(g.node("decoder.ffn"), module=None)), "parameters without a module path"),
    (lambda g: g.replace(replace(g.node("decoder.ffn"), in_block=False)), "is a layer's"),
    (lambda g: g.replace(replace(g.node("decoder.ffn"), params={"up.weight": (32, 16)})), "without its role"),
    (lambda g: g.add_edge("decoder.ffn", "decoder.block_input"), "differ from inputs"),
    (lambda g: g.add(ir.Add(id="decoder.extra", label="+", inputs=("decoder.ffn",), ports=("input",),
                            stack="decoder", in_block=True)), "a sum of 1 term"),
    (lambda g: g.add(ir.Norm(id="final2", label="Norm", inputs=("decoder.ffn",), ports=("input",), choice=None)),
     "from inside a layer"),
])
def test_lint_finds_each_broken_invariant(break_it, message):
    g = graph(EMB + "decoder x 2 { attention self heads=2 mask=causal; feedforward d_ff=32 }")
    g.lint()  # a validated graph holds every invariant
    broken = g.copy()
    break_it(broken)
    with pytest.raises(ir.IRError, match=message):
        broken.lint()


def test_lint_refuses_a_node_that_is_not_an_ir_type():
    g = graph(EMB + "decoder x 1 { attention self heads=2 mask=causal }")
    with pytest.raises(ir.IRError, match="not an IR node type"):
        g.add(ir.Node(id="stray", label="?"))


# ---------------------------------------------------------------- a model of several towers
TOWERS = sorted(str(p) for p in Path("examples").glob("*.tfs") if "\ntower " in p.read_text())


def towers_graph(layer: str = "none"):
    """The IR of test_connectors' small vision-language model, its connector reading ``layer`` (none: the
    output)."""
    from test_connectors import vlm
    return tfspec.parse(vlm(layer).replace(" layer=none", "")).graph()


@pytest.mark.parametrize("path", TOWERS)
def test_a_model_of_towers_is_typed_nodes_whose_parameters_are_the_compiled_models(path):
    spec = tfspec.load(path)
    g = spec.graph()
    assert isinstance(g, ir.TowersGraph) and list(g.towers) == [t.name for t in spec.towers]
    for c in g.of(ir.Connector):  # its source before it, it before its target
        order = [n.id for n in g.ordered()]
        assert order.index(c.source) < order.index(c.id) < order.index(c.target)
        assert isinstance(g.towers[c.target].node(c.into), ir.Embedding)
    model = tfspec.compile(path, device="meta")
    assert {k: tuple(v.shape) for k, v in model.state_dict().items()} == parameter_table(g)
    assert sum(p.numel() for p in model.parameters()) == spec.parameter_count()


@pytest.mark.parametrize("layer, reads, reads_layer", [
    ("none", "encoder.final_norm", None),  # the stack's output, normed
    ("0", "encoder.embed_sum", None),  # the embeddings entering its first layer
    ("-1", "encoder.block_output", 2),  # the last layer's output, before the final norm
    ("-2", "encoder.block_output", 1),
    ("1", "encoder.block_output", 0),
])
def test_a_connector_reads_the_node_its_layer_names(layer, reads, reads_layer):
    g = towers_graph(layer)
    (c,) = g.of(ir.Connector)
    assert (c.reads, c.reads_layer, c.into, c.module.at(None)) == (reads, reads_layer, "decoder.embed",
                                                                  "connectors.vision")
    assert [(s.length, s.width, s.out_width) for s in c.steps] == [(4, 16, 24), (4, 24, 24), (4, 24, 24)]
    assert c.vectors == 4 and set(c.params) == {"steps.0.weight", "steps.0.bias", "steps.2.weight", "steps.2.bias"}
    assert "connector.vision = connector(vision) -> text/decoder.embed at token 39" in g.format()


def _replaced(node_id, **fields):
    def break_it(g):
        g.nodes[node_id]["node"] = replace(g.node(node_id), **fields)
    return break_it


@pytest.mark.parametrize("break_it, message", [
    (_replaced("connector.vision", reads="encoder.nothing"), "which tower vision does not have"),
    (_replaced("connector.vision", reads="encoder.ffn"), "inside a layer without saying which layer"),
    (_replaced("connector.vision", reads_layer=1), "not the exit of layer 1's kind"),
    (_replaced("connector.vision", into="decoder.final_norm"), "no embedding of tower text"),
    (_replaced("connector.vision", reads_width=12), "step 0 reads 4×16, but is given 4×12"),
    (_replaced("connector.vision", params={}), "its parameters are not its steps'"),
    (_replaced("text", inputs=()), "differ from inputs"),
    (lambda g: g.add_edge("text", "vision"), "differ from inputs"),
])
def test_towers_lint_finds_each_broken_invariant(break_it, message):
    g = towers_graph()
    g.lint()
    broken = g.copy()
    break_it(broken)
    with pytest.raises(ir.IRError, match=message):
        broken.lint()


def test_a_contrastive_head_reads_each_towers_output_and_owns_its_scale_and_bias():
    g = tfspec.load("examples/siglip_base_patch16_224.tfs").graph()
    (join,) = g.of(ir.Contrastive)
    assert join.inputs == ("text", "vision") and all(isinstance(g.towers[t].node(r), ir.Output)
                                                    for t, r in zip(join.inputs, join.reads))
    assert {n: (p.shape, p.value) for n, p in join.params.items()} == {"scale": ((), join.scale),
                                                                       "bias": ((), -10.0)}
    broken = g.copy()
    _replaced("contrastive", reads=("head", "logits"))(broken)
    with pytest.raises(ir.IRError, match="not its output"):
        broken.lint()
