"""Hugging Face ``BertModel`` / ``BertForMaskedLM`` <-> a compiled encoder-only spec.

``examples/bert_base.tfs`` is ``BertModel`` with its pooler; add
``head tied(tokens) transform=gelu norm=layernorm(eps=1e-12) bias=true`` for
``BertForMaskedLM`` (which has no pooler).
"""

from __future__ import annotations

from .mapping import InteropError, Rule, architecture_problems, export_state, load_state, rule
from .facts import Facts
from .writer import SpecWriter

REFERENCE = "Hugging Face BERT"
ACTIVATIONS = {"gelu": "gelu", "relu": "relu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh",
               "silu": "silu", "swish": "silu"}


def _linear(ours: str, theirs: str) -> list[Rule]:
    return [rule(f"{ours}.weight", f"{theirs}.weight"), rule(f"{ours}.bias", f"{theirs}.bias")]


def _rules(model, prefix: str) -> tuple[list[Rule], dict[str, str]]:
    if model.spec.kind != "encoder-only":
        raise InteropError(f"BERT is an encoder; spec '{model.spec.name}' is {model.spec.kind}")
    e, p = "embeddings.tokens", f"{prefix}embeddings"
    rules = [rule(f"{e}.tokens.weight", f"{p}.word_embeddings.weight"),
             rule(f"{e}.positions.weight", f"{p}.position_embeddings.weight"),
             rule(f"{e}.segments.weight", f"{p}.token_type_embeddings.weight"),
             *_linear(f"{e}.norm", f"{p}.LayerNorm")]
    for i in range(len(model.encoder.layers)):
        ours, theirs = f"encoder.layers.{i}", f"{prefix}encoder.layer.{i}"
        qkv = [f"{theirs}.attention.self.{n}" for n in ("query", "key", "value")]
        rules += [rule(f"{ours}.self_attn.qkv.weight", tuple(f"{q}.weight" for q in qkv)),
                  rule(f"{ours}.self_attn.qkv.bias", tuple(f"{q}.bias" for q in qkv)),
                  *_linear(f"{ours}.self_attn.out", f"{theirs}.attention.output.dense"),
                  *_linear(f"{ours}.self_attn_norm", f"{theirs}.attention.output.LayerNorm"),
                  *_linear(f"{ours}.ffn.up", f"{theirs}.intermediate.dense"),
                  *_linear(f"{ours}.ffn.down", f"{theirs}.output.dense"),
                  *_linear(f"{ours}.ffn_norm", f"{theirs}.output.LayerNorm")]
    aliases = {}
    if model.pooler is not None:
        rules += _linear("pooler.dense", f"{prefix}pooler.dense")
    if model.head is not None:
        rules += [*_linear("head.transform", "cls.predictions.transform.dense"),
                  *_linear("head.transform_norm", "cls.predictions.transform.LayerNorm"),
                  rule("head.bias", "cls.predictions.bias")]
        aliases = {"cls.predictions.decoder.weight": f"{e}.tokens.weight", "cls.predictions.decoder.bias": "head.bias"}
    return rules, aliases


def spec_text(config, *, pooler: bool, head: bool, padding: bool = True, name: str = "reference",
              attention: str = "", embedding: tuple[str, ...] = (), writer: SpecWriter | None = None,
              heading: tuple[str, ...] = ()) -> str:
    """The tfspec spec a BERT configuration describes: ``BertModel`` with ``pooler``, ``BertForMaskedLM`` with
    ``head`` (its transform and tied decoder). ``attention`` and ``embedding``: further arguments of the
    self-attention and lines of the embedding, for BERT's relatives (BigBird's ``kind=bigbird(...)``), written
    with ``writer``'s ``let`` parameters; ``heading``: comment lines above it."""
    w = writer or SpecWriter()
    d_model, heads = w("d_model", config.hidden_size, "hidden_size"), w("heads", config.num_attention_heads,
                                                                         "num_attention_heads")
    layers, d_ff = w("layers", config.num_hidden_layers, "num_hidden_layers"), w("d_ff", config.intermediate_size,
                                                                                 "intermediate_size")
    vocab, max_len = w("vocab", config.vocab_size, "vocab_size"), w("max_len", config.max_position_embeddings,
                                                                    "max_position_embeddings")
    eps = w("eps", config.layer_norm_eps, "layer_norm_eps")
    activation = ACTIVATIONS.get(config.hidden_act, "gelu")
    extra = "".join(f"\n  {line}" for line in embedding)
    text = f"""model {name}

defaults {{
  residual post
  norm layernorm(eps={eps})
  dropout {w("p_dropout", config.hidden_dropout_prob, "hidden_dropout_prob")}
  attn_dropout {w("p_attn_dropout", config.attention_probs_dropout_prob, "attention_probs_dropout_prob")}
  init normal(std={w("init_std", config.initializer_range, "initializer_range")})
}}

embedding tokens {{
  vocab {vocab}
  dim {d_model}
  position learned({max_len})
  segments {w("segments", config.type_vocab_size, "type_vocab_size")}
  norm layernorm(eps={eps}){extra}
}}

encoder x {layers} {{
  attention self heads={heads} {attention}mask={'padding' if padding else 'none'}
  feedforward d_ff={d_ff} activation={activation}
}}

"""
    if pooler:
        text += "pooler tanh\n"
    if head:
        text += f"head tied(tokens) transform={activation} norm=layernorm(eps={eps}) bias=true  # the MLM head\n"
    return w.text(text, list(heading))


def hf_config(spec, model_type: str = "bert") -> dict:
    """The BERT configuration ``spec`` would be (exported after ``architecture_problems`` finds no difference)."""
    f = Facts(spec, "BERT")
    f.kind("encoder-only")
    attention, feedforward, e = f.attention("encoder"), f.feedforward("encoder"), f.embedding
    return dict(model_type=model_type, vocab_size=e.vocab, hidden_size=e.dim,
                num_hidden_layers=f.layers("encoder"), num_attention_heads=attention.heads,
                intermediate_size=feedforward.d_ff, max_position_embeddings=f.learned_positions(),
                type_vocab_size=e.segments, layer_norm_eps=e.norm.options.get("eps", 1e-12),
                hidden_act=f.theirs(ACTIVATIONS, feedforward.activation.name, "activation"),
                hidden_dropout_prob=f.residual_dropout("encoder"), attention_probs_dropout_prob=attention.dropout,
                initializer_range=f.init_option("std", 0.02))


def _config_problems(model, reference) -> list[str]:
    config = reference.config
    problems = []
    if getattr(config, "position_embedding_type", "absolute") != "absolute":
        problems.append(f"reference uses {config.position_embedding_type} positions; only absolute maps")
    if config.hidden_act not in ACTIVATIONS:
        problems.append(f"hidden_act '{config.hidden_act}' has no tfspec activation")
    if problems:
        return problems
    base = getattr(reference, "bert", reference)
    expected = spec_text(config, pooler=getattr(base, "pooler", None) is not None, head=hasattr(reference, "cls"),
                         padding=model.encoder.masks_padding)
    # embedding norm eps and scale, pooler activation, head transform: every fact, not only the sublayers'
    return architecture_problems(model.spec, expected, type(reference).__name__)


def from_hf_bert(model, reference) -> None:
    """Copy a ``BertModel`` or ``BertForMaskedLM``'s weights into ``model`` (every tensor accounted for)."""
    prefix = "bert." if hasattr(reference, "bert") else ""
    rules, aliases = _rules(model, prefix)
    load_state(model, reference.state_dict(), rules, reference=REFERENCE, aliases=aliases,
               config_problems=_config_problems(model, reference))


def to_hf_bert(model) -> dict:
    """A state dict for ``BertForMaskedLM`` (spec with a head) or ``BertModel`` (without)."""
    rules, aliases = _rules(model, "bert." if model.head is not None else "")
    return export_state(model, rules, reference=REFERENCE, aliases=aliases)
