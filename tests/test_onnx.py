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
