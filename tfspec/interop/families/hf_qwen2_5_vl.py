"""Hugging Face ``Qwen2_5_VLForConditionalGeneration`` (``model_type: qwen2_5_vl``) <-> a compiled model of two
towers joined by a connector.

Qwen2.5-VL (Bai et al. 2025) reads a picture with its own vision transformer: each 14-pixel patch of two identical
frames through a 3-D convolution without a bias (``patches(frames=2, bias=false)``), pre-norm RMSNorm layers of
biased attention turning queries and keys by each patch's row and column (``rotary_2d(frequencies=shared)``) and a
biased SwiGLU, most layers attending within tiles of ``window_size`` pixels (``tiles``) and those of
``fullatt_block_indexes`` over the whole picture (a layer schedule, ``mask=none``), no final norm. Its merger
norms each patch's vector, makes each ``spatial_merge_size``² block one vector (``pixel_shuffle``) and maps it
through a two-layer GELU MLP to the text model's width, in place of the prompt's image tokens. Its text model is
Qwen2's with M-RoPE (``mrope``: ``rope_parameters.mrope_section``'s temporal, height and width frequencies; a
picture's vectors numbered by their place in its grid), read and written by this family:

- ``tower vision``, ``tower text``;
- ``connect vision -> text image_token=ID { norm rmsnorm; pixel_shuffle M; linear; activation gelu; linear }``.

Pictures of any size whose sides are whole merged blocks (its processor resizes each within ``min_pixels`` and
``max_pixels`` to a multiple of 28 pixels; ``image_grid_thw``) are read as Hugging Face reads them: each on its own
grid, for its 2-D positions, its tiles, its merged blocks and M-RoPE's numbering. A batch of pictures of one size
is one tensor; pictures of several sizes a list of such batches, in the order their image tokens stand. The spec
names a picture size for what needs one (``tfspec check``'s counts, ``summary``'s costs, ``verify``, training):
``vision_config.image_size`` where the configuration has it (written back on export), else ``IMAGE`` pixels a side.
Videos are not read (``video_token_id`` is carried back as it was).
"""

from __future__ import annotations

from ..weights import GatedMLP, Patches, Towers
from . import hf_llama
from ..fields import Field, Fields, Fixed, lookup
from .hf_clip import towers_ignored
from .hf_llava import connected_config
from ..document import Block, Document, Statement, Tower
from ..family import Family
from ..nested import Nested

# its text model alone (--tower text): Qwen2's, as its M-RoPE is Qwen2's rotary positions on text without pictures
TEXT_ALONE = Nested("text_config", "text", "text_", "qwen2",
                    (("model.language_model.", "model."), ("lm_head.", "lm_head.")), read_as="qwen2")
IMAGE = 448  # pixels a side of the pictures a spec reads where the configuration says none: 32 × 32 patches of 14
VISION, TEXT, PROJECTOR = "model.visual", "model.language_model.", "model.visual.merger"
SECTIONS = [16, 24, 24]  # Hugging Face's M-RoPE sections where rope_parameters names none
# token ids the processor writes around pictures and videos, which no spec setting holds: written back as they were
CARRIED = ("vision_start_token_id", "vision_end_token_id", "video_token_id")


def _image(config) -> int:
    return getattr(config.vision_config, "image_size", None) or IMAGE


def _sections(config) -> list[int]:
    return list(lookup(config, "text_config.rope_parameters.mrope_section") or SECTIONS)


def _tile(f) -> int | None:
    """The side of the vision tower's tiles, in patches (None where its attention has none)."""
    sizes = [m.options["size"] for a in f.vision.layer_attentions("encoder") for m in a.mask if "size" in m.options]
    return sizes[0] if sizes else None


def _full_layers(f) -> list[int]:
    """The vision layers that attend over the whole picture: those whose attention has no tiles."""
    return [i for i, a in enumerate(f.vision.layer_attentions("encoder")) if not any("size" in m.options
                                                                                   for m in a.mask)]


def _mrope(f) -> list[int] | None:
    options = f.text.attention("decoder").position.options
    return [options[k] for k in ("temporal", "height", "width")] if "temporal" in options else None


def _window_tiles(config) -> bool:
    """Whether ``window_size`` makes whole tiles of merged blocks."""
    vision = config.vision_config
    return vision.window_size % (vision.spatial_merge_size * vision.patch_size) == 0 and vision.window_size > 0


FIELDS = Fields(
    Field("vision_d_model", "vision_config.hidden_size", lambda f: f.vision.embedding.dim),
    Field("vision_heads", "vision_config.num_heads", lambda f: f.vision.attention("encoder").heads),
    Field("vision_layers", "vision_config.depth", lambda f: f.vision.layers("encoder")),
    Field("vision_d_ff", "vision_config.intermediate_size", lambda f: f.vision.feedforward("encoder").d_ff),
    Field("vision_rope_theta", "vision_config.rope_parameters.rope_theta",
          lambda f: f.vision.position_option("encoder", "theta")),
    Field("vision_init_std", "vision_config.initializer_range", lambda f: f.vision.init_option("std", 0.02)),
    Field("vision_activation", "vision_config.hidden_act", lambda f: f.vision.feedforward("encoder").activation.name,
          names=hf_llama.ACTIVATIONS, let=False),
    Field("image", "vision_config.image_size", lambda f: f.vision.input_option("image"), read=_image),
    Field("patch", "vision_config.patch_size", lambda f: f.vision.input_option("patch")),
    Field("channels", "vision_config.in_channels", lambda f: f.vision.input_option("channels")),
    Field("frames", "vision_config.temporal_patch_size", lambda f: f.vision.input_option("frames")),
    Field("window", "vision_config.window_size", lambda f: _tile(f) * f.vision.input_option("patch")
          if _tile(f) else None),
    Field("full_layers", "vision_config.fullatt_block_indexes", _full_layers, setting=False, let=False),
    Field("merge", "vision_config.spatial_merge_size", lambda f: f.step(1, "factor"), let=False),
    Field("text_d_model", "text_config.hidden_size", lambda f: f.text.embedding.dim),
    Field("text_heads", "text_config.num_attention_heads", lambda f: f.text.attention("decoder").heads),
    Field("text_kv_heads", "text_config.num_key_value_heads", lambda f: f.text.attention("decoder").kv_heads),
    Field("text_layers", "text_config.num_hidden_layers", lambda f: f.text.layers("decoder")),
    Field("text_d_ff", "text_config.intermediate_size", lambda f: f.text.feedforward("decoder").d_ff),
    Field("text_vocab", "text_config.vocab_size", lambda f: f.text.embedding.vocab),
    Field("text_rope_theta", "text_config.rope_parameters.rope_theta",
          lambda f: f.text.position_option("decoder", "theta")),
    Field("sections", "text_config.rope_parameters.mrope_section", _mrope, read=_sections, setting=False,
          let=False),
    Field("text_eps", "text_config.rms_norm_eps", lambda f: f.text.norm_option("decoder", "eps", 1e-6)),
    Field("text_p_attn_dropout", "text_config.attention_dropout", lambda f: f.text.attention("decoder").dropout),
    Field("text_init_std", "text_config.initializer_range", lambda f: f.text.init_option("std", 0.02)),
    Field("text_activation", "text_config.hidden_act", lambda f: f.text.feedforward("decoder").activation.name,
          names=hf_llama.ACTIVATIONS, let=False),
    Field("image_token", "image_token_id", lambda f: f.connector.image_token, let=False),
    Field("tied", "tie_word_embeddings", lambda f: f.text.tied, setting=False, let=False),
    Fixed("vision_config.out_hidden_size", True, "vision_config.out_hidden_size other than text_config.hidden_size: "
          "the merger's vectors would not be the text model's width",
          read=lambda c: c.vision_config.out_hidden_size == c.text_config.hidden_size,
          required="text_config.hidden_size"),
    Fixed("vision_config.window_size", True, "window_size not a multiple of spatial_merge_size × patch_size: its "
          "windows would not be whole blocks of merged patches", read=_window_tiles,
          required="a multiple of spatial_merge_size × patch_size"),
    Fixed("vision_config.image_size", True, "image_size not a multiple of spatial_merge_size × patch_size: the merger "
          "would not tile the picture's patches", required="a multiple of spatial_merge_size × patch_size",
          read=lambda c: _image(c) % (c.vision_config.spatial_merge_size * c.vision_config.patch_size) == 0),
    Fixed("text_config.use_sliding_window", False, "use_sliding_window=true: tfspec reads Qwen2.5-VL's text model "
          "without its sliding windows"),
    Fixed("text_config.rope_parameters.rope_type", "default", "text_config.rope_parameters.rope_type '{value}': "
          "tfspec's M-RoPE turns unscaled frequencies"),
    ignored={
        **towers_ignored(("vision_config", "text_config")),
        "vision_config.tokens_per_second": "spaces a video's frames in time; tfspec reads pictures",
        "vision_config.rope_parameters.rope_type": "axial, how Hugging Face names the vision tower's positions",
        "text_config.max_position_embeddings": "a context length, which no tensor holds",
        "text_config.sliding_window": "read only with use_sliding_window",
        "text_config.max_window_layers": "read only with use_sliding_window",
        "text_config.layer_types": "full attention in every layer without use_sliding_window",
        "text_config.rope_parameters.type": "the legacy name of M-RoPE's scaling, 'mrope'",
        "text_config.pad_token_id": "a token id, which the tokenizer reads",
        "text_config.bos_token_id": "a token id, which the tokenizer reads",
        "text_config.eos_token_id": "a token id, which generation reads",
        **{key: "a token id the processor writes around pictures and videos" for key in CARRIED},
    },
)


def vision_tower(s, norm: str, attention: Statement, feedforward: Statement, *layers: str) -> Document:
    """A Qwen vision transformer from the settings ``s``: patches of frames without a bias, pre-norm layers of
    ``norm`` turning queries and keys by each patch's row and column, ``attention`` and ``feedforward`` (and
    ``layers`` sections), no final norm."""
    side = f"{s.image} // {s.patch}"
    return Document.of(
        Block("defaults", Statement("norm", norm), Statement("init", f"normal(std={s.vision_init_std})")),
        Block("embedding image", Statement("input", f"patches(image={s.image}, patch={s.patch}, channels={s.channels}, "
                                                    f"frames={s.frames}, bias=false)"),
              Statement("dim", s.vision_d_model), Statement("position", "none")),
        Block(f"encoder x {s.vision_layers}",
              Statement("position", f"rotary_2d(side={side}, theta={s.vision_rope_theta}, frequencies=shared)"),
              attention, feedforward, Statement("final", "none"), *layers))


def connected(s, vision: Document, norm: str, *, padding: bool) -> Document:
    """The ``vision`` tower connected by the merger (each patch's vector normed by ``norm``, merged, through a
    two-layer GELU MLP) to Qwen2's text model with M-RoPE, from the settings ``s``."""
    temporal, height, width = s.value("sections")
    text_norm = f"rmsnorm(eps={s.text_eps})"
    text = Document.of(
        Block("defaults", Statement("norm", text_norm), Statement("attn_dropout", s.text_p_attn_dropout),
              Statement("init", f"normal(std={s.text_init_std})")),
        Block("embedding tokens", Statement("vocab", s.text_vocab), Statement("dim", s.text_d_model),
              Statement("position", "none")),
        Block(f"decoder x {s.text_layers}",
              Statement("position", f"mrope(theta={s.text_rope_theta}, temporal={temporal}, height={height}, "
                                    f"width={width})"),
              Statement("attention", "self", heads=s.text_heads, kv_heads=s.text_kv_heads,
                        mask="causal + padding" if padding else "causal", bias="true", out_bias="false"),
              Statement("feedforward", d_ff=s.text_d_ff, activation=s.text_activation, bias="false"),
              Statement("final", text_norm)),
        tail=(Statement("head", "tied(tokens)") if s.value("tied") else
              Statement("head", "linear(text_vocab)", bias="false"),))
    merger = Block(f"connect vision -> text image_token={s.image_token}", Statement("norm", norm, eps="1e-06"),
                   Statement("pixel_shuffle", s.merge), Statement("linear", f"{s.merge} * {s.merge} * vision_d_model"),
                   Statement("activation", "gelu"), Statement("linear", "text_d_model"))
    return Document.of(Block("defaults", Statement("residual", "pre")), tail=(
        Tower("vision", vision), Tower("text", text),
        f"# each patch's vector normed, each {s.merge} × {s.merge} block one vector, through the merger's MLP\n"
        + merger.text()))


def document(s, *, padding: bool, head: bool) -> Document:
    """The vision tower, the text model and the merger a Qwen2.5-VL configuration's settings ``s`` describe (the
    text model with its head: the family's one class has it): RMSNorms, tiles of ``window_size`` pixels but in
    ``fullatt_block_indexes``, a gated MLP."""
    full = s.value("full_layers") or []
    vision = vision_tower(
        s, "rmsnorm(eps=1e-06)",
        Statement("attention", "self", heads=s.vision_heads,
                  mask=f"tiles(side={s.image} // {s.patch}, size={s.window} // {s.patch})"),
        Statement("feedforward", d_ff=s.vision_d_ff, activation=s.vision_activation),
        *([f"layers {' '.join(map(str, full))} {{ self_attn mask=none }}  # the whole picture"] if full else []))
    return connected(s, vision, "rmsnorm", padding=padding)


def hf_config(towers, fields: Fields = FIELDS, family: str = "Qwen2.5-VL", model_type: str = "qwen2_5_vl",
              out: str = "out_hidden_size") -> dict:
    """The Qwen2.5-VL configuration ``towers`` would be (another Qwen vision-language family's: its ``fields``,
    ``model_type``, and ``out``, its vision configuration's name of the merger's width)."""
    config, facts = connected_config(towers, fields, None, family, model_type, f"{model_type}_vision")
    vision = {**config["vision_config"], out: facts.text.embedding.dim}
    vision["rope_parameters"] = {"rope_type": "axial", **vision.get("rope_parameters", {})}
    text = {"model_type": f"{model_type}_text", **config["text_config"]}
    text["rope_parameters"] = {"rope_type": "default", **text.get("rope_parameters", {})}
    return {**config, "vision_config": vision, "text_config": text}


# a vision layer's tensors
LAYER = {"self_attn.qkv": "attn.qkv", "self_attn.out": "attn.proj", "self_attn_norm": "norm1", "ffn_norm": "norm2",
         "ffn": GatedMLP("mlp")}


def weights(layer: dict) -> Towers:
    """The table of its vision transformer of layers as ``layer`` says, its merger, and its text model by Llama's
    table."""
    return Towers({"towers.{vision}.embeddings.{image}.patches": Patches(f"{VISION}.patch_embed.proj", frames=True),
                   "{steps}.0": f"{PROJECTOR}.ln_q", "{steps}.2": f"{PROJECTOR}.mlp.0",
                   "{steps}.4": f"{PROJECTOR}.mlp.2"},
                  layers={"towers.{vision}.encoder.layers": (f"{VISION}.blocks", layer)},
                  models={"{text}": (TEXT, hf_llama.WEIGHTS)})


WEIGHTS = weights(LAYER)


def pictures(config, outputs: dict) -> list:
    """Qwen2.5-VL's processor's pictures (``pixel_values``: each picture's patches, each merged block's
    consecutive, a patch's pixels in (channel, frame, row, column) order; ``image_grid_thw``: each picture's frames,
    rows and columns of patches) as the spec reads them: each picture ``(1, channels, height, width)``, its first
    frame (a still picture's frames are one picture), in order. Videos (``pixel_values_videos``) are not read."""
    import torch

    vision = config.vision_config
    pixels, grids = outputs["pixel_values"], outputs.get("image_grid_thw")
    if grids is None:
        raise ValueError("Qwen2.5-VL's pixel_values come with their image_grid_thw (each picture's grid of patches)")
    c, t, p, m = vision.in_channels, vision.temporal_patch_size, vision.patch_size, vision.spatial_merge_size
    if pixels.dim() != 2 or pixels.shape[1] != c * t * p * p or int(grids.prod(dim=1).sum()) != pixels.shape[0]:
        raise ValueError(f"pixel_values {tuple(pixels.shape)} are not the patches of image_grid_thw "
                         f"{grids.tolist()}, {c}·{t}·{p}·{p} values each")
    out, start = [], 0
    for frames, rows, columns in grids.tolist():
        if frames != 1:
            raise ValueError(f"a picture of {frames} frames of patches is a video, which tfspec does not read")
        patches = pixels[start:start + rows * columns]
        start += rows * columns
        x = patches.reshape(rows // m, columns // m, m, m, c, t, p, p)[..., 0, :, :]  # (its first frame)
        out.append(x.permute(4, 0, 2, 5, 1, 3, 6).reshape(1, c, rows * p, columns * p))
    return out if len({tuple(x.shape) for x in out}) > 1 else torch.cat(out)


EXAMPLES = {
    # its vision transformer (two frames' patches, 2-D rotary positions, tiles of 8 pixels but in its layer 1), its
    # merger in place of the image tokens of Qwen2's text model with M-RoPE; square pictures of vision_config's
    # image_size (Hugging Face's reads any size)
    "Qwen2_5_VLForConditionalGeneration": dict(
        model_type="qwen2_5_vl", image_token_id=89, vision_start_token_id=87, vision_end_token_id=88,
        video_token_id=86, tie_word_embeddings=False,
        vision_config=dict(depth=2, hidden_size=32, intermediate_size=40, num_heads=4, in_channels=3, patch_size=2,
                           spatial_merge_size=2, temporal_patch_size=2, window_size=8, out_hidden_size=32,
                           fullatt_block_indexes=[1], image_size=12),
        text_config=dict(vocab_size=90, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, intermediate_size=48,
                         rope_parameters={"rope_type": "default", "rope_theta": 1000.0, "mrope_section": [1, 1, 2]})),
}

# every field away from its default: one-frame patches of 3 pixels, merged 3 × 3, tiles of 9 pixels, two full
# layers, a tied text model of GELU with its own M-RoPE sections
COVERAGE = [dict(model_type="qwen2_5_vl", image_token_id=5, tie_word_embeddings=True,
                 vision_config=dict(depth=3, hidden_size=24, intermediate_size=36, num_heads=2,
                                    in_channels=1, patch_size=3, spatial_merge_size=3,
                                    temporal_patch_size=1, window_size=9, out_hidden_size=24,
                                    fullatt_block_indexes=[0, 2], hidden_act="gelu",
                                    initializer_range=0.04, image_size=18,
                                    rope_parameters={"rope_type": "axial", "rope_theta": 500.0}),
                 text_config=dict(vocab_size=91, hidden_size=24, num_hidden_layers=2, num_attention_heads=2,
                                  num_key_value_heads=1, intermediate_size=40, rms_norm_eps=1e-6,
                                  attention_dropout=0.1, initializer_range=0.03, hidden_act="gelu",
                                  rope_parameters={"rope_type": "default", "rope_theta": 5000.0,
                                                   "mrope_section": [2, 2, 2]}))]


QWEN2_5_VL = Family(
    "Qwen2.5-VL", ("qwen2_5_vl",), {"Qwen2_5_VLForConditionalGeneration": {}},
    "Qwen2.5-VL: its vision transformer (tower vision: two identical frames' patches, 2-D rotary positions, "
    "tiles of window_size pixels but in fullatt_block_indexes, a biased SwiGLU, RMSNorm) connected by its "
    "merger (norm rmsnorm; pixel_shuffle; a two-layer GELU MLP) to Qwen2's text model with M-RoPE (tower "
    "text: position mrope(temporal, height, width), a picture's vectors numbered by their place in its grid)",
    priority=750, fields=FIELDS, document=document, hf_config=hf_config, rules=WEIGHTS, towers=True,
    carried=CARRIED, pictures=pictures, alone=TEXT_ALONE)
