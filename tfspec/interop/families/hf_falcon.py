"""Hugging Face ``FalconForCausalLM`` / ``FalconModel`` <-> a compiled decoder-only spec.

Falcon (Almazrouei et al. 2023) comes in three layouts, each written in the wiring form:

- **7B style** (``parallel_attn``, not ``new_decoder_architecture``): attention and feed-forward in parallel on
  one LayerNorm, ``multi_query`` (one key/value head): ``h = norm(x); x = x + attention(h) + feedforward(h)``;
- **the new decoder architecture** (40B, 180B): the same with grouped key/value heads (``num_kv_heads``) and,
  where ``num_ln_in_parallel_attn`` is 2 (its default), a LayerNorm of its own for each branch;
- **sequential** (``parallel_attn`` false): pre-norm, whose attention branch drops out at ``attention_dropout``
  (as Hugging Face's does) and feed-forward branch at ``hidden_dropout``.

Rotary positions (half-split), GELU, the head tied. The fused ``query_key_value`` holds, per key/value group,
that group's queries, then its key, then its value (all queries, then the key and value, for multi-query; per
head interleaved for the old layout without it); rows are permuted into tfspec's [q; k; v] on the way in and
back on the way out. Falcon's ``alibi`` (Falcon-RW) is not expressed and is refused.
"""

from __future__ import annotations

from ..family import Family, Requires, causal_lm
from . import hf_llama
from ..document import Document
from ..facts import Facts
from ..fields import Field, Fields, Fixed, standard
from ...ir import nodes as ir
from ...ir.queries import residual_placement
from ..mapping import layer_modules, spec_layer_modules
from .. import layouts
from ..weights import Weights, Reordered, per_head_rows
from ..writer import causal_masks

ACTIVATIONS = {"gelu": "gelu", "relu": "relu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh",
               "silu": "silu"}


def layout(config) -> tuple[bool, int, int]:
    """(parallel, LayerNorms per layer in parallel (1 or 2; 2 when sequential), key/value heads)."""
    heads = config.num_attention_heads
    if config.new_decoder_architecture:
        norms = config.num_ln_in_parallel_attn or 2
        return True, norms, config.num_kv_heads or heads  # the new architecture is always parallel
    return bool(config.parallel_attn), 1 if config.parallel_attn else 2, 1 if config.multi_query else heads


def spec_layout(f) -> tuple[bool, int, int]:
    """The same, read from a spec's facts."""
    parts = spec_layer_modules(f.spec)
    if not {"attention_norm", "feedforward_norm"} <= set(parts):
        raise f.refuse("its layers are not each a normed attention and a normed feed-forward, as Falcon's are")
    parallel = f.parallel("decoder")
    return parallel, 1 if parallel and parts["attention_norm"] == parts["feedforward_norm"] else 2, \
        f.geometry("decoder").kv_heads


def _new_architecture(f) -> bool:
    parallel, norms, kv = spec_layout(f)
    heads = f.geometry("decoder").heads
    return parallel and (norms == 2 or kv not in (1, heads))


FIELDS = Fields(
    *standard("decoder", d_model="hidden_size", heads="num_attention_heads", layers="num_hidden_layers"),
    Field("d_ff", "ffn_hidden_size", lambda f: f.feedforward("decoder").d_ff,
          read=lambda c: c.ffn_hidden_size or 4 * c.hidden_size),
    Field("vocab", "vocab_size", lambda f: f.embedding.vocab),
    Field("kv_heads", "num_kv_heads", lambda f: f.geometry("decoder").kv_heads if _new_architecture(f)
          else f.geometry("decoder").heads, read=lambda c: layout(c)[2]),
    Field("new_decoder_architecture", "new_decoder_architecture", _new_architecture, let=False, setting=False),
    # (of no consequence in the new architecture: left to its default there)
    Field("multi_query", "multi_query", lambda f: None if _new_architecture(f) else spec_layout(f)[2] == 1,
          let=False, setting=False,
          read=lambda c: layout(c)[2] == 1 if not c.new_decoder_architecture else None),
    Field("parallel", "parallel_attn", lambda f: spec_layout(f)[0], let=False, setting=False,
          read=lambda c: layout(c)[0]),
    Field("norms", "num_ln_in_parallel_attn", lambda f: spec_layout(f)[1] if _new_architecture(f) else None,
          read=lambda c: layout(c)[1] if c.new_decoder_architecture else None, let=False, setting=False),
    Field("rope_theta", "rope_parameters.rope_theta", lambda f: f.rotary("decoder").get("theta", 10000.0),
          read=lambda c: float(hf_llama.rope(c)["rope_theta"])),
    *hf_llama.ROPE_SCALING,
    Field("eps", "layer_norm_epsilon", lambda f: f.norm_option("decoder", "eps", 1e-5)),
    Field("p_dropout", "hidden_dropout", lambda f: _dropout(f)),
    *standard("decoder", p_attn_dropout="attention_dropout", init_std="initializer_range"),
    Field("activation", "activation", lambda f: f.feedforward("decoder").activation.name, names=ACTIVATIONS),
    Field("bias", "bias", lambda f: f.attention("decoder").bias, let=False),
    Field("tied", "tie_word_embeddings", lambda f: f.tied, let=False),
    Fixed("alibi", False, "alibi={value} (Falcon-RW) biases scores with Falcon's ALiBi, which is not expressed"),
    ignored=hf_llama.FIELDS.ignored,
)


def _dropout(f) -> float:
    """hidden_dropout: on the feed-forward's output, or in parallel on the sum of both branches (0: none)."""
    if spec_layout(f)[0]:
        dropouts = f.g.of(ir.Dropout, stack="decoder", in_block=True)
        return dropouts[0].p if dropouts else 0.0
    return residual_placement(f.g, f.node("decoder", ir.FeedForward)).dropout


def document(s, *, padding: bool, head: bool) -> Document:
    """Falcon's spec, in the wiring form of its layout."""
    parallel, norms, kv = layout(s.config)
    masks = causal_masks(padding=padding)
    attention = f"attention({{}}, heads={s.heads}, kv_heads={s.kv_heads}, mask={masks}, bias={s.bias})"
    feedforward = f"feedforward({{}}, d_ff={s.d_ff}, activation={s.activation}, bias={s.bias})"
    dropped = s.value("p_dropout")
    if parallel:
        inputs = ("h", "h") if norms == 1 else ("norm(x)", "norm(x)")
        both = f"{attention.format(inputs[0])} + \\\n    {feedforward.format(inputs[1])}"
        wiring = ("h = norm(x)\n" if norms == 1 else "") + (
            f"x = x + dropout({both}, {s.p_dropout})" if dropped else f"x = x + {both}")
    else:
        attention_out = attention.format("norm(x)")
        if s.value("p_attn_dropout"):  # Hugging Face drops the attention branch at attention_dropout
            attention_out = f"dropout({attention_out}, {s.p_attn_dropout})"
        ffn_out = feedforward.format("norm(x)")
        wiring = f"x = x + {attention_out}\nx = x + " + (f"dropout({ffn_out}, {s.p_dropout})" if dropped else ffn_out)
    return layouts.wired(s, norm=f"layernorm(eps={s.eps})", position=hf_llama.rotary(s), wiring=wiring, head=head)


def fused_rows(heads: int, kv_heads: int, head_dim: int, grouped: bool) -> tuple[int, ...]:
    """For each row of our [q; k; v], its row in Falcon's ``query_key_value``: per key/value group its queries,
    key and value (``grouped``: the new architecture), or per head interleaved (old, not multi-query), or
    already ours (old, multi-query)."""
    if not grouped:
        return tuple(range((heads + 2 * kv_heads) * head_dim)) if kv_heads == 1 else per_head_rows(heads, head_dim)
    group = heads // kv_heads
    q = [(h // group) * (group + 2) * head_dim + (h % group) * head_dim + d for h in range(heads)
         for d in range(head_dim)]
    k = [g * (group + 2) * head_dim + group * head_dim + d for g in range(kv_heads) for d in range(head_dim)]
    v = [g * (group + 2) * head_dim + (group + 1) * head_dim + d for g in range(kv_heads) for d in range(head_dim)]
    return tuple(q + k + v)


def _parts(model) -> dict[str, str]:
    """A layer's parts, its norms under Falcon's names for its layout: one norm (``input_layernorm``), one per
    branch in parallel (``ln_attn``, ``ln_mlp``), or sequential (``input_layernorm``, ``post_attention_layernorm``)."""
    parts = layer_modules(model)
    norms = (parts.get("attention_norm"), parts.get("feedforward_norm"))
    if norms[0] == norms[1]:
        names = ("input_layernorm",)
    else:
        names = ("ln_attn", "ln_mlp") if Facts(model.spec, "Falcon").parallel("decoder") else \
            ("input_layernorm", "post_attention_layernorm")
    return {"attention": parts["attention"], "feedforward": parts["feedforward"], **dict(zip(names, norms))}


def _fused_rows(model, core) -> tuple[int, ...]:
    """Its query_key_value grouped per key/value head where the spec is the new decoder architecture (loading has
    checked it is the reference's)."""
    return fused_rows(core.heads, core.kv_heads, core.head_dim, _new_architecture(Facts(model.spec, "Falcon")))


SAME_BIAS = Requires(lambda f: f.feedforward("decoder").bias == f.attention("decoder").bias,
                     "its attention and feed-forward differ in bias; Falcon's bias sets both")

EXAMPLES = {
    "FalconForCausalLM": dict(model_type="falcon", vocab_size=90, hidden_size=32, num_hidden_layers=2,
                              num_attention_heads=4, multi_query=True, parallel_attn=True, bos_token_id=1,
                              eos_token_id=2),
    "FalconModel": dict(model_type="falcon", vocab_size=90, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        num_kv_heads=2, new_decoder_architecture=True, ffn_hidden_size=48, bias=True,
                        bos_token_id=1, eos_token_id=2),
}

COVERAGE = [dict(model_type="falcon", vocab_size=91, hidden_size=24, num_hidden_layers=3, num_attention_heads=3,
                 multi_query=False, parallel_attn=False, ffn_hidden_size=40, layer_norm_epsilon=1e-6,
                 rope_parameters={"rope_type": "linear", "rope_theta": 5e5, "factor": 2.0},
                 hidden_dropout=0.2, attention_dropout=0.3, initializer_range=0.05, activation="relu",
                 bias=True, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2),
            dict(model_type="falcon", vocab_size=91, hidden_size=24, num_hidden_layers=1, num_attention_heads=6,
                 num_kv_heads=2, new_decoder_architecture=True, num_ln_in_parallel_attn=1, hidden_dropout=0.1,
                 bos_token_id=1, eos_token_id=2),
            *hf_llama.each_scaling(dict(
                model_type="falcon", vocab_size=91, hidden_size=24, num_hidden_layers=1, num_attention_heads=3,
                max_position_embeddings=32, bos_token_id=1, eos_token_id=2))]


FALCON = Family(
    "Falcon", ("falcon",), causal_lm("Falcon"),
    "Falcon: attention and feed-forward in parallel on one LayerNorm with one key/value head (7B), or "
    "grouped key/value heads and a LayerNorm per branch (the new decoder architecture), or sequential; "
    "rotary positions, GELU, the fused query_key_value permuted per key/value group, the head tied",
    priority=100, fields=FIELDS, document=document, requires=(SAME_BIAS,), prefix="transformer.",
    rules=Weights({
        "attention.qkv": Reordered("self_attention.query_key_value", _fused_rows),
        "attention.out": "self_attention.dense",
        "feedforward.up": "mlp.dense_h_to_4h", "feedforward.down": "mlp.dense_4h_to_h",
        **{name: name for name in ("input_layernorm", "ln_attn", "ln_mlp", "post_attention_layernorm")}},
        top={"embeddings.tokens.tokens": "word_embeddings", "decoder.final_norm": "ln_f"}, layers="h", parts=_parts))
