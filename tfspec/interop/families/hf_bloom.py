"""Hugging Face ``BloomForCausalLM`` / ``BloomModel`` <-> a compiled decoder-only spec.

BLOOM (BigScience 2022) is a pre-norm decoder with ALiBi instead of positions (``position alibi``: the paper's
slopes, which are BLOOM's for any head count), a LayerNorm on the embeddings, GELU (tanh) and biases
everywhere, the head tied. Its fused ``query_key_value`` interleaves q, k and v per head as GPT-NeoX's does, so
rows are permuted on the way in and out (``weights.per_head_rows``). ``hidden_dropout`` drops each
sublayer's output. BLOOM's ALiBi biases keys by their position among real tokens (m·j), tfspec's by distance
(-m·(i - j)): under the causal mask the two differ by a constant per query, which the softmax removes.
"""

from __future__ import annotations

from ..family import Family, Requires, causal_lm
from ...registry import POSITIONS
from ..fields import Field, Fields, Fixed, standard
from ..weights import Weights, Reordered, per_head_rows
from .. import layouts
from ..document import Document, Statement


FIELDS = Fields(
    *standard("decoder", d_model="hidden_size", heads="n_head", layers="n_layer", vocab="vocab_size"),
    Field("eps", "layer_norm_epsilon", lambda f: f.norm_option("decoder", "eps", 1e-5)),
    *standard("decoder", p_dropout="hidden_dropout", p_attn_dropout="attention_dropout", init_std="initializer_range"),
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


def _alibi(f) -> bool:
    """(the configuration is then read back as the spec it describes: a bias other than ALiBi's is refused there)"""
    position = f.attention("decoder").position
    return POSITIONS[position.name].biases_scores and position.options.get("max_bias", 8.0) == 8.0


ALIBI = Requires(_alibi, lambda f: f"its attention's positions are {f.attention('decoder').position}, not "
                                   f"{f.family}'s ALiBi")
FOUR_WIDE = Requires(lambda f: f.feedforward("decoder").d_ff == 4 * f.embedding.dim,
                     "its feed-forward is not 4 × hidden_size wide")

# BLOOM's checkpoint; its fused query_key_value interleaves q, k and v per head
WEIGHTS = Weights({
    "attention.qkv": Reordered("self_attention.query_key_value",
                               lambda model, core: per_head_rows(core.heads, core.head_dim)),
    "attention.out": "self_attention.dense",
    "feedforward.up": "mlp.dense_h_to_4h", "feedforward.down": "mlp.dense_4h_to_h",
    "attention_norm": "input_layernorm", "feedforward_norm": "post_attention_layernorm"},
    top={"embeddings.tokens.tokens": "word_embeddings", "embeddings.tokens.norm": "word_embeddings_layernorm",
         "decoder.final_norm": "ln_f"}, layers="h")

EXAMPLES = {
    "BloomForCausalLM": dict(model_type="bloom", vocab_size=90, hidden_size=36, n_layer=2, n_head=6,
                             bos_token_id=1, eos_token_id=2, pad_token_id=0),
    "BloomModel": dict(model_type="bloom", vocab_size=90, hidden_size=32, n_layer=1, n_head=4, bos_token_id=1,
                       eos_token_id=2, pad_token_id=0),
}

COVERAGE = [dict(model_type="bloom", vocab_size=91, hidden_size=24, n_layer=3, n_head=3, layer_norm_epsilon=1e-6,
                 hidden_dropout=0.2, attention_dropout=0.3, initializer_range=0.05, tie_word_embeddings=False,
                 bos_token_id=1, eos_token_id=2, pad_token_id=0)]


BLOOM = Family(
    "BLOOM", ("bloom",), causal_lm("Bloom"),
    "BLOOM: a pre-norm decoder with ALiBi, a LayerNorm on the embeddings, GELU (tanh), biases, the fused "
    "query_key_value interleaved per head, the head tied",
    priority=90, fields=FIELDS, document=document, requires=(ALIBI, FOUR_WIDE), rules=WEIGHTS,
    prefix="transformer.")
