"""Hugging Face ``Mistral3ForConditionalGeneration`` (Mistral Small 3.1 and 3.2, ``model_type: mistral3``) <-> a
compiled model of two towers joined by a connector.

Mistral 3 reads a picture with Pixtral's vision encoder: bias-free patches, an RMSNorm on them (``ln_pre``), then
pre-norm layers of bias-free attention turning queries and keys by each patch's row and column (``rotary_2d``:
Pixtral's axial RoPE, the head's frequency ladder dealt alternately to rows and columns) and a gated MLP, with no
final norm. Its projector norms each patch's vector (RMSNorm at the text model's ``rms_norm_eps``), makes each
``spatial_merge_size``² block of patches one vector feature by feature (``torch.nn.functional.unfold``'s order),
maps it back to the vision width (``merging_layer``, no bias), then through ``linear_1``, an activation and
``linear_2`` into the text model's width, in place of the prompt's image tokens (``image_token_index``; the
processor's row breaks and end token between them are ordinary tokens):

- ``tower vision``: Pixtral's encoder (``rotary_2d(side=image // patch)``, each picture turned by its own grid);
- ``tower text``: the language model of ``text_config``, a Mistral's by default, written, loaded and exported by
  its own family, its ``let``s prefixed ``text_``;
- ``connect vision -> text image_token=ID layer=L { norm rmsnorm; pixel_shuffle M channel_major=true; linear;
  linear; activation; linear }``.

Pictures of any size whose sides are whole merged blocks are read as Hugging Face reads them (``image_sizes``; its
rotary table holds ``image_size // patch_size`` patches a side, so it reads none larger); ``image_size`` is the
spec's picture size for what needs one (counts, costs, training). A text model without a sliding window (Mistral
Small 3.1's) is exported
as Llama's configuration, as the Mistral family exports one alone: Mistral 3 builds it with the same tensors and
computes the same.
"""

from __future__ import annotations

from ..weights import GatedMLP, Patches, Projections, Towers
from . import hf_llama
from ..document import Block, Document, Statement, Tower
from ..fields import Field, Fields, Fixed
from .hf_clip import ACTIVATIONS, picture_fields, towers_ignored
from .hf_llava import ONE_LAYER, TIED, connected_config, connected_document
from ..nested import Nested
from ..family import Family
from ..layouts import covering, example

TEXT = Nested("text_config", "text", "text_", "mistral",
              (("model.language_model.", "model."), ("lm_head.", "lm_head.")))
VISION, PROJECTOR = "model.vision_tower", "model.multi_modal_projector"
EPS = 1e-5  # Pixtral's norms', which its configuration does not set


def _grid(config) -> int:
    """The patches of a side of a picture."""
    return config.vision_config.image_size // config.vision_config.patch_size


FIELDS = TEXT.fields(Fields(
    Field("vision_d_model", "vision_config.hidden_size", lambda f: f.vision.embedding.dim),
    Field("vision_heads", "vision_config.num_attention_heads", lambda f: f.vision.attention("encoder").heads),
    Field("vision_layers", "vision_config.num_hidden_layers", lambda f: f.vision.layers("encoder")),
    Field("vision_d_ff", "vision_config.intermediate_size", lambda f: f.vision.feedforward("encoder").d_ff),
    Field("vision_p_attn_dropout", "vision_config.attention_dropout",
          lambda f: f.vision.attention("encoder").dropout),
    Field("vision_rope_theta", "vision_config.rope_parameters.rope_theta",
          lambda f: f.vision.position_option("encoder", "theta")),
    Field("vision_init_std", "vision_config.initializer_range", lambda f: f.vision.init_option("std", 0.02)),
    Field("vision_activation", "vision_config.hidden_act", lambda f: f.vision.feedforward("encoder").activation.name,
          names=hf_llama.ACTIVATIONS, let=False),
    *picture_fields(),
    Field("image_token", "image_token_index", lambda f: f.connector.image_token, let=False),
    Field("feature_layer", "vision_feature_layer", lambda f: f.connector.layer, let=False),
    Field("merge", "spatial_merge_size", lambda f: f.step(1, "factor"), let=False),
    Field("projector_activation", "projector_hidden_act", lambda f: f.step(4, "kind"), names=ACTIVATIONS, let=False),
    Field("projector_bias", "multimodal_projector_bias", lambda f: f.step(3, "bias"), let=False),
    *TIED,
    Fixed("vision_config.model_type", "pixtral", "vision_config of model_type '{value}': tfspec reads Mistral 3's "
          "Pixtral vision encoder (pixtral)"),
    Fixed("vision_config.rope_parameters.rope_type", "axial", "vision_config.rope_parameters.rope_type '{value}': "
          "Pixtral's positions are axial (rotary_2d)", exported=True),
    ONE_LAYER,
    Fixed("spatial_merge_size", True, "spatial_merge_size not dividing the patches' side (vision_config.image_size "
          "// patch_size): the patch merger's blocks would not tile the picture",
          read=lambda c: _grid(c) % c.spatial_merge_size == 0, required="a divisor of the patches' side"),
    ignored={
        **towers_ignored(("vision_config",)),
        "vision_config.head_dim": "hidden_size // num_attention_heads, which Pixtral's configuration sets itself",
        "vision_config.vocab_size": "a text model's, which a vision tower does not have",
    },
))


def document(s, *, padding: bool, head: bool) -> Document:
    """Pixtral's vision encoder, the text model and the projector a Mistral 3 configuration's settings ``s``
    describe."""
    def vision(s) -> Tower:  # Pixtral's encoder
        return Tower("vision", Document.of(
            Block("defaults", Statement("norm", f"rmsnorm(eps={EPS})"),
                  Statement("attn_dropout", s.vision_p_attn_dropout),
                  Statement("init", f"normal(std={s.vision_init_std})")),
            Block("embedding image", Statement("input", f"patches(image={s.image}, patch={s.patch}, "
                                                        f"channels={s.channels}, bias=false)"),
                  Statement("dim", s.vision_d_model), Statement("position", "none"),
                  Statement("norm", f"rmsnorm(eps={EPS})", comment="ln_pre")),
            Block(f"encoder x {s.vision_layers}",
                  Statement("position", f"rotary_2d(side={s.image} // {s.patch}, theta={s.vision_rope_theta})"),
                  Statement("attention", "self", heads=s.vision_heads, bias="false"),
                  Statement("feedforward", d_ff=s.vision_d_ff, activation=s.vision_activation, bias="false"),
                  Statement("final", "none"))))

    def connector(s) -> Block:
        bias = None if s.value("projector_bias") else "false"
        layer = s.value("feature_layer")
        where = "its last layer's output" if layer == -1 else f"the vision tower's hidden_states[{layer}]"
        return Block(f"connect vision -> text image_token={s.image_token} layer={s.feature_layer}",
                     Statement("norm", "rmsnorm", eps="text_eps"),
                     Statement("pixel_shuffle", s.merge, channel_major="true"),
                     Statement("linear", "vision_d_model", bias="false"),
                     Statement("linear", "text_d_model", bias=bias),
                     Statement("activation", s.projector_activation), Statement("linear", "text_d_model", bias=bias),
                     comment=f"each patch's vector at {where}, normed; each {s.merge} × {s.merge} block of patches "
                             "one vector, merged")
    return connected_document(s, TEXT, vision(s), connector(s), padding=padding)


def hf_config(towers) -> dict:
    """The Mistral 3 configuration ``towers`` would be."""
    return connected_config(towers, FIELDS, TEXT, "Mistral 3", "mistral3", "pixtral")[0]


# Pixtral's encoder and the projector: its norm, the patch merger's map and two linear maps
WEIGHTS = Towers({"towers.{vision}.embeddings.{image}.patches": Patches(f"{VISION}.patch_conv"),
                  "towers.{vision}.embeddings.{image}.norm": f"{VISION}.ln_pre",
                  "{steps}.0": f"{PROJECTOR}.norm", "{steps}.2": f"{PROJECTOR}.patch_merger.merging_layer",
                  "{steps}.3": f"{PROJECTOR}.linear_1", "{steps}.5": f"{PROJECTOR}.linear_2"},
                 layers={"towers.{vision}.encoder.layers": (f"{VISION}.transformer.layers", {
                     "self_attn": Projections("attention"), "ffn": GatedMLP("feed_forward"),
                     "self_attn_norm": "attention_norm", "ffn_norm": "ffn_norm"})})


def pictures(config, outputs: dict):
    """Pixtral's processor's pictures (``pixel_values`` padded to the batch's largest, ``image_sizes`` each one's
    height and width) as the spec reads them: each cut to its own size, in order (a list of batches where the
    sizes differ)."""
    pixels, sizes = outputs["pixel_values"], outputs.get("image_sizes")
    if pixels.dim() != 4:
        raise ValueError(f"Mistral 3 reads pixel_values (pictures, channels, height, width); got {tuple(pixels.shape)}")
    if sizes is None:
        return pixels
    if tuple(sizes.shape) != (pixels.shape[0], 2):
        raise ValueError(f"image_sizes {tuple(sizes.shape)} is not each of the {pixels.shape[0]} pictures' height "
                         "and width")
    out = [pixels[i:i + 1, :, :h, :w] for i, (h, w) in enumerate(sizes.tolist())]
    return out if len({tuple(x.shape) for x in out}) > 1 else pixels[:, :, :out[0].shape[2], :out[0].shape[3]]

EXAMPLES = {
    # Pixtral's vision encoder (2-D rotary positions, gated MLPs, RMSNorm), its patches normed, merged in 2 × 2
    # blocks and projected in place of a Mistral's image tokens
    "Mistral3ForConditionalGeneration": dict(
        model_type="mistral3", image_token_index=89, spatial_merge_size=2, tie_word_embeddings=False,
        text_config=example("mistral", head_dim=8, rms_norm_eps=1e-6, sliding_window=6),
        vision_config=dict(model_type="pixtral", hidden_size=32, intermediate_size=40, num_hidden_layers=2,
                           num_attention_heads=4, image_size=16, patch_size=4, num_channels=3, hidden_act="silu",
                           rope_parameters={"rope_theta": 100.0, "rope_type": "axial"})),
}

# every field away from its default: a 3 × 3 merge of a 6 × 6 grid, the input of the last vision layer, a
# biased relu projector, a tied text model
COVERAGE = [dict(model_type="mistral3", image_token_index=5, spatial_merge_size=3, vision_feature_layer=-2,
                 projector_hidden_act="relu", multimodal_projector_bias=True, tie_word_embeddings=False,
                 text_config=covering("mistral", num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                      head_dim=6, sliding_window=16, tie_word_embeddings=False),
                 vision_config=dict(model_type="pixtral", hidden_size=24, intermediate_size=36,
                                    num_hidden_layers=1, num_attention_heads=2, image_size=24, patch_size=4,
                                    num_channels=1, hidden_act="silu", attention_dropout=0.2,
                                    initializer_range=0.04,
                                    rope_parameters={"rope_theta": 500.0, "rope_type": "axial"}))]


MISTRAL3 = Family(
    "Mistral 3", ("mistral3",), {"Mistral3ForConditionalGeneration": {}},
    "Mistral 3's vision-language models (Mistral Small 3.1, 3.2): Pixtral's vision encoder (tower vision: "
    "bias-free patches normed, 2-D rotary positions, gated MLPs, RMSNorm) connected to a text model (tower "
    "text, its text_config's family: Mistral's by default) by an RMSNorm, a patch merger (pixel_shuffle "
    "channel_major=true; linear) and a two-layer projector, in place of the image tokens",
    priority=740, fields=FIELDS, document=document, hf_config=hf_config, rules=WEIGHTS, text=TEXT,
    towers=True, pictures=pictures)
