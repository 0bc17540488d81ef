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

from ..family import Requires, causal_lm
from . import hf_llama
from ..document import Document
from ..fields import Field, Fields, Fixed
from ..mapping import layer_modules
from .. import layouts
from ..writer import causal_masks
from ..layouts import covering, example

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


def wired(s, *, padding: bool, head: bool, position: str, parallel: bool, bias: str, norm: str,
          dropout: str | None = None) -> Document:
    """The spec of Cohere's layout in the wiring form: attention (``bias``: its bias options) and a feed-forward
    (with ``dropout`` on its output where given) in ``parallel`` on one ``norm``, or each behind its own."""
    masks = causal_masks(padding=padding)

    def ffn(h: str) -> str:
        call = f"feedforward({h}, d_ff={s.d_ff}, activation={s.activation}, bias=false)"
        return f"dropout({call}, {dropout})" if dropout else call

    attention = f"attention({{}}, heads={s.heads}, kv_heads={s.kv_heads}, mask={masks}, {bias})"
    if parallel:
        wiring = f"h = norm(x)\nx = x + {attention.format('h')} + \\\n    {ffn('h')}   # in parallel, on one norm"
    else:
        wiring = f"x = x + {attention.format('norm(x)')}\nx = x + {ffn('norm(x)')}"
    return layouts.wired(s, norm=norm, position=position, wiring=wiring, head=head)


def document(s, *, padding: bool, head: bool) -> Document:
    """Cohere's spec: its layer in parallel on one LayerNorm without bias, interleaved rotary positions, the logits
    scaled."""
    document = wired(s, padding=padding, head=head, position=hf_llama.rotary(s, interleaved=True), parallel=True,
                     bias=f"bias={s.attention_bias}", norm=f"layernorm(eps={s.eps}, bias=false)")
    if head and s.value("logit_scale") != 1.0:
        return document.change_tail("head", scale=s.logit_scale)
    if not head:
        s.writer.forget("logit_scale")
    return document


def one_norm_parts(model) -> dict[str, str]:
    """A layer's parts (``mapping.layer_modules``), its one norm the attention's where both sublayers read it."""
    parts = layer_modules(model)
    if parts.get("attention_norm") == parts.get("feedforward_norm"):
        del parts["feedforward_norm"]
    return parts


EXAMPLES = {
    "CohereForCausalLM": example("cohere", logit_scale=0.5, pad_token_id=0, bos_token_id=1, eos_token_id=2),
    "CohereModel": dict(model_type="cohere", vocab_size=90, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                        intermediate_size=48, attention_bias=True, pad_token_id=0, bos_token_id=1, eos_token_id=2),
}

COVERAGE = [covering("cohere", num_hidden_layers=3, num_key_value_heads=1, layer_norm_eps=1e-6, logit_scale=0.25,
                     rope_parameters={"rope_type": "linear", "rope_theta": 5e5, "factor": 2.0}, attention_dropout=0.3,
                     initializer_range=0.05, hidden_act="gelu", attention_bias=True, tie_word_embeddings=False,
                     pad_token_id=0, bos_token_id=1, eos_token_id=2),
            *hf_llama.each_scaling(covering("cohere", num_hidden_layers=1, num_key_value_heads=3,
                                            max_position_embeddings=32, pad_token_id=0, bos_token_id=1,
                                            eos_token_id=2))]


COHERE = hf_llama.LLAMA.derive(
    "Cohere", ("cohere",), causal_lm("Cohere"),
    "Cohere (Command R): attention and a SwiGLU feed-forward in parallel on one LayerNorm without bias, "
    "interleaved rotary positions, the logits multiplied by logit_scale (the head's input scale), the head tied",
    priority=310, fields=FIELDS, document=document, hf_config=None,
    requires=(Requires(lambda f: f.rotary("decoder").get("interleaved")
                       and f.norm_placement("decoder").startswith("parallel"),
                       "its rotary positions are not interleaved or its sublayers not parallel, as Cohere's are"),),
    rules=hf_llama.WEIGHTS.derive(parts=one_norm_parts))
