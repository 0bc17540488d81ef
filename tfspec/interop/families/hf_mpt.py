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

from ...registry import POSITIONS
from ..facts import Facts
from ..fields import COMMON_IGNORED, Field, Fields, Fixed
from . import hf_bloom, hf_llama
from ..mapping import InteropError, Rule, layer_modules, linear_rules, rule
from ..writer import SpecWriter

UNREAD = "not read by Hugging Face's MPT, so it does not change what the model computes"

FIELDS = Fields(
    Field("d_model", "d_model", lambda f: f.embedding.dim),
    Field("heads", "n_heads", lambda f: f.attention("decoder").heads),
    Field("layers", "n_layers", lambda f: f.layers("decoder")),
    Field("vocab", "vocab_size", lambda f: f.embedding.vocab),
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


def spec_text(config, *, head: bool = True, padding: bool = True, name: str = "reference",
              heading: tuple[str, ...] = ()) -> str:
    """The tfspec spec an MPT configuration describes: BLOOM's, its LayerNorms without a bias and none on the
    embeddings, no biases, GELU, no dropout, the attention's own scale where it sets one."""
    w = SpecWriter()
    s = FIELDS.write(config, w)
    norm = f"layernorm(eps={s.eps}, bias=false)"
    document = (hf_bloom.document(s, padding=padding, head=head)
                .change("defaults", "norm", norm)
                .drop("embedding tokens", "norm")
                .change("decoder", "attention", bias="false", scale=s.scale)
                .change("decoder", "feedforward", activation="gelu", bias="false")
                .change("decoder", "final", norm))
    return w.text(document.text(name), list(heading))


def hf_config(spec) -> dict:
    """The MPT configuration ``spec`` would be."""
    f = Facts(spec, "MPT")
    f.kind("decoder-only")
    position = f.attention("decoder").position
    # (the configuration is then read back as the spec it describes: a bias other than ALiBi's is refused there)
    if not POSITIONS[position.name].biases_scores or position.options.get("max_bias", 8.0) != 8.0:
        raise f.refuse(f"its attention's positions are {position}, not MPT's ALiBi")
    if f.feedforward("decoder").d_ff != 4 * f.embedding.dim:
        raise f.refuse("its feed-forward is not 4 × d_model wide")
    if f.attention("decoder").dropout or f.residual_dropout("decoder"):
        raise f.refuse("it trains with dropout; transformers' MPT configuration takes only a whole attn_pdrop (0)")
    values = FIELDS.config(f)
    values.pop("attn_config", None)
    return {"model_type": "mpt", **values, "attn_config": {"softmax_scale": f.attention("decoder").scale}}


def _rules(model, prefix: str, state: dict, lm: bool) -> tuple[list[Rule], dict[str, str]]:
    if model.spec.kind != "decoder-only":
        raise InteropError(f"MPT is decoder-only; spec '{model.spec.name}' is {model.spec.kind}")
    ours_state = model.state_dict()
    parts = layer_modules(model)
    rules = [rule("embeddings.tokens.tokens.weight", f"{prefix}wte.weight"),
             *linear_rules("decoder.final_norm", f"{prefix}norm_f", state, ours_state)]
    for i in range(len(model.decoder.layers)):
        ours, theirs = f"decoder.layers.{i}", f"{prefix}blocks.{i}"
        attention, feedforward = f"{ours}.{parts['attention']}", f"{ours}.{parts['feedforward']}"
        rules += [*linear_rules(f"{attention}.qkv", f"{theirs}.attn.Wqkv", state, ours_state),
                  *linear_rules(f"{attention}.out", f"{theirs}.attn.out_proj", state, ours_state),
                  *linear_rules(f"{feedforward}.up", f"{theirs}.ffn.up_proj", state, ours_state),
                  *linear_rules(f"{feedforward}.down", f"{theirs}.ffn.down_proj", state, ours_state),
                  *linear_rules(f"{ours}.{parts['attention_norm']}", f"{theirs}.norm_1", state, ours_state),
                  *linear_rules(f"{ours}.{parts['feedforward_norm']}", f"{theirs}.norm_2", state, ours_state)]
    head, aliases = hf_llama.lm_head_rules(model, lm)
    return rules + head, aliases


EXPORT_PRIORITY = 110  # where export tries this module's families (lower first)
FAMILIES = (  # the families this module reads and writes (``tfspec.interop.family``)
    hf_llama.decoder_family(
        "MPT", ("mpt",),
        {"MptForCausalLM": {"head": True}, "MptModel": {"head": False}},
        "MPT: a pre-norm decoder with ALiBi, LayerNorms without bias, no biases, GELU, the head tied",
        module=__name__, fields=FIELDS, spec_text=spec_text, hf_config=hf_config, rules=_rules, prefix="transformer."),
)
