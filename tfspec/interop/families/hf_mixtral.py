"""Hugging Face ``MixtralForCausalLM`` / ``MixtralModel`` <-> a compiled spec.

Mixtral (Jiang et al. 2024) is Mistral's decoder (``hf_llama``: its attention, norms, rotary and
sliding window) whose feed-forward is a mixture of ``num_local_experts`` SwiGLU experts, each position routed to
its ``num_experts_per_tok`` best by a softmax whose chosen weights are renormalised:
``kind=moe(experts, top) router=renormalize``. Hugging Face stores the experts stacked (``experts.gate_up_proj``,
gate rows first; ``experts.down_proj``), as tfspec does (``experts.up``, ``experts.down``), and the router as
``gate``. The load-balancing loss (``router_aux_loss_coef``) counts in Hugging Face's training only with
``output_router_logits``: it imports as ``aux_loss`` then, and as 0 otherwise.
"""

from __future__ import annotations

from ..family import causal_lm
from . import hf_llama
from ..document import Document
from ..fields import Field, Fields, Fixed
from ..weights import GatedMLP, Tensor
from ..layouts import covering, example

MOE_FIELDS = [
    Field("experts", "num_local_experts", lambda f: f.mixture("decoder").experts),
    Field("top", "num_experts_per_tok", lambda f: f.mixture("decoder").top),
    Field("aux_loss", "router_aux_loss_coef", lambda f: f.mixture("decoder").aux_loss or None,
          read=lambda c: c.router_aux_loss_coef if c.output_router_logits else 0.0),
    # written back where the spec trains with the loss (which is read with router_aux_loss_coef)
    Field("router_logits", "output_router_logits", lambda f: True if f.mixture("decoder").aux_loss else None,
          read=lambda c: bool(c.output_router_logits and c.router_aux_loss_coef), setting=False),
    Fixed("router_jitter_noise", 0.0, "router_jitter_noise={value} multiplies each input by noise in training; "
                                      "tfspec's mixture has none"),
]

def exported_head_dim(f) -> int | None:
    """head_dim, exported only where it is not hidden_size / num_attention_heads (Mixtral's default is None)."""
    shape = f.geometry("decoder")
    return shape.head_dim if shape.head_dim != shape.width // shape.heads else None


# Llama's table without the biases (Mixtral's projections have none) and the partial rotary factor (its rotary
# embedding rotates every dimension whatever rope_parameters say)
LEFT_OUT = ("mlp_bias", "attention_bias", "head_dim", "rope_parameters.partial_rotary_factor")
FIELDS = Fields(*(e for e in hf_llama.FIELDS.entries if getattr(e, "config", None) not in LEFT_OUT),
                Field("head_dim", "head_dim", exported_head_dim, read=hf_llama.written_head_dim),
                *MOE_FIELDS, ignored={**hf_llama.FIELDS.ignored,
                                      "rope_parameters.partial_rotary_factor": "Mixtral's rotary embedding rotates "
                                                                               "every dimension whatever it says"})


def document(s, *, padding: bool, head: bool) -> Document:
    """Mixtral's spec: Mistral's, its feed-forward a mixture."""
    return hf_llama.document(s, padding=padding, head=head).change(
        "decoder", "feedforward", kind=f"moe({s.experts}, {s.top}, aux_loss={s.aux_loss})", router="renormalize")


# a mixture's tensors: its router (Hugging Face's gate), its stacked experts, and (Qwen2-MoE's) a shared expert and
# its gate, beside Llama's gated MLP in the layers whose feed-forward is one
MIXTURE = {"feedforward.router": "mlp.gate", "feedforward.experts.up": Tensor("mlp.experts.gate_up_proj"),
           "feedforward.experts.down": Tensor("mlp.experts.down_proj"),
           "feedforward.shared": GatedMLP("mlp.shared_expert"), "feedforward.shared_gate": "mlp.shared_expert_gate"}


EXAMPLES = {
    "MixtralForCausalLM": example("mixtral", intermediate_size=24, num_local_experts=4, num_experts_per_tok=2,
                                  sliding_window=6),
    "MixtralModel": example("mixtral", num_hidden_layers=1, num_key_value_heads=4, intermediate_size=24,
                            num_local_experts=3, num_experts_per_tok=3, output_router_logits=True,
                            router_aux_loss_coef=0.02),
}

COVERAGE = [covering("mixtral", num_hidden_layers=3, num_key_value_heads=1, head_dim=10, rms_norm_eps=1e-7,
                     attention_dropout=0.3, initializer_range=0.05, hidden_act="gelu", tie_word_embeddings=True,
                     sliding_window=5, num_local_experts=5, num_experts_per_tok=3, output_router_logits=True,
                     router_aux_loss_coef=0.05, rope_parameters={"rope_type": "default", "rope_theta": 5000.0},
                     architectures=["MixtralForCausalLM"]),
            *hf_llama.each_scaling(covering("mixtral", num_hidden_layers=1, num_key_value_heads=3,
                                            max_position_embeddings=32, num_local_experts=2, num_experts_per_tok=1))]


# Llama's with the mixture's, and each head's query and key norms where it has them (Qwen3-MoE's)
WEIGHTS = hf_llama.WEIGHTS.derive({"attention.q_norm": "self_attn.q_norm", "attention.k_norm": "self_attn.k_norm",
                                   **MIXTURE})

MIXTRAL = hf_llama.MISTRAL.derive(
    "Mixtral", ("mixtral",), causal_lm("Mixtral"),
    "Mixtral: Mistral's decoder whose feed-forward is a mixture of SwiGLU experts, each position routed to its "
    "top num_experts_per_tok by a softmax whose chosen weights are renormalised "
    "(kind=moe(experts, top) router=renormalize)",
    priority=130, fields=FIELDS, document=document, hf_config=None, rules=WEIGHTS)
