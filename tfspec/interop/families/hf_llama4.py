"""Hugging Face ``Llama4ForCausalLM`` (the text model of Meta's Llama 4 Scout and Maverick; and its base model) <->
a compiled spec.

Llama 4 is Llama's pre-norm layout whose layers differ three ways, each as its configuration lists them:
- positions (``no_rope_layers``: 1 where a layer rotates): the rotary layers rotate neighbouring dimensions as
  pairs, then L2-normalise each head's queries and keys without a weight (``use_qk_norm``:
  ``steps=rotated_qk_norm(weight=false)``); the others use no positions (NoPE) and, with
  ``attn_temperature_tuning``, scale each query by its index (``steps=temperature(floor, scale)``);
- attention (``layer_types``): ``chunked_attention`` layers see the earlier keys of their chunk of
  ``attention_chunk_size`` positions (``mask=causal + chunked(c)``), the others every earlier key;
- feed-forward (``moe_layers``): a mixture of SwiGLU experts, one chosen per position by the sigmoid of its router
  logit, which scales the expert's input (``weigh=inputs``), beside a shared expert of the same size; the other
  layers a gated MLP of ``intermediate_size_mlp``.

Hugging Face stores the experts transposed (``gate_up_proj`` ``(experts, hidden, 2·d_ff)``, gate columns first).
"""

from __future__ import annotations

from ..family import causal_lm
from . import hf_llama
from ..fields import Field, Fields
from ..document import Document, Statement
from ..weights import GatedMLP, Tensor
from ..writer import causal_masks, every_step, schedule
from ..layouts import covering, example

CHUNKED, FULL = "chunked_attention", "full_attention"
_LLAMA = {e.name: e for e in hf_llama.FIELDS.fields}


def _rotates(config) -> list[bool]:
    return [bool(r) for r in config.no_rope_layers]


def _chunked(config) -> list[bool]:
    return [t == CHUNKED for t in config.layer_types]


def _moe(config) -> list[bool]:
    return [i in set(config.moe_layers) for i in range(config.num_hidden_layers)]


def _tuned(config) -> bool:
    """Does a layer scale its queries by their index (temperature tuning, on the layers without positions)?"""
    return bool(config.attn_temperature_tuning) and not all(_rotates(config))


def _layer_rotates(f) -> list[bool]:
    return [f.rotates(a.position) for a in f.layer_attentions("decoder")]


def _layer_chunks(f) -> list[int | None]:
    return [f.chunk_of(a.mask) for a in f.layer_attentions("decoder")]


def _one_chunk(f) -> int | None:
    chunks = {c for c in _layer_chunks(f) if c is not None}
    if len(chunks) > 1:
        raise f.refuse(f"its layers attend in chunks of different sizes ({', '.join(map(str, sorted(chunks)))})")
    return chunks.pop() if chunks else None


def _temperature(f, option: str):
    """An option of the layers' query temperature (their one step), where a layer without positions has one."""
    steps = [a.steps for a, rotates in zip(f.layer_attentions("decoder"), _layer_rotates(f)) if not rotates]
    return steps[0][0].options.get(option) if steps and steps[0] else None


def _qk_norm(f) -> bool:
    """Does a rotary layer normalise its queries and keys?"""
    return any(r and any(c.name == "rotated_qk_norm" for c in a.steps)
               for a, r in zip(f.layer_attentions("decoder"), _layer_rotates(f)))


FIELDS = Fields(
    *(_LLAMA[n] for n in ("d_model", "heads", "kv_heads", "layers", "vocab", "eps", "p_attn_dropout", "init_std",
                          "activation", "tied", "rope_theta")),
    *hf_llama.ROPE_SCALING,
    # written whatever it is: Llama 4's default is 128, not hidden_size / num_attention_heads
    Field("head_dim", "head_dim", lambda f: f.geometry("decoder").head_dim),
    Field("d_ff", "intermediate_size", lambda f: f.mixture_body("decoder").d_ff),
    Field("dense_d_ff", "intermediate_size_mlp",
          lambda f: next((ff.d_ff for ff in f.layer_feedforwards("decoder") if not f.routes(ff)), None),
          read=lambda c: c.intermediate_size_mlp if not all(_moe(c)) else None),
    Field("experts", "num_local_experts", lambda f: f.mixture("decoder").experts),
    Field("top", "num_experts_per_tok", lambda f: f.mixture("decoder").top),
    Field("attention_bias", "attention_bias", lambda f: f.attention("decoder").bias, let=False),
    Field("chunk", "attention_chunk_size", _one_chunk,
          read=lambda c: c.attention_chunk_size if any(_chunked(c)) else None),
    Field("floor", "floor_scale", lambda f: _temperature(f, "floor"),
          read=lambda c: c.floor_scale if _tuned(c) else None),
    Field("attn_scale", "attn_scale", lambda f: _temperature(f, "scale"),
          read=lambda c: c.attn_scale if _tuned(c) else None),
    # the layer schedule's three lists, each exported as the spec's layers say
    Field("no_rope_layers", "no_rope_layers", lambda f: [int(r) for r in _layer_rotates(f)], read=_rotates,
          setting=False),
    Field("layer_types", "layer_types", lambda f: [CHUNKED if c else FULL for c in _layer_chunks(f)],
          read=_chunked, setting=False),
    Field("moe_layers", "moe_layers", lambda f: [i for i, r in enumerate(f.layer_routes("decoder")) if r],
          read=_moe, setting=False),
    # the steps the lists follow where they follow one (Hugging Face derives the lists from them when not given)
    Field("no_rope_interval", "no_rope_layer_interval", lambda f: every_step([not r for r in _layer_rotates(f)], 4),
          read=_rotates, setting=False),
    Field("moe_step", "interleave_moe_layer_step", lambda f: every_step(f.layer_routes("decoder"), 1), read=_moe,
          setting=False),
    Field("use_qk_norm", "use_qk_norm", _qk_norm, read=lambda c: bool(c.use_qk_norm) and any(_rotates(c)),
          setting=False),
    Field("attn_temperature_tuning", "attn_temperature_tuning", lambda f: _temperature(f, "floor") is not None,
          read=_tuned, setting=False),
    ignored={**hf_llama.FIELDS.ignored,
             "router_aux_loss_coef": "Llama 4's causal LM adds no load-balancing loss",
             "output_router_logits": "what a forward call returns; Llama 4's causal LM adds no auxiliary loss",
             "router_jitter_noise": "not read by Hugging Face's Llama 4, which adds no noise"},
)


def document(s, *, padding: bool, head: bool) -> Document:
    """Llama 4's text spec: its layers' positions, chunks and feed-forwards as a layer schedule."""
    config = s.config
    mixture = {"d_ff": s.d_ff, "kind": f"moe({s.experts}, {s.top}, weigh=inputs, shared={s.d_ff})", "router": "sigmoid"}
    dense = {"d_ff": s.dense_d_ff, "kind": "dense"}
    qk_norm = f"rotated_qk_norm(eps={s.eps}, weight=false)" if config.use_qk_norm else None
    temperature = f"temperature(floor={s.floor}, scale={s.attn_scale})" if _tuned(config) else "none"

    def masks(chunked: bool) -> str:
        return causal_masks(padding=padding).replace("causal", f"causal + chunked({s.chunk})" if chunked else
                                                     "causal")

    def steps(rotates: bool, base: bool = False) -> dict:  # what differs between the layers with positions and
        if rotates:                                           # those without (a section's: from the stack's own)
            return {"steps": qk_norm or (None if base else "none")}
        return {"steps": temperature}

    def position(rotates: bool) -> str:
        return hf_llama.rotary(s, interleaved=True) if rotates else "none"

    layers = list(zip(_rotates(config), _chunked(config), _moe(config)))
    (rotates, chunked, sparse), sections = schedule(layers)

    def section(r: bool, c: bool, m: bool) -> str:  # what a section's layers change of the stack's own
        parts = [Statement("self_attn", mask=masks(c), **steps(r)).text() if (r, c) != (rotates, chunked) else "",
                 f"position {position(r)}" if r != rotates else "",
                 Statement("ffn", **(mixture if m else dense)).text() if m != sparse else ""]
        return "; ".join(p for p in parts if p)

    if not any(_rotates(config)):
        s.writer.forget("rope_theta")
    document = (hf_llama.document(s, padding=padding, head=head)
                .change("decoder", "position", position(rotates))
                .change("decoder", "attention", mask=masks(chunked), **steps(rotates, base=True))
                .put("decoder", Statement("feedforward", activation=s.activation, bias="false",
                                          **(mixture if sparse else dense))))
    for selection, layer in sections:
        document = document.add("decoder", f"layers {selection} {{ {section(*layer)} }}")
    return document


EXAMPLES = {
    # chunks of 4 and a temperature from index 2 on, both reached by 24 positions; MoE every other layer
    "Llama4ForCausalLM": example("llama4_text", num_hidden_layers=4, head_dim=8, intermediate_size=16,
                                 intermediate_size_mlp=48, num_local_experts=3, num_experts_per_tok=1,
                                 interleave_moe_layer_step=2, attention_chunk_size=4, floor_scale=3, attn_scale=0.5,
                                 pad_token_id=0, bos_token_id=1, eos_token_id=2),
    "Llama4TextModel": example("llama4_text", num_hidden_layers=3, num_key_value_heads=4, head_dim=16,
                               intermediate_size=16, num_local_experts=4, num_experts_per_tok=2,
                               no_rope_layers=[0, 1, 1], attention_chunk_size=5, use_qk_norm=False,
                               attn_temperature_tuning=False, attention_bias=True, pad_token_id=0, bos_token_id=1,
                               eos_token_id=2),
}

COVERAGE = [dict(model_type="llama4_text", vocab_size=91, hidden_size=24, num_hidden_layers=4,
                 num_attention_heads=3, num_key_value_heads=1, head_dim=10, intermediate_size=40,
                 intermediate_size_mlp=36, num_local_experts=5, num_experts_per_tok=2, moe_layers=[1, 2],
                 no_rope_layers=[1, 0, 1, 1], layer_types=["chunked_attention", "full_attention",
                                                            "full_attention", "chunked_attention"],
                 attention_chunk_size=6, floor_scale=5, attn_scale=0.25, rms_norm_eps=1e-7,
                 attention_dropout=0.3, initializer_range=0.05, hidden_act="gelu", tie_word_embeddings=True,
                 attention_bias=True, rope_parameters={"rope_type": "llama3", "rope_theta": 5e5, "factor": 8.0,
                                                       "low_freq_factor": 1.5, "high_freq_factor": 3.0,
                                                       "original_max_position_embeddings": 8}),
            covering("llama4_text", num_hidden_layers=2, num_key_value_heads=3, head_dim=8, num_local_experts=2,
                     use_qk_norm=False, attn_temperature_tuning=False, attention_chunk_size=None),
            *hf_llama.each_scaling(covering("llama4_text", num_hidden_layers=1, num_key_value_heads=3, head_dim=8,
                                            num_local_experts=2, max_position_embeddings=32))]


LLAMA4 = hf_llama.LLAMA.derive(
    "Llama 4", ("llama4_text",), causal_lm("Llama4", base="Llama4TextModel"),
    "Llama 4 (text): Llama's layout, rotary layers (pairs interleaved, a weightless L2 qk-norm after the "
    "rotation) attending in chunks of positions and NoPE layers with query temperature tuning, as "
    "no_rope_layers and layer_types say; mixtures of one sigmoid-routed expert scaling its input plus a shared "
    "expert in moe_layers, gated MLPs elsewhere",
    priority=510, fields=FIELDS, document=document, hf_config=None,
    # (its qk-norm has no weight) a mixture's router, transposed experts and shared expert, or a gated MLP
    rules=hf_llama.WEIGHTS.derive({
        "feedforward": GatedMLP("feed_forward"), "feedforward.router": "feed_forward.router",
        "feedforward.experts.up": Tensor("feed_forward.experts.gate_up_proj", transpose=True),
        "feedforward.experts.down": Tensor("feed_forward.experts.down_proj", transpose=True),
        "feedforward.shared": GatedMLP("feed_forward.shared_expert")}))
