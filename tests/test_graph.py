"""The graph IR: closed op set, one template per stack, residual wiring, sharing, shapes."""

import pytest

import tfspec
from tfspec.analysis import count_parameters, parameter_table
from tfspec.graph import OPS, format_graph

EMB = "embedding tokens { vocab 50; dim 16 }\n"


def graph(text):
    return tfspec.parse(text).graph()


def test_template_not_copies_and_repeat_attribute():
    g = graph(EMB + "decoder x 5 { attention self heads=2 mask=causal; feedforward d_ff=32 }")
    assert g.graph["stacks"]["decoder"]["repeat"] == 5
    assert sum(1 for _, a in g.nodes(data=True) if a["op"] == "attention") == 1
    assert all(a["op"] in OPS for _, a in g.nodes(data=True))
    table = parameter_table(g)
    assert {f"decoder.layers.{i}.self_attn.qkv.weight" for i in range(5)} <= set(table)
    assert table["decoder.layers.4.ffn.up.weight"] == (32, 16)


def test_post_and_pre_norm_are_wired_differently():
    post = graph(EMB + "encoder x 1 { residual post; attention self heads=2 }")
    pre = graph(EMB + "encoder x 1 { residual pre; attention self heads=2 }")
    inputs = lambda g, n: g.nodes[n]["inputs"]  # noqa: E731
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
    assert pre.edges["encoder.block_input", "encoder.self_attn_add"]["port"] == "residual"
    assert post.nodes["encoder.self_attn_add"]["residual"] == "post"


def test_residual_none_has_no_add():
    g = graph(EMB + "encoder x 1 { attention self heads=2 residual=none }")
    assert not any(a["op"] == "add" for n, a in g.nodes(data=True) if a["in_block"])


def test_parallel_block_in_wiring_form():
    g = graph(EMB + "decoder x 2 {\n h = norm(x)\n x = x + attention(h, heads=2, mask=causal) + feedforward(h, d_ff=32)\n}")
    add = next(n for n, a in g.nodes(data=True) if a["op"] == "add" and a["in_block"])
    assert g.nodes[add]["inputs"] == ["decoder.block_input", "decoder.self_attn", "decoder.ffn"]
    assert g.nodes["decoder.self_attn"]["inputs"] == g.nodes["decoder.ffn"]["inputs"] == ["decoder.norm"]
    same_as_sequential_sizes = graph(EMB + "decoder x 2 { residual pre; attention self heads=2; feedforward d_ff=32 }")
    # the parallel block has one norm where the sequential pre-norm block has two: 2 layers x 32 fewer
    assert count_parameters(same_as_sequential_sizes) - count_parameters(g) == 2 * 32


def test_cross_attention_reads_encoder_output_after_final_norm():
    g = graph(EMB + "encoder x 2 { attention self heads=2; final layernorm }\n"
                    "decoder x 2 { attention self heads=2 mask=causal; attention cross heads=2 }")
    assert g.nodes["decoder.cross_attn"]["inputs"][1] == "encoder.final_norm"
    assert g.edges["encoder.final_norm", "decoder.cross_attn"]["port"] == "memory"
    assert g.graph["stacks"]["encoder"]["length"] == "src_len"
    assert g.nodes["decoder.cross_attn"]["shape"] == ("batch", "tgt_len", 16)


def test_shared_embedding_and_tied_head_counted_once():
    text = EMB + "encoder x 1 { attention self heads=2 }\ndecoder x 1 { attention self heads=2 mask=causal }\n"
    tied = graph(text + "head tied(tokens)")
    untied = graph(text + "head linear")
    assert count_parameters(untied) - count_parameters(tied) == 50 * 16 + 50  # weight + default bias
    assert tied.nodes["head"]["ties"] == {"weight": "embeddings.tokens.tokens.weight"}
    # both stacks apply the same embedding module
    assert tied.nodes["encoder.embed"]["module"] == tied.nodes["decoder.embed"]["module"]


def test_separate_embeddings_and_cross_width():
    g = graph("embedding src { vocab 30; dim 16 }\nembedding tgt { vocab 40; dim 8 }\n"
              "encoder x 1 { embedding src; attention self heads=2 }\n"
              "decoder x 1 { embedding tgt; attention cross heads=2 }\nhead tied(tgt)")
    assert g.nodes["decoder.cross_attn"]["params"]["kv.weight"] == (16, 16)  # 2 x width(8) from memory width 16
    assert g.nodes["logits"]["shape"] == ("batch", "tgt_len", 40)


def test_gated_and_additive_parameter_shapes():
    g = graph(EMB + "encoder x 1 { attention self heads=4 kind=additive bias=false; feedforward d_ff=8 activation=swiglu }")
    attn = g.nodes["encoder.self_attn"]["params"]
    assert attn == {"qkv.weight": (48, 16), "out.weight": (16, 16), "score": (4, 4)}
    assert g.nodes["encoder.ffn"]["params"]["up.weight"] == (16, 16)  # two halves of d_ff=8


def test_embedding_parts_and_shapes():
    g = graph("embedding tokens { vocab 50; dim 16; position learned(20); segments 2; norm layernorm; dropout 0.1 }\n"
              "encoder x 1 { attention self heads=2 }\npooler tanh")
    assert g.nodes["encoder.embed_sum"]["inputs"] == ["encoder.embed", "encoder.position", "encoder.segments"]
    assert g.nodes["encoder.position"]["shape"] == ("seq_len", 16)
    assert g.nodes["pooled"]["shape"] == ("batch", 16)
    assert parameter_table(g)["embeddings.tokens.positions.weight"] == (20, 16)


def test_format_graph_one_line_per_node():
    g = graph(EMB + "decoder x 2 { attention self heads=2 mask=causal }")
    text = format_graph(g)
    assert text.splitlines()[0] == "graph model (decoder-only)"
    assert "decoder.self_attn = attention(decoder.block_input) -> (batch, seq_len, 16)" in text
    assert len(text.splitlines()) == 2 + g.number_of_nodes()


HUGE = ("let d = 1000000\nembedding tokens { vocab 1000000; dim d }\n"
        "decoder x 4000 { attention self heads=8; feedforward d_ff=1000000 }\n")


def test_a_huge_spec_checks_summarises_and_draws_without_allocating(tmp_path):
    import time
    from tfspec.diagram import to_graphviz
    from tfspec.analysis import analyse
    from tfspec.summary import format_summary
    start = time.perf_counter()
    spec = tfspec.parse(HUGE)
    assert count_parameters(spec.graph()) == 24_001_040_000_000_000
    assert "24,001,040,000,000,000" in format_summary(analyse(spec))
    assert to_graphviz(spec).source
    assert time.perf_counter() - start < 5


def test_only_materialising_weights_is_refused_for_size(monkeypatch):
    import tfspec.compiler as c
    monkeypatch.setattr(c, "available_memory_bytes", lambda device=None: 10 * 2**20)
    with pytest.raises(tfspec.SpecError) as info:
        c.compile(EMB + "decoder x 1 { attention self heads=2; feedforward d_ff=1000000 }")
    assert info.value.codes == ["size"]
    assert "need 0.1 GiB" in info.value.message and "only 0.0 GiB of memory is available" in info.value.message
    assert info.value.line == 2 and info.value.column == 39  # the feedforward that holds most of the weights
    c.compile(EMB + "decoder x 1 { attention self heads=2; feedforward d_ff=1000000 }", device="meta")


