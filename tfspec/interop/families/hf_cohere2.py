"""Hugging Face ``Cohere2ForCausalLM`` (Command R7B, Command A; and its base model) <-> a compiled spec.

Cohere 2 is Cohere's layer (``hf_cohere``: attention and a SwiGLU feed-forward in parallel on one
LayerNorm without bias, the logits multiplied by ``logit_scale``) whose layers slide over a window or see every
earlier key as ``layer_types`` says (three to one by default): the sliding layers rotate their queries and keys
(neighbouring dimensions paired), the full ones use no positions at all (NoPE) -- a layer schedule whose
sections change the mask and the positions. With no window (``sliding_window`` None) no layer rotates.
"""

from __future__ import annotations

from ..family import Requires, causal_lm
from ..document import Document
from . import hf_cohere, hf_exaone4, hf_gemma2, hf_llama
from ..fields import Field, Fields
from .. import layouts
from ..writer import causal_masks, schedule
from ..layouts import covering, example

SLIDING = hf_gemma2.SLIDING
_COHERE = [e for e in hf_cohere.COHERE_FIELDS.entries if getattr(e, "config", None) != "use_qk_norm"]

FIELDS = Fields(
    *_COHERE,
    next(e for e in hf_llama.FIELDS.fields if e.name == "head_dim"),
    # None where no layer rotates: any window leaves the sliding layers rotating
    Field("window", "sliding_window", lambda f: f.one_window("decoder"), read=hf_exaone4.sliding_window_of,
          null=lambda f: not any(f.rotates(a.position) for a in f.layer_attentions("decoder"))),
    Field("layer_types", "layer_types", hf_exaone4.layer_types_of, read=lambda c: list(c.layer_types), setting=False),
    ignored={**hf_cohere.COHERE_FIELDS.ignored},
)


def document(s, *, padding: bool, head: bool) -> Document:
    """The spec a Cohere 2 configuration describes: Cohere's parallel layer in the wiring form, the sliding
    layers (rotary) and the full ones (no positions) as a layer schedule."""
    slides = [s.window is not None and t == SLIDING for t in s.value("layer_types")]

    def position(slide: bool) -> str:  # only a sliding layer rotates, and only where there is a window
        return hf_llama.rotary(s, interleaved=True) if slide and s.config.sliding_window else "none"

    def masks(slide: bool) -> str:
        return causal_masks(s.window if slide else None, padding)

    base, sections = schedule(slides)
    lines = "".join(f"  layers {layers} {{ self_attn mask={masks(slide)}; position {position(slide)} }}\n"
                    for layers, slide in sections)
    if not any(slides):
        s.writer.forget("rope_theta")
    norm = f"layernorm(eps={s.eps}, bias=false)"
    head_dim = f", head_dim={s.head_dim}" if s.head_dim else ""
    wiring = f"""  h = norm(x)
  x = x + attention(h, heads={s.heads}, kv_heads={s.kv_heads}{head_dim}, mask={masks(base)}, \\
                    bias={s.attention_bias}) + \\
      feedforward(h, d_ff={s.d_ff}, activation={s.activation}, bias=false)   # in parallel, on one norm"""
    if not head:  # the base model has no logits to scale
        s.writer.forget("logit_scale")
    document = layouts.wired(s, norm=norm, position=position(base), wiring=wiring, head=head).add_lines(
        "decoder", lines)
    if head and s.value("logit_scale") != 1.0:
        document = document.change_tail("head", scale=s.logit_scale)
    return document


EXAMPLES = {
    "Cohere2ForCausalLM": example("cohere2", num_hidden_layers=4, sliding_window=6, logit_scale=0.25, bos_token_id=1,
                                  eos_token_id=2),
    "Cohere2Model": example("cohere2", num_key_value_heads=4, head_dim=16, sliding_window=5,
                            layer_types=["full_attention", "sliding_attention"], attention_bias=True, bos_token_id=1,
                            eos_token_id=2),
}

COVERAGE = [covering("cohere2", num_hidden_layers=4, num_key_value_heads=1, head_dim=10, layer_norm_eps=1e-7,
                     attention_dropout=0.3, initializer_range=0.05, hidden_act="gelu", tie_word_embeddings=False,
                     attention_bias=True, logit_scale=0.5, sliding_window=5,
                     layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
                     rope_parameters={"rope_type": "default", "rope_theta": 5e5}),
            *hf_llama.each_scaling(covering("cohere2", num_hidden_layers=1, num_key_value_heads=3, sliding_window=5,
                                            layer_types=["sliding_attention"], max_position_embeddings=32))]


COHERE2 = hf_cohere.COHERE.derive(
    "Cohere 2", ("cohere2",), causal_lm("Cohere2"),
    "Cohere 2 (Command R7B, Command A): Cohere's parallel layer, sliding layers with interleaved rotary "
    "positions and full layers with none (NoPE) as layer_types says (a layer schedule)",
    priority=430, fields=FIELDS, document=document,
    requires=(Requires(lambda f: f.norm_placement("decoder").startswith("parallel"),
                       "its sublayers are not parallel on one norm, as Cohere 2's are"),))
