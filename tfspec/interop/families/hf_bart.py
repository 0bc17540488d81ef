"""Hugging Face ``BartForConditionalGeneration``, ``MBartForConditionalGeneration`` and ``MarianMTModel`` (and
their base models) <-> a compiled encoder-decoder spec.

The three share one layout: a ``shared`` token table both stacks read (the spec's second embedding reads the
first's table: ``embedding target { tokens source; ... }``), embeddings scaled by sqrt(d_model) where
``scale_embedding``, self-attention, cross-attention and a feed-forward per decoder layer with separate q/k/v
projections (our fused ``qkv`` for self-attention, ``q`` and ``kv`` for cross-attention), biases everywhere,
and an LM head tied to the table with a bias held as ``final_logits_bias``. They differ in three conventions:

- **BART** (Lewis et al. 2020): post-norm, learned positions read two rows on (``learned(max_len + 2,
  offset=2)``), a LayerNorm on each stack's embeddings (``layernorm_embedding``);
- **mBART**: BART's embeddings and positions, pre-norm, a final LayerNorm per stack;
- **Marian** (MarianMT, OPUS): post-norm, no embedding norm, sinusoidal positions with every sine first and
  every cosine after (``sinusoidal(halves=true)``); its tables are in the checkpoint and are checked against
  the ones the spec computes.
"""

from __future__ import annotations

from ..facts import Facts
from ..fields import Field, Fields, Fixed, standard
from ..weights import Projections, Stacks, TiedHead, Weights
from ..document import Block, Document, Statement
from ..family import Family

OFFSET = 2  # BART's and mBART's learned positions read two rows on
MARIAN_ROWS = 1024  # the sinusoid tables export writes unless an import carried their length: transformers'
# default max_position_embeddings, which the exported configuration then leaves (the spec's sinusoid has no length)
CARRIED = ("max_position_embeddings",)  # Marian's tables' length, written back as it was (see Family.carried)
ACTIVATIONS = {"gelu": "gelu", "relu": "relu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh",
               "silu": "silu", "swish": "silu"}


def _scaled(f) -> bool:
    return f.embedding.scale != 1.0


# each stack's depth, heads and feed-forward width, as BART's configurations and those after it (Whisper) name them
STACK_FIELDS = (
    Field("layers", "encoder_layers", lambda f: f.layers("encoder")),
    Field("decoder_layers", "decoder_layers", lambda f: f.layers("decoder")),
    Field("heads", "encoder_attention_heads", lambda f: f.attention("encoder").heads),
    Field("decoder_heads", "decoder_attention_heads", lambda f: f.attention("decoder").heads),
    Field("d_ff", "encoder_ffn_dim", lambda f: f.feedforward("encoder").d_ff),
    Field("decoder_d_ff", "decoder_ffn_dim", lambda f: f.feedforward("decoder").d_ff),
)

# their dropouts, initialisation and activation, named alike too
LAYER_FIELDS = (
    *standard("encoder", p_dropout="dropout", p_attn_dropout="attention_dropout"),
    Field("p_act_dropout", "activation_dropout", lambda f: f.feedforward("encoder").dropout),
    Field("init_std", "init_std", lambda f: f.init_option("std", 0.02)),
    Field("activation", "activation_function", lambda f: f.feedforward("encoder").activation.name,
          names=ACTIVATIONS),
)

FIELDS = Fields(
    *standard("decoder", d_model="d_model", vocab="vocab_size"),
    *STACK_FIELDS,
    Field("max_len", "max_position_embeddings", lambda f: _max_len(f),
          read=lambda c: c.max_position_embeddings if c.model_type != "marian" else None),
    *LAYER_FIELDS,
    Field("scaled", "scale_embedding", _scaled, let=False),
    # transformers ties the stacks' tables to ``shared`` only where it ties the head: untied, each stack has its own
    Fixed("tie_word_embeddings", True, "tie_word_embeddings={value} gives each stack a token table of its own and "
          "the head another; tfspec reads the tied models these families release", exported=True),
    Fixed("share_encoder_decoder_embeddings", True, "share_encoder_decoder_embeddings={value} gives the decoder a "
          "token table of its own (decoder_vocab_size); tfspec reads Marian models whose stacks share one",
          read=lambda c: getattr(c, "share_encoder_decoder_embeddings", True)),
    Fixed("decoder_vocab_size", None, "decoder_vocab_size={value} differs from vocab_size: the decoder's table "
          "is not the shared one", read=lambda c: c.decoder_vocab_size
          if getattr(c, "decoder_vocab_size", None) not in (None, c.vocab_size) else None, required="= vocab_size"),
    Fixed("is_decoder", False, "is_decoder={value} makes this a decoder alone; tfspec reads the encoder-decoder"),
    ignored={"encoder_layerdrop": "skips whole layers at random in training (LayerDrop); tfspec trains every layer",
             "decoder_layerdrop": "skips whole layers at random in training (LayerDrop); tfspec trains every layer",
             "forced_bos_token_id": "a token generation forces first, which generation reads",
             "forced_eos_token_id": "a token generation forces last, which generation reads",
             "max_position_embeddings": "Marian's sinusoid tables' length; the spec's sinusoid computes any position",
             "static_position_embeddings": "Marian's positions are always its sinusoid tables",
             "num_hidden_layers": "an alias of encoder_layers", "scale_decoder_outputs": "not read by these models"},
)


def _max_len(f) -> int | None:
    rows = f.position_table()
    return rows - OFFSET if rows is not None else None


def document(s, *, padding: bool, head: bool) -> Document:
    """The spec a BART, mBART or Marian configuration's settings ``s`` describe: post-norm layers (pre-norm, each
    stack with a final norm: mBART) over learned positions read 2 rows on with a LayerNorm (sinusoids without one:
    Marian), both embeddings sharing one table, the head tied to it with a bias."""
    kind = s.config.model_type
    norm, source = "layernorm(eps=1e-5)", "padding" if padding else "none"
    position = "sinusoidal(halves=true)" if kind == "marian" else f"learned({s.max_len} + {OFFSET}, offset={OFFSET})"
    embedding = [Statement("position", position), *([Statement("norm", norm)] if kind != "marian" else []),
                 *([Statement("scale", f"sqrt({s.d_model})")] if s.value("scaled") else []),
                 Statement("dropout", s.p_dropout)]
    final = [Statement("final", norm)] if kind == "mbart" else []
    return Document.of(
        Block("defaults", Statement("residual", "pre" if kind == "mbart" else "post"), Statement("norm", norm),
              Statement("dropout", s.p_dropout), Statement("attn_dropout", s.p_attn_dropout),
              Statement("act_dropout", s.p_act_dropout), Statement("init", f"normal(std={s.init_std})")),
        Block("embedding source", Statement("vocab", s.vocab), Statement("dim", s.d_model), *embedding),
        Block("embedding target", Statement("tokens", "source"), *embedding),
        Block(f"encoder x {s.layers}", Statement("embedding", "source"),
              Statement("attention", "self", heads=s.heads, mask=source),
              Statement("feedforward", d_ff=s.d_ff, activation=s.activation), *final),
        Block(f"decoder x {s.decoder_layers}", Statement("embedding", "target"),
              Statement("attention", "self", heads=s.decoder_heads, mask="causal + padding" if padding else "causal"),
              Statement("attention", "cross", heads=s.decoder_heads, mask=source),
              Statement("feedforward", d_ff=s.decoder_d_ff, activation=s.activation), *final),
        tail=(Statement("head", "tied(target)", bias="true"),) if head else ())

def hf_config(spec) -> dict:
    """The configuration ``spec`` would be: mBART's when pre-norm, Marian's with sinusoidal positions, BART's."""
    f = Facts(spec, "BART")
    f.kind("encoder-decoder")
    position = f.embedding.position
    placement = f.norm_placement("encoder")
    if f.computed_positions(position, f.embedding.dim):  # Marian's sinusoids
        kind = "marian"
    elif f.position_table() is not None and position.options.get("offset") == OFFSET:
        kind = "mbart" if placement == "pre-norm" else "bart"
    else:
        raise f.refuse(f"its positions are {position.name}, not BART's learned(max_len + 2, offset=2) or Marian's "
                       "sinusoid")
    if [e.shares for e in spec.embeddings] != [None, spec.embeddings[0].name]:
        raise f.refuse("its stacks do not read one token table (embedding target { tokens source; ... })")
    return {"model_type": kind, **FIELDS.config(f)}


# a layer's projections, feed-forward and norms: BART's, mBART's, Marian's (and Whisper's)
PROJECTIONS = ("q_proj", "k_proj", "v_proj", "out_proj")
LAYER = {"attention": Projections("self_attn", PROJECTIONS), "attention_norm": "self_attn_layer_norm",
         "cross": Projections("encoder_attn", PROJECTIONS), "cross_norm": "encoder_attn_layer_norm",
         "feedforward.up": "fc1", "feedforward.down": "fc2", "feedforward_norm": "final_layer_norm"}


def stack(role: str, **top: str) -> Weights:
    """One stack's table: its layers, its final norm, and ``top``'s modules outside its layers."""
    return Weights(LAYER, top={f"{role}.final_norm": f"{role}.layer_norm", **top},
                   layers=f"{role}.layers")


def _embedding(role: str) -> dict[str, str]:
    return {"embeddings.{embedding}.positions": f"{role}.embed_positions",
            "embeddings.{embedding}.norm": f"{role}.layernorm_embedding"}


# both stacks read one table, ``shared``; the head is tied to it, its bias held as final_logits_bias
WEIGHTS = Stacks({"encoder": stack("encoder", **_embedding("encoder")),
                  "decoder": stack("decoder", **_embedding("decoder"))},
                 top={"embeddings.{encoder}.tokens": "shared"},
                 aliases={"encoder.embed_tokens.weight": "embeddings.{encoder}.tokens.weight",
                          "decoder.embed_tokens.weight": "embeddings.{encoder}.tokens.weight"},
                 head=TiedHead("lm_head", table="encoder", bias="final_logits_bias"))


def _sinusoids(model, prefix: str, state: dict) -> dict:
    """Marian's sinusoid tables, which its checkpoint holds and the spec computes: as long as the checkpoint's
    (``state``, on load), or as the import carried (on export; transformers' 1,024 rows without one)."""
    import torch
    length = (getattr(model, "hf_carried", None) or {}).get("max_position_embeddings", MARIAN_ROWS)
    out = {}
    for role, embedding in zip(("encoder", "decoder"), model.spec.embeddings):
        if Facts.computed_positions(embedding.position, embedding.dim):
            name = f"{prefix}{role}.embed_positions.weight"
            rows = state[name].shape[0] if name in state else length
            out[name] = model.embeddings[embedding.name].positions(torch.arange(rows)[None])[0].detach()
    return out


EXAMPLES = {
    "BartForConditionalGeneration": dict(model_type="bart", vocab_size=90, d_model=32, encoder_layers=2,
                                         decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
                                         encoder_ffn_dim=48, decoder_ffn_dim=40, max_position_embeddings=40,
                                         pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2,
                                         forced_eos_token_id=None),
    "BartModel": dict(model_type="bart", vocab_size=90, d_model=32, encoder_layers=1, decoder_layers=2,
                      encoder_attention_heads=4, decoder_attention_heads=2, encoder_ffn_dim=48, decoder_ffn_dim=48,
                      max_position_embeddings=40, scale_embedding=True, activation_function="relu",
                      pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2),
    "MBartForConditionalGeneration": dict(model_type="mbart", vocab_size=90, d_model=32, encoder_layers=2,
                                          decoder_layers=1, encoder_attention_heads=4, decoder_attention_heads=4,
                                          encoder_ffn_dim=48, decoder_ffn_dim=48, max_position_embeddings=40,
                                          scale_embedding=True, pad_token_id=1, bos_token_id=0, eos_token_id=2,
                                          decoder_start_token_id=2, forced_eos_token_id=None),
    "MBartModel": dict(model_type="mbart", vocab_size=90, d_model=32, encoder_layers=1, decoder_layers=1,
                       encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=48, decoder_ffn_dim=48,
                       max_position_embeddings=40, pad_token_id=1, bos_token_id=0, eos_token_id=2,
                       decoder_start_token_id=2),
    "MarianMTModel": dict(model_type="marian", vocab_size=90, decoder_vocab_size=90, d_model=32, encoder_layers=2,
                          decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=48,
                          decoder_ffn_dim=48, max_position_embeddings=40, scale_embedding=True,
                          activation_function="swish", pad_token_id=1, eos_token_id=2, decoder_start_token_id=1,
                          forced_eos_token_id=None),
    "MarianModel": dict(model_type="marian", vocab_size=90, decoder_vocab_size=90, d_model=32, encoder_layers=1,
                        decoder_layers=1, encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=48,
                        decoder_ffn_dim=48, max_position_embeddings=40, pad_token_id=1, eos_token_id=2,
                        decoder_start_token_id=1),
}

COVERAGE = [dict(model_type="bart", vocab_size=91, d_model=24, encoder_layers=3, decoder_layers=2,
                 encoder_attention_heads=3, decoder_attention_heads=2, encoder_ffn_dim=40, decoder_ffn_dim=36,
                 max_position_embeddings=33, dropout=0.2, attention_dropout=0.3, activation_dropout=0.15,
                 init_std=0.05, activation_function="relu", scale_embedding=True, pad_token_id=1,
                 bos_token_id=0, eos_token_id=2, decoder_start_token_id=2),
            dict(model_type="mbart", vocab_size=91, d_model=24, encoder_layers=1, decoder_layers=1,
                 encoder_attention_heads=3, decoder_attention_heads=3, encoder_ffn_dim=40, decoder_ffn_dim=40,
                 pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2),
            dict(model_type="marian", vocab_size=91, decoder_vocab_size=91, d_model=24, encoder_layers=1,
                 decoder_layers=1, encoder_attention_heads=3, decoder_attention_heads=3, encoder_ffn_dim=40,
                 decoder_ffn_dim=40, activation_function="swish", pad_token_id=1, eos_token_id=2,
                 decoder_start_token_id=1)]


BART = Family(
    "BART", ("bart",), {"BartForConditionalGeneration": {"head": True}, "BartModel": {"head": False}},
    "BART (Lewis et al. 2020): a post-norm encoder-decoder whose stacks read one token table, learned positions "
    "read two rows on, a LayerNorm on each stack's embeddings, GELU, the head tied with final_logits_bias",
    priority=350, fields=FIELDS, document=document, hf_config=hf_config, kind="encoder-decoder",
    rules=WEIGHTS, computed=_sinusoids, carried=CARRIED)
# (one spec text, configuration and weight mapping read all three: the configuration says which it is)
MBART = BART.derive(
    "mBART", ("mbart",), {"MBartForConditionalGeneration": {"head": True}, "MBartModel": {"head": False}},
    "mBART: BART's embeddings and positions, pre-norm with a final LayerNorm per stack",
    priority=350)
MARIAN = BART.derive(
    "Marian", ("marian",), {"MarianMTModel": {"head": True}, "MarianModel": {"head": False}},
    "Marian (MarianMT, OPUS): a post-norm encoder-decoder whose stacks read one token table, sinusoidal "
    "positions with the sines first and the cosines after, embeddings scaled by sqrt(d_model)",
    priority=350)
