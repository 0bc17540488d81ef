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


def _vision_state(theirs: dict, prefix: str, layers: int) -> dict:
    """Hugging Face's Qwen2.5-VL vision model's tensors (under ``prefix``) as the spec's vision tower and connector
    name them, written out here: the 3-D convolution's kernel flattened (channel, frame, row, column), each block's
    biased qkv, proj and gated MLP (gate first), its two norms, the merger's norm and MLP."""
    v, steps, state = "towers.vision", "connectors.vision.steps", {}
    kernel = theirs[f"{prefix}patch_embed.proj.weight"]
    state[f"{v}.embeddings.image.patches.weight"] = kernel.reshape(kernel.shape[0], -1)
    for i in range(layers):
        o, t = f"{v}.encoder.layers.{i}", f"{prefix}blocks.{i}"
        for part in ("weight", "bias"):
            for ours, hf in (("self_attn.qkv", "attn.qkv"), ("self_attn.out", "attn.proj"), ("ffn.down", "mlp.down_proj")):
                state[f"{o}.{ours}.{part}"] = theirs[f"{t}.{hf}.{part}"]
            state[f"{o}.ffn.up.{part}"] = torch.cat([theirs[f"{t}.mlp.gate_proj.{part}"],
                                                     theirs[f"{t}.mlp.up_proj.{part}"]])
        state[f"{o}.self_attn_norm.weight"], state[f"{o}.ffn_norm.weight"] = (theirs[f"{t}.norm1.weight"],
                                                                              theirs[f"{t}.norm2.weight"])
    state[f"{steps}.0.weight"] = theirs[f"{prefix}merger.ln_q.weight"]
    for ours, hf in ((2, 0), (4, 2)):
        for part in ("weight", "bias"):
            state[f"{steps}.{ours}.{part}"] = theirs[f"{prefix}merger.mlp.{hf}.{part}"]
    return state


@pytest.mark.parametrize("window, height, width", [(8, 20, 20), (4, 20, 20), (8, 12, 28)])
def test_qwen2_5_vl_s_vision_model_is_patches_of_frames_rotary_2d_tiles_and_a_merger(window, height, width):
    """Hugging Face's ``Qwen2_5_VisionTransformerPretrainedModel`` (its windows of ``window`` pixels: tiles of 4
    patches, the grid's 10 cut 4 + 4 + 2, or of 2; its layer 1 sees the whole picture) and the spec's vision tower
    and connector on two pictures, of the spec's size or another (6 × 14 patches: tiles of their own grid): the
    merged vectors, in the same order."""
    from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VisionTransformerPretrainedModel
    torch.manual_seed(0)
    config = transformers.Qwen2_5_VLVisionConfig(
        depth=3, hidden_size=32, intermediate_size=40, num_heads=4, in_channels=3, patch_size=2,
        spatial_merge_size=2, temporal_patch_size=2, window_size=window, out_hidden_size=24,
        fullatt_block_indexes=[1])
    reference = _perturbed(Qwen2_5_VisionTransformerPretrainedModel(config)).eval()
    tile = window // 2 // 2 * 2  # (window pixels // merge // patch) merge units of merge patches a side
    model = tfspec.compile(tfspec.parse(QWEN_VISION.format(tile=tile)), seed=0).eval()
    model.load_state_dict({**model.state_dict(), **_vision_state(reference.state_dict(), "", 3)})
    pixels = torch.randn(2, 3, height, width, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = reference(torch.cat([qwen_patches(p, 2, 2) for p in pixels]),
                             grid_thw=torch.tensor([[1, height // 2, width // 2]] * 2)).pooler_output
        expected = expected.reshape(2, height * width // 16, 24)
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


QWEN_VL = """model qwen_vl
defaults { residual pre }
tower vision {
  defaults { norm rmsnorm(eps=1e-6) }
  embedding image { input patches(image=12, patch=2, channels=3, frames=2, bias=false); dim 32; position none }
  encoder x 2 {
    position rotary_2d(side=6, frequencies=shared)
    attention self heads=4 mask=tiles(side=6, size=4)
    feedforward d_ff=40 activation=swiglu
    final none
    layers 1 { self_attn mask=none }
  }
}
tower text {
  defaults { norm rmsnorm(eps=1e-5) }
  embedding tokens { vocab 90; dim 32; position none }
  decoder x 2 {
    position mrope(theta=1000.0, temporal=1, height=1, width=2)
    attention self heads=4 kv_heads=2 mask=causal + padding bias=true out_bias=false
    feedforward d_ff=48 activation=swiglu bias=false
    final rmsnorm(eps=1e-5)
  }
  head linear(90) bias=false
}
connect vision -> text image_token=89 {
  norm rmsnorm eps=1e-6
  pixel_shuffle 2
  linear 128
  activation gelu
  linear 32
}
"""


def _qwen_vl():
    """A tiny Hugging Face Qwen2.5-VL, every weight perturbed, and the spec above with its weights."""
    torch.manual_seed(0)
    config = transformers.Qwen2_5_VLConfig(
        vision_config=dict(depth=2, hidden_size=32, intermediate_size=40, num_heads=4, in_channels=3, patch_size=2,
                           spatial_merge_size=2, temporal_patch_size=2, window_size=8, out_hidden_size=32,
                           fullatt_block_indexes=[1]),
        text_config=dict(vocab_size=90, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, intermediate_size=48,
                         rope_parameters={"rope_type": "default", "rope_theta": 1000.0, "mrope_section": [1, 1, 2]}),
        image_token_id=89, vision_start_token_id=87, vision_end_token_id=88, tie_word_embeddings=False)
    reference = _perturbed(transformers.Qwen2_5_VLForConditionalGeneration(config)).eval()
    model = tfspec.compile(tfspec.parse(QWEN_VL), seed=0).eval()
    theirs = reference.state_dict()
    state = {**model.state_dict(), **_vision_state(theirs, "model.visual.", 2)}
    x, L = "towers.text", "model.language_model"
    state[f"{x}.embeddings.tokens.tokens.weight"] = theirs[f"{L}.embed_tokens.weight"]
    state[f"{x}.decoder.final_norm.weight"], state[f"{x}.head.weight"] = theirs[f"{L}.norm.weight"], \
        theirs["lm_head.weight"]
    for i in range(2):
        o, t = f"{x}.decoder.layers.{i}", f"{L}.layers.{i}"
        for part in ("weight", "bias"):
            state[f"{o}.self_attn.qkv.{part}"] = torch.cat([theirs[f"{t}.self_attn.{n}_proj.{part}"] for n in "qkv"])
        state[f"{o}.self_attn.out.weight"] = theirs[f"{t}.self_attn.o_proj.weight"]
        state[f"{o}.self_attn_norm.weight"] = theirs[f"{t}.input_layernorm.weight"]
        state[f"{o}.ffn_norm.weight"] = theirs[f"{t}.post_attention_layernorm.weight"]
        state[f"{o}.ffn.up.weight"] = torch.cat([theirs[f"{t}.mlp.gate_proj.weight"], theirs[f"{t}.mlp.up_proj.weight"]])
        state[f"{o}.ffn.down.weight"] = theirs[f"{t}.mlp.down_proj.weight"]
    model.load_state_dict(state)
    return model, reference


def _prompt(seed: int, length: int, start: int):
    """Two prompts, each holding one picture's 9 image tokens between a vision start and end token."""
    ids = torch.randint(3, 80, (2, length), generator=torch.Generator().manual_seed(seed))
    ids[:, start], ids[:, start + 1:start + 10], ids[:, start + 10] = 87, 89, 88
    return ids


def test_qwen2_5_vl_is_its_vision_tower_connected_to_a_text_model_of_mrope_and_generates_as_it_does():
    """Hugging Face's ``Qwen2_5_VLForConditionalGeneration`` and the spec: logits over a plain and a right-padded
    prompt holding a picture (M-RoPE: the picture's 9 vectors at one position, their rows and columns added), and
    greedy generation after a left-padded prompt, cached and not, token for token as ``generate``."""
    from tfspec.run.decoding import Continuation, sample
    model, reference = _qwen_vl()
    pixels = torch.randn(2, 3, 12, 12, generator=torch.Generator().manual_seed(1))
    theirs_pictures = {"pixel_values": torch.cat([qwen_patches(p, 2, 2) for p in pixels]),
                       "image_grid_thw": torch.tensor([[1, 6, 6]] * 2)}
    ids = _prompt(2, 20, 3)
    for padded in (False, True):
        mask = torch.ones_like(ids)
        mask[1, -3:] = 0 if padded else 1
        with torch.no_grad():
            expected = reference(input_ids=ids, attention_mask=mask, mm_token_type_ids=(ids == 89).int(),
                                 **theirs_pictures).logits
            ours = model(text=ids, text_padding_mask=mask == 0, vision=pixels)
        assert_close(ours[mask.bool()], expected[mask.bool()], FLOAT32)
    prompt = _prompt(7, 18, 4)
    mask = torch.ones_like(prompt)
    mask[1, :3] = 0
    with torch.no_grad():
        out = reference.generate(prompt, attention_mask=mask, mm_token_type_ids=(prompt == 89).int(),
                                 **theirs_pictures, max_new_tokens=8, min_new_tokens=8, do_sample=False,
                                 pad_token_id=0, eos_token_id=None)
    expected = out[:, prompt.shape[1]:].tolist()
    assert len({t for row in expected for t in row}) >= 4  # a real continuation
    for use_cache in (True, False):
        steps = Continuation.of(model, vision=pixels, prompt_padding_mask=mask == 0, use_cache=use_cache)
        assert sample(steps, prompt, max_new=8) == expected


@pytest.mark.parametrize("first, second", [((2, 2), (3, 3)), ((2, 3), (3, 2)), ((1, 4), (4, 1))])
def test_mrope_numbers_a_prompt_of_pictures_as_hugging_face_does(first, second):
    """Two pictures (``first`` and ``second`` rows × columns of vectors; square, wide or tall) among tokens, one row
    left-padded: the position ids and the three positions M-RoPE turns by, against Hugging Face's
    ``get_rope_index`` (a picture advances the count by its longer side)."""
    from tfspec.nn.model import picture_marks
    model, reference = _qwen_vl()
    text = model.towers["text"]
    ids = torch.randint(3, 80, (2, 24), generator=torch.Generator().manual_seed(3))
    a, b = first[0] * first[1], second[0] * second[1]
    ids[:, 3:3 + a], ids[:, 5 + a:5 + a + b] = 89, 89
    mask = torch.ones_like(ids)
    mask[1, :2] = 0
    ids[1, :2] = 0
    grids = torch.tensor([[1, 2 * first[0], 2 * first[1]], [1, 2 * second[0], 2 * second[1]]] * 2)
    expected, _ = reference.model.get_rope_index(ids, (ids == 89).int(), grids, attention_mask=mask)
    marks = picture_marks(ids == 89, torch.tensor([first[1], second[1]] * 2))
    counted = ((mask.cumsum(dim=1) - 1).clamp(min=0))
    inputs = {"picture_ids": marks["ids"], "picture_rows": marks["rows"], "picture_columns": marks["columns"]}
    positions = text.numbered("decoder", counted, inputs)
    real = mask.bool()
    assert torch.equal(positions[real], expected[0][real])
    assert torch.equal((positions + marks["rows"])[real], expected[1][real])
    assert torch.equal((positions + marks["columns"])[real], expected[2][real])


def test_mrope_sections_other_than_half_a_head_are_refused_where_written():
    with pytest.raises(tfspec.SpecError) as info:
        tfspec.parse(QWEN_VL.replace("width=2)", "width=3)"), file="qvl.tfs")
    assert "mrope's sections turn 5 frequencies (1 + 1 + 3); a head of 8 dimensions has 4" in str(info.value)
    assert "qvl.tfs:18:14" in str(info.value)


def test_pictures_side_by_side_are_told_apart_by_their_counts():
    """Two pictures' image tokens with no token between them (2 × 3 then 3 × 2 vectors; Hugging Face's
    ``get_rope_index`` reads such a run as one picture, so its processor never writes one): with each picture's
    count of vectors, each is numbered on its own grid, by the rule written here."""
    from tfspec.nn.model import picture_marks
    model, _ = _qwen_vl()
    ids = torch.randint(3, 80, (1, 20), generator=torch.Generator().manual_seed(4))
    ids[:, 4:16] = 89
    marks = picture_marks(ids == 89, torch.tensor([3, 2]), torch.tensor([6, 6]))
    assert marks["ids"][0].tolist() == [0] * 4 + [1] * 6 + [2] * 6 + [0] * 4
    assert marks["rows"][0, 4:16].tolist() == [0, 0, 0, 1, 1, 1] + [0, 0, 1, 1, 2, 2]
    assert marks["columns"][0, 4:16].tolist() == [0, 1, 2, 0, 1, 2] + [0, 1, 0, 1, 0, 1]
    inputs = {"picture_ids": marks["ids"], "picture_rows": marks["rows"], "picture_columns": marks["columns"]}
    positions = model.towers["text"].numbered("decoder", torch.arange(20)[None], inputs)
    # each picture's vectors at its first position, the count then advanced by its longer side (3)
    assert positions[0].tolist() == [0, 1, 2, 3] + [4] * 6 + [7] * 6 + [10, 11, 12, 13]
    assert picture_marks(ids == 89)["ids"][0, 4:16].tolist() == [1] * 12  # (a run alone: one picture)


def test_a_grid_width_given_by_hand_is_checked():
    """``patch_columns`` is what a tower fills; given by hand, a width of 0 or a wrong shape is a ValueError naming
    it (not a division by zero)."""
    model = tfspec.compile(tfspec.parse(QWEN_VISION.format(tile=4)), seed=0).eval()
    vision = model.towers["vision"]
    pixels = torch.randn(2, 3, 20, 20)
    with pytest.raises(ValueError, match="patch_columns contains 0; a grid of patches is at least 1 wide"):
        vision(pixels, patch_columns=torch.tensor([0, 10]))
    with pytest.raises(ValueError, match=r"patch_columns must be shaped \(batch,\) = \(2,\)"):
        vision(pixels, patch_columns=torch.tensor([10]))
    with torch.no_grad():  # its own width, given, changes nothing
        assert torch.equal(vision(pixels, patch_columns=torch.tensor([10, 10])), vision(pixels))
