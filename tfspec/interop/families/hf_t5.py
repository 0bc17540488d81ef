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

from ...ir import nodes as ir
from ...ir import queries
from ..mapping import InteropError, Rule, rule
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


def _rules(model, prefix: str, state: dict, lm: bool) -> tuple[list[Rule], dict[str, str]]:
    """T5's weight names (the model with a head holds its stacks at the top: no prefix)."""
    if model.spec.kind != "encoder-decoder":
        raise InteropError(f"T5 is an encoder-decoder; spec '{model.spec.name}' is {model.spec.kind}")
    embedding = "embeddings.tokens.tokens.weight"
    rules = [rule(embedding, "shared.weight")]
    aliases = {"encoder.embed_tokens.weight": embedding, "decoder.embed_tokens.weight": embedding}
    for role, sublayers in (("encoder", ("SelfAttention",)), ("decoder", ("SelfAttention", "EncDecAttention"))):
        parts = _parts(model, role)
        attentions = parts["attentions"]
        rules += [rule(f"{role}.final_norm.weight", f"{role}.final_layer_norm.weight"),
                  rule(f"{role}.positions.{attentions[0]}.weight",
                       f"{role}.block.0.layer.0.SelfAttention.relative_attention_bias.weight")]
        feedforward = model.get_submodule(f"{role}.layers.0.{parts['feedforward']}")
        gated = feedforward.up.out_features != feedforward.down.in_features  # gate and value: wi_0 and wi_1
        for i in range(len(getattr(model, role).layers)):
            ours, theirs = f"{role}.layers.{i}", f"{role}.block.{i}.layer"
            for index, (mine, reference) in enumerate(zip(attentions, sublayers)):
                a, t = f"{ours}.{mine}", f"{theirs}.{index}.{reference}"
                if reference == "SelfAttention":
                    rules.append(rule(f"{a}.qkv.weight", (f"{t}.q.weight", f"{t}.k.weight", f"{t}.v.weight")))
                else:
                    rules += [rule(f"{a}.q.weight", f"{t}.q.weight"),
                              rule(f"{a}.kv.weight", (f"{t}.k.weight", f"{t}.v.weight"))]
                rules += [rule(f"{a}.out.weight", f"{t}.o.weight"),
                          rule(f"{ours}.{parts['norms'][mine]}.weight", f"{theirs}.{index}.layer_norm.weight")]
            f, t = f"{ours}.{parts['feedforward']}", f"{theirs}.{len(sublayers)}"
            up = (f"{t}.DenseReluDense.wi_0.weight", f"{t}.DenseReluDense.wi_1.weight") if gated \
                else f"{t}.DenseReluDense.wi.weight"
            rules += [rule(f"{f}.up.weight", up), rule(f"{f}.down.weight", f"{t}.DenseReluDense.wo.weight"),
                      rule(f"{ours}.{parts['norms'][parts['feedforward']]}.weight", f"{t}.layer_norm.weight")]
    if lm and model.tied_to is not None:
        aliases["lm_head.weight"] = embedding
    elif lm:
        rules.append(rule("head.weight", "lm_head.weight"))
    return rules, aliases


def _parts(model, role: str) -> dict:
    """A T5 layer's sublayers in our model: its attentions in order (self, then cross), its feed-forward, and the
    pre-norm before each (read from the graph, so the names in the spec do not matter)."""
    g = model.spec.graph()
    attentions, feedforwards, norms = [], [], {}
    for node in queries.sublayers(g, role):
        (attentions if isinstance(node, ir.Attention) else feedforwards).append(node.name)
        before = g.node(node.inputs[0])
        if not isinstance(before, ir.Norm) or before.module is None:
            raise InteropError(f"spec '{model.spec.name}': the {role}'s {node.name} has no norm before it, as T5's has")
        norms[node.name] = before.module.name
    expected = 1 if role == "encoder" else 2
    if len(attentions) != expected or len(feedforwards) != 1:
        raise InteropError(f"spec '{model.spec.name}': a T5 {role} layer has {expected} attention(s) and one "
                           f"feed-forward; this one has {len(attentions)} and {len(feedforwards)}")
    return {"attentions": attentions, "feedforward": feedforwards[0], "norms": norms}


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
            priority=340, fields=FIELDS, document=document, kind="encoder-decoder", rules=_rules,
            prefix="", options_from_tensors=options_from_tensors, options_from_model=options_from_model)
