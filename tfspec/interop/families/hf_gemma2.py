"""Hugging Face ``Gemma2ForCausalLM`` (and its base model) <-> a compiled spec.

Gemma 2 (Gemma Team 2024) normalises each sublayer's input *and* its output before the residual sum ("sandwich"
norms: ``x = x + norm(attention(norm(x)))``), which the spec writes in the wiring form; its RMSNorm scales by
``1 + w`` in float32 (``gemma_rmsnorm``), its embedding by ``sqrt(hidden_size)``, its scores by
``query_pre_attn_scalar ** -0.5``, and its gated feed-forward is GEGLU with the tanh approximation. Its layers
alternate a sliding window and full attention (``layer_types``), which the spec writes as a layer schedule.
Scores are soft-capped (``kind=softcap(50)``, ``tfspec.variants.softcap``) and so are the causal LM's logits
(``head ... softcap=30``).
"""

from __future__ import annotations

import math

from ..family import Family, Requires, causal_lm
from ...ir import nodes as ir
from ...registry import FEEDFORWARD_KINDS
from ...ir.queries import sublayers
from . import hf_llama
from ..fields import Field, Fields, Fixed, standard
from ..mapping import InteropError
from .. import layouts
from ..document import Document, Statement
from ..writer import causal_masks, schedule
from ..layouts import covering, example


SLIDING, FULL = "sliding_attention", "full_attention"
ACTIVATIONS = {"gelu_pytorch_tanh": "geglu_tanh", "gelu": "geglu"}  # HF's act on the gate -> our gated unit


def _window(config):
    """The sliding window of the layers that slide (None: none does)."""
    window = getattr(config, "sliding_window", None)
    return int(window) if window is not None and SLIDING in (config.layer_types or []) else None


def _attention_cap(f) -> float | None:
    """The scores' soft cap (None: not capped), which every layer's attention must have."""
    caps = {a.kind.options.get("cap") for a in f.layer_attentions("decoder")}
    if len(caps) > 1:
        raise f.refuse("its layers cap their attention scores differently")
    return caps.pop()


def _query_scalar(f) -> float:
    """``query_pre_attn_scalar`` from the scores' scale (``scale = query_pre_attn_scalar ** -0.5``)."""
    scale = f.attention("decoder").scale
    if scale is None:
        return f.geometry("decoder").head_dim
    scalar = round(scale ** -2, 6)
    return int(scalar) if scalar.is_integer() else scalar


FIELDS = Fields(
    *standard("decoder", d_model="hidden_size", heads="num_attention_heads", kv_heads="num_key_value_heads"),
    Field("head_dim", "head_dim", lambda f: f.geometry("decoder").head_dim),
    *standard("decoder", layers="num_hidden_layers", d_ff="intermediate_size", vocab="vocab_size"),
    Field("rope_theta", "rope_parameters.rope_theta", lambda f: f.rotary("decoder").get("theta", 10000.0),
          read=lambda c: float(hf_llama.rope(c)["rope_theta"])),
    Field("query_scalar", "query_pre_attn_scalar", _query_scalar),
    Field("window", "sliding_window", lambda f: f.one_window("decoder"), read=_window),
    Field("layer_types", "layer_types", lambda f: [SLIDING if w is not None else FULL
                                                   for w in f.layer_windows("decoder")],
          read=lambda c: list(c.layer_types), setting=False),
    Field("eps", "rms_norm_eps", lambda f: f.norm_option("decoder", "eps", 1e-6)),
    *standard("decoder", p_attn_dropout="attention_dropout", init_std="initializer_range"),
    Field("activation", "hidden_activation", lambda f: f.feedforward("decoder").activation.name, names=ACTIVATIONS),
    Field("attention_bias", "attention_bias", lambda f: f.attention("decoder").bias,
          read=lambda c: bool(getattr(c, "attention_bias", False)), let=False),
    Field("tied", "tie_word_embeddings", lambda f: f.tied, let=False),
    Field("attn_softcap", "attn_logit_softcapping", lambda f: _attention_cap(f), null=True),
    # left to the default when the spec has no head: the base model computes no logits to cap
    Field("final_softcap", "final_logit_softcapping", lambda f: f.spec.head.softcap if f.spec.head else None,
          null=lambda f: f.spec.head is not None),
    Fixed("rope_parameters.rope_type", "default", "rope scaling '{value}' is not supported (only unscaled RoPE)",
          read=lambda c: hf_llama.rope(c)["rope_type"], exported=True),
    Fixed("use_bidirectional_attention", None, "bidirectional attention ({value}) makes Gemma 2 an encoder; "
          "tfspec reads the causal model", read=lambda c: getattr(c, "use_bidirectional_attention", None) or None),
    ignored={"max_position_embeddings": "the longest sequence trained on; unscaled rotary positions compute the "
                                        "same at any length",
             "hidden_act": "an older name Gemma 2 does not read: hidden_activation says the activation"},
)


def document(s, *, padding: bool, head: bool) -> Document:
    """Gemma 2's spec: sandwich-normed layers in the wiring form, the layers that slide and those that do not as a
    layer schedule."""
    return with_head(s, sandwich(s, lambda slides: f"rotary(theta={s.rope_theta})", "", padding=padding), head)


def sandwich(s, position, attention: str, *, padding: bool) -> Document:
    """The spec of a Gemma 2-layout decoder from its settings ``s`` (without its head: ``with_head``):
    ``position(slides)`` is a kind of layer's rotary positions (the sliding ones' and the full ones'),
    ``attention`` more of the attention's arguments (Gemma 3's qk-norm)."""
    def masks(slides: bool) -> str:
        return causal_masks(s.window if slides else None, padding)

    slides = [s.window is not None and t == SLIDING for t in s.value("layer_types")]
    kind = f"kind=softcap({s.attn_softcap}), " if s.attn_softcap else ""
    base, sections = schedule(slides)
    own = position(base)
    wiring = f"""x = x + norm(attention(norm(x), heads={s.heads}, kv_heads={s.kv_heads}, head_dim={s.head_dim}, {kind}\\
                       mask={masks(base)}, scale={s.query_scalar} ** -0.5, bias={s.attention_bias}{attention}))
x = x + norm(feedforward(norm(x), d_ff={s.d_ff}, activation={s.activation}, bias=false))"""
    document = layouts.wired(s, norm=f"gemma_rmsnorm(eps={s.eps})", position=own, wiring=wiring,
                                     head=False).add("embedding tokens", Statement("scale", f"sqrt({s.d_model})"))
    for layers, slide in sections:
        document = document.add("decoder", f"layers {layers} {{ self_attn mask={masks(slide)}"
                                + (f"; position {position(slide)}" if position(slide) != own else "") + " }")
    return document


def with_head(s, document: Document, head: bool) -> Document:
    """A Gemma's spec finished: the causal LM's head (tied or not, its logits capped where the settings ``s``
    say), none for the base model, which computes no logits to cap."""
    if head:
        return document.with_tail(layouts.causal_lm_head(s).changed(softcap=s.final_softcap))
    s.writer.forget("final_softcap")
    return document


# every Gemma's embedding is scaled by sqrt(hidden_size), which its fields do not say
EMBEDDING_SCALE = Requires(lambda f: math.isclose(f.embedding.scale, math.sqrt(f.embedding.dim), rel_tol=1e-9),
                           lambda f: f"its embedding is scaled by {f.embedding.scale:g}, {f.family}'s by "
                                     f"sqrt(hidden_size) = {math.sqrt(f.embedding.dim):g}")


def sandwich_modules(model) -> dict[str, str]:
    """Module names, inside one decoder layer, of each sublayer and the norms before and after it:
    ``attention``, ``attention_norm``, ``attention_post_norm``, and the same for ``feedforward``."""
    g = model.spec.graph()
    found: dict[str, str] = {}
    for node in sublayers(g, "decoder", kind=0):  # every kind of layer names its calls alike
        if isinstance(node, ir.FeedForward) and FEEDFORWARD_KINDS[node.spec.kind.name].reads_per_layer:
            continue  # (Gemma 4's per-layer gate, which its family maps)
        part = "attention" if isinstance(node, ir.Attention) else "feedforward"
        before, after = g.node(node.inputs[0]), g.consumers(node.id)
        if part in found or not isinstance(before, ir.Norm) or len(after) != 1 or not isinstance(after[0], ir.Norm):
            raise InteropError(f"spec '{model.spec.name}' is not Gemma 2's layer: one attention and one feed-forward, "
                               "each with a norm before and after it (x = x + norm(attention(norm(x))))")
        found.update({part: node.name, f"{part}_norm": before.module.name, f"{part}_post_norm": after[0].module.name})
    return found


# Llama's checkpoint but for the norms: one before and one after each sublayer
EXAMPLES = {
    "Gemma2ForCausalLM": example("gemma2", num_hidden_layers=4, head_dim=8, sliding_window=6, query_pre_attn_scalar=8,
                                 attn_logit_softcapping=0.5, final_logit_softcapping=0.4),
    "Gemma2Model": example("gemma2", num_key_value_heads=4, head_dim=16, sliding_window=5,
                           layer_types=["full_attention", "sliding_attention"], attn_logit_softcapping=None),
}

COVERAGE = [covering("gemma2", num_hidden_layers=3, num_key_value_heads=1, head_dim=16, rms_norm_eps=1e-5,
                     rope_parameters={"rope_type": "default", "rope_theta": 5e5}, query_pre_attn_scalar=32,
                     sliding_window=7, attention_dropout=0.1, initializer_range=0.05, hidden_activation="gelu",
                     attention_bias=True, tie_word_embeddings=False,
                     layer_types=["full_attention", "sliding_attention", "sliding_attention"],
                     attn_logit_softcapping=None, final_logit_softcapping=None)]


WEIGHTS = hf_llama.WEIGHTS.derive(
    {"attention_norm": "input_layernorm", "attention_post_norm": "post_attention_layernorm",
     "feedforward_norm": "pre_feedforward_layernorm", "feedforward_post_norm": "post_feedforward_layernorm"},
    parts=sandwich_modules)

GEMMA2 = Family(
    "Gemma 2", ("gemma2",), causal_lm("Gemma2"),
    "Gemma 2: sandwich norms (an RMSNorm scaling by 1 + w before and after each sublayer, in the wiring "
    "form), embeddings scaled by sqrt(hidden_size), GEGLU (tanh) feed-forward, scores scaled by "
    "query_pre_attn_scalar ** -0.5 and soft-capped, sliding-window and full layers alternating (a layer "
    "schedule), the causal LM's logits soft-capped",
    priority=270, fields=FIELDS, document=document, requires=(EMBEDDING_SCALE,), rules=WEIGHTS)
