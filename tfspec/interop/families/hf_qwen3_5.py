"""Hugging Face ``Qwen3_5ForCausalLM`` (Qwen3.5's text model; and its base ``Qwen3_5TextModel``) <-> a compiled spec.

Qwen3.5 (2026) is a hybrid: as ``layer_types`` says, most layers mix positions with Gated DeltaNet (``mixer
gated_deltanet(...)``, the layer's ``linear_attn``: a delta-rule state per value head, a short convolution, a
gated RMSNorm), every fourth by default with gated attention (``attention(self, ...)`` with ``steps=output_gate``:
σ of a projection of the input times the heads' output; its queries' and gate's rows interleaved per head in
``q_proj``), each head's queries and keys normed, a quarter of each head rotated. Every norm is the (1 + w) RMSNorm
(``gemma_rmsnorm``); the feed-forward a SwiGLU. The text model's M-RoPE sections turn the three position axes of an
image's tokens; a text's three are equal, which is rotary positions (``rotary(fraction=...)``).
"""

from __future__ import annotations

from ..family import Family, causal_lm
from ..document import Document
from ..weights import Weights, GatedMLP
from ...registry import ATTENTION_STEPS
from .. import hybrid
from . import hf_llama
from ..fields import Field, Fields, Fixed
from ..mapping import Rule, linear_rules, rule
from ..writer import causal_masks, schedule
from ..layouts import covering

LINEAR, FULL = "linear_attention", "full_attention"
_LLAMA = {e.name: e for e in hf_llama.FIELDS.fields}


def _mixer(f):
    """The options of the decoder's Gated DeltaNet (refused where its mixers keep no delta-rule state)."""
    options = f.mixer("decoder")
    if not hasattr(options, "key_dim"):
        raise f.refuse(f"its layers' mixer is {f.layer_mixers('decoder')[0].kind.name}, not Gated DeltaNet "
                       "(mixer gated_deltanet(...))")
    return options


def _layer_types(f) -> list[str]:
    return [FULL if mixer is None else LINEAR for mixer in f.layer_mixers("decoder")]


def _gate_bias(f) -> bool:
    """The attention's bias, which its output gate (rows of ``q_proj``) must share."""
    attention = f.attention("decoder")
    gates = [s for s in attention.steps if ATTENTION_STEPS[s.name].gates_output]
    if len(gates) != 1:
        raise f.refuse("its attention has no output gate (steps=output_gate): Qwen3.5's is gated")
    if gates[0].options.get("bias", False) != attention.bias or attention.out_bias != attention.bias:
        raise f.refuse("its attention's projections, output gate and output projection are not all biased or all "
                       "not (attention_bias)")
    return attention.bias


FIELDS = Fields(
    *(_LLAMA[n] for n in ("d_model", "heads", "kv_heads", "layers", "d_ff", "vocab", "eps", "p_attn_dropout",
                          "init_std", "tied", "rope_theta", "rotary_fraction")),
    Fixed("hidden_act", "silu", "hidden_act={value}: Qwen3.5 applies it in its Gated DeltaNet's convolution as well "
                                "as in its MLP, and tfspec's convolution applies SiLU"),
    Field("head_dim", "head_dim", lambda f: f.geometry("decoder").head_dim),  # (its default is 256, not d / heads)
    Field("attention_bias", "attention_bias", _gate_bias, let=False),
    Field("linear_heads", "linear_num_value_heads", lambda f: _mixer(f).heads),
    Field("linear_key_heads", "linear_num_key_heads", lambda f: _mixer(f).key_heads or _mixer(f).heads),
    Field("linear_key_dim", "linear_key_head_dim", lambda f: _mixer(f).key_dim),
    Field("linear_value_dim", "linear_value_head_dim", lambda f: _mixer(f).value_dim),
    Field("conv_kernel", "linear_conv_kernel_dim", lambda f: _mixer(f).kernel),
    Field("layer_types", "layer_types", _layer_types, read=lambda c: list(c.layer_types), setting=False),
    *hf_llama.ROPE_SCALING,
    ignored={**hf_llama.FIELDS.ignored,
             "rope_parameters.mrope_section": "M-RoPE's sections turn the time, height and width positions of an "
                                              "image's tokens; a text's three are equal: rotary positions",
             "rope_parameters.mrope_interleaved": "how M-RoPE interleaves those sections: the same for a text",
             "full_attention_interval": "the period of the default layer_types, which layer_types states"},
)


def hybrid_document(s, feedforward: str, *, head: bool, padding: bool, sparse: list[bool] | None = None,
                    dense: str = "") -> Document:
    """A Qwen hybrid's spec from its settings ``s``: Gated DeltaNet or gated attention in each layer as
    ``layer_types`` says, SwiGLU feed-forwards of the ``feedforward`` arguments, and (``sparse``, per layer) the
    layers whose feed-forward takes the ``dense`` ones instead (Qwen3-Next's ``mlp_only_layers``); one section per
    kind of layer."""
    norm = f"gemma_rmsnorm(eps={s.eps})"
    bias = str(s.attention_bias).lower()
    mixer = (f"gated_deltanet({s.linear_heads}, key_heads={s.linear_key_heads}, key_dim={s.linear_key_dim}, "
             f"value_dim={s.linear_value_dim}, kernel={s.conv_kernel}, eps={s.eps})")
    attention = (f"heads={s.heads}, kv_heads={s.kv_heads}, head_dim={s.head_dim}, qk_norm={norm}, "
                 f"mask={causal_masks(None, padding)}, bias={bias}, out_bias={bias}, "
                 f"steps=output_gate(bias={bias})")
    sparse = sparse or [True] * s.value("layers")
    (linear, routes), sections = schedule(list(zip([t == LINEAR for t in s.value("layer_types")], sparse)))
    own = f"mixer {mixer}" if linear else "attention self " + attention.replace(", ", " ")
    other = f"linear_attn = attention(self, {attention})" if linear else f"self_attn = mixer({mixer})"

    def section(layer: tuple[bool, bool]) -> str:
        changes = ([other] if layer[0] != linear else []) + \
            ([f"ffn {feedforward if layer[1] else dense}"] if layer[1] != routes else [])
        return "; ".join(changes)

    lines = "".join(f"  layers {layers} {{ {section(layer)} }}\n" for layers, layer in sections)
    document = hybrid.document(s, norm=norm, position=hf_llama.rotary(s), own=own, head=head,
                               feedforward=f"activation=swiglu bias=false {feedforward if routes else dense}")
    return document.add_lines("decoder", lines)


def document(s, *, padding: bool, head: bool) -> Document:
    """Qwen3.5's text spec: the most common kind of layer the stack's, the other kind's layers a section that puts
    it in the mixer's place (or the attention's)."""
    return hybrid_document(s, f"d_ff={s.d_ff}", head=head, padding=padding)


def gated_attention(model, ours: str, theirs: str, state: dict, ours_state: dict) -> list[Rule]:
    """Gated attention (the layer's ``self_attn``): ``q_proj``'s rows, each head's queries then its gate, into our
    ``qkv``'s queries and the output gate's ``proj``; ``k_proj`` and ``v_proj`` after them in ``qkv``; the norms and
    ``o_proj``."""
    attention, theirs = model.get_submodule(ours), f"{theirs}.self_attn"
    heads, kv_heads, head_dim = attention.heads, attention.kv_heads, attention.head_dim
    q = [h * 2 * head_dim + j for h in range(heads) for j in range(head_dim)]
    kv = [2 * heads * head_dim + r for r in range(2 * kv_heads * head_dim)]
    gate = [h * 2 * head_dim + head_dim + j for h in range(heads) for j in range(head_dim)]
    split = (2 * heads * head_dim, kv_heads * head_dim, kv_heads * head_dim)
    pieces = (f"{theirs}.q_proj", f"{theirs}.k_proj", f"{theirs}.v_proj")
    rules = [rule((f"{ours}.qkv.weight", f"{ours}.output_gate.proj.weight"), tuple(f"{p}.weight" for p in pieces),
                  rows=tuple(q + kv + gate), split=split)]
    if f"{ours}.qkv.bias" in ours_state or f"{theirs}.q_proj.bias" in state:
        rules.append(rule((f"{ours}.qkv.bias", f"{ours}.output_gate.proj.bias"), tuple(f"{p}.bias" for p in pieces),
                          rows=tuple(q + kv + gate), split=split))
    rules += [rule(f"{ours}.q_norm.weight", f"{theirs}.q_norm.weight"),
              rule(f"{ours}.k_norm.weight", f"{theirs}.k_norm.weight")]
    return rules + linear_rules(f"{ours}.out", f"{theirs}.o_proj", state, ours_state)


MIXER_TENSORS = ("in_proj_qkv.weight", "in_proj_z.weight", "in_proj_b.weight", "in_proj_a.weight", "conv1d.weight",
                 "dt_bias", "A_log", "norm.weight", "out_proj.weight")  # Qwen3.5's names are ours


def identical_mixer(model, ours: str, theirs: str, state: dict, ours_state: dict) -> list[Rule]:
    """Qwen3.5's Gated DeltaNet (the layer's ``linear_attn``): its tensors' names are ours."""
    return [rule(f"{ours}.{t}", f"{theirs}.linear_attn.{t}") for t in MIXER_TENSORS]


# a Qwen hybrid's checkpoint, layer by layer: its Gated DeltaNet or gated attention, the norm before each sublayer,
# and its feed-forward
WEIGHTS = Weights({"attention": gated_attention, "mixer": identical_mixer, "feedforward": GatedMLP(),
                          "operator_norm": "input_layernorm", "feedforward_norm": "post_attention_layernorm"},
                         parts=hybrid.parts("Qwen3.5"))

EXAMPLES = {
    # Qwen3.5's text model: three Gated DeltaNet layers to one of gated attention (a quarter of each head rotated);
    # the base model the other way round (its stack's layer attention, a section putting Gated DeltaNet in its
    # place), its projections and gate biased
    "Qwen3_5ForCausalLM": dict(model_type="qwen3_5_text", vocab_size=90, hidden_size=32, intermediate_size=40,
                               num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                               linear_num_value_heads=4, linear_num_key_heads=2, linear_key_head_dim=6,
                               linear_value_head_dim=5, linear_conv_kernel_dim=3, rms_norm_eps=1e-6,
                               layer_types=["linear_attention", "full_attention", "linear_attention",
                                            "linear_attention"],
                               rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                                "partial_rotary_factor": 0.25, "mrope_section": [1, 1, 0]}),
    "Qwen3_5TextModel": dict(model_type="qwen3_5_text", vocab_size=90, hidden_size=32, intermediate_size=40,
                             num_hidden_layers=3, num_attention_heads=2, num_key_value_heads=2, head_dim=12,
                             linear_num_value_heads=2, linear_num_key_heads=2, linear_key_head_dim=8,
                             linear_value_head_dim=8, linear_conv_kernel_dim=4, attention_bias=True,
                             layer_types=["full_attention", "linear_attention", "full_attention"],
                             rope_parameters={"rope_type": "default", "rope_theta": 5e5,
                                              "partial_rotary_factor": 0.5}),
}

COVERAGE = [covering("qwen3_5_text", num_hidden_layers=3, num_key_value_heads=1, head_dim=12, linear_num_value_heads=4,
                     linear_num_key_heads=2, linear_key_head_dim=6, linear_value_head_dim=5, linear_conv_kernel_dim=3,
                     rms_norm_eps=1e-5, attention_bias=True, attention_dropout=0.1, initializer_range=0.05,
                     tie_word_embeddings=True, layer_types=["linear_attention", "full_attention", "full_attention"],
                     rope_parameters={"rope_type": "default", "rope_theta": 5e5, "partial_rotary_factor": 0.5}),
            *hf_llama.each_scaling(covering("qwen3_5_text", num_hidden_layers=2, num_key_value_heads=3, head_dim=16,
                                            linear_num_value_heads=2, linear_num_key_heads=2, linear_key_head_dim=4,
                                            linear_value_head_dim=4, max_position_embeddings=32,
                                            layer_types=["linear_attention", "full_attention"]))]


QWEN3_5 = Family(
    "Qwen3.5", ("qwen3_5_text",), causal_lm("Qwen3_5", base="Qwen3_5TextModel"),
    "Qwen3.5 (text): a hybrid whose layers mix by Gated DeltaNet (mixer gated_deltanet) or by gated attention "
    "(steps=output_gate, qk-norms, a quarter of each head rotated) as layer_types says, a layer schedule; "
    "(1 + w) RMSNorms (gemma_rmsnorm) and SwiGLU feed-forwards",
    priority=550, fields=FIELDS, document=document, rules=WEIGHTS,
    carried=("rope_parameters.mrope_section", "rope_parameters.mrope_interleaved"))
