"""Hugging Face ``Qwen2VLForConditionalGeneration`` (``model_type: qwen2_vl``) <-> a compiled model of two towers
joined by a connector: Qwen2.5-VL's (``hf_qwen2_5_vl``) by its differences.

Qwen2-VL's vision transformer is the one Qwen2.5-VL's grew from: LayerNorms (with a bias) where Qwen2.5-VL has
RMSNorms, every layer attending over the whole picture (no tiles), and a plain MLP (``fc1`` -> ``hidden_act``,
quick GELU -> ``fc2``) ``mlp_ratio`` times its width ``embed_dim``; its merger norms each patch by a LayerNorm.
Its configuration names the merger's width (the text model's) ``vision_config.hidden_size``. The text model with
M-RoPE, the pictures of any size and the processor's outputs are Qwen2.5-VL's.
"""

from __future__ import annotations

from . import hf_qwen2_5_vl
from .hf_clip import ACTIVATIONS
from ..document import Document, Statement
from ..fields import Field, Fixed

EXAMPLES = {
    # Qwen2.5-VL's shape with Qwen2-VL's vision layers: LayerNorms, a plain MLP twice as wide, the whole picture
    "Qwen2VLForConditionalGeneration": dict(
        model_type="qwen2_vl", image_token_id=89, vision_start_token_id=87, vision_end_token_id=88,
        video_token_id=86, tie_word_embeddings=False,
        vision_config=dict(depth=2, embed_dim=32, hidden_size=32, mlp_ratio=2, num_heads=4, in_channels=3,
                           patch_size=2, spatial_merge_size=2, temporal_patch_size=2, image_size=12),
        text_config=dict(vocab_size=90, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, intermediate_size=48,
                         rope_parameters={"rope_type": "default", "rope_theta": 1000.0, "mrope_section": [1, 1, 2]})),
}

# every field away from its default: one-frame patches of 3 pixels merged 3 × 3, an MLP three times as wide of
# GELU, a tied text model with its own M-RoPE sections (Qwen2.5-VL's)
COVERAGE = [dict(model_type="qwen2_vl", image_token_id=5, tie_word_embeddings=True,
                 vision_config=dict(depth=3, embed_dim=24, hidden_size=24, mlp_ratio=3, num_heads=2, in_channels=1,
                                    patch_size=3, spatial_merge_size=3, temporal_patch_size=1, hidden_act="gelu",
                                    initializer_range=0.04, image_size=18,
                                    rope_parameters={"rope_type": "axial", "rope_theta": 500.0}),
                 text_config=hf_qwen2_5_vl.COVERAGE[0]["text_config"])]  # (Qwen2.5-VL's text model)


def _mlp_ratio(f) -> int:
    """The vision MLP's width over the tower's, a whole number as Qwen2-VL's ``mlp_ratio`` is."""
    d_ff, width = f.vision.feedforward("encoder").d_ff, f.vision.embedding.dim
    if d_ff % width:
        raise f.refuse(f"its vision feed-forward is {d_ff} wide, not a whole multiple of the tower's width {width} "
                       "(mlp_ratio)")
    return d_ff // width


FIELDS = hf_qwen2_5_vl.FIELDS.derive(
    Field("vision_d_model", "vision_config.embed_dim", lambda f: f.vision.embedding.dim),
    Field("vision_mlp_ratio", "vision_config.mlp_ratio", _mlp_ratio),
    Field("vision_activation", "vision_config.hidden_act", lambda f: f.vision.feedforward("encoder").activation.name,
          names=ACTIVATIONS, let=False),
    Fixed("vision_config.hidden_size", True, "vision_config.hidden_size other than text_config.hidden_size: the "
          "merger's vectors would not be the text model's width",
          read=lambda c: c.vision_config.hidden_size == c.text_config.hidden_size, required="text_config.hidden_size"),
    drop={"vision_d_ff", "window", "full_layers", "vision_config.out_hidden_size", "vision_config.window_size"})


def document(s, *, padding: bool, head: bool) -> Document:
    """Qwen2.5-VL's towers with Qwen2-VL's vision layers: LayerNorms, the whole picture, a plain MLP."""
    vision = hf_qwen2_5_vl.vision_tower(
        s, "layernorm(eps=1e-06)", Statement("attention", "self", heads=s.vision_heads),
        Statement("feedforward", d_ff=f"{s.vision_mlp_ratio} * {s.vision_d_model}", activation=s.vision_activation))
    return hf_qwen2_5_vl.connected(s, vision, "layernorm", padding=padding)


def hf_config(towers) -> dict:
    """The Qwen2-VL configuration ``towers`` would be."""
    return hf_qwen2_5_vl.hf_config(towers, FIELDS, "Qwen2-VL", "qwen2_vl", out="hidden_size")


# Qwen2.5-VL's, its layers' MLP fc1 and fc2
WEIGHTS = hf_qwen2_5_vl.weights({**{k: v for k, v in hf_qwen2_5_vl.LAYER.items() if k != "ffn"},
                                 "ffn.up": "mlp.fc1", "ffn.down": "mlp.fc2"})

QWEN2_VL = hf_qwen2_5_vl.QWEN2_5_VL.derive(
    "Qwen2-VL", ("qwen2_vl",), {"Qwen2VLForConditionalGeneration": {}},
    "Qwen2-VL: Qwen2.5-VL's towers but for its vision layers: LayerNorms, each over the whole picture, a plain "
    "MLP (fc1, quick GELU, fc2) mlp_ratio times as wide; its merger's norm a LayerNorm",
    priority=745, fields=FIELDS, document=document, hf_config=hf_config, rules=WEIGHTS)
