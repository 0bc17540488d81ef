"""Hugging Face ``GraniteForCausalLM`` (IBM's Granite 3; and its base model) <-> a compiled spec.

Granite is Llama's layout (``hf_llama``'s weight rules) with four scalar multipliers, each a
setting the spec states: the embeddings times ``embedding_multiplier`` (the embedding's ``scale``), the scores
times ``attention_multiplier`` in place of 1/sqrt(head_dim) (the attention's ``scale``), each sublayer's output
times ``residual_multiplier`` before its residual sum (``x = x + residual_multiplier * attention(norm(x))``, the
wiring form), and the logits divided by ``logits_scaling`` (the head's input scale, its inverse).
"""

from __future__ import annotations

import math

from ..family import causal_lm
from . import hf_llama
from ..fields import Field
from .. import layouts
from ..document import Document, Statement
from ..writer import causal_masks
from ..layouts import covering, example


def _logits_scaling(f) -> float | None:
    """``logits_scaling`` from the head's input scale (its inverse), as the configuration wrote it where the two
    agree to the last bits (1 / (1 / x) is not always x)."""
    if f.spec.head is None:
        return None
    value = 1 / f.spec.head.scale
    short = round(value, 9)
    return short if math.isclose(short, value, rel_tol=1e-12) else value


EXAMPLES = {
    "GraniteForCausalLM": example("granite", embedding_multiplier=12.0, attention_multiplier=0.0078125,
                                  residual_multiplier=0.22, logits_scaling=8.0, tie_word_embeddings=True),
    "GraniteModel": dict(model_type="granite", vocab_size=90, hidden_size=32, num_hidden_layers=1,
                         num_attention_heads=4, intermediate_size=48, embedding_multiplier=3.5,
                         attention_multiplier=0.3, residual_multiplier=0.5, attention_bias=True),
}

COVERAGE = [covering("granite", num_hidden_layers=3, num_key_value_heads=1, rms_norm_eps=1e-7, attention_dropout=0.3,
                     initializer_range=0.05, hidden_act="gelu", tie_word_embeddings=True, attention_bias=True,
                     mlp_bias=True, embedding_multiplier=12.0, attention_multiplier=0.2, residual_multiplier=0.3,
                     logits_scaling=8.0,
                     rope_parameters={"rope_type": "default", "rope_theta": 5e5, "partial_rotary_factor": 0.5}),
            *hf_llama.each_scaling(covering("granite", num_hidden_layers=1, num_key_value_heads=3,
                                            max_position_embeddings=32))]


FIELDS = hf_llama.FIELDS.derive(
    Field("embedding_multiplier", "embedding_multiplier", lambda f: f.embedding.scale),
    Field("attention_multiplier", "attention_multiplier",
          lambda f: f.attention("decoder").scale or f.geometry("decoder").head_dim ** -0.5),
    Field("residual_multiplier", "residual_multiplier", lambda f: f.residual_scale("decoder")),
    Field("logits_scaling", "logits_scaling", _logits_scaling), drop={"head_dim", "window", "pretraining_tp"})


def document(s, *, padding: bool, head: bool) -> Document:
    """Granite's spec: Llama's layer in the wiring form, its branches scaled."""
    wiring = f"""  x = x + residual_multiplier * attention(norm(x), heads={s.heads}, kv_heads={s.kv_heads}, \\
                                          mask={causal_masks(padding=padding)}, scale={s.attention_multiplier}, \\
                                          bias={s.attention_bias})
  x = x + residual_multiplier * feedforward(norm(x), d_ff={s.d_ff}, activation={s.activation}, bias={s.mlp_bias})"""
    document = layouts.wired(s, norm=f"rmsnorm(eps={s.eps})", position=hf_llama.rotary(s), wiring=wiring,
                             head=head).add("embedding tokens", Statement("scale", s.embedding_multiplier))
    if not head:  # the base model has no logits to scale
        s.writer.forget("logits_scaling")
        return document
    return document.change_tail("head", scale=f"1 / {s.logits_scaling}")


GRANITE = hf_llama.LLAMA.derive(
    "Granite", ("granite",), causal_lm("Granite"),
    "Granite 3: Llama's block with the embeddings scaled (embedding_multiplier, the embedding's scale), the "
    "scores scaled by attention_multiplier, each branch scaled by residual_multiplier before its residual "
    "sum (the wiring form), the logits divided by logits_scaling (the head's input scale)",
    priority=420, fields=FIELDS, document=document, hf_config=None)
