"""Hugging Face ``LlavaForConditionalGeneration`` <-> a compiled model of two towers joined by a connector.

LLaVA (Liu et al. 2023; LLaVA-1.5's projector) reads a picture with CLIP's vision tower, takes each patch's vector
from one of its layers (``vision_feature_layer``: Hugging Face's ``hidden_states[-2]`` by default, the input of
its last layer), drops the class token (``vision_feature_select_strategy`` "default"; "full" keeps it), maps the
rest through a two-layer MLP (``linear_1``, an activation, ``linear_2``) to the text model's width and puts them
in place of the prompt's image tokens (``image_token_index``) among its token embeddings:

- ``tower vision``: CLIP's vision tower as CLIP's family writes it, without a projection;
- ``tower text``: the language model of ``text_config``, written, loaded and exported by its own family (a Llama's,
  a Mistral's, a Qwen2's ...; ``tfspec.interop.nested``), its ``let``s prefixed ``text_``;
- ``connect vision -> text image_token=ID layer=L drop=first { linear; activation; linear }``.
"""

from __future__ import annotations

from ...front import schema as S
from ..facts import Facts, OtherKind
from ..fields import Field, Fields, Fixed
from .hf_clip import (ACTIVATIONS, encoder_layers, picture_fields, square_pictures, tower_fields, towers_ignored,
                      vision_top, vision_tower)
from ..document import Block, Document, Statement, Tower
from ..weights import Towers
from ..nested import Nested
from ..family import Family
from ..layouts import covering, covering_vision, example

TEXT = Nested("text_config", "text", "text_", "llama",
              (("model.language_model.", "model."), ("lm_head.", "lm_head.")))
PROJECTOR = "model.multi_modal_projector"


class ConnectedFacts:
    """A model of two towers joined by one connector, as a vision-language family's ``hf_config`` asks for it:
    ``vision`` and ``text``, the ``Facts`` of the connector's source and target; ``connector``, its declaration."""

    def __init__(self, towers, family: str):
        if not isinstance(towers, S.Towers):
            raise OtherKind(f"not a {family} model: '{towers.name}' is one model, not towers")
        if len(towers.connectors) != 1 or towers.contrastive is not None or len(towers.towers) != 2:
            raise OtherKind(f"not a {family} model: '{towers.name}' is not two towers joined by one connector")
        self.towers, self.family = towers, family
        self.connector = towers.connectors[0]
        self.vision = Facts(towers.tower(self.connector.source), family)
        self.text = Facts(towers.tower(self.connector.target), family)

    theirs = staticmethod(Facts.theirs)

    def refuse(self, reason: str):
        """A refusal naming the family, as ``Facts.refuse`` (what a field's fact or a ``Requires`` raises)."""
        return self.text.refuse(reason)

    def step(self, index: int, option: str):
        """An option of the connector's step ``index`` (None where it has no such step or option)."""
        steps = self.connector.steps
        return steps[index].options.get(option) if index < len(steps) else None


# the whole model's head is its text model's: tied as text_config says (exported from the text tower's head)
TIED = (Field("tied", "tie_word_embeddings", lambda f: f.text.tied, setting=False),
        Fixed("tie_word_embeddings", True, "tie_word_embeddings other than text_config.tie_word_embeddings: the head "
              "is the text model's", read=lambda c: bool(c.tie_word_embeddings) == bool(
                  c.text_config.tie_word_embeddings), required="text_config.tie_word_embeddings"))


# a connector reads one layer of the vision tower (LLaVA's, Mistral 3's, InternVL's vision_feature_layer)
ONE_LAYER = Fixed("vision_feature_layer", True, "vision_feature_layer naming several layers: their vectors side by "
                  "side; tfspec's connector reads one layer's", read=lambda c: isinstance(c.vision_feature_layer, int),
                  required="one layer")


def _patches(config) -> int:
    """The vectors a picture gives the text model: its patches, and its class token where kept."""
    vision = config.vision_config
    return (vision.image_size // vision.patch_size) ** 2 + (config.vision_feature_select_strategy == "full")


FIELDS = TEXT.fields(
    Fields(
    *tower_fields("vision_", "vision", "vision_config"),
    *picture_fields(),
    Field("image_token", "image_token_index", lambda f: f.connector.image_token, let=False),
    Field("feature_layer", "vision_feature_layer", lambda f: f.connector.layer, let=False),
    Field("drop", "vision_feature_select_strategy", lambda f: f.connector.drop, let=False,
          names={"default": "first", "full": "none"}),
    Field("projector_activation", "projector_hidden_act", lambda f: f.step(1, "kind"), names=ACTIVATIONS, let=False),
    Field("projector_bias", "multimodal_projector_bias", lambda f: f.step(0, "bias"), let=False),
    *TIED,
    ONE_LAYER,
    Fixed("vision_config.model_type", "clip_vision_model", "vision_config of model_type '{value}': tfspec reads "
          "LLaVA's CLIP vision tower (clip_vision_model)"),
    Fixed("image_seq_length", True, "image_seq_length other than the vectors a picture gives (its patches, and its "
          "class token where vision_feature_select_strategy is 'full'): the processor's image tokens would not be "
          "the connector's vectors", read=lambda c: c.image_seq_length == _patches(c), required="the picture's vectors"),
    ignored={
        **towers_ignored(("vision_config",)),
        "vision_config.projection_dim": "CLIP's projection, which LLaVA's vision tower does not have",
        "vision_config.vocab_size": "a text model's, which a vision tower does not have",
        "vision_config.initializer_factor": "scales Hugging Face's initialisation; imported weights are the "
                                            "checkpoint's",
    },
), )


def connected_document(s, text: Nested, vision: Tower, connector: Block, *, padding: bool) -> Document:
    """The spec of a vision tower (``vision``) connected (``connector``) to a text model read through its own family
    (``text``), from a configuration's settings ``s`` (``Fields.write``'s)."""
    square_pictures(s.config)
    return Document.of(Block("defaults", Statement("residual", "pre")), tail=(
        vision, text.tower_text(s.writer, s.config, padding=padding), connector))


def document(s, *, padding: bool, head: bool) -> Document:
    """The vision tower, the text model and the projector a LLaVA configuration's settings ``s`` describe."""
    bias = None if s.value("projector_bias") else "false"
    connector = Block(f"connect vision -> text image_token={s.image_token} layer={s.feature_layer} drop={s.drop}",
                      Statement("linear", "text_d_model", bias=bias), Statement("activation", s.projector_activation),
                      Statement("linear", "text_d_model", bias=bias), comment=_reading(s))
    return connected_document(s, TEXT, vision_tower(s), connector, padding=padding)


def _reading(s) -> str:
    """What the connector reads of a picture, in words."""
    layer = s.value("feature_layer")
    where = {-1: "its last layer's output (before the final norm)", -2: "the input of its last layer"}.get(
        layer, f"the vision tower's hidden_states[{layer}]")
    return f"each patch's vector{' and the class token' if s.drop == 'none' else ''}, at {where}"


def connected_config(towers, fields, text: Nested | None, family: str, model_type: str, vision_type: str
                     ) -> tuple[dict, ConnectedFacts]:
    """The configuration of a vision-language family (``family``'s, of ``model_type``) that ``towers`` would be: its
    ``fields`` read from them, its vision tower's of ``vision_type``, the text model's written by its own family
    (``text``; None: the family's fields write it); with the towers' facts, for what a family adds."""
    facts = ConnectedFacts(towers, family)
    if facts.vision.spec.embeddings[0].input is None or facts.text.spec.head is None:
        raise facts.text.refuse(f"{family} reads pictures into a text model with an LM head")
    own = fields.config(facts)
    config = {"model_type": model_type, **own, "vision_config": {"model_type": vision_type, **own["vision_config"]}}
    if text is not None:
        config["text_config"] = text.config(facts.text.spec)
    return config, facts


def hf_config(towers) -> dict:
    """The LLaVA configuration ``towers`` would be."""
    config, facts = connected_config(towers, FIELDS, TEXT, "LLaVA", "llava", "clip_vision_model")
    vectors = (facts.vision.input_option("image") // facts.vision.input_option("patch")) ** 2 + \
        (facts.connector.drop == "none")
    return {**config, "image_seq_length": vectors}


def vision_prefix(names=None, vision: str = "CLIPVision", within: str = "model.vision_tower") -> str:
    """Where a vision-language model holds its vision transformer: ``within`` itself (transformers 5.2x's
    ``CLIPVisionModel`` and ``SiglipVisionModel``) or its ``vision_model`` (earlier ones); ``names``: a state
    dict's keys to read it from, else the installed transformers' class (``vision``: ``CLIPVision``,
    ``SiglipVision``), built on the meta device."""
    if names is None:
        import torch
        import transformers

        with torch.device("meta"):
            tiny = getattr(transformers, f"{vision}Model")(getattr(transformers, f"{vision}Config")(
                hidden_size=4, intermediate_size=4, num_hidden_layers=1, num_attention_heads=1, image_size=4,
                patch_size=2))
        names = [f"{within}.{k}" for k in tiny.state_dict()]
    return f"{within}.vision_model" if any(n.startswith(f"{within}.vision_model.") for n in names) else within


# CLIP's vision tower (where this transformers holds it) and the projector's two linear maps
WEIGHTS = Towers({**vision_top("{vision_model}"), "{steps}.0": f"{PROJECTOR}.linear_1",
                  "{steps}.2": f"{PROJECTOR}.linear_2"},
                 layers=encoder_layers("vision", "{vision_model}"),
                 paths=lambda state: {"vision_model": vision_prefix(state or None)})


EXAMPLES = {
    # CLIP's vision tower, its patches at the input of its last layer through a two-layer projector in place of a
    # Llama's image tokens
    "LlavaForConditionalGeneration": dict(
        model_type="llava", image_token_index=89, image_seq_length=9,
        text_config=example("llama"),
        vision_config=dict(hidden_size=24, intermediate_size=40, num_hidden_layers=3, num_attention_heads=4,
                           image_size=12, patch_size=4, num_channels=3, layer_norm_eps=1e-6)),
}

# every field away from its default: the class token kept, the last layer's output read, a bias-free projector,
# a tied Qwen2 text model (any family's text_config: that family's fields are its own table's)
COVERAGE = [dict(model_type="llava", image_token_index=3, image_seq_length=17, projector_hidden_act="relu",
                 vision_feature_select_strategy="full", vision_feature_layer=-1, multimodal_projector_bias=False,
                 tie_word_embeddings=True,
                 text_config=covering("qwen2", num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                      tie_word_embeddings=True),
                 vision_config=covering_vision(image_size=16, patch_size=4, hidden_act="gelu", initializer_range=0.04))]


LLAVA = Family(
    "LLaVA", ("llava",), {"LlavaForConditionalGeneration": {}},
    "LLaVA: CLIP's vision tower (tower vision) connected to a text model (tower text, its text_config's "
    "family: Llama's by default) by a two-layer projector (connect vision -> text { linear; activation; "
    "linear }) that reads each patch's vector at vision_feature_layer, less the class token, and puts it in "
    "place of an image token",
    priority=710, fields=FIELDS, document=document, hf_config=hf_config, rules=WEIGHTS, text=TEXT,
    towers=True)
