"""Hugging Face ``Glm4ForCausalLM`` (Zhipu's GLM-4-0414; and its base model) <-> a compiled spec.

GLM-4 wraps each sublayer in two RMSNorms, one before it and one on its output before the residual sum (Gemma 2's
sandwich, ``hf_gemma2``, written in the wiring form); its attention biases q/k/v but not the output,
rotates half of each head (``partial_rotary_factor`` 0.5) pairing neighbouring dimensions (``interleaved=true``),
and its MLP's gate and up projections are fused as Phi-3's (``gate_up_proj``, copied unsplit).
"""

from __future__ import annotations

from . import hf_gemma2, hf_llama
from ..facts import Facts
from ..fields import Field, Fields
from ..mapping import InteropError, Rule, linear_rules, rule
from .. import layouts
from ..writer import SpecWriter, causal_masks

_LLAMA = [e for e in hf_llama.FIELDS.entries if getattr(e, "name", None) not in
          {"head_dim", "window", "attention_bias", "mlp_bias", "rotary_fraction"}
          and getattr(e, "config", None) != "pretraining_tp"]

FIELDS = Fields(
    *_LLAMA,
    Field("head_dim", "head_dim", lambda f: f.geometry("decoder").head_dim),
    Field("attention_bias", "attention_bias", lambda f: f.attention("decoder").bias, let=False),
    # exported even when whole: GLM-4's default is half
    Field("rotary_fraction", "rope_parameters.partial_rotary_factor",
          lambda f: f.rotary("decoder").get("fraction", 1.0),
          read=lambda c: hf_llama.written_fraction(hf_llama.rope(c)["partial_rotary_factor"])),
    ignored={**hf_llama.FIELDS.ignored},
)


def spec_text(config, *, head: bool = True, padding: bool = True, name: str = "reference",
              heading: tuple[str, ...] = ()) -> str:
    """The tfspec spec a GLM-4 configuration describes: sandwich-normed layers in the wiring form."""
    w = SpecWriter()
    s = FIELDS.write(config, w)
    rotary = hf_llama.rotary(s, interleaved=True)
    wiring = f"""  x = x + norm(attention(norm(x), heads={s.heads}, kv_heads={s.kv_heads}, head_dim={s.head_dim}, \\
                         mask={causal_masks(padding=padding)}, bias={s.attention_bias}, out_bias=false))
  x = x + norm(feedforward(norm(x), d_ff={s.d_ff}, activation={s.activation}, bias=false))"""
    document = layouts.wired(s, norm=f"rmsnorm(eps={s.eps})", position=rotary, wiring=wiring, head=head)
    return w.text(document.text(name), list(heading))


def hf_config(spec) -> dict:
    """The GLM-4 configuration ``spec`` would be."""
    f = Facts(spec, "GLM-4")
    f.kind("decoder-only")
    if not f.rotary("decoder").get("interleaved"):
        raise f.refuse("its rotary positions pair halves, GLM-4's neighbouring dimensions (interleaved=true)")
    return {"model_type": "glm4", **FIELDS.config(f)}


def _rules(model, prefix: str, state: dict, lm: bool) -> tuple[list[Rule], dict[str, str]]:
    if model.spec.kind != "decoder-only":
        raise InteropError(f"GLM-4 is decoder-only; spec '{model.spec.name}' is {model.spec.kind}")
    ours_state = model.state_dict()
    parts = hf_gemma2.sandwich_modules(model)
    rules = [rule("embeddings.tokens.tokens.weight", f"{prefix}embed_tokens.weight"),
             rule("decoder.final_norm.weight", f"{prefix}norm.weight")]
    norms = {"attention_norm": "input_layernorm", "attention_post_norm": "post_self_attn_layernorm",
             "feedforward_norm": "post_attention_layernorm", "feedforward_post_norm": "post_mlp_layernorm"}
    for i in range(len(model.decoder.layers)):
        ours, theirs = f"decoder.layers.{i}", f"{prefix}layers.{i}"
        feedforward = f"{ours}.{parts['feedforward']}"
        rules += hf_llama.attention_rules(model, f"{ours}.{parts['attention']}", theirs, state, ours_state)
        rules += [*linear_rules(f"{feedforward}.up", f"{theirs}.mlp.gate_up_proj", state, ours_state),
                  *linear_rules(f"{feedforward}.down", f"{theirs}.mlp.down_proj", state, ours_state)]
        rules += [rule(f"{ours}.{parts[part]}.weight", f"{theirs}.{name}.weight") for part, name in norms.items()]
    head, aliases = hf_llama.lm_head_rules(model, lm)
    return rules + head, aliases


EXPORT_PRIORITY = 410  # where export tries this module's families (lower first)
FAMILIES = (  # the families this module reads and writes (``tfspec.interop.family``)
    hf_llama.decoder_family(
        "GLM-4", ("glm4",), {"Glm4ForCausalLM": {"head": True}, "Glm4Model": {"head": False}},
        "GLM-4 (0414): sandwich norms (an RMSNorm before and after each sublayer, in the wiring form), q/k/v "
        "biased but not the output, half of each head rotated pairing neighbouring dimensions, the MLP's gate "
        "and up projections fused",
        module=__name__, fields=FIELDS, spec_text=spec_text, hf_config=hf_config, rules=_rules),
)
