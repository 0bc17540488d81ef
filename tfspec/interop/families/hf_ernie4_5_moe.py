"""Hugging Face ``Ernie4_5_MoeForCausalLM`` (Baidu's ERNIE 4.5 MoE, A3B and A47B; and its base model) <-> a
compiled spec.

ERNIE 4.5 MoE is ERNIE 4.5's attention (``hf_ernie4_5``: interleaved rotary positions, its own
head width) whose feed-forwards are, in the layers ``moe_layer_interval``, ``moe_layer_start_index`` and
``moe_layer_end_index`` pick, mixtures of ``moe_num_experts`` SwiGLU experts: a softmax over every expert, the
``moe_k`` best chosen by their probability plus a per-expert correction bias (``router=correction + renormalize``,
as DeepSeek-V3's steers the choice but not the weights), their probabilities renormalised, beside ``moe_num_shared_experts`` shared
experts; the other layers keep a gated MLP. Hugging Face floors the renormalising sum at ``moe_norm_min`` (1e-12),
which no top-k of a softmax reaches; ``use_bias`` would bias the dense and shared networks and the head but not the
experts, which tfspec's mixture does not express, and is refused.
"""

from __future__ import annotations

from ..family import Requires, causal_lm
from .. import layouts
from . import hf_deepseek, hf_ernie4_5, hf_llama, hf_mixtral, hf_qwen_moe
from ..document import Document
from ..fields import Field, Fields, Fixed
from ..mapping import InteropError, Rule, rule
from ..layouts import covering, example

_ERNIE = [e for e in hf_ernie4_5.FIELDS.entries if getattr(e, "config", None) not in
          ("head_dim", "use_bias", "intermediate_size")]


def sparse_layers(config) -> list[bool]:
    """Per layer: is its feed-forward a mixture (Hugging Face's rule)?"""
    for field in ("moe_layer_start_index", "moe_layer_end_index"):
        if not isinstance(getattr(config, field), int):
            raise InteropError(f"config.json's field {field} is {getattr(config, field)!r}; ERNIE 4.5 MoE reads a "
                               "layer's number there")
    end = config.num_hidden_layers - 1 if config.moe_layer_end_index == -1 else config.moe_layer_end_index
    return [(i + 1) % config.moe_layer_interval == 0 and config.moe_layer_start_index <= i <= end
            for i in range(config.num_hidden_layers)]


def _moe_layers(f) -> tuple[int, int, int]:
    """(start, end, interval): a rule that makes exactly the spec's mixture layers mixtures, Hugging Face's
    defaults (start 1, end the last layer, interval 1) where they do."""
    sparse = f.layer_routes("decoder")
    n = len(sparse)
    if any(sparse):
        first, last = sparse.index(True), n - 1 - sparse[::-1].index(True)
        starts = sorted(range(first + 1), key=lambda start: (start != 1, start))
        for interval in range(1, n + 1):
            for start in starts:
                for end in dict.fromkeys((n - 1, last)):
                    if sparse == [(i + 1) % interval == 0 and start <= i <= end for i in range(n)]:
                        return start, end, interval
    raise f.refuse("its mixture layers are not every moe_layer_interval-th from one layer to another")


FIELDS = Fields(
    *_ERNIE,
    Field("d_ff", "moe_intermediate_size", lambda f: f.mixture_body("decoder").d_ff),
    Field("dense_d_ff", "intermediate_size", hf_qwen_moe.dense_width,
          read=lambda c: c.intermediate_size if not all(sparse_layers(c)) else None),
    Field("experts", "moe_num_experts", lambda f: f.mixture("decoder").experts),
    Field("top", "moe_k", lambda f: f.mixture("decoder").top),
    Field("shared_experts", "moe_num_shared_experts", hf_deepseek.shared_expert_count,
          read=lambda c: c.moe_num_shared_experts or 0),
    *hf_mixtral.MOE_FIELDS[2:4],  # the load-balancing loss, and whether Hugging Face trains with it
    Field("moe_start", "moe_layer_start_index", lambda f: _moe_layers(f)[0], read=sparse_layers, setting=False),
    Field("moe_end", "moe_layer_end_index", lambda f: _moe_layers(f)[1], read=sparse_layers, setting=False),
    Field("moe_interval", "moe_layer_interval", lambda f: _moe_layers(f)[2], read=sparse_layers, setting=False),
    Fixed("use_bias", False, "use_bias={value} biases ERNIE 4.5 MoE's dense and shared networks and head but not "
                             "its experts, which tfspec's mixture (biased in all or none) does not express"),
    ignored={**hf_ernie4_5.FIELDS.ignored,
             "moe_norm_min": "the floor of the renormalising sum (1e-12), which no top-k of a softmax reaches"},
)


def document(s, *, padding: bool, head: bool) -> Document:
    """ERNIE 4.5 MoE's spec, its dense layers a schedule: ERNIE 4.5's with mixtures choosing by a correction bias."""
    sparse = sparse_layers(s.config)
    if not any(sparse):
        raise InteropError("no layer of this configuration is a mixture of experts (moe_layer_start_index, "
                           "moe_layer_end_index, moe_layer_interval): import it as the dense ERNIE 4.5 it is")
    shared = f", shared={s.d_ff} * {s.shared_experts}" if s.value("shared_experts") else ""
    mixture = {"d_ff": s.d_ff, "kind": f"moe({s.experts}, {s.top}, aux_loss={s.aux_loss}{shared})",
               "router": "correction + renormalize"}
    document = hf_llama.document(s, padding=padding, head=head).change(
        "decoder", "position", hf_llama.rotary(s, interleaved=True)).change("decoder", "attention", bias="false")
    return layouts.scheduled_feedforwards(document, s, mixture, {"d_ff": s.dense_d_ff, "kind": "dense"}, sparse)


def _ernie_router(f) -> bool:
    return set(f.router("decoder").parts) == {"correction", "renormalize"}


def _correction(model, ours: str, theirs: str, state: dict, ours_state: dict) -> list[Rule]:
    """A mixture's correction bias, which Hugging Face keeps as (1, experts) in the router's ``moe_statics``."""
    if ours not in ours_state:
        return []
    return [rule(ours, f"{theirs}.mlp.gate.moe_statics.e_score_correction_bias", shape=(1, ours_state[ours].shape[0]))]


EXAMPLES = {
    "Ernie4_5_MoeForCausalLM": example("ernie4_5_moe", num_hidden_layers=3, moe_intermediate_size=8, moe_num_experts=6,
                                       moe_k=2, moe_num_shared_experts=1, moe_layer_start_index=1),
    "Ernie4_5_MoeModel": example("ernie4_5_moe", num_hidden_layers=4, num_key_value_heads=4, moe_intermediate_size=8,
                                 moe_num_experts=4, moe_k=2, moe_num_shared_experts=0, moe_layer_start_index=1,
                                 moe_layer_interval=2, tie_word_embeddings=False),
}

COVERAGE = [covering("ernie4_5_moe", num_hidden_layers=5, num_key_value_heads=1, moe_intermediate_size=10,
                     moe_num_experts=5, moe_k=3, moe_num_shared_experts=1, moe_layer_start_index=1,
                     moe_layer_end_index=3, moe_layer_interval=2, output_router_logits=True, router_aux_loss_coef=0.02,
                     rms_norm_eps=1e-7, attention_dropout=0.3, initializer_range=0.05, hidden_act="gelu",
                     tie_word_embeddings=False, rope_parameters={"rope_type": "default", "rope_theta": 5e5}),
            *hf_llama.each_scaling(dict(
                model_type="ernie4_5_moe", vocab_size=91, hidden_size=24, num_hidden_layers=1, num_attention_heads=3,
                num_key_value_heads=3, moe_intermediate_size=10, moe_num_experts=4, moe_k=2, moe_layer_start_index=0,
                max_position_embeddings=32))]


ERNIE4_5_MOE = hf_ernie4_5.ERNIE4_5.derive(
    "ERNIE 4.5 MoE", ("ernie4_5_moe",),
    causal_lm("Ernie4_5_Moe"),
    "ERNIE 4.5 MoE: ERNIE 4.5's attention, mixtures of SwiGLU experts in the layers moe_layer_* pick, routed "
    "by a softmax whose choice a per-expert correction bias steers, renormalised, beside shared experts; "
    "gated MLPs elsewhere",
    priority=460, fields=FIELDS, document=document,
    requires=(Requires(_ernie_router, "its router is not ERNIE 4.5's: a softmax, a correction bias on the choice, "
                                      "the chosen weights renormalised and not scaled"),
              hf_ernie4_5.INTERLEAVED),
    rules=hf_llama.WEIGHTS.derive({**hf_deepseek.MIXTURE, "feedforward.choice.correction.bias": _correction}))
