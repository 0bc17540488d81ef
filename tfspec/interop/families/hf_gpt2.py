"""Hugging Face ``GPT2Model`` / ``GPT2LMHeadModel`` <-> a compiled decoder-only spec.

GPT-2 stores its linear maps as ``Conv1D`` (input-major), so every matrix is
transposed on the way; ``lm_head.weight`` is the token embedding (tied).
"""

from __future__ import annotations

from ..family import Family
from ..weights import Conv1D, Weights
from ..fields import Field, Fields, Fixed, standard
from .. import layouts
from ..document import Document, Statement

ACTIVATIONS = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu", "relu": "relu",
               "silu": "silu", "swish": "silu", "tanh": "tanh"}


def _d_ff(f):
    """n_inner: None stands for 4 * n_embd."""
    d_ff = f.feedforward("decoder").d_ff
    return None if d_ff == 4 * f.embedding.dim else d_ff


FIELDS = Fields(
    *standard("decoder", d_model="n_embd", heads="n_head", layers="n_layer", vocab="vocab_size"),
    Field("context", "n_positions", lambda f: f.learned_positions()),
    Field("d_ff", "n_inner", _d_ff, read=lambda c: c.n_inner or None),
    Field("eps", "layer_norm_epsilon", lambda f: f.norm_option("decoder", "eps", 1e-5)),
    Field("p_dropout", "resid_pdrop", lambda f: f.residual_dropout("decoder")),
    Field("p_embd_dropout", "embd_pdrop", lambda f: f.embedding.dropout,  # written when it differs
          read=lambda c: c.embd_pdrop if c.embd_pdrop != c.resid_pdrop else None),
    *standard("decoder", p_attn_dropout="attn_pdrop", init_std="initializer_range"),
    Field("activation", "activation_function", lambda f: f.feedforward("decoder").activation.name,
          names=ACTIVATIONS),
    Field("tied", "tie_word_embeddings", lambda f: f.tied, let=False),
    Fixed("scale_attn_by_inverse_layer_idx", False,
          "scale_attn_by_inverse_layer_idx scales each layer's scores by 1/(layer + 1); tfspec's softmax scale is "
          "one per sublayer, the same in every layer"),
    Fixed("scale_attn_weights", True, "scale_attn_weights=False leaves scores unscaled: write it as `scale=1` by "
                                      "hand"),
    Fixed("add_cross_attention", False, "add_cross_attention=True makes GPT-2 an encoder-decoder's decoder; tfspec "
                                        "imports it decoder-only"),
    ignored={"summary_type": "GPT2DoubleHeadsModel's multiple-choice head, which tfspec does not import",
             "summary_use_proj": "GPT2DoubleHeadsModel's multiple-choice head, which tfspec does not import",
             "summary_activation": "GPT2DoubleHeadsModel's multiple-choice head, which tfspec does not import",
             "summary_proj_to_labels": "GPT2DoubleHeadsModel's multiple-choice head, which tfspec does not import",
             "summary_first_dropout": "GPT2DoubleHeadsModel's multiple-choice head, which tfspec does not import",
             "reorder_and_upcast_attn": "computes the scores in float32 under half precision; in float32, as "
                                        "tfspec computes them, the result is the same"},
)


def document(s, *, padding: bool, head: bool) -> Document:
    """The spec a GPT-2 configuration describes: ``GPT2LMHeadModel``'s, or ``GPT2Model``'s with
    ``head=False`` (``padding``: mask padded keys)."""
    document = (layouts.decoder(s, norm=f"layernorm(eps={s.eps})", padding=padding, head=head)
                .change("defaults", "residual", comment="x = x + Dropout(Sublayer(LayerNorm(x)))")
                .change("defaults", "init", f"gpt2(std={s.init_std})")
                .change("embedding tokens", "position", f"learned({s.context})"))
    if s.p_embd_dropout:
        document = document.add("embedding tokens", Statement("dropout", s.p_embd_dropout))
    return document


EXAMPLES = {
    "GPT2LMHeadModel": dict(model_type="gpt2", vocab_size=90, n_embd=32, n_layer=2, n_head=4, n_positions=40),
    "GPT2Model": dict(model_type="gpt2", vocab_size=90, n_embd=32, n_layer=2, n_head=4, n_positions=40, n_inner=48,
                      embd_pdrop=0.0),
}

COVERAGE = [dict(model_type="gpt2", vocab_size=91, n_embd=24, n_layer=3, n_head=3, n_positions=33, n_inner=40,
                 layer_norm_epsilon=1e-6, resid_pdrop=0.2, embd_pdrop=0.25, attn_pdrop=0.3,
                 initializer_range=0.05, activation_function="relu", tie_word_embeddings=False)]


GPT2 = Family(
    "GPT-2", ("gpt2",), {"GPT2LMHeadModel": {"head": True}, "GPT2Model": {"head": False}},
    "GPT-2 (Radford et al. 2019): pre-norm LayerNorm, tanh-approximated GELU, learned positions, a final "
    "LayerNorm, the head tied to the token embedding; init gpt2 scales residual projections by "
    "1/sqrt(2 * layers)",
    priority=70, fields=FIELDS, document=document, prefix="transformer.",
    # its projections are Conv1Ds, their weights stored transposed
    rules=Weights({"attention.qkv": Conv1D("attn.c_attn"), "attention.out": Conv1D("attn.c_proj"),
                          "feedforward.up": Conv1D("mlp.c_fc"), "feedforward.down": Conv1D("mlp.c_proj"),
                          "attention_norm": "ln_1", "feedforward_norm": "ln_2"},
                         top={"embeddings.tokens.tokens": "wte", "embeddings.tokens.positions": "wpe",
                              "decoder.final_norm": "ln_f"}, layers="h"))
