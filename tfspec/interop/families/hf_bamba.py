"""Hugging Face ``BambaForCausalLM`` (IBM's Bamba; and its base model) <-> a compiled spec.

Bamba (2025) is Llama's pre-normed RMSNorm layer with Mamba-2 (``mixer mamba2(...)``, the layer's ``mamba``) in
place of attention, except in the layers ``attn_layer_indices`` names, which attend with grouped-query attention
rotating half of each head (Bamba's rotary embedding always has ``partial_rotary_factor`` 0.5). Every feed-forward
is a SwiGLU; the norms are ``input_layernorm`` and ``pre_ff_layernorm``, the final one ``final_layernorm``.
"""

from __future__ import annotations

from ..family import Family, Requires, causal_lm
from ..weights import Weights, GatedMLP, Projections
from ..document import Document
from .. import hybrid

from . import hf_llama
from ..fields import Field, Fields, Fixed
from ..writer import causal_masks, schedule
from ..layouts import covering, example

MAMBA, ATTENTION = "linear_attention", "full_attention"
_LLAMA = {e.name: e for e in hf_llama.FIELDS.fields}


def _layer_types(f) -> list[str]:
    return [ATTENTION if mixer is None else MAMBA for mixer in f.layer_mixers("decoder")]


FIELDS = Fields(
    *(_LLAMA[n] for n in ("d_model", "heads", "kv_heads", "layers", "d_ff", "vocab", "eps", "p_attn_dropout",
                          "init_std", "tied", "rope_theta", "attention_bias", "mlp_bias")),
    # Bamba's rotary embedding turns half of each head whatever the configuration says
    Fixed("rope_parameters.partial_rotary_factor", 0.5, "partial_rotary_factor={value}: Bamba rotates half of each "
                                                        "head"),
    *hf_llama.ROPE_SCALING,
    *hybrid.mamba2_fields("mamba_n_heads", "mamba_d_head", "mamba_d_state", "mamba_n_groups", "mamba_d_conv",
                          "mamba_chunk_size", "mamba_conv_bias", "mamba_proj_bias", "mamba_expand"),
    Fixed("hidden_act", "silu", "hidden_act={value}: Bamba applies it in its Mamba-2 layers' convolution as well "
                                "as in its SwiGLUs, and tfspec's convolution applies SiLU"),
    Fixed("z_loss_coefficient", 0.0, "z_loss_coefficient={value} adds a z-loss on the logits to training, which "
                                     "tfspec's trainer does not", read=lambda c: c.z_loss_coefficient or 0.0),
    Field("layer_types", "attn_layer_indices",
          lambda f: [i for i, t in enumerate(_layer_types(f)) if t == ATTENTION],
          read=lambda c: list(c.layers_block_type), setting=False),
    ignored={**hf_llama.FIELDS.ignored, **hybrid.MAMBA2_IGNORED,
             "num_logits_to_keep": "how many positions' logits a generation step computes; the rest are unused"},
)


def document(s, *, padding: bool, head: bool) -> Document:
    """The spec a Bamba configuration describes: Mamba-2 or attention in each layer as
    ``attn_layer_indices`` says (the most common kind the stack's, the other a section), SwiGLUs."""
    norm = f"rmsnorm(eps={s.eps})"
    mamba = hybrid.mamba2_layer(s, "eps")
    attention = (f"heads={s.heads}, kv_heads={s.kv_heads}, mask={causal_masks(padding=padding)}, "
                 f"bias={s.attention_bias}")
    base, sections = schedule(s.value("layer_types"))
    own = f"mixer {mamba}" if base == MAMBA else "attention self " + attention.replace(", ", " ")
    other = f"mamba = attention(self, {attention})" if base == MAMBA else f"self_attn = mixer({mamba})"
    lines = "".join(f"  layers {layers} {{ {other} }}\n" for layers, _ in sections)
    position = hf_llama.rotary(s).replace("rotary(", "rotary(fraction=0.5, ")
    document = hybrid.document(s, norm=norm, position=position, own=own, head=head,
                               feedforward=f"d_ff={s.d_ff} activation=swiglu bias={s.mlp_bias}")
    return document.add_lines("decoder", lines)


# its attention rotates half of each head whatever the configuration says
HALF_ROTATED = Requires(lambda f: ATTENTION not in _layer_types(f) or f.rotary("decoder").get("fraction", 1.0) == 0.5,
                        "its attention rotates more or less than half of each head, which Bamba's always does")

EXAMPLES = {
    # Bamba: Mamba-2 with attention in layer 2 (half of each head rotated); the base model's attention first
    "BambaForCausalLM": example("bamba", intermediate_size=40, num_hidden_layers=3, attn_layer_indices=[2],
                                mamba_n_heads=4, mamba_d_head=16, mamba_d_state=8, mamba_n_groups=2,
                                mamba_chunk_size=8),
    "BambaModel": dict(model_type="bamba", vocab_size=90, hidden_size=32, intermediate_size=24, num_hidden_layers=3,
                       num_attention_heads=2, num_key_value_heads=1, attn_layer_indices=[0, 1], mamba_n_heads=2,
                       mamba_d_head=32, mamba_d_state=6, mamba_d_conv=3, mamba_chunk_size=4, mamba_proj_bias=True,
                       mamba_conv_bias=False, attention_bias=True, mlp_bias=True,
                       rope_parameters={"rope_type": "default", "rope_theta": 5e5}),
}

COVERAGE = [covering("bamba", num_hidden_layers=3, num_key_value_heads=1, attn_layer_indices=[0, 2], rms_norm_eps=1e-6,
                     attention_dropout=0.1, initializer_range=0.05, attention_bias=True, mlp_bias=True,
                     tie_word_embeddings=True, mamba_n_heads=3, mamba_d_head=32, mamba_d_state=6, mamba_n_groups=3,
                     mamba_d_conv=3, mamba_chunk_size=4, mamba_conv_bias=False, mamba_proj_bias=True, mamba_expand=4,
                     rope_parameters={"rope_type": "default", "rope_theta": 5e5}),
            *hf_llama.each_scaling(covering("bamba", num_hidden_layers=2, num_key_value_heads=3, attn_layer_indices=[1],
                                            mamba_n_heads=2, mamba_d_head=24, max_position_embeddings=32))]


BAMBA = Family(
    "Bamba", ("bamba",), causal_lm("Bamba"),
    "Bamba: Llama's pre-normed RMSNorm layers with Mamba-2 (mixer mamba2) in place of attention but in the "
    "layers attn_layer_indices names, whose attention rotates half of each head; SwiGLU feed-forwards",
    priority=610, fields=FIELDS, document=document, requires=(HALF_ROTATED,),
    rules=Weights({"attention": Projections(), "mixer": hybrid.Mamba2Mixer(),
                          "feedforward": GatedMLP("feed_forward"),
                          "operator_norm": "input_layernorm", "feedforward_norm": "pre_ff_layernorm"},
                         top={"embeddings.tokens.tokens": "embed_tokens", "decoder.final_norm": "final_layernorm"},
                         parts=hybrid.parts("Bamba")))
