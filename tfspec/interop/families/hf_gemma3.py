"""Hugging Face ``Gemma3ForCausalLM`` (text; and ``Gemma3TextModel``) <-> a compiled spec.

Gemma 3 (Gemma Team 2025) is Gemma 2's layer (``hf_gemma2``: sandwich norms scaling by 1 + w, a
scaled embedding, GEGLU, scores scaled by ``query_pre_attn_scalar ** -0.5``, optional soft caps) with each head's
queries and keys normed (``qk_norm=gemma_rmsnorm``) and rotary positions of their own per kind of layer: sliding
layers rotate with ``rope_parameters.sliding_attention`` (θ 10,000), full ones with ``full_attention`` (θ 1e6,
scaled linearly in the larger models) -- a layer schedule whose sections change the mask and the positions.
"""

from __future__ import annotations

from . import hf_gemma2, hf_llama
from ..facts import Facts
from ..fields import Field, Fields, Fixed
from ..mapping import Rule, rule
from ..writer import SpecWriter

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


def spec_text(config, *, head: bool = True, padding: bool = True, name: str = "reference",
              heading: tuple[str, ...] = ()) -> str:
    """The tfspec spec a Gemma 3 configuration describes: sandwich-normed layers in the wiring form, the sliding
    and the full layers (each with its own rotary positions) as a layer schedule."""
    w = SpecWriter()
    s = FIELDS.write(config, w)

    def position(slides: bool) -> str:
        return f"rotary(theta={s.local_theta})" if slides else hf_llama.rotary(s)

    slides = [s.window is not None and t == SLIDING for t in s.value("layer_types")]
    if not any(slides):
        w.forget("local_theta")
    if all(slides):
        w.forget("rope_theta")
    document = hf_gemma2.sandwich(s, position, f", qk_norm=gemma_rmsnorm(eps={s.eps})", padding=padding)
    return hf_gemma2.with_head(w, s, document, head, heading, name)


def hf_config(spec) -> dict:
    """The Gemma 3 configuration ``spec`` would be, its ``layer_types`` read from each layer."""
    f = Facts(spec, "Gemma 3")
    f.kind("decoder-only")
    hf_gemma2.check_embedding_scale(f)
    return {"model_type": "gemma3_text", **FIELDS.config(f)}


def _rules(model, prefix: str, state: dict, lm: bool) -> tuple[list[Rule], dict[str, str]]:
    rules, aliases = hf_gemma2.weight_rules(model, prefix, state, lm)
    attention = hf_gemma2.sandwich_modules(model)["attention"]
    for i in range(len(model.decoder.layers)):
        rules += [rule(f"decoder.layers.{i}.{attention}.{n}.weight", f"{prefix}layers.{i}.self_attn.{n}.weight")
                  for n in ("q_norm", "k_norm")]
    return rules, aliases


EXPORT_PRIORITY = 280  # where export tries this module's families (lower first)
FAMILIES = (  # the families this module reads and writes (``tfspec.interop.family``)
    hf_llama.decoder_family(
        "Gemma 3", ("gemma3_text",),
        {"Gemma3ForCausalLM": {"head": True}, "Gemma3TextModel": {"head": False}},
        "Gemma 3 (text): Gemma 2's sandwich-normed layer with each head's queries and keys normed "
        "(gemma_rmsnorm), sliding and full layers (a layer schedule) each with rotary positions of their own "
        "base (and the full ones' scaling)",
        module=__name__, fields=FIELDS, spec_text=spec_text, hf_config=hf_config, rules=_rules),
)
