"""ONNX export, run by onnxruntime: equal to PyTorch (≤ 1e-4) for a decoder, an encoder with padding and token
types, and an encoder-decoder whose source and target lengths differ from each other and from those traced."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("onnxscript")
onnxruntime = pytest.importorskip("onnxruntime")

import tfspec  # noqa: E402
from tfspec.interop.onnx import OnnxError, export_onnx, graph_inputs  # noqa: E402
from numerics import assert_close

DECODER = """
embedding tokens { vocab 60; dim 32; position none }
decoder x 2 {
  residual pre
  position rotary
  attention self heads=4 kv_heads=2 mask=causal + padding
  feedforward d_ff=64 activation=swiglu
  final rmsnorm
}
head tied(tokens)
"""
ENCODER = """
embedding tokens { vocab 60; dim 32; position learned(24); segments 2; norm layernorm }
encoder x 1 { attention self heads=4 mask=padding; feedforward d_ff=64 activation=gelu }
head linear(60)
pooler tanh
"""
SEQ2SEQ = """
embedding src { vocab 60; dim 32; position sinusoidal }
embedding tgt { vocab 50; dim 32; position learned(32) }
encoder x 1 { embedding src; attention self heads=4 mask=padding; feedforward d_ff=64 }
decoder x 1 {
  embedding tgt
  attention self heads=4 mask=causal + padding
  attention cross heads=4 mask=padding
  feedforward d_ff=64
}
head tied(tgt)
"""


def _perturbed(text: str):
    torch.manual_seed(0)
    model = tfspec.compile(tfspec.parse(text))
    with torch.no_grad():
        for p in model.parameters():  # norms away from 1, biases away from 0
            p.add_(torch.randn_like(p) * 0.1)
    return model.eval()

ONNX = 1e-4  # onnxruntime's kernels fuse and order sums otherwise than PyTorch's (its own export check's bound)


def _run(path, feeds: dict) -> list:
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {k: v.numpy() for k, v in feeds.items()})




def test_a_decoder_runs_in_onnxruntime_at_other_shapes(tmp_path):
    model = _perturbed(DECODER)
    done = export_onnx(model, tmp_path / "model.onnx")
    assert done.inputs == ("tokens", "padding_mask") and done.outputs == ("logits",)
    assert done.max_difference is not None and done.max_difference <= 1e-4
    for batch, length in ((1, 13), (4, 3)):
        tokens = torch.randint(0, 60, (batch, length))
        padding = torch.zeros(batch, length, dtype=torch.bool)
        padding[-1, length - 1:] = True
        with torch.no_grad():
            ours = model(tokens, padding_mask=padding)
        (theirs,) = _run(done.path, {"tokens": tokens, "padding_mask": padding})
        assert theirs.shape == (batch, length, 60)
        assert_close(torch.from_numpy(theirs), ours, ONNX)


def test_an_encoder_with_padding_and_token_types_and_a_pooler(tmp_path):
    model = _perturbed(ENCODER)
    assert [i.name for i in graph_inputs(model)] == ["tokens", "padding_mask", "token_types"]
    done = export_onnx(model, tmp_path / "model.onnx", verify=False)
    assert done.outputs == ("logits", "pooled") and done.max_difference is None
    tokens = torch.randint(0, 60, (3, 10))
    types = torch.randint(0, 2, (3, 10))
    padding = torch.zeros(3, 10, dtype=torch.bool)
    padding[1, 6:] = True
    padding[2, 2:] = True
    with torch.no_grad():
        logits, pooled = model(tokens, padding_mask=padding, token_types=types)
    theirs = _run(done.path, {"tokens": tokens, "padding_mask": padding, "token_types": types})
    assert_close(torch.from_numpy(theirs[0]), logits, ONNX)
    assert_close(torch.from_numpy(theirs[1]), pooled, ONNX)
    # The mask is an input, not a constant of the trace: unpadding a row changes that row's result.
    unpadded = _run(done.path, {"tokens": tokens, "padding_mask": torch.zeros_like(padding), "token_types": types})
    assert abs(unpadded[1][2] - theirs[1][2]).max() > 1e-3


def test_an_encoder_decoder_through_the_cli_with_unequal_lengths(tfspec_cli, tmp_path):
    from tfspec.run import checkpoint

    model = _perturbed(SEQ2SEQ)
    checkpoint.save(tmp_path / "run", 0, model, SEQ2SEQ, {}, {})
    result = tfspec_cli("export", str(tmp_path / "run"), "--to", "onnx", "-o", str(tmp_path / "onnx"))
    assert result.returncode == 0, result.stderr
    assert "inputs src, src_padding_mask, tgt, tgt_padding_mask" in result.stdout
    assert "onnxruntime gives PyTorch's logits to" in result.stdout
    assert "torchvision" not in result.stdout + result.stderr  # the exporter's notes stay quiet
    session = onnxruntime.InferenceSession(str(tmp_path / "onnx" / "model.onnx"), providers=["CPUExecutionProvider"])
    axes = {i.name: i.shape for i in session.get_inputs()}
    assert axes["src"][1] != axes["tgt"][1]  # two length axes, not one
    for src_len, tgt_len in ((17, 4), (3, 21)):
        src = torch.randint(0, 60, (2, src_len))
        tgt = torch.randint(0, 50, (2, tgt_len))
        src_pad = torch.zeros(2, src_len, dtype=torch.bool)
        src_pad[1, src_len - 1:] = True
        tgt_pad = torch.zeros(2, tgt_len, dtype=torch.bool)
        tgt_pad[0, tgt_len - 1:] = True
        with torch.no_grad():
            ours = model(src, tgt, src_padding_mask=src_pad, tgt_padding_mask=tgt_pad)
        (theirs,) = session.run(None, {"src": src.numpy(), "tgt": tgt.numpy(), "src_padding_mask": src_pad.numpy(),
                                       "tgt_padding_mask": tgt_pad.numpy()})
        assert theirs.shape == (2, tgt_len, 50)
        assert_close(torch.from_numpy(theirs), ours, ONNX)


def test_an_export_that_computes_something_else_is_refused_and_not_left(tmp_path, monkeypatch):
    import tfspec.interop.onnx as onnx_export

    model = _perturbed(DECODER)
    real = onnx_export._Named.forward
    monkeypatch.setattr(onnx_export, "compare", _wrong(onnx_export.compare, model))
    with pytest.raises(OnnxError, match="differs from PyTorch's"):
        export_onnx(model, tmp_path / "model.onnx")
    assert not (tmp_path / "model.onnx").exists()
    assert onnx_export._Named.forward is real


def _wrong(compare, model):
    """compare(), against a model whose weights moved after the export: what a wrong export looks like."""
    def wrong(*args, **kwargs):
        with torch.no_grad():
            model.head.proj.weight.add_(0.5) if hasattr(model.head, "proj") else next(model.parameters()).add_(0.5)
        return compare(*args, **kwargs)
    return wrong


def _towers(path: str):
    """An example of towers at ``verify``'s small sizes, every weight perturbed."""
    from tfspec.inspect.verify import small_version
    spec, _ = small_version(tfspec.load(path), width_per_head=8, max_vocab=64, max_d_ff=48)
    torch.manual_seed(0)
    model = tfspec.compile(spec)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    return model.eval()


def test_two_towers_meeting_in_a_contrastive_head_each_at_its_own_batch(tmp_path):
    """CLIP's towers: each tower's input by its name, the text's padding mask, and each tower's batch an axis of its
    own; the logits and both towers' vectors as PyTorch's for 3 texts (one padded) against 5 pictures."""
    model = tfspec.compile("examples/clip_digits.tfs", seed=0).eval()
    done = tfspec.export(model, tmp_path / "clip", to="onnx")
    assert done.startswith("model.onnx (inputs text, text_padding_mask, vision; outputs logits, text_vectors, "
                           "vision_vectors;")
    text = torch.randint(1, 31, (3, 6), generator=torch.Generator().manual_seed(1))
    padding = torch.zeros(3, 6, dtype=torch.bool)
    padding[1, 4:] = True
    pictures = torch.rand(5, 1, 16, 16, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        ours = model(text=text, text_padding_mask=padding, vision=pictures)
    theirs = _run(tmp_path / "clip" / "model.onnx", {"text": text, "text_padding_mask": padding, "vision": pictures})
    assert theirs[0].shape == (3, 5)
    for mine, other in zip(ours, theirs):
        assert_close(torch.from_numpy(other), mine, ONNX)


def test_a_vision_language_model_reads_its_prompts_pictures_in_onnxruntime(tmp_path):
    """Qwen2.5-VL's towers (2-D rotary positions, tiles, the merger, M-RoPE numbering each picture by its place
    in the batch): a first prompt holding two pictures and a second, left-padded, none, unlike the rows traced;
    the logits as PyTorch's, and the graph's axes named by tower."""
    import onnx
    model = _towers("examples/qwen2_5_vl_3b.tfs")
    done = export_onnx(model, tmp_path / "model.onnx")
    assert done.inputs == ("vision", "text", "text_padding_mask") and done.outputs == ("logits",)
    assert done.max_difference is not None and done.max_difference <= ONNX
    axes = {i.name: [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim]
            for i in onnx.load(str(done.path)).graph.input}
    assert axes["text"] == ["text_batch", "text_length"] and axes["vision"][0] == "vision_batch"
    connector = next(iter(model.connectors.values()))
    count = model.features("vision", torch.rand(1, *axes["vision"][1:])).shape[1]
    text = torch.randint(1, 60, (2, 2 * count + 7), generator=torch.Generator().manual_seed(3))
    text[text == connector.image_token] = 1
    text[0, 1:1 + count] = connector.image_token
    text[0, 3 + count:3 + 2 * count] = connector.image_token
    padding = torch.zeros_like(text, dtype=torch.bool)
    padding[1, :3] = True
    pictures = torch.rand(2, *axes["vision"][1:], generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        ours = model(text=text, text_padding_mask=padding, vision=pictures)
    (theirs,) = _run(done.path, {"vision": pictures, "text": text, "text_padding_mask": padding})
    assert_close(torch.from_numpy(theirs)[~padding], ours[~padding], ONNX)
