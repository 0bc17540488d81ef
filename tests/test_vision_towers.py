"""Vision towers built from the language's parts, exact against Hugging Face's own vision models: Qwen2.5-VL's
(``patches(frames=2)``: its 3-D convolution of a still picture; ``rotary_2d(frequencies=shared)``; ``tiles``: its
windowed layers, with ``layers N { self_attn mask=none }`` for its full ones; its merger as a connector). The
families' import, export and generation are in ``test_import.py``."""

from __future__ import annotations

import pytest
import torch

import tfspec
from numerics import FLOAT32, assert_close

transformers = pytest.importorskip("transformers")

QWEN_VISION = """model qwen_vision
defaults {{ residual pre }}
tower vision {{
  defaults {{ norm rmsnorm(eps=1e-6) }}
  embedding image {{ input patches(image=20, patch=2, channels=3, frames=2, bias=false); dim 32; position none }}
  encoder x 3 {{
    position rotary_2d(side=10, frequencies=shared)
    attention self heads=4 mask=tiles(side=10, size={tile})
    feedforward d_ff=40 activation=swiglu
    final none
    layers 1 {{ self_attn mask=none }}
  }}
}}
tower text {{
  embedding tokens {{ vocab 30; dim 24; position none }}
  decoder x 1 {{ attention self heads=2 mask=causal; feedforward d_ff=32 }}
  head tied(tokens)
}}
connect vision -> text image_token=29 {{
  norm rmsnorm eps=1e-6
  pixel_shuffle 2
  linear 128
  activation gelu
  linear 24
}}
"""


def qwen_patches(picture: torch.Tensor, patch: int, merge: int, frames: int = 2) -> torch.Tensor:
    """One picture ``(C, H, W)`` as Qwen2-VL's image processor flattens it: ``frames`` copies, each merge × merge
    block of patches consecutive, a patch's pixels in (channel, frame, row, column) order."""
    c, h, w = picture.shape
    rows, columns = h // patch, w // patch
    x = picture[None].expand(frames, c, h, w).reshape(1, frames, c, rows // merge, merge, patch, columns // merge,
                                                      merge, patch)
    return x.permute(0, 3, 6, 4, 7, 2, 1, 5, 8).reshape(rows * columns, c * frames * patch * patch)


def _perturbed(module):
    with torch.no_grad():  # every weight away from its initialisation: a norm weight of exactly 1 hides mistakes
        for p in module.parameters():
            p.mul_(1 + 0.2 * torch.randn_like(p)).add_(0.02 * torch.randn_like(p))
    return module


@pytest.mark.parametrize("window", [8, 4])
def test_qwen2_5_vl_s_vision_model_is_patches_of_frames_rotary_2d_tiles_and_a_merger(window):
    """Hugging Face's ``Qwen2_5_VisionTransformerPretrainedModel`` (its windows of ``window`` pixels: tiles of 4
    patches, the grid's 10 cut 4 + 4 + 2, or of 2; its layer 1 sees the whole picture) and the spec's vision tower
    and connector on two pictures: the merged vectors, in the same order."""
    from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VisionTransformerPretrainedModel
    torch.manual_seed(0)
    config = transformers.Qwen2_5_VLVisionConfig(
        depth=3, hidden_size=32, intermediate_size=40, num_heads=4, in_channels=3, patch_size=2,
        spatial_merge_size=2, temporal_patch_size=2, window_size=window, out_hidden_size=24,
        fullatt_block_indexes=[1])
    reference = _perturbed(Qwen2_5_VisionTransformerPretrainedModel(config)).eval()
    tile = window // 2 // 2 * 2  # (window pixels // merge // patch) merge units of merge patches a side
    model = tfspec.compile(tfspec.parse(QWEN_VISION.format(tile=tile)), seed=0).eval()
    theirs, state = reference.state_dict(), dict(model.state_dict())
    v, steps = "towers.vision", "connectors.vision.steps"
    state[f"{v}.embeddings.image.patches.weight"] = theirs["patch_embed.proj.weight"].reshape(32, -1)
    for i in range(3):
        o, t = f"{v}.encoder.layers.{i}", f"blocks.{i}"
        for ours, hf in (("self_attn.qkv", "attn.qkv"), ("self_attn.out", "attn.proj"), ("ffn.down", "mlp.down_proj")):
            state[f"{o}.{ours}.weight"], state[f"{o}.{ours}.bias"] = theirs[f"{t}.{hf}.weight"], theirs[f"{t}.{hf}.bias"]
        state[f"{o}.self_attn_norm.weight"], state[f"{o}.ffn_norm.weight"] = (theirs[f"{t}.norm1.weight"],
                                                                              theirs[f"{t}.norm2.weight"])
        for part in ("weight", "bias"):  # gate first
            state[f"{o}.ffn.up.{part}"] = torch.cat([theirs[f"{t}.mlp.gate_proj.{part}"],
                                                     theirs[f"{t}.mlp.up_proj.{part}"]])
    state[f"{steps}.0.weight"] = theirs["merger.ln_q.weight"]
    for ours, hf in ((2, 0), (4, 2)):
        state[f"{steps}.{ours}.weight"], state[f"{steps}.{ours}.bias"] = (theirs[f"merger.mlp.{hf}.weight"],
                                                                          theirs[f"merger.mlp.{hf}.bias"])
    model.load_state_dict(state)
    pixels = torch.randn(2, 3, 20, 20, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = reference(torch.cat([qwen_patches(p, 2, 2) for p in pixels]),
                             grid_thw=torch.tensor([[1, 10, 10]] * 2)).pooler_output.reshape(2, 25, 24)
        assert_close(model.features("vision", pixels), expected, FLOAT32)


def test_tiles_see_their_own_tile_of_the_grid_and_are_refused_off_it():
    """The rule against the formula here (partial tiles at the edges), and a grid other than the pictures' a
    located error."""
    from tfspec.variants.tiles import tiles
    side, size = 5, 2
    positions = torch.arange(side * side)
    allowed = tiles(positions, positions, side, size)
    for q in range(side * side):
        for k in range(side * side):
            same = (q // side // size, q % side // size) == (k // side // size, k % side // size)
            assert bool(allowed[q, k]) == same
    assert int(allowed[24].sum()) == 1 and int(allowed[0].sum()) == 4 and int(allowed[4].sum()) == 2
    with pytest.raises(tfspec.SpecError) as info:
        tfspec.parse(QWEN_VISION.format(tile=4).replace("tiles(side=10", "tiles(side=9"), file="qv.tfs")
    assert "the pictures make a grid 10 patches a side; tiles(side=9) cuts one 9 a side" in str(info.value)
    assert "qv.tfs:8:" in str(info.value)
