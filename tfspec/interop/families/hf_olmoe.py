"""Hugging Face ``OlmoeForCausalLM`` (Ai2's OLMoE; and its base model) <-> a compiled spec.

OLMoE is Llama's pre-norm layout whose queries and keys are RMS-normed over all heads at once, before the heads
are split (OLMo 2's ``qk_norm_width=full``), and whose feed-forward is a mixture of ``num_experts`` SwiGLU experts,
each position routed to its ``num_experts_per_tok`` best by a softmax, the chosen weights renormalised where
``norm_topk_prob`` says (``kind=moe(experts, top, renormalize=...)``). The tensors map through
``hf_mixtral``'s rules; ``clip_qkv`` (clamping the projections) is not expressed and is refused.
"""

from __future__ import annotations

from . import hf_llama, hf_mixtral
from ..facts import Facts
from ..fields import Field, Fields, Fixed
from ..writer import SpecWriter

_MIXTRAL = [e for e in hf_mixtral.FIELDS.entries if getattr(e, "config", None) not in
            ("num_local_experts", "head_dim", "sliding_window", "router_jitter_noise")]

FIELDS = Fields(
    *_MIXTRAL,
    Field("experts", "num_experts", lambda f: f.mixture("decoder").experts),
    Field("renormalize", "norm_topk_prob", lambda f: f.mixture("decoder").renormalize, let=False),
    Field("attention_bias", "attention_bias", lambda f: f.attention("decoder").bias, let=False),
    Fixed("clip_qkv", None, "clip_qkv={value} clamps the q/k/v projections, which tfspec does not express"),
    ignored={**hf_mixtral.FIELDS.ignored},
)


def spec_text(config, *, head: bool = True, padding: bool = True, name: str = "reference",
              heading: tuple[str, ...] = ()) -> str:
    """The tfspec spec an OLMoE configuration describes: Llama's with queries and keys RMS-normed over all heads at
    once and a mixture of SwiGLU experts."""
    w = SpecWriter()
    s = FIELDS.write(config, w)
    document = (hf_llama.document(s, padding=padding, head=head)
                .change("decoder", "attention", qk_norm=f"rmsnorm(eps={s.eps})", qk_norm_width="full")
                .change("decoder", "feedforward", bias="false",
                        kind=f"moe({s.experts}, {s.top}, renormalize={s.renormalize}, aux_loss={s.aux_loss})"))
    return w.text(document.text(name), list(heading))

def hf_config(spec) -> dict:
    """The OLMoE configuration ``spec`` would be."""
    f = Facts(spec, "OLMoE")
    f.kind("decoder-only")
    if f.attention("decoder").qk_norm_width != "full":
        raise f.refuse("its queries and keys are not normed over all heads at once, as OLMoE's are")
    return {"model_type": "olmoe", **FIELDS.config(f)}


EXPORT_PRIORITY = 440  # where export tries this module's families (lower first)
FAMILIES = (  # the families this module reads and writes (``tfspec.interop.family``)
    hf_llama.decoder_family(
        "OLMoE", ("olmoe",), {"OlmoeForCausalLM": {"head": True}, "OlmoeModel": {"head": False}},
        "OLMoE: Llama's pre-norm block with queries and keys RMS-normed over all heads at once "
        "(qk_norm_width=full) and a mixture of SwiGLU experts routed by a softmax, renormalised where "
        "norm_topk_prob says (kind=moe(experts, top, renormalize=...))",
        module=__name__, fields=FIELDS, spec_text=spec_text, hf_config=hf_config, rules=hf_mixtral.weight_rules),
)
