"""Hugging Face ``OlmoeForCausalLM`` (Ai2's OLMoE; and its base model) <-> a compiled spec.

OLMoE is Llama's pre-norm layout whose queries and keys are RMS-normed over all heads at once, before the heads
are split (OLMo 2's ``steps=full_qk_norm``), and whose feed-forward is a mixture of ``num_experts`` SwiGLU experts,
each position routed to its ``num_experts_per_tok`` best by a softmax, the chosen weights renormalised where
``norm_topk_prob`` says (``router=renormalize``). The tensors map through
``hf_mixtral``'s rules; ``clip_qkv`` (clamping the projections) is not expressed and is refused.
"""

from __future__ import annotations

from ..family import Requires, causal_lm
from . import hf_llama, hf_mixtral, hf_olmo2
from ..document import Document
from ..fields import Field, Fields, Fixed
from ..layouts import covering, example

_MIXTRAL = [e for e in hf_mixtral.FIELDS.entries if getattr(e, "config", None) not in
            ("num_local_experts", "head_dim", "sliding_window", "router_jitter_noise")]

FIELDS = Fields(
    *_MIXTRAL,
    Field("experts", "num_experts", lambda f: f.mixture("decoder").experts),
    Field("renormalize", "norm_topk_prob", lambda f: f.router("decoder").renormalize, let=False),
    Field("attention_bias", "attention_bias", lambda f: f.attention("decoder").bias, let=False),
    Fixed("clip_qkv", None, "clip_qkv={value} clamps the q/k/v projections, which tfspec does not express"),
    ignored={**hf_mixtral.FIELDS.ignored},
)


def document(s, *, padding: bool, head: bool) -> Document:
    """OLMoE's spec: Llama's with queries and keys RMS-normed over all heads at once and a mixture of SwiGLU
    experts."""
    return (hf_llama.document(s, padding=padding, head=head)
            .change("decoder", "attention", steps=f"full_qk_norm(eps={s.eps})")
            .change("decoder", "feedforward", bias="false",
                    kind=f"moe({s.experts}, {s.top}, aux_loss={s.aux_loss})",
                    router="renormalize" if s.value("renormalize") else None))


EXAMPLES = {
    "OlmoeForCausalLM": example("olmoe", intermediate_size=16, num_experts=4, num_experts_per_tok=2, pad_token_id=0,
                                eos_token_id=2),
    "OlmoeModel": dict(model_type="olmoe", vocab_size=90, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                       intermediate_size=16, num_experts=3, num_experts_per_tok=2, norm_topk_prob=True,
                       attention_bias=True, pad_token_id=0, eos_token_id=2),
}

COVERAGE = [covering("olmoe", num_hidden_layers=3, num_key_value_heads=1, rms_norm_eps=1e-7, attention_dropout=0.3,
                     initializer_range=0.05, hidden_act="gelu", tie_word_embeddings=True, attention_bias=True,
                     num_experts=5, num_experts_per_tok=3, norm_topk_prob=True, output_router_logits=True,
                     router_aux_loss_coef=0.02, rope_parameters={"rope_type": "default", "rope_theta": 5e5}),
            *hf_llama.each_scaling(covering("olmoe", num_hidden_layers=1, num_key_value_heads=3, num_experts=4,
                                            num_experts_per_tok=2, max_position_embeddings=32))]


OLMOE = hf_llama.LLAMA.derive(
    "OLMoE", ("olmoe",), causal_lm("Olmoe"),
    "OLMoE: Llama's pre-norm block with queries and keys RMS-normed over all heads at once "
    "(steps=full_qk_norm) and a mixture of SwiGLU experts routed by a softmax, renormalised where "
    "norm_topk_prob says (router=renormalize)",
    priority=440, fields=FIELDS, document=document, hf_config=None, 
    rules=hf_mixtral.WEIGHTS.derive(hf_olmo2.FULL_QK_NORM),
    requires=(Requires(lambda f: [c.name for c in f.attention("decoder").steps] == ["full_qk_norm"],
                       "its queries and keys are not normed over all heads at once, as OLMoE's are"),))
