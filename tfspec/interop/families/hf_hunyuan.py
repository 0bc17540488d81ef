"""Hugging Face ``HunYuanDenseV1ForCausalLM`` (Tencent's Hunyuan dense models; and the base model) <-> a compiled
spec.

Hunyuan is Llama's layout (``hf_llama``'s weight rules) whose attention RMS-norms each head's
queries and keys *after* the rotary positions have rotated them (``steps=rotated_qk_norm``; Qwen3 norms them
before), its norms named ``query_layernorm`` and ``key_layernorm``. Its checkpoints label their rotary scaling
"dynamic" with a fixed ``alpha``, which Hugging Face computes as a fixed NTK stretch of the base
(``scaling=ntk_alpha, alpha=...``: the base times alpha ** (d / (d - 2)), at any length); other scalings are
refused. ``head_dim`` must be set: Hunyuan's attention reads it as it is, and None breaks it.
"""

from __future__ import annotations

from ..family import Requires, causal_lm
from . import hf_llama
from ..document import Document
from ..fields import Field, Fields, Fixed
from ..mapping import InteropError
from ..layouts import covering

_LLAMA = [e for e in hf_llama.FIELDS.entries if getattr(e, "name", None) not in
          {"head_dim", "window", "mlp_bias", "rotary_fraction"} and e not in hf_llama.ROPE_SCALING]


def _alpha(config) -> float | None:
    """The fixed NTK alpha of a rotary labelled "dynamic" with one (None: unscaled)."""
    params = hf_llama.rope(config)
    return float(params["alpha"]) if params["rope_type"] == "dynamic" and params.get("alpha") else None


def _fact_alpha(f) -> float | None:
    options = f.rotary("decoder")
    return options.get("alpha", 1.0) if options.get("scaling") == "ntk_alpha" else None


FIELDS = Fields(
    *_LLAMA,
    Field("head_dim", "head_dim", lambda f: f.geometry("decoder").head_dim),
    Field("rope_alpha", "rope_parameters.alpha", _fact_alpha, read=_alpha),
    Field("rope_dynamic", "rope_parameters.rope_type", lambda f: "dynamic" if _fact_alpha(f) else "default",
          read=lambda c: None, setting=False, constant=True),
    # what Hugging Face requires of a "dynamic" rotary, which a fixed alpha leaves unread
    Field("rope_dynamic_factor", "rope_parameters.factor", lambda f: 1.0 if _fact_alpha(f) else None,
          read=lambda c: None, setting=False, constant=True),
    Fixed("rope_parameters.rope_type", "default", "rope scaling '{value}' is not expressed (Hunyuan's is unscaled, "
          "or 'dynamic' with a fixed alpha)", read=lambda c: "default" if _alpha(c) else hf_llama.rope(c)["rope_type"],
          required="= 'default', or 'dynamic' with alpha (scaling=ntk_alpha)"),
    ignored={**hf_llama.FIELDS.ignored, "eod_token_id": "a token id, which the tokenizer reads",
             "rope_parameters.partial_rotary_factor": "Hunyuan's rotary rotates every dimension"},
)


def document(s, *, padding: bool, head: bool) -> Document:
    """Hunyuan's spec: Llama's with the rotated queries and keys RMS-normed, its rotary positions NTK-scaled by alpha
    where it says."""
    if not getattr(s.config, "head_dim", None):
        raise InteropError("head_dim is None: Hunyuan's attention reads it as it is (set it to hidden_size / "
                           "num_attention_heads)")
    rotary = f"rotary(theta={s.rope_theta}" + (f", scaling=ntk_alpha, alpha={s.rope_alpha})" if s.rope_alpha
                                               else ")")
    return (hf_llama.document(s, padding=padding, head=head)
            .change("decoder", "position", rotary)
            .change("decoder", "attention", steps=f"rotated_qk_norm(eps={s.eps})")
            .change("decoder", "feedforward", bias="false"))


EXAMPLES = {
    "HunYuanDenseV1ForCausalLM": dict(model_type="hunyuan_v1_dense", vocab_size=90, hidden_size=32,
                                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                                      intermediate_size=48,
                                      rope_parameters={"rope_type": "dynamic", "rope_theta": 10000.0,
                                                       "alpha": 1000.0, "factor": 1.0},
                                      pad_token_id=0, bos_token_id=1, eos_token_id=2),
    "HunYuanDenseV1Model": dict(model_type="hunyuan_v1_dense", vocab_size=90, hidden_size=32, num_hidden_layers=1,
                                num_attention_heads=4, head_dim=16, intermediate_size=48, attention_bias=True,
                                pad_token_id=0, bos_token_id=1, eos_token_id=2),
}

COVERAGE = [covering("hunyuan_v1_dense", num_hidden_layers=3, num_key_value_heads=1, head_dim=10, rms_norm_eps=1e-7,
                     attention_dropout=0.3, initializer_range=0.05, hidden_act="gelu", tie_word_embeddings=True,
                     attention_bias=True,
                     rope_parameters={"rope_type": "dynamic", "rope_theta": 5e5, "alpha": 100.0, "factor": 1.0})]


HUNYUAN = hf_llama.LLAMA.derive(
    "Hunyuan", ("hunyuan_v1_dense",), causal_lm("HunYuanDenseV1"),
    "Hunyuan (dense): Llama's block with each head's queries and keys RMS-normed after the rotary positions "
    "rotate them (steps=rotated_qk_norm), its 'dynamic' rotary with a fixed alpha a fixed NTK stretch of "
    "the base (scaling=ntk_alpha)",
    priority=490, fields=FIELDS, document=document, hf_config=None,
    requires=(Requires(lambda f: [c.name for c in f.attention("decoder").steps] == ["rotated_qk_norm"],
                       "its queries and keys are normed before the positions rotate them; Hunyuan's after"),),
    rules=hf_llama.WEIGHTS.derive({"attention.rotated_qk_norm.q": "self_attn.query_layernorm",
                                   "attention.rotated_qk_norm.k": "self_attn.key_layernorm"}))
