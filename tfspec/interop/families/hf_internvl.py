"""Hugging Face ``InternVLForConditionalGeneration`` (InternVL 3, ``model_type: internvl``) <-> a compiled model of
two towers joined by a connector.

InternVL (Chen et al. 2024) reads a picture with InternViT: patches with a bias, a class token and learned
positions, pre-norm layers (LayerNorm or RMSNorm, ``norm_type``) whose attention and MLP branches are each scaled
per channel before they join the stream (LayerScale: ``x = x + gain(attention(norm(x)), init=...)``, its
``lambda_1`` and ``lambda_2``), the queries and keys RMS-normed over all heads where ``use_qk_norm``
(``steps=full_qk_norm``), a final LayerNorm unless ``use_mean_pooling``. Its projector reads a layer's patches
(``vision_feature_layer``, the class token dropped), makes each ``1 / downsample_ratio``² block one vector
(``pixel_shuffle``), norms it and maps it through a two-layer MLP to the text model's width, in place of the
prompt's image tokens:

- ``tower vision``: InternViT (the wiring form, for its scaled branches);
- ``tower text``: the language model of ``text_config`` (Qwen2's by default), written, loaded and exported by its
  own family, its ``let``s prefixed ``text_``;
- ``connect vision -> text image_token=ID layer=L drop=first { pixel_shuffle 2; norm layernorm; linear;
  activation; linear }``.
"""

from __future__ import annotations

from ..document import Block, Document, Statement, Tower
from ...ir import nodes as ir
from ..fields import Field, Fields, Fixed, lookup
from .hf_vit import square_side
from .hf_clip import ACTIVATIONS, picture_fields, tower_fields, towers_ignored
from .hf_llava import ONE_LAYER, TIED, connected_config, connected_document
from .hf_bart import PROJECTIONS
from ..weights import One, Patches, Projections, Tensor, Towers
from ..nested import Nested
from ..family import Family
from ..layouts import example

TEXT = Nested("text_config", "text", "text_", "qwen2",
              (("model.language_model.", "model."), ("lm_head.", "lm_head.")))
NORMS = {"layer_norm": "layernorm", "rms_norm": "rmsnorm"}
VISION, PROJECTOR = "model.vision_tower", "model.multi_modal_projector"


def _factor(config) -> int | None:
    """The side of each block of patches made one vector (None where 1 / downsample_ratio is no whole number)."""
    factor = 1 / lookup(config, "downsample_ratio")
    return round(factor) if abs(factor - round(factor)) < 1e-9 and round(factor) >= 1 else None


def _vectors(config) -> int | None:
    """The vectors a picture gives the text model: its patches, in blocks of the pixel shuffle (a configuration, or
    the dict export writes)."""
    side, patch = (square_side(lookup(config, f"vision_config.{key}")) for key in ("image_size", "patch_size"))
    factor = _factor(config)
    return (side // patch // factor) ** 2 if factor and side and patch else None


def _layer_scale(f) -> float:
    """The LayerScale's initial value (its gains' ``init``); refused where the branches are not scaled."""
    gains = [n.choice for n in f.vision.g.of(ir.Norm, stack="encoder", in_block=True)
             if n.choice is not None and n.choice.name == "gain"]
    if not gains:
        raise f.refuse("its vision layers' branches are not scaled per channel (gain(...)), as InternViT's are")
    return gains[0].options.get("init", 1.0)


def _qk_norm(f) -> bool:
    return any(step.name == "full_qk_norm" for step in f.vision.attention("encoder").steps)


FIELDS = TEXT.fields(Fields(
    *tower_fields("vision_", "vision", "vision_config", ACTIVATIONS),
    *picture_fields(),
    Field("vision_bias", "vision_config.attention_bias", lambda f: f.vision.attention("encoder").bias, let=False),
    Field("vision_qk_norm", "vision_config.use_qk_norm", _qk_norm, setting=False),
    Field("vision_norm", "vision_config.norm_type", lambda f: f.vision.node("encoder", ir.Norm).choice.name,
          names=NORMS, let=False),
    Field("vision_layer_scale", "vision_config.layer_scale_init_value", _layer_scale),
    Field("vision_final", "vision_config.use_mean_pooling",
          lambda f: f.vision.stack("encoder").final_norm.name == "none", setting=False),
    Field("image_token", "image_token_id", lambda f: f.connector.image_token, let=False),
    Field("feature_layer", "vision_feature_layer", lambda f: f.connector.layer, let=False),
    Field("factor", "downsample_ratio", lambda f: 1 / f.step(0, "factor"), read=_factor, let=False),
    Field("projector_activation", "projector_hidden_act", lambda f: f.step(3, "kind"), names=ACTIVATIONS, let=False),
    *TIED,
    Fixed("downsample_ratio", True, "downsample_ratio not one over a whole number: the pixel shuffle's blocks "
          "would not be whole patches", read=lambda c: _factor(c) is not None, required="1 / a whole number"),
    Fixed("image_seq_length", True, "image_seq_length other than the vectors a picture gives (its patches in "
          "blocks of 1 / downsample_ratio): the processor's image tokens would not be the connector's vectors",
          read=lambda c: c.image_seq_length == _vectors(c), required="the picture's vectors"),
    ONE_LAYER,
    Fixed("vision_feature_select_strategy", "default", "vision_feature_select_strategy '{value}': the class token "
          "kept beside the patches, which InternVL's pixel shuffle cannot lay in its grid"),
    Fixed("vision_config.use_mean_pooling", True, "use_mean_pooling=false with vision_feature_layer -1: the "
          "projector would read the vision tower's output after its final LayerNorm, and tfspec's connector reads a "
          "layer's before it", read=lambda c: c.vision_config.use_mean_pooling or c.vision_feature_layer != -1,
          required="true, or another vision_feature_layer"),
    Fixed("vision_config.use_absolute_position_embeddings", True, "use_absolute_position_embeddings=false: "
          "InternViT without positions, which tfspec does not read"),
    Fixed("vision_config.use_mask_token", False, "use_mask_token=true: a mask token for pretraining, which tfspec "
          "does not read"),
    Fixed("vision_config.hidden_dropout_prob", 0.0, "hidden_dropout_prob={value}: InternViT's dropout in training, "
          "which tfspec's tower does not apply"),
    Fixed("vision_config.projection_dropout", 0.0, "projection_dropout={value}: InternViT's dropout in training, "
          "which tfspec's tower does not apply"),
    ignored={**towers_ignored(("vision_config",)),
             "vision_config.vocab_size": "a text model's, which a vision tower does not have"},
))


def vision(s) -> Tower:
    """InternViT from a configuration's settings ``s``."""
    norm = f"{s.vision_norm}(eps={s.vision_eps})"
    steps = ", steps=full_qk_norm(eps=1e-06)" if s.value("vision_qk_norm") else ""
    scale = f"init={s.vision_layer_scale}"
    return Tower("vision", Document.of(
        Block("defaults", Statement("norm", norm), Statement("attn_dropout", s.vision_p_attn_dropout),
              Statement("init", f"normal(std={s.vision_init_std})")),
        Block("embedding image",
              Statement("input", f"patches(image={s.image}, patch={s.patch}, channels={s.channels}, "
                                 "class_token=true)"),
              Statement("dim", s.vision_d_model),
              Statement("position", f"learned({s.image} // {s.patch} * ({s.image} // {s.patch}) + 1)")),
        Block(f"encoder x {s.vision_layers}",
              f"x = x + gain(attention(norm(x), heads={s.vision_heads}, bias={s.vision_bias}, out_bias=true{steps}), "
              f"{scale})",
              f"x = x + gain(feedforward(norm(x), d_ff={s.vision_d_ff}, activation={s.vision_activation}), {scale})",
              Statement("final", "none" if s.value("vision_final") else f"layernorm(eps={s.vision_eps})"))))


def document(s, *, padding: bool, head: bool) -> Document:
    """InternViT, the text model and the projector an InternVL configuration's settings ``s`` describe."""
    connector = Block(f"connect vision -> text image_token={s.image_token} layer={s.feature_layer} drop=first",
                      Statement("pixel_shuffle", s.factor), Statement("norm", "layernorm", eps="1e-05"),
                      Statement("linear", "text_d_model"), Statement("activation", s.projector_activation),
                      Statement("linear", "text_d_model"),
                      comment=f"each {s.factor} × {s.factor} block of patches one vector, normed, through an MLP")
    return connected_document(s, TEXT, vision(s), connector, padding=padding)


def hf_config(towers) -> dict:
    """The InternVL configuration ``towers`` would be."""
    config, _ = connected_config(towers, FIELDS, TEXT, "InternVL", "internvl", "internvl_vision")
    return {**config, "image_seq_length": _vectors(config)}


# InternViT (its class token and positions with leading ones), its layers' scales, and the projector
LAYER = {"self_attn": Projections("attention", (*PROJECTIONS[:3], "projection_layer")),
         "self_attn.full_qk_norm.q": "attention.q_norm", "self_attn.full_qk_norm.k": "attention.k_norm",
         "norm": "layernorm_before", "norm_1": "layernorm_after", "gain.weight": Tensor("lambda_1"),
         "gain_1.weight": Tensor("lambda_2"), "ffn.up": "mlp.fc1", "ffn.down": "mlp.fc2"}
EMBEDDING = "towers.{vision}.embeddings.{image}"
WEIGHTS = Towers({f"{EMBEDDING}.patches": Patches(f"{VISION}.embeddings.patch_embeddings.projection"),
                  f"{EMBEDDING}.class_token": One(f"{VISION}.embeddings.cls_token", dims=3),
                  f"{EMBEDDING}.positions.weight": One(f"{VISION}.embeddings.position_embeddings", dims=3),
                  "towers.{vision}.encoder.final_norm": f"{VISION}.layernorm",
                  "{steps}.1": f"{PROJECTOR}.layer_norm", "{steps}.2": f"{PROJECTOR}.linear_1",
                  "{steps}.4": f"{PROJECTOR}.linear_2"},
                 layers={"towers.{vision}.encoder.layers": (f"{VISION}.encoder.layer", LAYER)})

EXAMPLES = {
    # InternViT (class token, learned positions, scaled branches, qk-norm) and its projector in place of Qwen2's
    # image tokens, each 2 × 2 block of patches one vector
    "InternVLForConditionalGeneration": dict(
        model_type="internvl", image_token_id=89, image_seq_length=4, downsample_ratio=0.5, tie_word_embeddings=False,
        text_config=example("qwen2", tie_word_embeddings=False),
        vision_config=dict(hidden_size=24, intermediate_size=40, num_hidden_layers=2, num_attention_heads=4,
                           image_size=[8, 8], patch_size=[2, 2], num_channels=3, use_qk_norm=True,
                           layer_scale_init_value=0.3)),
}

# every field away from its default: RMSNorms, no qk-norm, a final LayerNorm, the input of the last layer read,
# 4 × 4 blocks, a biased attention, a ReLU projector, a tied text model
COVERAGE = [dict(model_type="internvl", image_token_id=5, image_seq_length=4, downsample_ratio=0.25,
                 projector_hidden_act="relu", vision_feature_layer=-2, tie_word_embeddings=True,
                 text_config=dict(model_type="qwen2", vocab_size=91, hidden_size=24, num_hidden_layers=2,
                                  num_attention_heads=2, num_key_value_heads=1, intermediate_size=40,
                                  tie_word_embeddings=True),
                 vision_config=dict(hidden_size=20, intermediate_size=36, num_hidden_layers=2, num_attention_heads=5,
                                    image_size=[16, 16], patch_size=[2, 2], num_channels=1, norm_type="rms_norm",
                                    use_qk_norm=False, use_mean_pooling=False, attention_bias=True,
                                    layer_scale_init_value=0.5, hidden_act="gelu_pytorch_tanh", layer_norm_eps=1e-5,
                                    attention_dropout=0.1, initializer_range=0.04)),
            dict(model_type="internvl", image_token_id=5, image_seq_length=4, tie_word_embeddings=False,
                 text_config=dict(model_type="qwen2", vocab_size=91, hidden_size=24, num_hidden_layers=1,
                                  num_attention_heads=2, num_key_value_heads=2, intermediate_size=40,
                                  tie_word_embeddings=False),
                 vision_config=dict(hidden_size=20, intermediate_size=36, num_hidden_layers=1, num_attention_heads=5,
                                    image_size=[8, 8], patch_size=[2, 2], use_qk_norm=True))]

INTERNVL = Family(
    "InternVL", ("internvl",), {"InternVLForConditionalGeneration": {}},
    "InternVL 3: InternViT (tower vision: a class token, learned positions, pre-norm branches each scaled per "
    "channel, gain(...), optional qk-norm) connected to a text model (tower text, its text_config's family: "
    "Qwen2's by default) by a pixel shuffle, a LayerNorm and a two-layer MLP, in place of the image tokens",
    priority=725, fields=FIELDS, document=document, hf_config=hf_config, rules=WEIGHTS, text=TEXT, towers=True)
