"""Hugging Face ``OPTForCausalLM`` / ``OPTModel`` <-> a compiled decoder-only spec.

OPT (Zhang et al. 2022) is a GPT-style decoder: learned positions, ReLU, biased projections, LayerNorm before each
sublayer (after it where ``do_layer_norm_before`` is false, as OPT-350m), a final LayerNorm, the head tied. Its
position table keeps two rows no real token reads -- position p reads row p + 2 -- and a padded batch's positions
count only its real tokens: ``learned(max_len + 2, offset=2, skip_padding=true)``. ``word_embed_proj_dim`` other
than ``hidden_size`` (a projection in and out of a narrower embedding) is not expressed and is refused.
"""

from __future__ import annotations

from ..family import Family, Requires, causal_lm
from ..weights import Weights, Projections
from ..document import Document
from ..fields import Field, Fields, Fixed, standard
from .. import layouts

OFFSET = 2  # OPTLearnedPositionalEmbedding's
ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "gelu_new": "gelu_tanh", "silu": "silu"}


FIELDS = Fields(
    *standard("decoder", d_model="hidden_size", heads="num_attention_heads", layers="num_hidden_layers", d_ff="ffn_dim",
              vocab="vocab_size"),
    Field("max_len", "max_position_embeddings", lambda f: f.learned_positions() - OFFSET),
    *standard("decoder", p_dropout="dropout", p_attn_dropout="attention_dropout", init_std="init_std"),
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


def document(s, *, padding: bool, head: bool) -> Document:
    """The spec an OPT configuration describes: the decoder layout with LayerNorms of eps 1e-5 before each
    sublayer (after it, and none after the stack, where do_layer_norm_before is false), learned positions read
    2 rows on and counting real tokens only, biases as enable_bias says."""
    pre = s.value("pre_norm")
    document = (layouts.decoder(s, norm="layernorm(eps=1e-5)", padding=padding, head=head)
                .change("defaults", "residual", "pre" if pre else "post")
                .change("embedding tokens", "position",
                        f"learned({s.max_len} + {OFFSET}, offset={OFFSET}, skip_padding=true)")
                .change("decoder", "attention", bias=s.bias)
                .change("decoder", "feedforward", bias=s.bias))
    if not pre:
        document = document.drop("decoder", "final")
    return document


# its learned positions, which its fields do not read
OPT_POSITIONS = Requires(lambda f: f.embedding.position.options.get("offset") == OFFSET
                         and f.embedding.position.options.get("skip_padding"),
                         "its learned positions are not OPT's (offset=2, skip_padding=true)")
SAME_BIAS = Requires(lambda f: f.feedforward("decoder").bias == f.attention("decoder").bias,
                     "its attention and feed-forward differ in bias; OPT's enable_bias sets both")

EXAMPLES = {
    "OPTForCausalLM": dict(model_type="opt", vocab_size=90, hidden_size=32, num_hidden_layers=2,
                           num_attention_heads=4, ffn_dim=64, max_position_embeddings=40, word_embed_proj_dim=32,
                           pad_token_id=1, bos_token_id=2, eos_token_id=2),
    "OPTModel": dict(model_type="opt", vocab_size=90, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                     ffn_dim=64, max_position_embeddings=40, word_embed_proj_dim=32, do_layer_norm_before=False,
                     pad_token_id=1, bos_token_id=2, eos_token_id=2),
}

COVERAGE = [dict(model_type="opt", vocab_size=91, hidden_size=24, num_hidden_layers=3, num_attention_heads=3,
                 ffn_dim=40, max_position_embeddings=33, word_embed_proj_dim=24, do_layer_norm_before=False,
                 dropout=0.2, attention_dropout=0.3, init_std=0.05, activation_function="gelu",
                 enable_bias=False, tie_word_embeddings=False, pad_token_id=1, bos_token_id=2, eos_token_id=2)]


OPT = Family(
    "OPT", ("opt",), causal_lm("OPT"),
    "OPT (Zhang et al. 2022): a GPT-style decoder with LayerNorm before each sublayer (or after, where "
    "do_layer_norm_before is false), ReLU, biases, learned positions read 2 rows on and counting real "
    "tokens only, the head tied",
    priority=80, fields=FIELDS, document=document, requires=(OPT_POSITIONS, SAME_BIAS),
    # its base model holds the decoder as ``decoder.``
    rules=Weights({"attention": Projections(names=("q_proj", "k_proj", "v_proj", "out_proj")),
                          "feedforward.up": "fc1", "feedforward.down": "fc2",
                          "attention_norm": "self_attn_layer_norm", "feedforward_norm": "final_layer_norm"},
                         top={"embeddings.tokens.tokens": "decoder.embed_tokens",
                              "embeddings.tokens.positions": "decoder.embed_positions",
                              "decoder.final_norm": "decoder.final_layer_norm"}, layers="decoder.layers"))
