"""Hugging Face ``Cohere2ForCausalLM`` (Command R7B, Command A; and its base model) <-> a compiled spec.

Cohere 2 is Cohere's layer (``hf_cohere``: attention and a SwiGLU feed-forward in parallel on one
LayerNorm without bias, the logits multiplied by ``logit_scale``) whose layers slide over a window or see every
earlier key as ``layer_types`` says (three to one by default): the sliding layers rotate their queries and keys
(neighbouring dimensions paired), the full ones use no positions at all (NoPE) -- a layer schedule whose
sections change the mask and the positions. With no window (``sliding_window`` None) no layer rotates.
"""

from __future__ import annotations

from . import hf_cohere, hf_exaone4, hf_gemma2, hf_llama
from ..facts import Facts
from ..fields import Field, Fields
from .. import layouts
from ..writer import SpecWriter, causal_masks, schedule

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


def spec_text(config, *, head: bool = True, padding: bool = True, name: str = "reference",
              heading: tuple[str, ...] = ()) -> str:
    """The tfspec spec a Cohere 2 configuration describes: Cohere's parallel layer in the wiring form, the sliding
    layers (rotary) and the full ones (no positions) as a layer schedule."""
    w = SpecWriter()
    s = FIELDS.write(config, w)
    slides = [s.window is not None and t == SLIDING for t in s.value("layer_types")]

    def position(slide: bool) -> str:  # only a sliding layer rotates, and only where there is a window
        return hf_llama.rotary(s, interleaved=True) if slide and config.sliding_window else "none"

    def masks(slide: bool) -> str:
        return causal_masks(s.window if slide else None, padding)

    base, sections = schedule(slides)
    lines = "".join(f"  layers {layers} {{ self_attn mask={masks(slide)}; position {position(slide)} }}\n"
                    for layers, slide in sections)
    if not any(slides):
        w.forget("rope_theta")
    norm = f"layernorm(eps={s.eps}, bias=false)"
    head_dim = f", head_dim={s.head_dim}" if s.head_dim else ""
    wiring = f"""  h = norm(x)
  x = x + attention(h, heads={s.heads}, kv_heads={s.kv_heads}{head_dim}, mask={masks(base)}, \\
                    bias={s.attention_bias}) + \\
      feedforward(h, d_ff={s.d_ff}, activation={s.activation}, bias=false)   # in parallel, on one norm"""
    if not head:  # the base model has no logits to scale
        w.forget("logit_scale")
    document = layouts.wired(s, norm=norm, position=position(base), wiring=wiring, head=head).add_lines(
        "decoder", lines)
    if head and s.value("logit_scale") != 1.0:
        document = document.change_tail("head", scale=s.logit_scale)
    return w.text(document.text(name), list(heading))


def hf_config(spec) -> dict:
    """The Cohere 2 configuration ``spec`` would be, its ``layer_types`` read from each layer."""
    f = Facts(spec, "Cohere 2")
    f.kind("decoder-only")
    if not f.norm_placement("decoder").startswith("parallel"):
        raise f.refuse("its sublayers are not parallel on one norm, as Cohere 2's are")
    return {"model_type": "cohere2", **FIELDS.config(f)}


EXPORT_PRIORITY = 430  # where export tries this module's families (lower first)
FAMILIES = (  # the families this module reads and writes (``tfspec.interop.family``)
    hf_llama.decoder_family(
        "Cohere 2", ("cohere2",), {"Cohere2ForCausalLM": {"head": True}, "Cohere2Model": {"head": False}},
        "Cohere 2 (Command R7B, Command A): Cohere's parallel layer, sliding layers with interleaved rotary "
        "positions and full layers with none (NoPE) as layer_types says (a layer schedule)",
        module=__name__, fields=FIELDS, spec_text=spec_text, hf_config=hf_config, rules=hf_cohere.weight_rules),
)
