"""Hugging Face ``T5ForConditionalGeneration`` / ``T5Model`` (T5 v1.0 and v1.1, mT5's layout) <-> a compiled spec.

T5 is an encoder-decoder of pre-norm layers with RMSNorms (no bias anywhere), a relative attention bias that
each stack's first layer owns and every layer adds (our ``position t5``: the stack owns the table), attention
without the 1/sqrt(d_kv) scale (``scale=1``), and a feed-forward of ``wi`` (or ``wi_0``, ``wi_1`` for the
gated v1.1: our ``up``, gate first) and ``wo``. Both stacks read one ``shared`` embedding. With the head tied
to it (v1.0) the decoder's output is scaled by d_model^-0.5 first (``head tied(tokens) scale=...``). Dropout
(``dropout_rate``) acts after the embedding, on each sublayer's output, on the attention weights, after the
feed-forward's activation and after each stack's final norm: the spec says each.

``spec_text(config)`` writes the spec a configuration describes; loading compares the model's spec with it
fact by fact (``architecture_problems``), so a differing bucket count, distance, eps, activation, head
scale or tying is an ``InteropError``, never a silent copy.
"""

from __future__ import annotations

from ..mapping import Rule, linear_rules
from ..weights import Projections, Stacks, Weights
from ..fields import Field, Fields, Fixed, standard
from ..document import Block, Document, Statement
from ..writer import number
from ..family import Family

# feed_forward_proj -> our activation. "gated-gelu" is the tanh-approximated GELU (T5Config reads it as
# gelu_new); the exact gated GELU has no feed_forward_proj.
ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh",
               "silu": "silu", "swish": "silu", "gated-gelu": "geglu_tanh", "gated-gelu_new": "geglu_tanh",
               "gated-gelu_pytorch_tanh": "geglu_tanh", "gated-silu": "swiglu", "gated-swish": "swiglu"}


def scales_decoder_output(config) -> bool:
    """Does the model scale the decoder's output by d_model^-0.5 before its head (T5 v1.0; not v1.1)?"""
    return bool(getattr(config, "scale_decoder_outputs", config.tie_word_embeddings))


def _bias(f):
    """The encoder's relative attention bias (its options: buckets, distance)."""
    return f.stack_bias("encoder")


def _scaled(f) -> bool:
    """T5 v1.0 scales exactly when its config ties; without a head nothing shows it (Hugging Face's default)."""
    return f.spec.head.scale != 1.0 if f.spec.head is not None else True


FIELDS = Fields(
    Field("d_model", "d_model", lambda f: f.embedding.dim),
    Field("d_kv", "d_kv", lambda f: f.geometry("encoder").head_dim),
    *standard("encoder", heads="num_heads", d_ff="d_ff", layers="num_layers"),
    Field("decoder_layers", "num_decoder_layers", lambda f: f.layers("decoder"),
          read=lambda c: c.num_decoder_layers if c.num_decoder_layers != c.num_layers else None),
    Field("vocab", "vocab_size", lambda f: f.embedding.vocab),
    Field("eps", "layer_norm_epsilon", lambda f: f.norm_option("encoder", "eps", 1e-6)),
    Field("p_dropout", "dropout_rate", lambda f: f.embedding.dropout),
    Field("buckets", "relative_attention_num_buckets", lambda f: _bias(f).options.get("num_buckets", 32)),
    Field("max_distance", "relative_attention_max_distance", lambda f: _bias(f).options.get("max_distance", 128)),
    Field("init_factor", "initializer_factor", lambda f: f.init_option("factor", 1.0)),
    Field("activation", "feed_forward_proj", lambda f: f.feedforward("encoder").activation.name,
          names=ACTIVATIONS),
    # T5Config reads tie_word_embeddings as "scale the decoder's output" (and then ties the head whatever it says)
    Field("scaled", "tie_word_embeddings", _scaled, read=scales_decoder_output, let=False),
    Fixed("is_decoder", False, "is_decoder=True makes T5's encoder stack causal; tfspec imports T5 as the "
                               "encoder-decoder it is"),
    ignored={"dense_act_fn": "T5Config derives it from feed_forward_proj",
             "is_gated_act": "T5Config derives it from feed_forward_proj",
             "scale_decoder_outputs": "T5Config derives it from tie_word_embeddings"},
)


def options_from_model(model) -> dict:
    """Whether the head shares the embedding is the model's, whatever the configuration says (Hugging Face ties
    T5's head on construction, and keeps a head of its own only when the checkpoint has one)."""
    return {"tied": model.head is not None and model.head.tied}


def options_from_tensors(names: set[str]) -> dict:
    """A checkpoint saved with its head tied to the embedding stores no ``lm_head.weight`` (Hugging Face loads it
    tied, whatever ``tie_word_embeddings`` says); one that stores it has its own head."""
    return {"tied": "lm_head.weight" not in names}


def document(s, *, padding: bool, head: bool, tied: bool | None = None) -> Document:
    """T5's spec from the configuration's settings ``s``: ``T5ForConditionalGeneration``'s, or ``T5Model``'s with
    ``head=False``. ``tied``: the head shares the embedding (default: as T5 v1.0 and v1.1 do, tied exactly when the
    decoder's output is scaled); ``padding``: mask padded keys."""
    tied = s.value("scaled") if tied is None else tied
    norm, drop, source = f"rmsnorm(eps={s.eps})", s.p_dropout, "padding" if padding else "none"
    attention = {"heads": s.heads, "head_dim": s.d_kv, "scale": "1"}  # T5 folds 1/sqrt(d_kv) into its initialisation

    def stack(role: str, repeat: str, *attentions: Statement) -> Block:
        position = f"t5(num_buckets={s.buckets}, max_distance={s.max_distance})"
        return Block(f"{role} x {repeat}", Statement("position", position), *attentions,
                     Statement("feedforward", d_ff=s.d_ff, activation=s.activation),
                     Statement("final", norm), Statement("final_dropout", drop))

    head_statement = Statement("head", "tied(tokens)" if tied else f"linear({s.vocab})", bias="false",
                               scale=number(s.config.d_model ** -0.5) if s.value("scaled") else None)
    return Document.of(
        Block("defaults", Statement("residual", "pre"), Statement("norm", norm), Statement("bias", "false"),
              Statement("dropout", drop), Statement("attn_dropout", drop), Statement("act_dropout", drop),
              Statement("init", f"t5(factor={s.init_factor})")),
        Block("embedding tokens", Statement("vocab", s.vocab), Statement("dim", s.d_model),
              Statement("position", "none"), Statement("dropout", drop)),
        stack("encoder", s.layers, Statement("attention", "self", **attention, mask=source)),
        stack("decoder", s.decoder_layers or s.layers,
              Statement("attention", "self", **attention, mask="causal + padding" if padding else "causal"),
              Statement("attention", "cross", **attention, memory="encoder", mask=source)),
        tail=(head_statement,) if head else ())


def _up(sublayer: int):
    """The rules of a feed-forward's up projection: ``wi``, or the gated v1.1's ``wi_0`` and ``wi_1`` (gate first)."""
    def rules(model, ours: str, theirs: str, state: dict, ours_state: dict) -> list[Rule]:
        feedforward = model.get_submodule(ours.rsplit(".", 1)[0])
        gated = feedforward.up.out_features != feedforward.down.in_features
        return linear_rules(ours, tuple(f"{theirs}.layer.{sublayer}.DenseReluDense.{name}"
                                        for name in (("wi_0", "wi_1") if gated else ("wi",))), state, ours_state)
    return rules


def _stack(role: str, *sublayers: tuple[str, str]) -> Weights:
    """A stack's table: each layer's attentions (``sublayers``: our part, theirs) then its feed-forward, each with
    the norm before it; the relative attention bias its first layer owns; its final norm."""
    layer = {}
    for index, (part, theirs) in enumerate(sublayers):
        layer |= {part: Projections(f"layer.{index}.{theirs}", ("q", "k", "v", "o")),
                  f"{part}_norm": f"layer.{index}.layer_norm"}
    last = len(sublayers)
    layer |= {"feedforward.up": _up(last), "feedforward.down": f"layer.{last}.DenseReluDense.wo",
              "feedforward_norm": f"layer.{last}.layer_norm"}
    return Weights(layer, layers=f"{role}.block", top={
        f"{role}.final_norm": f"{role}.final_layer_norm",
        f"{role}.positions.{{attention}}": f"{role}.block.0.layer.0.SelfAttention.relative_attention_bias"})


# both stacks read ``shared``; the head is tied to it (v1.0) or its own (v1.1)
WEIGHTS = Stacks({"encoder": _stack("encoder", ("attention", "SelfAttention")),
                  "decoder": _stack("decoder", ("attention", "SelfAttention"), ("cross", "EncDecAttention"))},
                 top={"embeddings.{encoder}.tokens": "shared"},
                 aliases={"encoder.embed_tokens.weight": "embeddings.{encoder}.tokens.weight",
                          "decoder.embed_tokens.weight": "embeddings.{encoder}.tokens.weight"})


EXAMPLES = {
    "T5ForConditionalGeneration": dict(model_type="t5", vocab_size=90, d_model=32, d_kv=8, d_ff=64, num_layers=2,
                                       num_heads=4, feed_forward_proj="gated-gelu", tie_word_embeddings=False,
                                       decoder_start_token_id=0),  # as released T5 checkpoints say,
    "T5Model": dict(model_type="t5", vocab_size=90, d_model=32, d_kv=8, d_ff=64, num_layers=1, num_decoder_layers=2,
                    num_heads=4),
}

COVERAGE = [dict(model_type="t5", vocab_size=91, d_model=24, d_kv=6, num_heads=3, d_ff=40, num_layers=2,
                 num_decoder_layers=3, layer_norm_epsilon=1e-5, dropout_rate=0.2,
                 relative_attention_num_buckets=16, relative_attention_max_distance=64, initializer_factor=0.5,
                 feed_forward_proj="gated-silu", tie_word_embeddings=False)]


T5 = Family("T5", ("t5",),
            {"T5ForConditionalGeneration": {"head": True}, "T5Model": {"head": False}},
            "T5 (Raffel et al. 2020): pre-norm RMSNorm without bias, relative attention bias shared by a "
            "stack's layers, unscaled scores (1/sqrt(d_kv) folded into the init)",
            priority=340, fields=FIELDS, document=document, kind="encoder-decoder", rules=WEIGHTS,
            prefix="", options_from_tensors=options_from_tensors, options_from_model=options_from_model)
