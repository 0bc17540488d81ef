"""Hugging Face ``Lfm2ForCausalLM`` (Liquid AI's LFM2; and its base model) <-> a compiled spec.

LFM2 (2025) is a hybrid of pre-normed RMSNorm layers: as ``layer_types`` says (``full_attn_idxs`` its attention
layers), each mixes positions with a gated short convolution (``mixer shortconv(conv_L_cache)``, the layer's
``conv``: out(C ⊙ conv(B ⊙ x)), whose decoding state is its last inputs) or with grouped-query attention whose
heads' queries and keys are RMS-normed before rotary positions; every feed-forward is a SwiGLU (``w1`` the gate,
``w3`` the up projection, ``w2`` down), whose width ``block_auto_adjust_ff_dim`` derives from
``intermediate_size`` (two thirds of it, times ``block_ffn_dim_multiplier``, rounded up to ``block_multiple_of``):
the spec holds the width it comes to, which export writes back as ``intermediate_size`` with the adjustment off.
Its final norm is named ``embedding_norm``.
"""

from __future__ import annotations

from ..family import Family, causal_lm
from ..document import Document
from ..weights import Projections, Weights
from .. import hybrid

from . import hf_llama
from ..fields import Field, Fields, Fixed
from ..writer import causal_masks, schedule
from ..layouts import covering, example

CONV, FULL = "conv", "full_attention"
_LLAMA = {e.name: e for e in hf_llama.FIELDS.fields}


def ff_width(config) -> int:
    """The SwiGLU's width Hugging Face's ``Lfm2MLP`` builds from the configuration."""
    width = config.intermediate_size
    if config.block_auto_adjust_ff_dim:
        width = int(2 * width / 3)
        if config.block_ffn_dim_multiplier is not None:
            width = int(config.block_ffn_dim_multiplier * width)
            multiple = config.block_multiple_of
            width = multiple * ((width + multiple - 1) // multiple)
    return width


def _conv(f):
    """The options of the decoder's short convolution (refused where its mixers are another kind)."""
    options = f.mixer("decoder")
    if hasattr(options, "key_dim") or not hasattr(options, "kernel"):
        raise f.refuse(f"its layers' mixer is {f.layer_mixers('decoder')[0].kind.name}, not LFM2's short "
                       "convolution (mixer shortconv(...))")
    return options


def layer_types_of(f) -> list[str]:
    return [FULL if mixer is None else CONV for mixer in f.layer_mixers("decoder")]


FIELDS = Fields(
    *(_LLAMA[n] for n in ("d_model", "heads", "kv_heads", "layers", "vocab", "init_std", "tied", "rope_theta")),
    *hf_llama.ROPE_SCALING,
    Field("eps", "norm_eps", lambda f: f.norm_option("decoder", "eps", 1e-5)),
    Field("d_ff", "intermediate_size", lambda f: f.feedforward("decoder").d_ff, read=ff_width),
    # the width is the spec's: export writes it with the adjustment off (the same width, from other numbers)
    Field("ff_adjusted", "block_auto_adjust_ff_dim", lambda f: False, read=lambda c: c.block_auto_adjust_ff_dim,
          setting=False),
    Field("conv_kernel", "conv_L_cache", lambda f: _conv(f).kernel),
    Fixed("conv_bias", False, "conv_bias={value}: LFM2 zeroes a padded position's input before its biased "
                              "projection, tfspec's convolution what the projection makes of it"),
    Field("layer_types", "layer_types", layer_types_of, read=lambda c: list(c.layer_types), setting=False),
    Field("full_attn_idxs", "full_attn_idxs", lambda f: [i for i, t in enumerate(layer_types_of(f)) if t == FULL],
          read=lambda c: list(c.layer_types), setting=False),
    ignored={**hf_llama.FIELDS.ignored,
             "block_multiple_of": "read only with block_auto_adjust_ff_dim, whose width the spec holds",
             "block_ffn_dim_multiplier": "read only with block_auto_adjust_ff_dim, whose width the spec holds"},
)


def document(s, *, padding: bool, head: bool) -> Document:
    """LFM2's spec: the most common kind of layer the stack's, the others a section putting attention in the
    convolution's place (or the convolution in the attention's)."""
    return layers_document(s, [(t, True) for t in s.value("layer_types")], f"d_ff={s.d_ff}", "", head=head,
                           padding=padding)


def layers_document(s, layers: list[tuple[str, bool]], feedforward: str, dense: str, *, head: bool,
                    padding: bool) -> Document:
    """An LFM2 spec from its settings ``s``: each layer's (type, whether its feed-forward takes the
    ``feedforward`` arguments, else the ``dense`` ones: LFM2-MoE's first layers), the most common the stack's and
    the others sections."""
    norm = f"rmsnorm(eps={s.eps})"
    conv = f"shortconv({s.conv_kernel})"
    attention = f"heads={s.heads}, kv_heads={s.kv_heads}, qk_norm={norm}, mask={causal_masks(None, padding)}, " \
                "bias=false, out_bias=false"
    (base, routes), sections = schedule(layers)
    own = f"mixer {conv}" if base == CONV else "attention self " + attention.replace(", ", " ")
    other = f"conv = attention(self, {attention})" if base == CONV else f"self_attn = mixer({conv})"

    def section(layer: tuple[str, bool]) -> str:
        return "; ".join(([other] if layer[0] != base else []) +
                         ([f"ffn {feedforward if layer[1] else dense}"] if layer[1] != routes else []))

    lines = "".join(f"  layers {selected} {{ {section(layer)} }}\n" for selected, layer in sections)
    document = hybrid.document(s, norm=norm, position=hf_llama.rotary(s), own=own, head=head, attn_dropout=False,
                               feedforward=f"{feedforward if routes else dense} activation=swiglu bias=false")
    return document.add_lines("decoder", lines)


EXAMPLES = {
    # LFM2: short convolutions with attention in every second layer; the base model attention's with one
    "Lfm2ForCausalLM": example("lfm2", num_hidden_layers=4, conv_L_cache=3, full_attn_idxs=[1, 3],
                               block_auto_adjust_ff_dim=False, tie_word_embeddings=False),
    "Lfm2Model": example("lfm2", intermediate_size=40, num_hidden_layers=3, num_attention_heads=2, conv_L_cache=4,
                         full_attn_idxs=[0, 2], block_auto_adjust_ff_dim=False, norm_eps=1e-6,
                         rope_parameters={"rope_type": "default", "rope_theta": 5e5}),
}

COVERAGE = [covering("lfm2", num_hidden_layers=3, num_key_value_heads=1, conv_L_cache=4, full_attn_idxs=[2],
                     block_auto_adjust_ff_dim=False, norm_eps=1e-6, initializer_range=0.05, tie_word_embeddings=False,
                     rope_parameters={"rope_type": "default", "rope_theta": 5e5}),
            *hf_llama.each_scaling(covering("lfm2", num_hidden_layers=2, num_key_value_heads=3, full_attn_idxs=[1],
                                            block_auto_adjust_ff_dim=False, max_position_embeddings=32))]


LFM2 = Family(
    "LFM2", ("lfm2",), causal_lm("Lfm2"),
    "LFM2: a hybrid of pre-normed RMSNorm layers mixing by a gated short convolution (mixer shortconv(...)) "
    "or by grouped-query attention with qk-norms as layer_types says, a layer schedule; SwiGLU feed-forwards "
    "of the width block_auto_adjust_ff_dim derives",
    priority=580, fields=FIELDS, document=document,
    # its short convolution or attention (q/k/v and out_proj, qk-norms), its SwiGLU (w1 the gate, w3 up, w2 down)
    rules=Weights({"attention": Projections(names=("q_proj", "k_proj", "v_proj", "out_proj")),
                   "attention.q_norm": "self_attn.q_layernorm", "attention.k_norm": "self_attn.k_layernorm",
                   **{f"mixer.{part}": f"conv.{part}" for part in ("in_proj", "out_proj", "conv")},
                   "feedforward.up": ("feed_forward.w1", "feed_forward.w3"), "feedforward.down": "feed_forward.w2",
                   "operator_norm": "operator_norm", "feedforward_norm": "ffn_norm"},
                  top={"embeddings.tokens.tokens": "embed_tokens", "decoder.final_norm": "embedding_norm"},
                  parts=hybrid.parts("LFM2")))
