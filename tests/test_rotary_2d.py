"""Axial 2-D rotary positions (variants/rotary_2d.py, nn/rotary.AxialRotaryPositions) against Hugging Face's
Pixtral and Qwen2.5-VL vision rotary embeddings and the complex-number formula written here."""

from __future__ import annotations

import pytest
import torch

import tfspec
from tfspec.errors import SpecError
from tfspec.nn.rotary import AxialRotaryPositions
from numerics import FLOAT32, assert_close

transformers = pytest.importorskip("transformers")


def heads(length: int, head_dim: int = 16, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(2, 3, length, head_dim, generator=g)


def grid_ids(side: int) -> torch.Tensor:
    """Each patch's (row, column) of a side × side grid, row-major: ``(side², 2)``, as Hugging Face numbers them."""
    rows, columns = torch.meshgrid(torch.arange(side), torch.arange(side), indexing="ij")
    return torch.stack((rows.flatten(), columns.flatten()), dim=-1)


def rotated(module: AxialRotaryPositions, q, k):
    positions = torch.arange(q.shape[2])[None]
    return module.rotate(q, k, module.tables(positions, q.dtype))


def formula(x: torch.Tensor, side: int, theta: float, shared: bool) -> torch.Tensor:
    """Pairs (i, i + d/2) as complex numbers times e^(i·angle): the first d/4 pairs turn by the row times their
    frequency, the last d/4 by the column times theirs."""
    d = x.shape[-1]
    ladder = [theta ** (-2 * i / d) for i in range(d // 2)]
    rows, columns = ladder[0::2], (ladder[0::2] if shared else ladder[1::2])
    out = x.clone()
    for p in range(x.shape[2]):
        row, column = divmod(p, side)
        for i in range(d // 2):
            angle = torch.tensor(row * rows[i] if i < d // 4 else column * columns[i - d // 4], dtype=torch.float64)
            pair = torch.complex(x[:, :, p, i].double(), x[:, :, p, i + d // 2].double()) * torch.polar(
                torch.tensor(1.0, dtype=torch.float64), angle)
            out[:, :, p, i], out[:, :, p, i + d // 2] = pair.real.float(), pair.imag.float()
    return out


@pytest.mark.parametrize("shared", [False, True])
@pytest.mark.parametrize("side, theta", [(4, 10000.0), (3, 100.0)])
def test_rotation_equals_the_complex_number_formula(side, theta, shared):
    q, k = heads(side * side), heads(side * side, seed=1)
    got_q, got_k = rotated(AxialRotaryPositions(16, theta, side, shared), q, k)
    assert_close(got_q, formula(q, side, theta, shared))
    assert_close(got_k, formula(k, side, theta, shared))


def test_alternate_frequencies_equal_hugging_face_pixtral():
    from transformers.models.pixtral import modeling_pixtral as pixtral
    config = transformers.PixtralVisionConfig(hidden_size=64, num_attention_heads=4, image_size=20, patch_size=4)
    q, k = heads(25), heads(25, seed=1)
    cos, sin = pixtral.PixtralVisionRotaryEmbedding(config)(q, grid_ids(5))
    expected = pixtral.apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=0)
    for ours, theirs in zip(rotated(AxialRotaryPositions(16, 10000.0, 5), q, k), expected):
        assert_close(ours, theirs, FLOAT32)


def test_shared_frequencies_equal_hugging_face_qwen2_5_vl():
    from transformers.models.qwen2_5_vl import modeling_qwen2_5_vl as qwen
    config = transformers.Qwen2_5_VLVisionConfig(hidden_size=64, num_heads=4)
    q, k = heads(36), heads(36, seed=1)
    cos, sin = qwen.Qwen2_5_VLVisionRotaryEmbedding(config)(q, grid_ids(6))
    # (Hugging Face's vision attention holds (patches, heads, head_dim))
    expected = qwen.apply_rotary_pos_emb_vision(q.transpose(1, 2), k.transpose(1, 2), cos, sin)
    for ours, theirs in zip(rotated(AxialRotaryPositions(16, 10000.0, 6, shared=True), q, k), expected):
        assert_close(ours, theirs.transpose(1, 2), FLOAT32)


@pytest.mark.parametrize("shared", [False, True])
def test_scores_depend_on_offsets_in_rows_and_columns_alone(shared):
    """q·k of a query at (r, c) and a key at (r', c') is unchanged when both move by the same rows and columns,
    and changes when they move apart."""
    side, module = 6, AxialRotaryPositions(16, 100.0, 6, shared)
    q, k = heads(side * side), heads(side * side, seed=1)
    q, k = q[:, :, :1].expand(-1, -1, side * side, -1), k[:, :, :1].expand(-1, -1, side * side, -1)
    rq, rk = rotated(module, q, k)

    def score(query, key):
        return (rq[:, :, query[0] * side + query[1]] * rk[:, :, key[0] * side + key[1]]).sum(-1)

    assert_close(score((1, 2), (3, 0)), score((2, 4), (4, 2)))  # the same offsets (2, -2), moved by (1, 2)
    assert_close(score((0, 0), (0, 1)), score((4, 4), (4, 5)))
    assert not torch.allclose(score((0, 0), (0, 1)), score((0, 0), (1, 0)), rtol=1e-3)  # a row is not a column


SPEC = """model pixtral_like

embedding image {{
  input patches(image=16, patch=4, channels=3, bias=false{class_token})
  dim 32
  position none
}}

encoder x 1 {{
  position {position}
  attention self heads=2 bias=false
  feedforward d_ff=48 activation=swiglu bias=false
}}
"""


@pytest.mark.parametrize("position, class_token, message, hint", [
    ("rotary_2d(side=5)", "", "the pictures make a grid 4 patches a side; rotary_2d(side=5) numbers one 5 a side",
     "rotary_2d(side=4)"),
    ("rotary_2d(side=4)", ", class_token=true", "rotary_2d numbers the patches from position 0, but a class token "
     "comes first", "class_token=false"),
])
def test_a_grid_other_than_the_pictures_is_refused_where_written(position, class_token, message, hint):
    text = SPEC.format(position=position, class_token=class_token)
    with pytest.raises(SpecError) as caught:
        tfspec.parse(text, file="pix.tfs")
    shown = str(caught.value)
    assert message in shown and hint in shown
    assert "pix.tfs:10:12" in shown  # the position scheme, where the stack writes it


def test_a_head_dimension_not_a_multiple_of_four_is_refused():
    text = SPEC.format(position="rotary_2d(side=4)", class_token="").replace("dim 32", "dim 36").replace(
        "heads=2", "heads=6")
    with pytest.raises(SpecError, match="head_dim 6 is not a multiple of 4"):
        tfspec.parse(text)


def test_the_pictures_own_grid_compiles_and_rotates_by_row_and_column():
    model = tfspec.compile(tfspec.parse(SPEC.format(position="rotary_2d(side=4)", class_token="")), seed=0).eval()
    position = model.get_submodule("encoder.layers.0.self_attn.position")
    assert isinstance(position, AxialRotaryPositions) and (position.side, position.shared) == (4, False)
    pictures = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert model(pictures).shape == (2, 16, 32)
