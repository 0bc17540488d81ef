"""Hugging Face ``CohereForCausalLM`` (Command R; and ``CohereModel``) and ``StableLmForCausalLM`` (StableLM 2;
and ``StableLmModel``) <-> a compiled spec.

Both are Llama's projections (``hf_llama``'s tensor names) around LayerNorms. Cohere runs
attention and the SwiGLU feed-forward in parallel on one LayerNorm without bias (``h = norm(x); x = x +
attention(h) + feedforward(h)``), pairs neighbouring dimensions in its rotary positions (``interleaved=true``)
and multiplies the logits by ``logit_scale`` (``head tied(tokens) scale=...``, which scales the head's input:
the same product). StableLM rotates part of each head (half-split), biases q/k/v where ``use_qkv_bias``, and
is pre-norm with LayerNorms (with bias) or, with ``use_parallel_residual``, parallel on one norm; its
``hidden_dropout`` drops the feed-forward's output only. Per-head norms of queries and keys with weights of
their own per head (Cohere's ``use_qk_norm``, StableLM's ``qk_layernorm``) are not expressed and are refused.
"""

from __future__ import annotations

from . import hf_llama
from ..facts import Facts
from ..fields import Field, Fields, Fixed
from ..mapping import InteropError, Rule, layer_modules, linear_rules, rule
from .. import layouts
from ..writer import SpecWriter, causal_masks
from ..family import Family

_LLAMA = {e.name: e for e in hf_llama.FIELDS.fields}
_SHARED = ("d_model", "heads", "kv_heads", "layers", "d_ff", "vocab", "rope_theta", "p_attn_dropout", "init_std",
           "activation", "tied")


COHERE_FIELDS = Fields(
    *(_LLAMA[n] for n in _SHARED), *hf_llama.ROPE_SCALING,
    Field("eps", "layer_norm_eps", lambda f: f.norm_option("decoder", "eps", 1e-5)),
    Field("attention_bias", "attention_bias", lambda f: f.attention("decoder").bias, let=False),
    Field("logit_scale", "logit_scale", lambda f: f.spec.head.scale if f.spec.head is not None else None),
    Fixed("use_qk_norm", False, "use_qk_norm={value} norms each head's queries and keys with weights of its own "
          "per head, which the language does not express (its qk-norm shares one weight across heads)"),
    ignored=hf_llama.FIELDS.ignored,
)

STABLELM_FIELDS = Fields(
    *(_LLAMA[n] for n in _SHARED + ("rotary_fraction",)), *hf_llama.ROPE_SCALING,
    Field("eps", "layer_norm_eps", lambda f: f.norm_option("decoder", "eps", 1e-5)),
    Field("qkv_bias", "use_qkv_bias", lambda f: f.attention("decoder").bias, let=False),
    Field("parallel", "use_parallel_residual", lambda f: f.norm_placement("decoder").startswith("parallel"),
          let=False),
    Field("p_dropout", "hidden_dropout", lambda f: _feedforward_dropout(f)),
    Fixed("qk_layernorm", False, "qk_layernorm={value} norms each head's queries and keys with weights of its own "
          "per head, which the language does not express (its qk-norm shares one weight across heads)"),
    ignored=hf_llama.FIELDS.ignored,
)
FIELDS = COHERE_FIELDS  # Cohere's table; StableLM's module (hf_stablelm) names STABLELM_FIELDS


def _feedforward_dropout(f) -> float:
    """The dropout on the feed-forward's output (StableLM's hidden_dropout; its attention's output has none)."""
    from ...ir import nodes as ir
    from ...ir.queries import residual_placement
    node = f.node("decoder", ir.FeedForward)
    return residual_placement(f.g, node).dropout


def spec_text(config, *, head: bool = True, padding: bool = True, name: str = "reference",
              heading: tuple[str, ...] = ()) -> str:
    """The tfspec spec a Cohere or StableLM configuration describes, in the wiring form."""
    cohere = config.model_type == "cohere"
    w = SpecWriter()
    s = (COHERE_FIELDS if cohere else STABLELM_FIELDS).write(config, w)
    masks = causal_masks(padding=padding)
    if cohere:
        position, parallel = hf_llama.rotary(s, interleaved=True), True
        bias = f"bias={s.attention_bias}"
        norm = f"layernorm(eps={s.eps}, bias=false)"
    else:
        position, parallel = hf_llama.rotary(s), s.value("parallel")
        bias = f"bias={s.qkv_bias}, out_bias=false"
        norm = f"layernorm(eps={s.eps})"
    dropout = s.p_dropout if not cohere and s.value("p_dropout") else None

    def ffn(h: str) -> str:
        call = f"feedforward({h}, d_ff={s.d_ff}, activation={s.activation}, bias=false)"
        return f"dropout({call}, {dropout})" if dropout else call

    attention = f"attention({{}}, heads={s.heads}, kv_heads={s.kv_heads}, mask={masks}, {bias})"
    if parallel:
        wiring = f"h = norm(x)\nx = x + {attention.format('h')} + \\\n    {ffn('h')}   # in parallel, on one norm"
    else:
        wiring = f"x = x + {attention.format('norm(x)')}\nx = x + {ffn('norm(x)')}"
    document = layouts.wired(s, norm=norm, position=position, wiring=wiring, head=head)
    if head and cohere and s.value("logit_scale") != 1.0:
        document = document.change_tail("head", scale=s.logit_scale)
    elif not head and cohere:
        w.forget("logit_scale")
    return w.text(document.text(name), list(heading))


def hf_config(spec) -> dict:
    """The Cohere configuration ``spec`` would be."""
    f = Facts(spec, "Cohere")
    f.kind("decoder-only")
    if not f.rotary("decoder").get("interleaved") or not f.norm_placement("decoder").startswith("parallel"):
        raise f.refuse("its rotary positions are not interleaved or its sublayers not parallel, as Cohere's are")
    return {"model_type": "cohere", **COHERE_FIELDS.config(f)}


def hf_config_stablelm(spec) -> dict:
    """The StableLM configuration ``spec`` would be."""
    f = Facts(spec, "StableLM")
    f.kind("decoder-only")
    return {"model_type": "stablelm", **STABLELM_FIELDS.config(f)}


def weight_rules(model, prefix: str, state: dict, lm: bool) -> tuple[list[Rule], dict[str, str]]:
    if model.spec.kind != "decoder-only":
        raise InteropError(f"spec '{model.spec.name}' is {model.spec.kind}, not decoder-only")
    ours_state = model.state_dict()
    parts = layer_modules(model)
    parallel = parts.get("attention_norm") == parts.get("feedforward_norm")
    rules = [rule("embeddings.tokens.tokens.weight", f"{prefix}embed_tokens.weight"),
             *linear_rules("decoder.final_norm", f"{prefix}norm", state, ours_state)]
    for i in range(len(model.decoder.layers)):
        ours, theirs = f"decoder.layers.{i}", f"{prefix}layers.{i}"
        rules += hf_llama.projection_rules(model, f"{ours}.{parts['attention']}", f"{ours}.{parts['feedforward']}",
                                           theirs, state, ours_state)
        rules += linear_rules(f"{ours}.{parts['attention_norm']}", f"{theirs}.input_layernorm", state, ours_state)
        if not parallel:
            rules += linear_rules(f"{ours}.{parts['feedforward_norm']}", f"{theirs}.post_attention_layernorm", state,
                                  ours_state)
    head, aliases = hf_llama.lm_head_rules(model, lm)
    return rules + head, aliases


def from_hf_cohere(model, reference) -> None:
    """Copy a ``CohereForCausalLM`` (or ``CohereModel``)'s weights into ``model``; the spec must be the
    architecture the reference's configuration describes."""
    hf_llama.load_decoder(model, reference, COHERE_FIELDS, hf_config, spec_text, weight_rules)


def to_hf_cohere(model) -> dict:
    """A state dict for ``CohereForCausalLM`` (spec with a head) or ``CohereModel``."""
    return hf_llama.export_decoder(model, weight_rules, "Hugging Face Cohere")


def from_hf_stablelm(model, reference) -> None:
    """Copy a ``StableLmForCausalLM`` (or ``StableLmModel``)'s weights into ``model``, as ``from_hf_cohere``."""
    hf_llama.load_decoder(model, reference, STABLELM_FIELDS, hf_config_stablelm, spec_text, weight_rules)


def to_hf_stablelm(model) -> dict:
    """A state dict for ``StableLmForCausalLM`` (spec with a head) or ``StableLmModel``."""
    return hf_llama.export_decoder(model, weight_rules, "Hugging Face StableLM")


EXPORT_PRIORITY = 310  # where export tries this module's families (lower first)
FAMILIES = (  # the families this module reads and writes (``tfspec.interop.family``)
    Family("Cohere", ("cohere",),
           {"CohereForCausalLM": {"head": True}, "CohereModel": {"head": False}},
           "Cohere (Command R): attention and a SwiGLU feed-forward in parallel on one LayerNorm without bias, "
           "interleaved rotary positions, the logits multiplied by logit_scale (the head's input scale), the head "
           "tied",
           module=__name__, fields=FIELDS, spec_text=spec_text, hf_config=hf_config, load=from_hf_cohere,
           export=to_hf_cohere),
)
