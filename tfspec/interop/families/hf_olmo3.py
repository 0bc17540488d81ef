"""Hugging Face ``Olmo3ForCausalLM`` (OLMo 3; and its base model) <-> a compiled spec.

OLMo 3 (Ai2 2025) is OLMo 2's layer (``hf_olmo2``: an RMSNorm after each sublayer, queries and keys
RMS-normed over all heads at once) whose layers slide over a window or see every earlier key as ``layer_types``
says (three sliding layers to one full by default), each kind with rotary positions of its own
(``rope_parameters.sliding_attention``, ``rope_parameters.full_attention``, the full layers' scaled by YaRN in the
long-context models): a layer schedule whose sections change the mask and the positions, as Gemma 3's.
"""

from __future__ import annotations

from ..family import causal_lm
from ..document import Document
from . import hf_gemma2, hf_gemma3, hf_llama, hf_olmo2
from ..fields import Fields, Fixed
from ..writer import causal_masks, schedule

SLIDING, FULL = hf_gemma2.SLIDING, hf_gemma2.FULL
_OLMO2 = {e.name: e for e in hf_olmo2.FIELDS.fields}
_GEMMA2 = {e.name: e for e in hf_gemma2.FIELDS.fields}
_GEMMA3 = {e.name: e for e in hf_gemma3.FIELDS.fields}

FIELDS = Fields(
    *(_OLMO2[n] for n in ("d_model", "heads", "kv_heads", "layers", "d_ff", "vocab", "eps", "p_attn_dropout",
                          "init_std", "activation", "attention_bias", "tied")),
    _GEMMA2["window"], _GEMMA2["layer_types"], _GEMMA3["rope_theta"], _GEMMA3["local_theta"],
    *(e for e in hf_gemma3.FIELDS.entries if getattr(e, "config", "").startswith("rope_parameters.full_attention.")
      and getattr(e, "name", None) != "rope_theta"),
    *(e for e in hf_gemma3.FIELDS.entries if getattr(e, "config", None) == "max_position_embeddings"),
    Fixed("rope_parameters.sliding_attention.rope_type", "default", "rope scaling '{value}' of the sliding layers "
          "is not expressed (only of the full ones)", read=lambda c: hf_gemma3.rope_of_kind(c, SLIDING)["rope_type"],
          exported=True),
    ignored={**hf_olmo2.FIELDS.ignored},
)


def document(s, *, padding: bool, head: bool) -> Document:
    """The spec an OLMo 3 configuration describes: OLMo 2's layer in the wiring form, the sliding and the
    full layers (each with its own rotary positions) as a layer schedule."""

    def position(slides: bool) -> str:
        return f"rotary(theta={s.local_theta})" if slides else hf_llama.rotary(s)

    def masks(slides: bool) -> str:
        return causal_masks(s.window if slides else None, padding)

    slides = [s.window is not None and t == SLIDING for t in s.value("layer_types")]
    if not any(slides):
        s.writer.forget("local_theta")
    if all(slides):
        s.writer.forget("rope_theta")
    base, sections = schedule(slides)
    lines = "".join(f"  layers {layers} {{ self_attn mask={masks(slide)}"
                    + (f"; position {position(slide)}" if position(slide) != position(base) else "") + " }\n"
                    for layers, slide in sections)
    document = hf_olmo2.post_norm_document(s, position(base), masks(base), head=head).add_lines("decoder", lines)
    return document


EXAMPLES = {
    "Olmo3ForCausalLM": dict(model_type="olmo3", vocab_size=90, hidden_size=32, num_hidden_layers=4,
                             num_attention_heads=4, num_key_value_heads=2, intermediate_size=48, sliding_window=6,
                             rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                                              "full_attention": {"rope_type": "default", "rope_theta": 500000.0}},
                             pad_token_id=0, eos_token_id=2),
    "Olmo3Model": dict(model_type="olmo3", vocab_size=90, hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
                       intermediate_size=48, sliding_window=5, attention_bias=True, max_position_embeddings=64,
                       layer_types=["full_attention", "sliding_attention", "full_attention"],
                       rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                                        "full_attention": {"rope_type": "yarn", "rope_theta": 500000.0, "factor": 4.0,
                                                           "beta_fast": 32.0, "beta_slow": 1.0,
                                                           "original_max_position_embeddings": 16}},
                       pad_token_id=0, eos_token_id=2),
}

COVERAGE = [dict(model_type="olmo3", vocab_size=91, hidden_size=24, num_hidden_layers=4, num_attention_heads=3,
                 num_key_value_heads=1, intermediate_size=40, rms_norm_eps=1e-7, attention_dropout=0.3,
                 initializer_range=0.05, hidden_act="gelu", tie_word_embeddings=True, attention_bias=True,
                 sliding_window=5, layer_types=["sliding_attention", "full_attention", "sliding_attention",
                                                "full_attention"],
                 rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 2e4},
                                  "full_attention": {"rope_type": "default", "rope_theta": 5e5}}),
            *(dict(model_type="olmo3", vocab_size=91, hidden_size=24, num_hidden_layers=2, num_attention_heads=3,
                   num_key_value_heads=3, intermediate_size=40, sliding_window=5, max_position_embeddings=32,
                   layer_types=["sliding_attention", "full_attention"],
                   rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
                                    "full_attention": rope}) for rope in hf_llama.ROPE_EXAMPLES.values())]


OLMO3 = hf_olmo2.OLMO2.derive(
    "OLMo 3", ("olmo3",), causal_lm("Olmo3"),
    "OLMo 3: OLMo 2's post-normed layer, sliding and full layers as layer_types says (a layer schedule), "
    "each kind with rotary positions of its own base (and the full ones' scaling)",
    priority=380, fields=FIELDS, document=document)
