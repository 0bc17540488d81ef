"""Hugging Face ``Olmo2ForCausalLM`` (and its base model) <-> a compiled spec.

OLMo 2 (OLMo et al. 2024) normalises each sublayer's *output* before the residual sum, with no norm before it
(``x = x + norm(attention(x))``, the wiring form), and RMS-normalises the queries and keys over all heads at once
(``steps=full_qk_norm``: one weight per dimension of the whole projection, applied before the
heads are split and rotated). Otherwise Llama's: rotary positions, SwiGLU, grouped-query attention, the same
tensor names for the projections (``hf_llama``).
"""

from __future__ import annotations

from ..family import Family, causal_lm
from ...ir import nodes as ir
from ...ir.queries import sublayers
from . import hf_llama
from ..fields import Fields
from ..mapping import InteropError
from .. import layouts
from ..document import Document
from ..writer import causal_masks
from ..layouts import covering, example

_LLAMA = {e.name: e for e in hf_llama.FIELDS.fields}

FIELDS = Fields(
    *(_LLAMA[n] for n in ("d_model", "heads", "kv_heads", "layers", "d_ff", "vocab", "rope_theta", "eps",
                          "p_attn_dropout", "init_std", "activation", "attention_bias", "tied")),
    *hf_llama.ROPE_SCALING,
    ignored=hf_llama.FIELDS.ignored,
)


def document(s, *, padding: bool, head: bool) -> Document:
    """The spec an OLMo 2 configuration describes: norms after each sublayer, in the wiring form."""
    document = post_norm_document(s, hf_llama.rotary(s), causal_masks(padding=padding), head=head)
    return document


def post_norm_document(s, position: str, masks: str, *, head: bool, qk_norm: str | None = None,
                       bias: str | None = None) -> Document:
    """The spec of an OLMo-layout decoder from its settings ``s``: its stack's rotary ``position`` and ``masks``
    (a family adds the ``layers`` sections where layers differ: OLMo 3's sliding and full layers);
    ``qk_norm``: the attention's norm of queries and keys (default OLMo's, over all heads at once; EXAONE 4's
    each head's); ``bias``: the attention's, where the configuration has no ``attention_bias`` (EXAONE 4's:
    false)."""
    bias = bias or s.attention_bias
    qk_norm = qk_norm or f"steps=full_qk_norm(eps={s.eps})"
    wiring = f"""  x = x + norm(attention(x, heads={s.heads}, kv_heads={s.kv_heads}, mask={masks}, bias={bias}, \\
                         {qk_norm}))
  x = x + norm(feedforward(x, d_ff={s.d_ff}, activation={s.activation}, bias=false))"""
    return layouts.wired(s, norm=f"rmsnorm(eps={s.eps})", position=position, wiring=wiring, head=head)


def post_norm_modules(model) -> dict[str, str]:
    """Module names, inside one decoder layer, of each sublayer and the norm after it: ``attention``,
    ``attention_post_norm``, ``feedforward``, ``feedforward_post_norm``."""
    g = model.spec.graph()
    found: dict[str, str] = {}
    for node in sublayers(g, "decoder", kind=0):
        part = "attention" if isinstance(node, ir.Attention) else "feedforward"
        after = g.consumers(node.id)
        if part in found or len(after) != 1 or not isinstance(after[0], ir.Norm):
            raise InteropError(f"spec '{model.spec.name}' is not OLMo 2's layer: one attention and one "
                               "feed-forward, each with a norm after it (x = x + norm(attention(x)))")
        found.update({part: node.name, f"{part}_post_norm": after[0].module.name})
    return found


# all heads' query and key norms, as OLMo's checkpoints name them (EXAONE 4's each head's have these names too)
FULL_QK_NORM = {"attention.full_qk_norm.q": "self_attn.q_norm", "attention.full_qk_norm.k": "self_attn.k_norm",
                "attention.q_norm": "self_attn.q_norm", "attention.k_norm": "self_attn.k_norm"}


EXAMPLES = {
    "Olmo2ForCausalLM": example("olmo2", pad_token_id=0, eos_token_id=2),
    "Olmo2Model": dict(model_type="olmo2", vocab_size=90, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                       intermediate_size=48, attention_bias=True, pad_token_id=0, eos_token_id=2),
}

COVERAGE = [covering("olmo2", num_hidden_layers=3, num_key_value_heads=1, rms_norm_eps=1e-6,
                     rope_parameters={"rope_type": "linear", "rope_theta": 5e5, "factor": 2.0}, attention_dropout=0.1,
                     initializer_range=0.05, hidden_act="gelu", attention_bias=True, tie_word_embeddings=True,
                     pad_token_id=0, eos_token_id=2),
            *hf_llama.each_scaling(covering("olmo2", num_hidden_layers=1, max_position_embeddings=32, pad_token_id=0,
                                            eos_token_id=2))]


OLMO2 = Family(
    "OLMo 2", ("olmo2",), causal_lm("Olmo2"),
    "OLMo 2: an RMSNorm after each sublayer and none before it (in the wiring form), queries and keys "
    "RMS-normed over all heads at once (steps=full_qk_norm), rotary positions, SwiGLU",
    priority=250, fields=FIELDS, document=document,
    # Llama's projections and each head's query and key norms; a norm after each sublayer
    rules=hf_llama.WEIGHTS.derive(
        {**FULL_QK_NORM, "attention_norm": None,
         "feedforward_norm": None, "attention_post_norm": "post_attention_layernorm",
         "feedforward_post_norm": "post_feedforward_layernorm"}, parts=post_norm_modules))
