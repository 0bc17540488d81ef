"""Hugging Face ``Glm4ForCausalLM`` (Zhipu's GLM-4-0414; and its base model) <-> a compiled spec.

GLM-4 wraps each sublayer in two RMSNorms, one before it and one on its output before the residual sum (Gemma 2's
sandwich, ``hf_gemma2``, written in the wiring form); its attention biases q/k/v but not the output,
rotates half of each head (``partial_rotary_factor`` 0.5) pairing neighbouring dimensions (``interleaved=true``),
and its MLP's gate and up projections are fused as Phi-3's (``gate_up_proj``, copied unsplit).
"""

from __future__ import annotations

from ..family import Requires, causal_lm
from . import hf_gemma2, hf_llama
from ..document import Document
from ..fields import Field, Fields
from .. import layouts
from ..writer import causal_masks
from ..layouts import covering, example

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


def document(s, *, padding: bool, head: bool) -> Document:
    """GLM-4's spec: sandwich-normed layers in the wiring form."""
    wiring = f"""  x = x + norm(attention(norm(x), heads={s.heads}, kv_heads={s.kv_heads}, head_dim={s.head_dim}, \\
                         mask={causal_masks(padding=padding)}, bias={s.attention_bias}, out_bias=false))
  x = x + norm(feedforward(norm(x), d_ff={s.d_ff}, activation={s.activation}, bias=false))"""
    return layouts.wired(s, norm=f"rmsnorm(eps={s.eps})", position=hf_llama.rotary(s, interleaved=True),
                         wiring=wiring, head=head)


EXAMPLES = {
    "Glm4ForCausalLM": example("glm4", head_dim=16, pad_token_id=0, eos_token_id=2),
    "Glm4Model": example("glm4", num_hidden_layers=1, num_key_value_heads=4, head_dim=8, attention_bias=False,
                         partial_rotary_factor=1.0, rms_norm_eps=1e-5, pad_token_id=0),
}

COVERAGE = [covering("glm4", num_hidden_layers=3, num_key_value_heads=1, head_dim=10, rms_norm_eps=1e-7,
                     attention_dropout=0.3, initializer_range=0.05, hidden_act="gelu", tie_word_embeddings=True,
                     attention_bias=False,
                     rope_parameters={"rope_type": "default", "rope_theta": 5e5, "partial_rotary_factor": 1.0}),
            *hf_llama.each_scaling(covering("glm4", num_hidden_layers=1, num_key_value_heads=3, head_dim=8,
                                            max_position_embeddings=32))]


GLM4 = hf_llama.LLAMA.derive(
    "GLM-4", ("glm4",), causal_lm("Glm4"),
    "GLM-4 (0414): sandwich norms (an RMSNorm before and after each sublayer, in the wiring form), q/k/v "
    "biased but not the output, half of each head rotated pairing neighbouring dimensions, the MLP's gate "
    "and up projections fused",
    priority=410, fields=FIELDS, document=document, hf_config=None,
    requires=(Requires(lambda f: f.rotary("decoder").get("interleaved"),
                       "its rotary positions pair halves, GLM-4's neighbouring dimensions (interleaved=true)"),),
    rules=hf_gemma2.WEIGHTS.derive({
        "feedforward": None, "feedforward.up": "mlp.gate_up_proj", "feedforward.down": "mlp.down_proj",
        "attention_post_norm": "post_self_attn_layernorm", "feedforward_norm": "post_attention_layernorm",
        "feedforward_post_norm": "post_mlp_layernorm"}))
