"""Hugging Face ``MptForCausalLM`` / ``MptModel`` <-> a compiled decoder-only spec.

MPT (MosaicML 2023) is a pre-norm decoder with ALiBi, LayerNorms without bias, no biases anywhere, a GELU
feed-forward four times as wide, the head tied. What Hugging Face's MPT computes is what the spec states, and
some configuration fields it does not read at all (``expansion_ratio`` beyond 4, ``no_bias``, ``norm_type``,
``learned_pos_emb``, ``attn_config.alibi_bias_max``, ...): those are listed as ignored, with the reason.
``attn_config.attn_pdrop`` would drop the attention weights and each sublayer's output, but transformers types
it as a whole number (0 or 1), so the spec trains without dropout and a 1 is refused. MPT's slopes for a head count
that is not a power of two are ordered otherwise than the paper's (and tfspec's): such a configuration is
refused. Its ALiBi biases keys by their index (m·j), tfspec's by distance (-m·(i - j)): under the causal mask
the two differ by a constant per query, which the softmax removes.
"""

from __future__ import annotations

from ..family import Requires, causal_lm
from ..document import Document
from ..facts import Facts
from ..fields import COMMON_IGNORED, Field, Fields, Fixed, standard
from . import hf_bloom
from ..weights import Weights

UNREAD = "not read by Hugging Face's MPT, so it does not change what the model computes"

FIELDS = Fields(
    *standard("decoder", d_model="d_model", heads="n_heads", layers="n_layers", vocab="vocab_size"),
    Field("eps", "layer_norm_epsilon", lambda f: f.norm_option("decoder", "eps", 1e-5)),
    Field("scale", "attn_config.softmax_scale", lambda f: f.attention("decoder").scale,
          read=lambda c: c.attn_config.softmax_scale),
    Field("init_std", "initializer_range", lambda f: f.init_option("std", 0.02)),
    Field("tied", "tie_word_embeddings", lambda f: f.tied, let=False),
    Fixed("attn_config.attn_pdrop", 0, "attn_pdrop={value}: transformers' MPT configuration takes only a whole "
          "number here, and a dropout of 1 is no dropout tfspec trains with", read=lambda c: c.attn_config.attn_pdrop),
    Fixed("attn_config.clip_qkv", None, "clip_qkv={value} clamps the q/k/v projections, which is not expressed",
          read=lambda c: c.attn_config.clip_qkv),
    Fixed("n_heads", "a power of two", "n_heads={value}: MPT orders the ALiBi slopes of a head count that is not a "
          "power of two otherwise than the paper (and tfspec)",
          read=lambda c: "a power of two" if c.n_heads & (c.n_heads - 1) == 0 else c.n_heads,
          required="a power of two"),
    ignored={**{f"attn_config.{name}": why for name, why in COMMON_IGNORED.items()},
             **{name: UNREAD for name in ("expansion_ratio", "no_bias", "norm_type", "learned_pos_emb",
                                          "embedding_fraction", "logit_scale", "resid_pdrop", "emb_pdrop",
                                          "init_device", "attn_config.alibi", "attn_config.alibi_bias_max",
                                          "attn_config.qk_ln", "attn_config.prefix_lm",
                                          "attn_config.attn_uses_sequence_id", "attn_config.attn_type",
                                          "attn_config.attn_impl")},
             "max_seq_len": "the length of MPT's precomputed ALiBi table; tfspec's ALiBi biases any length"},
)


def document(s, *, padding: bool, head: bool) -> Document:
    """MPT's spec: BLOOM's, its LayerNorms without a bias and none on the embeddings, no biases, GELU, no dropout,
    the attention's own scale where it sets one."""
    norm = f"layernorm(eps={s.eps}, bias=false)"
    return (hf_bloom.document(s, padding=padding, head=head)
            .change("defaults", "norm", norm)
            .drop("embedding tokens", "norm")
            .change("decoder", "attention", bias="false", scale=s.scale)
            .change("decoder", "feedforward", activation="gelu", bias="false")
            .change("decoder", "final", norm))


def hf_config(spec) -> dict:
    """The MPT configuration ``spec`` would be: its attention's scale inside ``attn_config``, whose other fields are
    left to their defaults."""
    f = Facts(spec, "MPT")
    f.kind("decoder-only")
    for required in (hf_bloom.ALIBI, hf_bloom.FOUR_WIDE, NO_DROPOUT):
        required.check(f)
    values = FIELDS.config(f)
    values.pop("attn_config", None)
    return {"model_type": "mpt", **values, "attn_config": {"softmax_scale": f.attention("decoder").scale}}


NO_DROPOUT = Requires(lambda f: not (f.attention("decoder").dropout or f.residual_dropout("decoder")),
                      "it trains with dropout; transformers' MPT configuration takes only a whole attn_pdrop (0)")

EXAMPLES = {
    "MptForCausalLM": dict(model_type="mpt", vocab_size=90, d_model=32, n_layers=2, n_heads=4, max_seq_len=40,
                           bos_token_id=1, eos_token_id=2),
    "MptModel": dict(model_type="mpt", vocab_size=90, d_model=32, n_layers=1, n_heads=8, max_seq_len=40,
                     attn_config={"softmax_scale": 0.3}, bos_token_id=1, eos_token_id=2),
}

COVERAGE = [dict(model_type="mpt", vocab_size=91, d_model=24, n_layers=3, n_heads=2, max_seq_len=33,
                 layer_norm_epsilon=1e-6, attn_config={"softmax_scale": 0.5},
                 initializer_range=0.05, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2)]


MPT = hf_bloom.BLOOM.derive(
    "MPT", ("mpt",), causal_lm("Mpt"),
    "MPT: a pre-norm decoder with ALiBi, LayerNorms without bias, no biases, GELU, the head tied",
    priority=110, fields=FIELDS, document=document, hf_config=hf_config,
    rules=Weights({"attention.qkv": "attn.Wqkv", "attention.out": "attn.out_proj",
                          "feedforward.up": "ffn.up_proj", "feedforward.down": "ffn.down_proj",
                          "attention_norm": "norm_1", "feedforward_norm": "norm_2"},
                         top={"embeddings.tokens.tokens": "wte", "decoder.final_norm": "norm_f"}, layers="blocks"))
