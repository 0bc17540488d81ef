"""Hugging Face ``BloomForCausalLM`` / ``BloomModel`` <-> a compiled decoder-only spec.

BLOOM (BigScience 2022) is a pre-norm decoder with ALiBi instead of positions (``position alibi``: the paper's
slopes, which are BLOOM's for any head count), a LayerNorm on the embeddings, GELU (tanh) and biases
everywhere, the head tied. Its fused ``query_key_value`` interleaves q, k and v per head as GPT-NeoX's does, so
rows are permuted on the way in and out (``hf_gpt_neox.qkv_rows``). ``hidden_dropout`` drops each
sublayer's output. BLOOM's ALiBi biases keys by their position among real tokens (m·j), tfspec's by distance
(-m·(i - j)): under the causal mask the two differ by a constant per query, which the softmax removes.
"""

from __future__ import annotations

from ...registry import POSITIONS
from ..facts import Facts
from ..fields import Field, Fields, Fixed
from .hf_gpt_neox import qkv_rows
from . import hf_llama
from ..mapping import InteropError, Rule, layer_modules, linear_rules, rule
from ..writer import SpecWriter
from .. import layouts
from ..document import Document, Statement


FIELDS = Fields(
    Field("d_model", "hidden_size", lambda f: f.embedding.dim),
    Field("heads", "n_head", lambda f: f.attention("decoder").heads),
    Field("layers", "n_layer", lambda f: f.layers("decoder")),
    Field("vocab", "vocab_size", lambda f: f.embedding.vocab),
    Field("eps", "layer_norm_epsilon", lambda f: f.norm_option("decoder", "eps", 1e-5)),
    Field("p_dropout", "hidden_dropout", lambda f: f.residual_dropout("decoder")),
    Field("p_attn_dropout", "attention_dropout", lambda f: f.attention("decoder").dropout),
    Field("init_std", "initializer_range", lambda f: f.init_option("std", 0.02)),
    Field("tied", "tie_word_embeddings", lambda f: f.tied, let=False),
    Fixed("apply_residual_connection_post_layernorm", False, "apply_residual_connection_post_layernorm={value} adds "
          "the normed input, not the input, back: not a residual the language writes"),
    Fixed("slow_but_exact", False, "slow_but_exact={value} splits the projections' matmuls (pretraining_tp); "
          "use false"),
    ignored={"pretraining_tp": "splits the output projection's matmul in slow_but_exact mode only (refused)"},
)


def document(s, *, padding: bool, head: bool) -> Document:
    """BLOOM's spec from its settings ``s``: the decoder layout with a LayerNorm on the embeddings, ALiBi in the
    stack and a GELU (tanh) feed-forward 4 · d_model wide."""
    return (layouts.decoder(s, norm=f"layernorm(eps={s.eps})", padding=padding, head=head)
            .add("embedding tokens", Statement("norm", f"layernorm(eps={s.eps})"))
            .add("decoder", Statement("position", "alibi"), before="attention")
            .change("decoder", "feedforward", activation="gelu_tanh"))


def spec_text(config, *, head: bool = True, padding: bool = True, name: str = "reference",
              heading: tuple[str, ...] = ()) -> str:
    """The tfspec spec a BLOOM configuration describes."""
    w = SpecWriter()
    return w.text(document(FIELDS.write(config, w), padding=padding, head=head).text(name), list(heading))


def hf_config(spec) -> dict:
    """The BLOOM configuration ``spec`` would be."""
    f = Facts(spec, "BLOOM")
    f.kind("decoder-only")
    position = f.attention("decoder").position
    # (the configuration is then read back as the spec it describes: a bias other than ALiBi's is refused there)
    if not POSITIONS[position.name].biases_scores or position.options.get("max_bias", 8.0) != 8.0:
        raise f.refuse(f"its attention's positions are {position}, not BLOOM's ALiBi")
    if f.feedforward("decoder").d_ff != 4 * f.embedding.dim:
        raise f.refuse("its feed-forward is not 4 × hidden_size wide")
    return {"model_type": "bloom", **FIELDS.config(f)}


def _rules(model, prefix: str, state: dict, lm: bool) -> tuple[list[Rule], dict[str, str]]:
    if model.spec.kind != "decoder-only":
        raise InteropError(f"BLOOM is decoder-only; spec '{model.spec.name}' is {model.spec.kind}")
    ours_state = model.state_dict()
    parts = layer_modules(model)
    rules = [rule("embeddings.tokens.tokens.weight", f"{prefix}word_embeddings.weight"),
             *linear_rules("embeddings.tokens.norm", f"{prefix}word_embeddings_layernorm", state, ours_state),
             *linear_rules("decoder.final_norm", f"{prefix}ln_f", state, ours_state)]
    for i in range(len(model.decoder.layers)):
        ours, theirs = f"decoder.layers.{i}", f"{prefix}h.{i}"
        attention, feedforward = f"{ours}.{parts['attention']}", f"{ours}.{parts['feedforward']}"
        core = model.get_submodule(attention)
        rules += [*linear_rules(f"{attention}.qkv", f"{theirs}.self_attention.query_key_value", state, ours_state,
                                rows=qkv_rows(core.heads, core.head_dim)),
                  *linear_rules(f"{attention}.out", f"{theirs}.self_attention.dense", state, ours_state),
                  *linear_rules(f"{feedforward}.up", f"{theirs}.mlp.dense_h_to_4h", state, ours_state),
                  *linear_rules(f"{feedforward}.down", f"{theirs}.mlp.dense_4h_to_h", state, ours_state),
                  *linear_rules(f"{ours}.{parts['attention_norm']}", f"{theirs}.input_layernorm", state, ours_state),
                  *linear_rules(f"{ours}.{parts['feedforward_norm']}", f"{theirs}.post_attention_layernorm", state,
                                ours_state)]
    head, aliases = hf_llama.lm_head_rules(model, lm)
    return rules + head, aliases


EXPORT_PRIORITY = 90  # where export tries this module's families (lower first)
FAMILIES = (  # the families this module reads and writes (``tfspec.interop.family``)
    hf_llama.decoder_family(
        "BLOOM", ("bloom",),
        {"BloomForCausalLM": {"head": True}, "BloomModel": {"head": False}},
        "BLOOM: a pre-norm decoder with ALiBi, a LayerNorm on the embeddings, GELU (tanh), biases, the fused "
        "query_key_value interleaved per head, the head tied",
        module=__name__, fields=FIELDS, spec_text=spec_text, hf_config=hf_config, rules=_rules, prefix="transformer."),
)
