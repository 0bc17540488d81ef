"""Hugging Face ``Gemma3ForCausalLM`` (text; and ``Gemma3TextModel``) <-> a compiled spec.

Gemma 3 (Gemma Team 2025) is Gemma 2's layer (``hf_gemma2``: sandwich norms scaling by 1 + w, a
scaled embedding, GEGLU, scores scaled by ``query_pre_attn_scalar ** -0.5``, optional soft caps) with each head's
queries and keys normed (``qk_norm=gemma_rmsnorm``) and rotary positions of their own per kind of layer: sliding
layers rotate with ``rope_parameters.sliding_attention`` (θ 10,000), full ones with ``full_attention`` (θ 1e6,
scaled linearly in the larger models) -- a layer schedule whose sections change the mask and the positions.
"""

from __future__ import annotations

from ..family import causal_lm
from . import hf_gemma2, hf_llama
from ..document import Document
from ..fields import Field, Fields, Fixed
from ..layouts import example

SLIDING, FULL = hf_gemma2.SLIDING, hf_gemma2.FULL
_GEMMA2 = {e.name: e for e in hf_gemma2.FIELDS.fields}


def rope_of_kind(config, kind: str) -> dict:
    """The rotary settings of one kind of layer."""
    params = dict((config.rope_parameters or {}).get(kind) or {})
    params.setdefault("rope_type", "default")
    params.setdefault("rope_theta", 1e6 if kind == FULL else 1e4)
    return params


def _theta(kind: str):
    """The base of a kind of layer's rotary positions (None where no layer is of that kind)."""
    return lambda c: float(rope_of_kind(c, kind)["rope_theta"]) if kind in (c.layer_types or []) else None


FIELDS = Fields(
    *(_GEMMA2[n] for n in ("d_model", "heads", "kv_heads", "head_dim", "layers", "d_ff", "vocab", "query_scalar",
                           "window", "layer_types", "eps", "p_attn_dropout", "init_std", "activation",
                           "attention_bias", "tied", "attn_softcap", "final_softcap")),
    Field("rope_theta", "rope_parameters.full_attention.rope_theta",
          lambda f: f.layer_rotaries("decoder", sliding=False).get("theta"), read=_theta(FULL)),
    Field("local_theta", "rope_parameters.sliding_attention.rope_theta",
          lambda f: f.layer_rotaries("decoder", sliding=True).get("theta"), read=_theta(SLIDING)),
    # (of no consequence where no layer is full)
    *hf_llama.scaling_fields("rope_parameters.full_attention",
                             params=lambda c: rope_of_kind(c, FULL) if FULL in (c.layer_types or [])
                             else {"rope_type": "default"},
                             options=lambda f: f.layer_rotaries("decoder", sliding=False)),
    Fixed("rope_parameters.sliding_attention.rope_type", "default", "rope scaling '{value}' of the sliding layers "
          "is not expressed (only of the full ones)", read=lambda c: rope_of_kind(c, SLIDING)["rope_type"],
          exported=True),
    Fixed("use_bidirectional_attention", False, "bidirectional attention ({value}) makes Gemma 3 an encoder; "
          "tfspec reads the causal model", read=lambda c: bool(getattr(c, "use_bidirectional_attention", False))),
    ignored={**hf_gemma2.FIELDS.ignored,
             "_sliding_window_pattern": "how layer_types is derived when a configuration leaves it out"},
)


def document(s, *, padding: bool, head: bool) -> Document:
    """Gemma 3's spec: Gemma 2's sandwich-normed layers, each head's queries and keys normed, the sliding and the
    full layers (each with its own rotary positions) as a layer schedule."""
    def position(slides: bool) -> str:
        return f"rotary(theta={s.local_theta})" if slides else hf_llama.rotary(s)

    slides = [s.window is not None and t == SLIDING for t in s.value("layer_types")]
    if not any(slides):
        s.writer.forget("local_theta")
    if all(slides):
        s.writer.forget("rope_theta")
    document = hf_gemma2.sandwich(s, position, f", qk_norm=gemma_rmsnorm(eps={s.eps})", padding=padding)
    return hf_gemma2.with_head(s, document, head)


EXAMPLES = {
    "Gemma3ForCausalLM": dict(model_type="gemma3_text", vocab_size=90, hidden_size=32, num_hidden_layers=4,
                              num_attention_heads=4, num_key_value_heads=2, head_dim=8, intermediate_size=48,
                              sliding_window=6, query_pre_attn_scalar=8, final_logit_softcapping=0.4,
                              layer_types=["sliding_attention"] * 3 + ["full_attention"],
                              rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
                                               "full_attention": {"rope_type": "linear", "rope_theta": 1e6,
                                                                  "factor": 8.0}}),
    "Gemma3TextModel": example("gemma3_text", num_key_value_heads=4, head_dim=16, sliding_window=5,
                               layer_types=["full_attention", "sliding_attention"]),
}

COVERAGE = [dict(model_type="gemma3_text", vocab_size=91, hidden_size=24, num_hidden_layers=3,
                 num_attention_heads=3, num_key_value_heads=1, head_dim=16, intermediate_size=40,
                 rms_norm_eps=1e-5, query_pre_attn_scalar=32, sliding_window=7, attention_dropout=0.1,
                 initializer_range=0.05, hidden_activation="gelu", attention_bias=True,
                 tie_word_embeddings=False, attn_logit_softcapping=20.0, final_logit_softcapping=10.0,
                 layer_types=["full_attention", "sliding_attention", "sliding_attention"],
                 rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 2e4},
                                  "full_attention": {"rope_type": "linear", "rope_theta": 5e5, "factor": 4.0}}),
            *(dict(model_type="gemma3_text", vocab_size=91, hidden_size=24, num_hidden_layers=2,
                   num_attention_heads=3, num_key_value_heads=3, head_dim=8, intermediate_size=40,
                   max_position_embeddings=32, sliding_window=7,
                   layer_types=["sliding_attention", "full_attention"],
                   rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
                                    "full_attention": rope})
              for rope in hf_llama.ROPE_EXAMPLES.values())]


GEMMA3 = hf_gemma2.GEMMA2.derive(
    "Gemma 3", ("gemma3_text",), causal_lm("Gemma3", base="Gemma3TextModel"),
    "Gemma 3 (text): Gemma 2's sandwich-normed layer with each head's queries and keys normed "
    "(gemma_rmsnorm), sliding and full layers (a layer schedule) each with rotary positions of their own "
    "base (and the full ones' scaling)",
    priority=280, fields=FIELDS, document=document,
    rules=hf_gemma2.WEIGHTS.derive({"attention.q_norm": "self_attn.q_norm", "attention.k_norm": "self_attn.k_norm"}))
