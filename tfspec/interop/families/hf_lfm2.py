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

from ..weights import Projections, lm_head_rules
from .. import hybrid

from . import hf_llama
from ..family import Family, exported_config
from ..fields import Field, Fields, Fixed
from ..mapping import Rule, linear_rules, rule
from ..writer import SpecWriter, causal_masks, schedule

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


def spec_text(config, *, head: bool = True, padding: bool = True, name: str = "reference",
              heading: tuple[str, ...] = ()) -> str:
    """The tfspec spec an LFM2 configuration describes: the most common kind of layer the stack's, the others a
    section putting attention in the convolution's place (or the convolution in the attention's)."""
    w = SpecWriter()
    s = FIELDS.write(config, w)
    return layers_text(w, s, [(t, True) for t in s.value("layer_types")], f"d_ff={s.d_ff}", "", head=head,
                       padding=padding, name=name, heading=heading)


def layers_text(w: SpecWriter, s, layers: list[tuple[str, bool]], feedforward: str, dense: str, *, head: bool,
                padding: bool, name: str, heading: tuple[str, ...]) -> str:
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
    return w.text(document.add_lines("decoder", lines).text(name), list(heading))


hf_config = exported_config("LFM2", "lfm2", "decoder-only", FIELDS)


def mlp_rules(ours: str, theirs: str, state: dict, ours_state: dict) -> list[Rule]:
    """LFM2's SwiGLU: ``w1`` the gate and ``w3`` the up projection into our ``up`` (gate first), ``w2`` down."""
    return linear_rules(f"{ours}.up", (f"{theirs}.w1", f"{theirs}.w3"), state, ours_state) + \
        linear_rules(f"{ours}.down", f"{theirs}.w2", state, ours_state)


def weight_rules(model, prefix: str, state: dict, lm: bool, feedforward_rules=mlp_rules
           ) -> tuple[list[Rule], dict[str, str]]:
    """LFM2's tensors layer by layer: its short convolution or attention, its norms, and its feed-forward
    (``feedforward_rules(ours, theirs, state, ours_state)``: LFM2's SwiGLU by default)."""
    ours_state = model.state_dict()
    rules = [rule("embeddings.tokens.tokens.weight", f"{prefix}embed_tokens.weight"),
             rule("decoder.final_norm.weight", f"{prefix}embedding_norm.weight")]
    for i in range(len(model.decoder.layers)):
        ours, theirs, parts = f"decoder.layers.{i}", f"{prefix}layers.{i}", hybrid.layer_parts(model, i, "LFM2")
        operator = f"{ours}.{parts['operator']}"
        if "attends" in parts:
            rules += [r for r in Projections()(model, operator, theirs, state, ours_state)
                      if not r.theirs[0].endswith(".o_proj.weight")]  # (LFM2 names it out_proj)
            rules += linear_rules(f"{operator}.out", f"{theirs}.self_attn.out_proj", state, ours_state)
            rules += [rule(f"{operator}.q_norm.weight", f"{theirs}.self_attn.q_layernorm.weight"),
                      rule(f"{operator}.k_norm.weight", f"{theirs}.self_attn.k_layernorm.weight")]
        else:
            rules += [r for part in ("in_proj", "out_proj")
                      for r in linear_rules(f"{operator}.{part}", f"{theirs}.conv.{part}", state, ours_state)]
            rules += [rule(f"{operator}.conv.weight", f"{theirs}.conv.conv.weight")]
            if f"{operator}.conv.bias" in ours_state or f"{theirs}.conv.conv.bias" in state:
                rules.append(rule(f"{operator}.conv.bias", f"{theirs}.conv.conv.bias"))
        rules += feedforward_rules(f"{ours}.{parts['feedforward']}", f"{theirs}.feed_forward", state, ours_state)
        rules += [rule(f"{ours}.{parts['operator_norm']}.weight", f"{theirs}.operator_norm.weight"),
                  rule(f"{ours}.{parts['feedforward_norm']}.weight", f"{theirs}.ffn_norm.weight")]
    head, aliases = lm_head_rules(model, lm)
    return rules + head, aliases


EXPORT_PRIORITY = 580  # where export tries this module's families (lower first)
FAMILIES = (  # the families this module reads and writes (``tfspec.interop.family``)
    Family(
        "LFM2", ("lfm2",), {"Lfm2ForCausalLM": {"head": True}, "Lfm2Model": {"head": False}},
        "LFM2: a hybrid of pre-normed RMSNorm layers mixing by a gated short convolution (mixer shortconv(...)) "
        "or by grouped-query attention with qk-norms as layer_types says, a layer schedule; SwiGLU feed-forwards "
        "of the width block_auto_adjust_ff_dim derives",
        module=__name__, fields=FIELDS, spec_text=spec_text, hf_config=hf_config, rules=weight_rules),
)
