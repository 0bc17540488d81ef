"""Hugging Face ``GptOssForCausalLM`` / ``GptOssModel`` <-> a compiled spec.

gpt-oss (OpenAI, 2025) is a pre-norm RMSNorm decoder in Llama's layout with: biased q/k/v/o projections and a
learned sink per head (``kind=sinks``); sliding-window and full layers as ``layer_types`` says (a layer
schedule); YaRN-scaled rotary positions; and a mixture of ``num_local_experts`` experts, each position routed to
its ``num_experts_per_tok`` best by a biased router whose chosen logits are soft-maxed (``kind=moe(experts, top,
router_bias=true) router=renormalize``: a softmax renormalised over the chosen is that), the experts biased and
gated by the clamped SwiGLU (``activation=swiglu_clamped(alpha, limit)``). Hugging Face stores each expert's
matrices transposed, its gate and up columns interleaved; the mapping transposes them and de-interleaves.
"""

from __future__ import annotations

from ..family import causal_lm
from . import hf_llama, hf_mixtral
from ..document import Document
from ..fields import Field, Fields
from ..mapping import Rule, rule
from ..weights import Tensor
from ..writer import causal_masks, schedule
from ..layouts import covering, example

SLIDING, FULL = "sliding_attention", "full_attention"


def _windows(config) -> list[bool]:
    """Per layer: does it slide (``layer_types``; every layer of a configuration without a window is full)?"""
    return [config.sliding_window is not None and t == SLIDING for t in config.layer_types]


def _layer_types(f) -> list[str]:
    return [SLIDING if w is not None else FULL for w in f.layer_windows("decoder")]


LEFT_OUT = ("mlp_bias", "attention_bias", "head_dim", "sliding_window", "hidden_act",
            "rope_parameters.partial_rotary_factor")
# gpt-oss's clamped SwiGLU: transformers before 5.2x computes it with these and has no configuration fields for them,
# and the published config.json (openai/gpt-oss-20b) leaves them out: a configuration without them means these
SWIGLU_ALPHA, SWIGLU_LIMIT = 1.702, 7.0


def _given(value, default):
    return default if value is None else value


def _unless(value, default):
    """What export writes: nothing for gpt-oss's own value, which every transformers computes, with the field or
    without it."""
    return None if value is None or value == default else value


FIELDS = Fields(
    *(e for e in hf_llama.FIELDS.entries if getattr(e, "config", None) not in LEFT_OUT),
    Field("head_dim", "head_dim", lambda f: f.geometry("decoder").head_dim),
    Field("attention_bias", "attention_bias", lambda f: f.attention("decoder").bias, let=False),
    Field("window", "sliding_window", lambda f: f.one_window("decoder"),
          read=lambda c: c.sliding_window if any(_windows(c)) else None),
    Field("layer_types", "layer_types", _layer_types, read=lambda c: [SLIDING if w else FULL for w in _windows(c)],
          setting=False),
    Field("experts", "num_local_experts", lambda f: f.mixture("decoder").experts),
    Field("top", "num_experts_per_tok", lambda f: f.mixture("decoder").top),
    Field("alpha", "swiglu_alpha", lambda f: _unless(f.mixture_body("decoder").activation.options.get("alpha"),
                                                     SWIGLU_ALPHA),
          read=lambda c: _given(getattr(c, "swiglu_alpha", None), SWIGLU_ALPHA)),
    Field("limit", "swiglu_limit", lambda f: _unless(f.mixture_body("decoder").activation.options.get("limit"),
                                                     SWIGLU_LIMIT),
          read=lambda c: _given(getattr(c, "swiglu_limit", None), SWIGLU_LIMIT)),
    *hf_mixtral.MOE_FIELDS[2:4],  # the load-balancing loss, and whether Hugging Face trains with it
    ignored={**hf_llama.FIELDS.ignored,
             "hidden_act": "not read: the experts' gated unit is the clamped SwiGLU (swiglu_alpha, swiglu_limit)",
             "rope_parameters.partial_rotary_factor": "gpt-oss's rotary embedding rotates every dimension",
             "initial_context_length": "the context it was pretrained at (its YaRN scaling's original context)"},
)


def document(s, *, padding: bool, head: bool) -> Document:
    """gpt-oss's spec, its full layers (or sliding ones) a schedule: Llama's with attention sinks, biases everywhere
    and a mixture of clamped SwiGLU experts with a biased router."""
    def masks(slides: bool) -> str:
        return causal_masks(s.window if slides else None, padding)

    base, sections = schedule(_windows(s.config))
    document = (hf_llama.document(s, padding=padding, head=head)
                .change("decoder", "attention", mask=masks(base), kind="sinks")
                .change("decoder", "feedforward", bias=None)  # (written again after the activation)
                .change("decoder", "feedforward", activation=f"swiglu_clamped(alpha={s.alpha}, limit={s.limit})",
                        bias="true", kind=f"moe({s.experts}, {s.top}, router_bias=true, aux_loss={s.aux_loss})",
                        router="renormalize"))
    for selection, slides in sections:
        document = document.add("decoder", f"layers {selection} {{ self_attn mask={masks(slides)} }}")
    return document


def _mixture(model, ours: str, theirs: str, state: dict, ours_state: dict) -> list[Rule]:
    """The router, and the experts: Hugging Face's ``gate_up_proj`` ``(experts, width, 2·d_ff)`` with gate and up
    columns interleaved is our ``up`` ``(experts, 2·d_ff, width)``, gate rows first; ``down_proj`` transposed."""
    d_ff, mlp = ours_state[f"{ours}.experts.down"].shape[-1], f"{theirs}.mlp"
    gate_then_up = tuple(range(0, 2 * d_ff, 2)) + tuple(range(1, 2 * d_ff, 2))
    return [rule(f"{ours}.router.weight", f"{mlp}.router.weight"),
            rule(f"{ours}.router.bias", f"{mlp}.router.bias"),
            rule(f"{ours}.experts.up", f"{mlp}.experts.gate_up_proj", transpose=True, rows=gate_then_up, axis=1),
            rule(f"{ours}.experts.up_bias", f"{mlp}.experts.gate_up_proj_bias", rows=gate_then_up, axis=1),
            rule(f"{ours}.experts.down", f"{mlp}.experts.down_proj", transpose=True),
            rule(f"{ours}.experts.down_bias", f"{mlp}.experts.down_proj_bias")]


EXAMPLES = {
    "GptOssForCausalLM": dict(model_type="gpt_oss", vocab_size=90, hidden_size=32, num_hidden_layers=3,
                              num_attention_heads=4, num_key_value_heads=2, head_dim=8, intermediate_size=24,
                              num_local_experts=4, num_experts_per_tok=2, sliding_window=5,
                              rope_parameters={"rope_type": "yarn", "rope_theta": 150000.0, "factor": 4.0,
                                               "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False,
                                               "original_max_position_embeddings": 16},
                              max_position_embeddings=64),
    "GptOssModel": example("gpt_oss", num_key_value_heads=4, head_dim=8, intermediate_size=24, num_local_experts=3,
                           num_experts_per_tok=3, sliding_window=6, swiglu_limit=2.0, swiglu_alpha=1.5,
                           layer_types=["full_attention", "sliding_attention"],
                           rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
}

COVERAGE = [covering("gpt_oss", num_hidden_layers=4, num_key_value_heads=1, head_dim=10, intermediate_size=20,
                     num_local_experts=5, num_experts_per_tok=3, sliding_window=5, swiglu_alpha=1.5, swiglu_limit=3.0,
                     output_router_logits=True, router_aux_loss_coef=0.05, rms_norm_eps=1e-7, attention_dropout=0.3,
                     initializer_range=0.05, tie_word_embeddings=True, attention_bias=False,
                     layer_types=["full_attention"] * 3 + ["sliding_attention"],
                     rope_parameters={"rope_type": "default", "rope_theta": 5000.0},
                     architectures=["GptOssForCausalLM"]),
            *hf_llama.each_scaling(covering("gpt_oss", num_hidden_layers=1, num_key_value_heads=3, head_dim=8,
                                            intermediate_size=20, num_local_experts=2, num_experts_per_tok=1,
                                            max_position_embeddings=32))]


GPT_OSS = hf_llama.LLAMA.derive(
    "gpt-oss", ("gpt_oss",), causal_lm("GptOss"),
    "gpt-oss: a pre-norm decoder with biased attention and a learned sink per head (kind=sinks), sliding and "
    "full layers as layer_types says (a layer schedule), YaRN rotary positions, and a mixture of biased "
    "experts gated by the clamped SwiGLU (swiglu_clamped), routed by a biased router's top logits, "
    "soft-maxed",
    priority=170, fields=FIELDS, document=document, hf_config=None,
    rules=hf_llama.WEIGHTS.derive({"attention.sinks.logits": Tensor("self_attn.sinks"), "feedforward": _mixture}))
