"""Diagrams: every example renders, and the SVG (parsed, not grepped) says what the architecture is."""

from __future__ import annotations

import os
import shutil
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tfspec import ir
from tfspec import load, render
from tfspec.front.schema import Towers
from tfspec.inspect.diagram import MEMORY_COLOUR, RESIDUAL_COLOUR, RenderError, to_graphviz

EXAMPLES = sorted(Path(__file__).parent.parent.joinpath("examples").glob("*.tfs"))
SVG = "{http://www.w3.org/2000/svg}"
needs_dot = pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot is not installed")


def parse_svg(path: Path) -> dict[str, list[dict]]:
    """Graphviz SVG -> {"node"|"edge"|"cluster": [{"title", "text", "strokes"}]}."""
    parts: dict[str, list[dict]] = {"node": [], "edge": [], "cluster": []}
    for g in ET.parse(path).getroot().iter(f"{SVG}g"):
        kind = g.get("class")
        if kind not in parts:
            continue
        texts = [t.text for t in g.iter(f"{SVG}text") if t.text]
        strokes = {(p.get("stroke") or "").upper() for p in g.iter(f"{SVG}path")}
        parts[kind].append({"title": g.find(f"{SVG}title").text, "text": " ".join(texts), "strokes": strokes})
    return parts


def texts(parts, kind):
    return [p["text"] for p in parts[kind]]


@needs_dot
@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_every_example_renders_with_its_structure(path, tmp_path):
    spec = load(path)
    out = render(spec, tmp_path / "diagram.svg")
    parts = parse_svg(out)
    # a model of towers: each in a box of its own, side by side, its ids prefixed by its name
    towers = [(f"{t.name}/", f"{t.name}_", t.spec) for t in spec.towers] if isinstance(spec, Towers) else \
        [("", "", spec)]
    residual_adds = cross = 0
    for prefix, cluster, tower in towers:
        g = tower.graph()
        for role, info in g.stacks.items():  # each kind of layer drawn once, in an "N×" box: N together the stack's
            boxes = [c["text"] for c in parts["cluster"] if c["title"].startswith(f"cluster_{cluster}{role}")
                     and "×" in c["text"]]
            assert sum(int(text.split("×")[0]) for text in boxes) == info.repeat and len(boxes) == len(info.kinds)
        node_text = " | ".join(p["text"] for p in parts["node"] if p["title"].startswith(prefix))
        for node in g.of(ir.Sublayer):
            assert node.label in node_text
        # (a sum of branches that is not the stream's, Gemma 4's normed MLP and mixture outputs, draws no residual
        # edge)
        residual_adds += len([a for a in g.of(ir.Add, in_block=True) if "residual" in a.ports])
        memory = [e for e in parts["edge"] if e["text"] == "memory" and e["title"].startswith(prefix)]
        crossing = [f"{prefix}{n.id}" for n in g.of(ir.Attention) if n.spec.reads == "cross"]
        cross += len(crossing)
        assert [e["title"].split("->")[1] for e in memory] == crossing
        assert all(MEMORY_COLOUR in e["strokes"] for e in memory)
    residual_edges = [e for e in parts["edge"] if RESIDUAL_COLOUR in e["strokes"]]
    assert len(residual_edges) == residual_adds > 0
    assert len([e for e in parts["edge"] if e["text"] == "memory"]) == cross
    tied = any(t.head is not None and t.head.tied_to is not None for _, _, t in towers)
    assert ("shared weights" in texts(parts, "edge")) == tied
    if isinstance(spec, Towers):
        assert [c["text"].split(" (")[0] for c in parts["cluster"] if c["title"].startswith("cluster_tower_")] == \
            [f"tower {t.name}" for t in spec.towers]
        joined = [e["title"] for e in parts["edge"] if e["title"].endswith("->contrastive")]
        expected = spec.contrastive.towers if spec.contrastive is not None else ()
        assert sorted(joined) == sorted(f"{name}/logits->contrastive" for name in expected)
        drawn = {p["title"] for p in parts["node"]}
        for c in spec.connectors:  # from a node the source draws, into the target's token table
            assert [e["title"].split("->")[1] for e in parts["edge"]
                    if e["title"].startswith(f"connector.{c.source}->")] == [f"{c.target}/decoder.embed"]
            (reads,) = [e["title"].split("->")[0] for e in parts["edge"]
                        if e["title"].endswith(f"->connector.{c.source}")]
            assert reads.startswith(f"{c.source}/") and reads in drawn


@needs_dot
def test_pre_norm_and_post_norm_look_different(tmp_path):
    post = parse_svg(render(load("examples/gpt1.tfs"), tmp_path / "gpt1.svg"))
    pre = parse_svg(render(load("examples/gpt2_small.tfs"), tmp_path / "gpt2.svg"))
    assert texts(post, "node").count("Add & Norm (layernorm)") == 2
    assert "+" not in [p["text"] for p in post["node"] if p["title"].startswith("decoder.") and "add" in p["title"]]
    assert texts(pre, "node").count("Add & Norm (layernorm)") == 0
    assert texts(pre, "node").count("Norm (layernorm)") == 2  # before each sublayer
    assert texts(pre, "node").count("+") == 3  # two residual sums and the embedding sum
    assert "Final Norm (layernorm)" in texts(pre, "node")


@needs_dot
def test_expand_draws_every_layer_and_detail_shows_shapes(tmp_path):
    spec = load("examples/vaswani_base.tfs", overrides={"layers": 3})
    expanded = parse_svg(render(spec, tmp_path / "expanded.svg", expand=True))
    assert sorted(texts(expanded, "cluster")) == sorted([f"layer {i}" for i in range(3)] * 2)
    memory = [e["title"] for e in expanded["edge"] if e["text"] == "memory"]
    assert sorted(m.split("->")[1] for m in memory) == [f"decoder.cross_attn@{i}" for i in range(3)]
    assert {m.split("->")[0] for m in memory} == {"encoder.ffn_add@2"}  # the last encoder layer's output
    # layer i reads layer i-1: the block entry of layer 1 is fed by layer 0's Add & Norm
    assert "decoder.ffn_add@0->decoder.block_input@1" in [e["title"] for e in expanded["edge"]]

    detailed = parse_svg(render(spec, tmp_path / "detail.svg", detail=True))
    edge_text = texts(detailed, "edge")
    assert "batch×src_len×512" in edge_text and "batch×tgt_len×37000" in edge_text
    assert any(t.startswith("Dropout (0.1)") for t in texts(detailed, "node"))
    assert not any(t.startswith("Dropout") for t in texts(parse_svg(render(spec, tmp_path / "plain.svg")), "node"))


@needs_dot
def test_the_picture_is_laid_out_as_figure_1(tmp_path):
    """Encoder beside decoder from one baseline, each layer's sublayers in one straight column, the shared table
    joined to the head in both stacks, and --detail writing a shape only where it changes."""
    import re

    spec = load("examples/vaswani_base.tfs", overrides={"layers": 2})
    source = to_graphviz(spec).source
    assert re.search(r'\{\s*rank=same\s*"encoder\.block_input"\s*"decoder\.block_input"', source)
    for role in ("encoder", "decoder"):
        column = [n.id for n in spec.graph().of(ir.Node, in_block=True) if n.stack == role
                  and not isinstance(n, (ir.BlockOutput, ir.Dropout)) and not n.id.endswith("_norm")]
        assert all(re.search(rf'"{re.escape(n)}" \[[^\]]*group={role}\b', source) for n in column), role
    svg = parse_svg(render(spec, tmp_path / "plain.svg"))
    ties = [e["title"] for e in svg["edge"] if e["text"] == "shared weights"]
    assert sorted(t.split("->")[0].split(":")[0] for t in ties) == ["decoder.embed", "encoder.embed"]
    # the column: each sublayer straight above the one it reads (the centres of their labels within a pixel)
    centres = {g.find(f"{SVG}title").text: float(next(g.iter(f"{SVG}text")).get("x"))
               for g in ET.parse(tmp_path / "plain.svg").getroot().iter(f"{SVG}g") if g.get("class") == "node"
               and next(g.iter(f"{SVG}text"), None) is not None}
    for role, sublayers in (("encoder", ("self_attn", "self_attn_add", "ffn", "ffn_add")),
                            ("decoder", ("self_attn", "self_attn_add", "cross_attn", "cross_attn_add", "ffn"))):
        xs = [centres[f"{role}.{name}"] for name in sublayers]
        assert max(xs) - min(xs) < 1.0, (role, xs)

    detailed = parse_svg(render(spec, tmp_path / "detail.svg", detail=True))
    shaped = [e["title"] for e in detailed["edge"] if "×" in e["text"]]
    inside = [t for t in shaped if t.split("->")[0].startswith(("encoder.self_attn", "encoder.ffn", "decoder.ffn"))]
    assert inside == [] and len(shaped) < len(detailed["edge"]) / 2  # not on every edge of a layer
    assert "Add & Norm (layernorm(eps=1e-06))" in texts(detailed, "node")


def test_dot_output_needs_no_graphviz_and_is_written_whole(tmp_path):
    out = render(load("examples/gpt1.tfs"), tmp_path / "gpt1.dot")
    source = out.read_text()
    assert source.startswith("digraph gpt1 {") and "12×" in source
    assert source == to_graphviz(load("examples/gpt1.tfs")).source
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary file left


def test_unknown_format_and_missing_directory(tmp_path):
    spec = load("examples/gpt1.tfs")
    with pytest.raises(RenderError, match="cannot tell the format"):
        render(spec, tmp_path / "gpt1.jpeg2000")
    with pytest.raises(RenderError, match="does not exist"):
        render(spec, tmp_path / "missing" / "gpt1.svg")


def test_without_dot_other_formats_fail_with_install_advice(tfspec_cli, tmp_path):
    bare = tmp_path / "bin"  # a PATH with Python but no Graphviz
    bare.mkdir()
    os.symlink(sys.executable, bare / "python")
    env = {**os.environ, "PATH": str(bare)}
    previous = tmp_path / "old.svg"
    previous.write_text("previous diagram")
    failed = tfspec_cli("render", "examples/gpt1.tfs", "-o", str(previous), env=env)
    assert failed.returncode == 2
    assert "sudo apt-get install graphviz" in failed.stderr and "Traceback" not in failed.stderr
    assert previous.read_text() == "previous diagram"  # nothing half-written
    dot = tfspec_cli("render", "examples/gpt1.tfs", "-o", str(tmp_path / "gpt1.dot"), env=env)
    assert dot.returncode == 0, dot.stderr
    assert (tmp_path / "gpt1.dot").read_text().startswith("digraph gpt1")


def test_render_cli_errors(tfspec_cli, tmp_path):
    missing = tfspec_cli("render", "examples/nope.tfs", "-o", str(tmp_path / "x.svg"))
    assert missing.returncode == 1 and "no such file" in missing.stderr
    bad = tfspec_cli("render", "examples/gpt1.tfs", "-o", str(tmp_path / "x.bmp"))
    assert bad.returncode == 2 and "use a name ending in .svg, .png, .pdf, .dot" in bad.stderr


@needs_dot
def test_render_cli_writes_png(tfspec_cli, tmp_path):
    result = tfspec_cli("render", "examples/vaswani_base.tfs", "-o", str(tmp_path / "vaswani.png"))
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "vaswani.png").read_bytes().startswith(b"\x89PNG")


def test_written_files_get_ordinary_permissions(tmp_path):
    umask = os.umask(0o022)
    try:
        out = render(load("examples/gpt1.tfs"), tmp_path / "gpt1.dot")
    finally:
        os.umask(umask)
    assert out.stat().st_mode & 0o777 == 0o644  # not mkstemp's private 0600
