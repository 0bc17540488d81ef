"""Hugging Face ``GPTJForCausalLM`` / ``GPTJModel`` (and ``PhiForCausalLM`` / ``PhiModel``, phi-2) <-> a spec.

GPT-J (Wang and Komatsuzaki 2021) and Phi (Li et al. 2023; phi-2) run attention and the feed-forward in
parallel on one LayerNorm's output (``h = norm(x); x = x + attention(h) + feedforward(h)``, the wiring form),
with rotary positions on part of each head, a GELU (tanh) feed-forward with biases, a final LayerNorm and an
untied head with a bias. GPT-J pairs neighbouring dimensions (``interleaved=true``) and has no attention
biases; Phi pairs halves, biases every projection, and may norm each head's queries and keys
(``qk_layernorm``). Dropout of the embeddings and of each branch's output is carried over.
"""

from __future__ import annotations

from ..family import Family, Requires, causal_lm
from ...registry import NORMS
from . import hf_cohere, hf_llama
from .. import layouts
from ..document import Document, Statement
from ..fields import Field, Fields, standard
from ..weights import Weights, Projections
from ..writer import causal_masks

ACTIVATIONS = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu", "relu": "relu",
               "silu": "silu"}


def _fraction(f) -> float:
    return f.rotary("decoder").get("fraction", 1.0)


def _d_ff(f) -> int | None:
    """n_inner, left out where it is GPT-J's default of 4 * n_embd."""
    d_ff = f.feedforward("decoder").d_ff
    return None if d_ff == 4 * f.embedding.dim else d_ff


def _branch_dropout(f) -> float:
    """The dropout on each parallel branch's output (GPT-J's resid_pdrop, Phi's)."""
    return f.residual_dropout("decoder")


GPTJ_FIELDS = Fields(
    *standard("decoder", d_model="n_embd", heads="n_head", layers="n_layer"),
    Field("d_ff", "n_inner", _d_ff, read=lambda c: c.n_inner or None),
    Field("vocab", "vocab_size", lambda f: f.embedding.vocab),
    Field("rotary_dim", "rotary_dim", lambda f: round(_fraction(f) * f.geometry("decoder").head_dim),
          read=lambda c: c.rotary_dim or c.n_embd // c.n_head, let=False),
    Field("eps", "layer_norm_epsilon", lambda f: f.norm_option("decoder", "eps", 1e-5)),
    Field("p_dropout", "resid_pdrop", _branch_dropout),
    Field("p_embd_dropout", "embd_pdrop", lambda f: f.embedding.dropout),
    *standard("decoder", p_attn_dropout="attn_pdrop", init_std="initializer_range"),
    Field("activation", "activation_function", lambda f: f.feedforward("decoder").activation.name,
          names=ACTIVATIONS),
    Field("tied", "tie_word_embeddings", lambda f: f.tied, let=False),
    ignored={"n_positions": "the length of GPT-J's precomputed sin/cos table; tfspec's rotary positions compute "
                            "any position"},
)

PHI_FIELDS = Fields(
    *(e for e in hf_llama.FIELDS.fields if e.name in ("d_model", "heads", "kv_heads", "layers", "d_ff", "vocab",
                                                        "rope_theta", "rotary_fraction", "init_std")),
    *hf_llama.ROPE_SCALING,
    Field("eps", "layer_norm_eps", lambda f: f.norm_option("decoder", "eps", 1e-5)),
    Field("p_dropout", "resid_pdrop", _branch_dropout),
    Field("p_embd_dropout", "embd_pdrop", lambda f: f.embedding.dropout),
    Field("p_attn_dropout", "attention_dropout", lambda f: f.attention("decoder").dropout),
    Field("activation", "hidden_act", lambda f: f.feedforward("decoder").activation.name, names=ACTIVATIONS),
    Field("qk_layernorm", "qk_layernorm", lambda f: not NORMS[f.attention("decoder").qk_norm.name].absent,
          let=False),
    Field("tied", "tie_word_embeddings", lambda f: f.tied, let=False),
    ignored=hf_llama.FIELDS.ignored,
)
FIELDS = GPTJ_FIELDS  # GPT-J's table; Phi's module (hf_phi) names PHI_FIELDS


def parallel(s, *, padding: bool, head: bool, position: str, kv: str, extra: str, d_ff: str) -> Document:
    """The spec of GPT-J's layout: attention (``kv``: its options after the heads, ``extra``: after the mask) and
    a feed-forward of ``d_ff`` in parallel on one LayerNorm, each branch's dropout before the sum, the causal LM's
    head biased."""
    def out(t: str) -> str:  # each branch's dropout before the sum
        return f"dropout({t}, {s.p_dropout})" if s.value("p_dropout") else t

    attention = out(f"attention(h, heads={s.heads}{kv}, mask={causal_masks(padding=padding)}{extra})")
    feedforward = out(f"feedforward(h, d_ff={d_ff}, activation={s.activation})")
    wiring = f"h = norm(x)\nx = x + {attention} + \\\n    {feedforward}   # in parallel, on one norm"
    document = layouts.wired(s, norm=f"layernorm(eps={s.eps})", position=position, wiring=wiring, head=head)
    if s.value("p_embd_dropout"):
        document = document.add("embedding tokens", Statement("dropout", s.p_embd_dropout))
    return document.change_tail("head", bias="true") if head else document


def document(s, *, padding: bool, head: bool) -> Document:
    """GPT-J's spec: interleaved partial rotary positions of base 10,000, no attention biases."""
    fraction = s.value("rotary_dim") / (s.config.n_embd // s.config.n_head)
    position = "rotary(theta=10000.0, interleaved=true" + (f", fraction={fraction!r})" if fraction != 1 else ")")
    return parallel(s, padding=padding, head=head, position=position, kv="", extra=", bias=false",
                    d_ff=s.d_ff or f"4 * {s.d_model}")


EXAMPLES = {
    "GPTJForCausalLM": dict(model_type="gptj", vocab_size=90, n_embd=32, n_layer=2, n_head=4, rotary_dim=4,
                            n_positions=40, bos_token_id=1, eos_token_id=2),
    "GPTJModel": dict(model_type="gptj", vocab_size=90, n_embd=32, n_layer=1, n_head=4, rotary_dim=8, n_inner=48,
                      n_positions=40, bos_token_id=1, eos_token_id=2),
}

COVERAGE = [dict(model_type="gptj", vocab_size=91, n_embd=24, n_layer=3, n_head=3, rotary_dim=4, n_inner=40,
                 layer_norm_epsilon=1e-6, resid_pdrop=0.2, embd_pdrop=0.25, attn_pdrop=0.3,
                 initializer_range=0.05, activation_function="relu", tie_word_embeddings=True,
                 bos_token_id=1, eos_token_id=2)]


GPTJ = Family(
    "GPT-J", ("gptj",), causal_lm("GPTJ"),
    "GPT-J: attention and feed-forward in parallel on one LayerNorm (the wiring form), interleaved "
    "partial rotary positions, no attention biases, an untied head with a bias",
    priority=290, fields=FIELDS, document=document, prefix="transformer.",
    requires=(Requires(lambda f: f.rotary("decoder").get("interleaved") and f.rotary("decoder").get("theta") == 10000.0,
                       "its rotary positions are not GPT-J's (interleaved, theta 10000)"),
              Requires(lambda f: not f.attention("decoder").bias,
                       "its attention projections have biases; GPT-J's have none")),
    rules=Weights({"attention": Projections("attn", ("q_proj", "k_proj", "v_proj", "out_proj")),
                          "feedforward.up": "mlp.fc_in", "feedforward.down": "mlp.fc_out", "attention_norm": "ln_1"},
                         top={"embeddings.tokens.tokens": "wte", "decoder.final_norm": "ln_f"}, layers="h",
                         parts=hf_cohere.one_norm_parts))
