"""Hugging Face ``OPTForCausalLM`` / ``OPTModel`` <-> a compiled decoder-only spec.

OPT (Zhang et al. 2022) is a GPT-style decoder: learned positions, ReLU, biased projections, LayerNorm before each
sublayer (after it where ``do_layer_norm_before`` is false, as OPT-350m), a final LayerNorm, the head tied. Its
position table keeps two rows no real token reads -- position p reads row p + 2 -- and a padded batch's positions
count only its real tokens: ``learned(max_len + 2, offset=2, skip_padding=true)``. ``word_embed_proj_dim`` other
than ``hidden_size`` (a projection in and out of a narrower embedding) is not expressed and is refused.
"""

from __future__ import annotations

from ..facts import Facts
from ..fields import Field, Fields, Fixed
from . import hf_llama
from ..mapping import InteropError, Rule, layer_modules, linear_rules, rule
from ..writer import SpecWriter
from .. import layouts

OFFSET = 2  # OPTLearnedPositionalEmbedding's
ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "gelu_new": "gelu_tanh", "silu": "silu"}


FIELDS = Fields(
    Field("d_model", "hidden_size", lambda f: f.embedding.dim),
    Field("heads", "num_attention_heads", lambda f: f.attention("decoder").heads),
    Field("layers", "num_hidden_layers", lambda f: f.layers("decoder")),
    Field("d_ff", "ffn_dim", lambda f: f.feedforward("decoder").d_ff),
    Field("vocab", "vocab_size", lambda f: f.embedding.vocab),
    Field("max_len", "max_position_embeddings", lambda f: f.learned_positions() - OFFSET),
    Field("p_dropout", "dropout", lambda f: f.residual_dropout("decoder")),
    Field("p_attn_dropout", "attention_dropout", lambda f: f.attention("decoder").dropout),
    Field("init_std", "init_std", lambda f: f.init_option("std", 0.02)),
    Field("activation", "activation_function", lambda f: f.feedforward("decoder").activation.name,
          names=ACTIVATIONS),
    Field("bias", "enable_bias", lambda f: f.attention("decoder").bias, let=False),
    Field("pre_norm", "do_layer_norm_before", lambda f: f.norm_placement("decoder") == "pre-norm", let=False),
    Field("tied", "tie_word_embeddings", lambda f: f.tied, let=False),
    # the embedding's width, which export writes (its default, 768, would add projections)
    Field("word_embed_proj_dim", "word_embed_proj_dim", lambda f: f.embedding.dim,
          read=lambda c: c.word_embed_proj_dim, setting=False),
    Fixed("word_embed_proj_dim", None, "word_embed_proj_dim {value} projects a narrower embedding in and out of "
          "the stack; tfspec's embedding is as wide as the stack",
          read=lambda c: c.word_embed_proj_dim if c.word_embed_proj_dim != c.hidden_size else None,
          required="= hidden_size"),
    Fixed("layer_norm_elementwise_affine", True, "layer_norm_elementwise_affine={value}: LayerNorms without "
          "weights are not expressed"),
    Fixed("_remove_final_layer_norm", False, "_remove_final_layer_norm={value} drops the final LayerNorm of a "
          "pre-norm OPT"),
    ignored={"layerdrop": "skips whole layers at random in training (LayerDrop); tfspec trains every layer"},
)


def spec_text(config, *, head: bool = True, padding: bool = True, name: str = "reference",
              heading: tuple[str, ...] = ()) -> str:
    """The tfspec spec an OPT configuration describes: the decoder layout with LayerNorms of eps 1e-5 before each
    sublayer (after it, and none after the stack, where do_layer_norm_before is false), learned positions read
    2 rows on and counting real tokens only, biases as enable_bias says."""
    w = SpecWriter()
    s = FIELDS.write(config, w)
    pre = s.value("pre_norm")
    document = (layouts.decoder(s, norm="layernorm(eps=1e-5)", padding=padding, head=head)
                .change("defaults", "residual", "pre" if pre else "post")
                .change("embedding tokens", "position",
                        f"learned({s.max_len} + {OFFSET}, offset={OFFSET}, skip_padding=true)")
                .change("decoder", "attention", bias=s.bias)
                .change("decoder", "feedforward", bias=s.bias))
    if not pre:
        document = document.drop("decoder", "final")
    return w.text(document.text(name), list(heading))


def hf_config(spec) -> dict:
    """The OPT configuration ``spec`` would be."""
    f = Facts(spec, "OPT")
    f.kind("decoder-only")
    position = f.embedding.position
    if position.options.get("offset") != OFFSET or not position.options.get("skip_padding"):
        raise f.refuse("its learned positions are not OPT's (offset=2, skip_padding=true)")
    if f.feedforward("decoder").bias != f.attention("decoder").bias:
        raise f.refuse("its attention and feed-forward differ in bias; OPT's enable_bias sets both")
    return {"model_type": "opt", **FIELDS.config(f)}


def _rules(model, prefix: str, state: dict, lm: bool) -> tuple[list[Rule], dict[str, str]]:
    if model.spec.kind != "decoder-only":
        raise InteropError(f"OPT is decoder-only; spec '{model.spec.name}' is {model.spec.kind}")
    ours_state = model.state_dict()
    parts = layer_modules(model)
    rules = [rule("embeddings.tokens.tokens.weight", f"{prefix}embed_tokens.weight"),
             rule("embeddings.tokens.positions.weight", f"{prefix}embed_positions.weight")]
    if "decoder.final_norm.weight" in ours_state or f"{prefix}final_layer_norm.weight" in state:
        rules += linear_rules("decoder.final_norm", f"{prefix}final_layer_norm", state, ours_state)
    for i in range(len(model.decoder.layers)):
        ours, theirs = f"decoder.layers.{i}", f"{prefix}layers.{i}"
        attention, feedforward = f"{ours}.{parts['attention']}", f"{ours}.{parts['feedforward']}"
        core = model.get_submodule(attention)
        width = core.heads * core.head_dim
        rules += [*linear_rules(f"{attention}.qkv", tuple(f"{theirs}.self_attn.{p}_proj" for p in "qkv"), state,
                                ours_state, split=(width, width, width)),
                  *linear_rules(f"{attention}.out", f"{theirs}.self_attn.out_proj", state, ours_state),
                  *linear_rules(f"{feedforward}.up", f"{theirs}.fc1", state, ours_state),
                  *linear_rules(f"{feedforward}.down", f"{theirs}.fc2", state, ours_state),
                  *linear_rules(f"{ours}.{parts['attention_norm']}", f"{theirs}.self_attn_layer_norm", state,
                                ours_state),
                  *linear_rules(f"{ours}.{parts['feedforward_norm']}", f"{theirs}.final_layer_norm", state,
                                ours_state)]
    head, aliases = hf_llama.lm_head_rules(model, lm)
    return rules + head, aliases


def _decoder_rules(model, prefix: str, state: dict, lm: bool):
    """``_rules`` under OPT's names: its base model holds the decoder as ``decoder.``."""
    return _rules(model, f"{prefix}decoder.", state, lm)


EXPORT_PRIORITY = 80  # where export tries this module's families (lower first)
FAMILIES = (  # the families this module reads and writes (``tfspec.interop.family``)
    hf_llama.decoder_family(
        "OPT", ("opt",),
        {"OPTForCausalLM": {"head": True}, "OPTModel": {"head": False}},
        "OPT (Zhang et al. 2022): a GPT-style decoder with LayerNorm before each sublayer (or after, where "
        "do_layer_norm_before is false), ReLU, biases, learned positions read 2 rows on and counting real "
        "tokens only, the head tied",
        module=__name__, fields=FIELDS, spec_text=spec_text, hf_config=hf_config, rules=_decoder_rules),
)
