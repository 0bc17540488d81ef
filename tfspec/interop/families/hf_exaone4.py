"""Hugging Face ``Exaone4ForCausalLM`` (LG's EXAONE 4.0; and its base model) <-> a compiled spec.

EXAONE 4.0 is OLMo 2's layer (``hf_olmo2``: an RMSNorm after each sublayer, none before it) with
each head's queries and keys RMS-normed (``qk_norm=rmsnorm``), no biases, and layers that slide over a window
as ``layer_types`` says (three to one by default, from ``sliding_window_pattern``): the sliding layers rotate
their queries and keys, the full ones use no positions at all (NoPE) -- a layer schedule whose sections change
the mask and the positions. With no window at all (``sliding_window`` None) every layer is full and rotates.
"""

from __future__ import annotations

from ..family import Requires, causal_lm
from ..document import Document
from . import hf_gemma2, hf_llama, hf_olmo2
from ..fields import Field, Fields
from ..writer import causal_masks, schedule
from ...registry import NORMS
from ..layouts import covering, example

SLIDING, FULL = hf_gemma2.SLIDING, hf_gemma2.FULL
_LLAMA = {e.name: e for e in hf_llama.FIELDS.fields}


def sliding_window_of(config) -> int | None:
    """The window of the sliding layers (None: no layer slides)."""
    window = getattr(config, "sliding_window", None)
    return int(window) if window is not None and SLIDING in (config.layer_types or []) else None


def layer_types_of(f) -> list[str]:
    return [SLIDING if w is not None else FULL for w in f.layer_windows("decoder")]


def _pattern(f) -> int | None:
    """``sliding_window_pattern``: every how many layers one is full, where the layers say so (else None, and
    ``layer_types`` alone says it)."""
    types = layer_types_of(f)
    if SLIDING not in types:
        return None
    step = types.index(FULL) + 1 if FULL in types else len(types) + 1
    same = all((t == FULL) == ((i + 1) % step == 0) for i, t in enumerate(types))
    return step if same else None


FIELDS = Fields(
    *(_LLAMA[n] for n in ("d_model", "heads", "kv_heads", "layers", "d_ff", "vocab", "eps", "p_attn_dropout",
                          "init_std", "activation", "tied")),
    *(e for e in hf_llama.FIELDS.entries if getattr(e, "name", None) in ("rope_theta",) or
      e in hf_llama.ROPE_SCALING),
    # None where every layer rotates: any window, even where no layer slides, leaves the full layers unrotated
    Field("window", "sliding_window", lambda f: f.one_window("decoder"), read=sliding_window_of,
          null=lambda f: all(f.rotates(a.position) for a in f.layer_attentions("decoder"))),
    Field("window_pattern", "sliding_window_pattern", _pattern, read=lambda c: None, setting=False, constant=True),
    Field("layer_types", "layer_types", layer_types_of, read=lambda c: list(c.layer_types), setting=False),
    ignored={**hf_llama.FIELDS.ignored},
)


def document(s, *, padding: bool, head: bool) -> Document:
    """The spec an EXAONE 4 configuration describes: OLMo 2's post-normed layer in the wiring form, the
    sliding layers (rotary) and the full ones (no positions, where any layer slides) as a layer schedule."""
    slides = [s.window is not None and t == SLIDING for t in s.value("layer_types")]

    def position(slide: bool) -> str:  # every layer rotates where the configuration has no window at all
        return hf_llama.rotary(s) if slide or s.config.sliding_window is None else "none"

    def masks(slide: bool) -> str:
        return causal_masks(s.window if slide else None, padding)

    base, sections = schedule(slides)
    lines = "".join(f"  layers {layers} {{ self_attn mask={masks(slide)}; position {position(slide)} }}\n"
                    for layers, slide in sections)
    if not any(position(slide) != "none" for slide in slides):
        s.writer.forget("rope_theta")
    document = hf_olmo2.post_norm_document(s, position(base), masks(base), head=head,
                                           qk_norm=f"qk_norm=rmsnorm(eps={s.eps})",
                                           bias="false").add_lines("decoder", lines)
    return document


EXAMPLES = {
    "Exaone4ForCausalLM": example("exaone4", num_hidden_layers=4, sliding_window=6, sliding_window_pattern=4,
                                  pad_token_id=0, eos_token_id=2),
    "Exaone4Model": example("exaone4", num_key_value_heads=4, sliding_window=None, rms_norm_eps=1e-6,
                            layer_types=["full_attention"] * 2, pad_token_id=0, eos_token_id=2),
}

COVERAGE = [covering("exaone4", num_hidden_layers=4, num_key_value_heads=1, rms_norm_eps=1e-7, attention_dropout=0.3,
                     initializer_range=0.05, hidden_act="gelu", tie_word_embeddings=True, sliding_window=5,
                     sliding_window_pattern=2, rope_parameters={"rope_type": "default", "rope_theta": 5e5}),
            covering("exaone4", num_hidden_layers=3, num_key_value_heads=3, sliding_window=5,
                     layer_types=["sliding_attention", "full_attention", "full_attention"]),
            *hf_llama.each_scaling(covering("exaone4", num_hidden_layers=1, num_key_value_heads=3, sliding_window=None,
                                            layer_types=["full_attention"], max_position_embeddings=32))]


EXAONE4 = hf_olmo2.OLMO2.derive(
    "EXAONE 4", ("exaone4",), causal_lm("Exaone4"),
    "EXAONE 4.0: OLMo 2's post-normed layer with each head's queries and keys RMS-normed, sliding layers "
    "with rotary positions and full layers with none (NoPE) as layer_types says (a layer schedule)",
    priority=390, fields=FIELDS, document=document,
    requires=(Requires(lambda f: not NORMS[f.attention("decoder").qk_norm.name].absent,
                       "its queries and keys are not each head's normed, as EXAONE 4's are"),))
