"""Hugging Face ``MixtralForCausalLM`` / ``MixtralModel`` <-> a compiled spec.

Mixtral (Jiang et al. 2024) is Mistral's decoder (``hf_llama``: its attention, norms, rotary and
sliding window) whose feed-forward is a mixture of ``num_local_experts`` SwiGLU experts, each position routed to
its ``num_experts_per_tok`` best by a softmax whose chosen weights are renormalised:
``kind=moe(experts, top, renormalize=true)``. Hugging Face stores the experts stacked (``experts.gate_up_proj``,
gate rows first; ``experts.down_proj``), as tfspec does (``experts.up``, ``experts.down``), and the router as
``gate``. The load-balancing loss (``router_aux_loss_coef``) counts in Hugging Face's training only with
``output_router_logits``: it imports as ``aux_loss`` then, and as 0 otherwise.
"""

from __future__ import annotations

from . import hf_llama
from ..family import exported_config
from ..fields import Field, Fields, Fixed
from ..mapping import Rule, rule
from ..writer import SpecWriter

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


def spec_text(config, *, head: bool = True, padding: bool = True, name: str = "reference",
              heading: tuple[str, ...] = ()) -> str:
    """The tfspec spec a Mixtral configuration describes: Mistral's, its feed-forward a mixture."""
    w = SpecWriter()
    s = FIELDS.write(config, w)
    document = hf_llama.document(s, padding=padding, head=head).change(
        "decoder", "feedforward", kind=f"moe({s.experts}, {s.top}, renormalize=true, aux_loss={s.aux_loss})")
    return w.text(document.text(name), list(heading))

hf_config = exported_config("Mixtral", "mixtral", "decoder-only", FIELDS)


def moe_rules(ours: str, theirs: str) -> list[Rule]:
    """A mixture's router (Hugging Face's ``gate``) and its stacked experts."""
    return [rule(f"{ours}.router.weight", f"{theirs}.gate.weight"),
            rule(f"{ours}.experts.up", f"{theirs}.experts.gate_up_proj"),
            rule(f"{ours}.experts.down", f"{theirs}.experts.down_proj")]


def shared_rules(ours: str, theirs: str, state: dict, ours_state: dict) -> list[Rule]:
    """Qwen2-MoE's shared expert (a gated MLP) and its gate, where the mixture has them."""
    if f"{ours}.shared.down.weight" not in ours_state and f"{theirs}.shared_expert.down_proj.weight" not in state:
        return []
    rules = hf_llama.mlp_rules(f"{ours}.shared", f"{theirs}.shared_expert", state, ours_state)
    return rules + [rule(f"{ours}.shared_gate.weight", f"{theirs}.shared_expert_gate.weight")]


def _sublayer_rules(model, attention: str, feedforward: str, theirs: str, state: dict, ours_state: dict
                    ) -> list[Rule]:
    """One layer's attention (with each head's query and key norms where it has them: Qwen3-MoE) and its
    feed-forward: a mixture, or (layer by layer) a gated MLP."""
    rules = hf_llama.attention_rules(model, attention, theirs, state, ours_state)
    rules += [rule(f"{attention}.{n}.weight", f"{theirs}.self_attn.{n}.weight") for n in ("q_norm", "k_norm")
              if f"{attention}.{n}.weight" in ours_state]
    if f"{feedforward}.router.weight" in ours_state:  # this layer's is a mixture
        return rules + moe_rules(feedforward, f"{theirs}.mlp") + shared_rules(feedforward, f"{theirs}.mlp", state,
                                                                              ours_state)
    return rules + hf_llama.mlp_rules(feedforward, f"{theirs}.mlp", state, ours_state)


def weight_rules(model, prefix: str, state: dict, lm: bool) -> tuple[list[Rule], dict[str, str]]:
    """A Llama-layout decoder whose feed-forwards are mixtures (or, layer by layer, gated MLPs)."""
    return hf_llama.layout_rules(model, prefix, state, lm, _sublayer_rules)


EXPORT_PRIORITY = 130  # where export tries this module's families (lower first)
FAMILIES = (  # the families this module reads and writes (``tfspec.interop.family``)
    hf_llama.decoder_family(
        "Mixtral", ("mixtral",),
        {"MixtralForCausalLM": {"head": True}, "MixtralModel": {"head": False}},
        "Mixtral: Mistral's decoder whose feed-forward is a mixture of SwiGLU experts, each position routed to its "
        "top num_experts_per_tok by a softmax whose chosen weights are renormalised "
        "(kind=moe(experts, top, renormalize=true))",
        module=__name__, fields=FIELDS, spec_text=spec_text, hf_config=hf_config, rules=weight_rules),
)
