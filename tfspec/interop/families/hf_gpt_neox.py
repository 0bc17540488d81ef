"""Hugging Face ``GPTNeoXForCausalLM`` / ``GPTNeoXModel`` (Pythia, GPT-NeoX-20B) <-> a compiled spec.

GPT-NeoX's fused ``query_key_value`` interleaves q, k and v per head (rows
ordered head, then q/k/v, then dimension); our ``qkv`` holds all queries, then
all keys, then all values, so the rows are permuted on the way in and out. With
``use_parallel_residual`` attention and feed-forward read the same input through
their own LayerNorms and are added together: the spec writes that in the wiring
form. ``spec_text(config)`` is the spec a configuration describes; loading
compares against it (partial rotary fraction, θ, eps, parallel residual, biases,
tying, dropout) and refuses any difference with an ``InteropError``.
"""

from __future__ import annotations

from ...ir.queries import sublayers
from ..mapping import (InteropError, Rule, export_state, layer_modules, linear_rules, load_state,
                      refuse_other_architecture, rule, same_head)
from ..fields import Field, Fields, Fixed
from .. import layouts
from ..writer import SpecWriter
from ..family import Family, exported_config

ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "relu": "relu",
               "silu": "silu", "tanh": "tanh"}



def rope(config) -> tuple[float, float]:
    """(θ, partial rotary fraction) of a GPT-NeoX configuration."""
    params = dict(getattr(config, "rope_parameters", None) or {})
    theta = params.get("rope_theta", getattr(config, "rotary_emb_base", 10000))
    fraction = params.get("partial_rotary_factor", getattr(config, "rotary_pct", 1.0))
    return float(theta), float(fraction)


def _parallel(f) -> bool:
    """Parallel residual: the feed-forward's norm reads the layer's input, as the attention's does."""
    g = f.g
    norm_input = [g.node(node.inputs[0]).inputs[0] for node in sublayers(g, "decoder")]
    return len(set(norm_input)) == 1


FIELDS = Fields(
    Field("d_model", "hidden_size", lambda f: f.embedding.dim),
    Field("heads", "num_attention_heads", lambda f: f.attention("decoder").heads),
    Field("layers", "num_hidden_layers", lambda f: f.layers("decoder")),
    Field("d_ff", "intermediate_size", lambda f: f.feedforward("decoder").d_ff),
    Field("vocab", "vocab_size", lambda f: f.embedding.vocab),
    Field("rope_theta", "rope_parameters.rope_theta", lambda f: f.rotary("decoder").get("theta", 10000.0),
          read=lambda c: rope(c)[0]),
    # always exported: GPT-NeoX's default fraction is 0.25, not 1
    Field("rotary_fraction", "rope_parameters.partial_rotary_factor",
          lambda f: f.rotary("decoder").get("fraction", 1.0), read=lambda c: rope(c)[1] if rope(c)[1] != 1.0 else None),
    Field("eps", "layer_norm_eps", lambda f: f.norm_option("decoder", "eps", 1e-5)),
    Field("p_attn_dropout", "attention_dropout", lambda f: f.attention("decoder").dropout),
    Field("p_dropout", "hidden_dropout", lambda f: f.residual_dropout("decoder"),
          read=lambda c: float(getattr(c, "hidden_dropout", 0.0) or 0.0) or None),  # written where it acts
    Field("init_std", "initializer_range", lambda f: f.init_option("std", 0.02)),
    Field("activation", "hidden_act", lambda f: f.feedforward("decoder").activation.name, names=ACTIVATIONS),
    Field("bias", "attention_bias", lambda f: f.attention("decoder").bias,
          read=lambda c: bool(getattr(c, "attention_bias", True)), let=False),
    Field("parallel", "use_parallel_residual", _parallel, let=False),
    Field("tied", "tie_word_embeddings", lambda f: f.tied, let=False),
    Fixed("rope_parameters.rope_type", "default", "rope scaling '{value}' is not supported (only unscaled RoPE)",
          read=lambda c: dict(getattr(c, "rope_parameters", None) or {}).get("rope_type", "default"), exported=True),
    ignored={"max_position_embeddings": "the longest sequence trained on; unscaled rotary positions compute the "
                                        "same at any length",
             "is_decoder": "not read by GPT-NeoX's model, which is always causal"},
)


def spec_text(config, *, head: bool = True, padding: bool = True, name: str = "reference",
              heading: tuple[str, ...] = ()) -> str:
    """The tfspec spec a GPT-NeoX configuration describes (``padding``: mask padded keys)."""
    w = SpecWriter()
    s = FIELDS.write(config, w)
    masks = "causal + padding" if padding else "causal"

    def out(t: str) -> str:  # HF's post_attention_dropout / post_mlp_dropout
        return f"dropout({t}, {s.p_dropout})" if s.p_dropout else t

    attention = out(f"attention(layernorm(x, eps={s.eps}), heads={s.heads}, mask={masks}, bias={s.bias})")
    feedforward = out(f"feedforward(layernorm(x, eps={s.eps}), d_ff={s.d_ff}, activation={s.activation})")
    wiring = (f"x = x + {attention} + {feedforward}   # parallel residual" if s.value("parallel")
              else f"x = x + {attention}\nx = x + {feedforward}")
    position = f"rotary(theta={s.rope_theta}" + (f", fraction={s.rotary_fraction})" if s.rotary_fraction else ")")
    document = layouts.wired(s, norm=None, final=f"layernorm(eps={s.eps})", position=position,
                                     wiring=wiring, head=head)
    return w.text(document.text(name), list(heading))


hf_config = exported_config("GPT-NeoX", "gpt_neox", "decoder-only", FIELDS)


def qkv_rows(heads: int, head_dim: int) -> tuple[int, ...]:
    """For each row of our [q; k; v], its row in GPT-NeoX's per-head interleaved [q_h, k_h, v_h]..."""
    return tuple(h * 3 * head_dim + part * head_dim + d
                 for part in range(3) for h in range(heads) for d in range(head_dim))


def _rules(model, prefix: str, state: dict, lm: bool, head: str = "lm_head") -> tuple[list[Rule], dict[str, str]]:
    if model.spec.kind != "decoder-only":
        raise InteropError(f"GPT-NeoX is decoder-only; spec '{model.spec.name}' is {model.spec.kind}")
    ours_state = model.state_dict()
    parts = layer_modules(model)
    attention = model.decoder.layers[0].get_submodule(parts["attention"])
    rows = qkv_rows(attention.heads, attention.head_dim)
    rules = [rule("embeddings.tokens.tokens.weight", f"{prefix}embed_in.weight")]
    rules += [rule(f"decoder.final_norm.{p}", f"{prefix}final_layer_norm.{p}") for p in ("weight", "bias")]
    for i in range(len(model.decoder.layers)):
        ours, theirs = f"decoder.layers.{i}", f"{prefix}layers.{i}"
        a, f = f"{ours}.{parts['attention']}", f"{ours}.{parts['feedforward']}"
        rules += linear_rules(f"{a}.qkv", f"{theirs}.attention.query_key_value", state, ours_state, rows=rows)
        rules += linear_rules(f"{a}.out", f"{theirs}.attention.dense", state, ours_state)
        rules += linear_rules(f"{f}.up", f"{theirs}.mlp.dense_h_to_4h", state, ours_state)
        rules += linear_rules(f"{f}.down", f"{theirs}.mlp.dense_4h_to_h", state, ours_state)
        for part, norm in (("attention_norm", "input_layernorm"), ("feedforward_norm", "post_attention_layernorm")):
            rules += [rule(f"{ours}.{parts[part]}.{p}", f"{theirs}.{norm}.{p}") for p in ("weight", "bias")]
    aliases = {}
    if lm and model.tied_to is not None:
        aliases[f"{head}.weight"] = "embeddings.tokens.tokens.weight"
    elif lm:
        rules.append(rule("head.weight", f"{head}.weight"))
    return rules, aliases


def from_hf_gpt_neox(model, reference) -> None:
    """Copy a ``GPTNeoXForCausalLM`` (or ``GPTNeoXModel``)'s weights into ``model``, after checking that the
    spec is the architecture its configuration describes; an ``InteropError`` lists every difference."""
    # transformers 5 names the output projection lm_head; earlier versions (and Pythia's files) embed_out
    head = "lm_head" if hasattr(reference, "lm_head") else "embed_out"
    lm = hasattr(reference, head)
    same_head(model, reference, lm)
    refuse_other_architecture(model, reference, FIELDS, hf_config, lambda: spec_text(
        reference.config, head=lm, padding=model.decoder.masks_padding))
    state = reference.state_dict()
    rules, aliases = _rules(model, "gpt_neox." if lm else "", state, lm, head)
    load_state(model, state, rules, reference=type(reference).__name__, aliases=aliases)


def to_hf_gpt_neox(model, head: str = "lm_head") -> dict:
    """A state dict for ``GPTNeoXForCausalLM`` (spec with a head; ``head="embed_out"`` for transformers < 5)
    or ``GPTNeoXModel`` (without)."""
    lm = model.head is not None
    rules, aliases = _rules(model, "gpt_neox." if lm else "", {}, lm, head)
    return export_state(model, rules, reference="Hugging Face GPT-NeoX", aliases=aliases)


EXPORT_PRIORITY = 330  # where export tries this module's families (lower first)
FAMILIES = (  # the families this module reads and writes (``tfspec.interop.family``)
    Family("GPT-NeoX", ("gpt_neox",),
           {"GPTNeoXForCausalLM": {"head": True}, "GPTNeoXModel": {"head": False}},
           "GPT-NeoX (Pythia): attention and feed-forward read the same input in parallel (when "
           "use_parallel_residual), each behind its own LayerNorm; partial rotary positions; an untied head",
           module=__name__, fields=FIELDS, spec_text=spec_text, hf_config=hf_config, load=from_hf_gpt_neox,
           export=to_hf_gpt_neox),
)
