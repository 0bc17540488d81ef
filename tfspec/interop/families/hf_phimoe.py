"""Hugging Face ``PhimoeForCausalLM`` (Microsoft's Phi-3.5-MoE; and its base model) <-> a compiled spec.

Phi-3.5-MoE is Mixtral's decoder (``hf_mixtral``: stacked SwiGLU experts, grouped-query attention,
rotary positions, an optional sliding window) with LayerNorms (weight and bias) in place of RMSNorms, biases where
``attention_bias`` and ``lm_head_bias`` say, and GRIN's sparse mixer for routing (``router=sparsemixer(eps)``): two
experts chosen in turn among those whose logits lie within a relative ``2·router_jitter_noise`` of the best left,
sampled by their softmax in training and trained through Heun's third-order gradient estimate; training also
jitters the mixture's input by ``input_jitter_noise`` (once, as Microsoft's release does; transformers' port
multiplies it twice). Its router is ``mlp.router``. The ``longrope`` scaling of the released checkpoints (two
frequency sets switched by the sequence's length) is not expressed and is refused.
"""

from __future__ import annotations

from ..writer import router
from ..family import Requires, causal_lm
from . import hf_llama, hf_mixtral
from ..document import Document
from ..fields import Field, Fields, Fixed
from ..layouts import covering, example

_LLAMA = {e.name: e for e in hf_llama.FIELDS.fields}

FIELDS = Fields(
    *(_LLAMA[n] for n in ("d_model", "heads", "kv_heads", "layers", "d_ff", "vocab", "rope_theta", "window", "eps",
                          "p_attn_dropout", "init_std", "activation", "tied")),
    Field("experts", "num_local_experts", lambda f: f.mixture("decoder").experts),
    *hf_mixtral.MOE_FIELDS[2:4],  # the load-balancing loss, and whether Hugging Face trains with it
    Field("router_eps", "router_jitter_noise", lambda f: f.router("decoder").option("sparsemixer", "eps")),
    Field("input_jitter", "input_jitter_noise", lambda f: f.router("decoder").option("jitter", "amount", 0.0)),
    Field("attention_bias", "attention_bias", lambda f: f.attention("decoder").bias, let=False),
    Field("head_bias", "lm_head_bias", lambda f: f.spec.head.bias if f.spec.head is not None else None,
          read=lambda c: bool(c.lm_head_bias), let=False),
    Fixed("num_experts_per_tok", 2, "num_experts_per_tok={value}: the sparse mixer chooses two experts whatever "
          "it says (and Hugging Face's load-balancing loss counts num_experts_per_tok of them)", exported=True),
    Fixed("rope_parameters.rope_type", "default", "rope scaling '{value}' is not expressed (Phi-3.5-MoE's longrope "
          "switches between two frequency sets by the sequence's length)",
          read=lambda c: hf_llama.rope(c)["rope_type"], exported=True),
    ignored={**hf_llama.FIELDS.ignored},
)


def document(s, *, padding: bool, head: bool) -> Document:
    """PhiMoE's spec: Mixtral's with LayerNorms, the sparse mixer's routing and the head's own bias."""
    document = (hf_llama.document(s, padding=padding, head=head, norm="layernorm")
                .change("decoder", "feedforward", bias="false",
                        kind=f"moe({s.experts}, 2, aux_loss={s.aux_loss})",
                        router=router(f"sparsemixer({s.router_eps})",
                                      f"jitter({s.input_jitter})" if s.value("input_jitter") else None)))
    if head and not s.value("tied"):
        document = document.with_tail(f"head linear({s.vocab}) bias={s.head_bias}")
    return document


EXAMPLES = {
    # a wide threshold (router_jitter_noise), so that the sparse mixer's softmax weighs several experts
    "PhimoeForCausalLM": example("phimoe", intermediate_size=16, num_local_experts=4, router_jitter_noise=0.6,
                                 attention_bias=True, lm_head_bias=True, tie_word_embeddings=False, pad_token_id=0,
                                 bos_token_id=1, eos_token_id=2),
    "PhimoeModel": example("phimoe", num_hidden_layers=1, num_key_value_heads=4, intermediate_size=16,
                           num_local_experts=3, router_jitter_noise=0.3, input_jitter_noise=0.01, sliding_window=5,
                           pad_token_id=0, bos_token_id=1, eos_token_id=2),
}

COVERAGE = [covering("phimoe", num_hidden_layers=3, num_key_value_heads=1, num_local_experts=5, router_jitter_noise=0.2,
                     input_jitter_noise=0.05, output_router_logits=True, router_aux_loss_coef=0.02, rms_norm_eps=1e-7,
                     attention_dropout=0.3, initializer_range=0.05, hidden_act="gelu", tie_word_embeddings=True,
                     attention_bias=True, sliding_window=7,
                     rope_parameters={"rope_type": "default", "rope_theta": 5e5}),
            covering("phimoe", num_hidden_layers=1, num_key_value_heads=3, num_local_experts=2, lm_head_bias=True,
                     tie_word_embeddings=False)]


PHIMOE = hf_mixtral.MIXTRAL.derive(
    "PhiMoE", ("phimoe",), causal_lm("Phimoe"),
    "PhiMoE (Phi-3.5-MoE): Mixtral's decoder with LayerNorms, optional attention and head biases, and GRIN's "
    "sparse mixer choosing two experts (router=sparsemixer(eps)); longrope scaling refused",
    priority=520, fields=FIELDS, document=document,
    requires=(Requires(lambda f: f.router("decoder").score == "sparsemixer",
                       "its router is not a sparse mixer (router=sparsemixer)"),),
    rules=hf_mixtral.WEIGHTS.derive({"feedforward.router": "mlp.router"}))
