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

from .mapping import (InteropError, Rule, architecture_problems, export_state, layer_modules, linear_rules,
                      load_state, rule)
from .facts import Facts
from .hf_llama import rope_parameters
from .writer import SpecWriter

ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "relu": "relu",
               "silu": "silu", "tanh": "tanh"}



def rope(config) -> tuple[float, float]:
    """(θ, partial rotary fraction) of a GPT-NeoX configuration."""
    params = dict(getattr(config, "rope_parameters", None) or {})
    theta = params.get("rope_theta", getattr(config, "rotary_emb_base", 10000))
    fraction = params.get("partial_rotary_factor", getattr(config, "rotary_pct", 1.0))
    return float(theta), float(fraction)


def unsupported(config) -> list[str]:
    problems = []
    params = dict(getattr(config, "rope_parameters", None) or {})
    if params.get("rope_type", "default") != "default":
        problems.append(f"rope scaling '{params['rope_type']}' is not supported (only unscaled RoPE)")
    if config.hidden_act not in ACTIVATIONS:
        problems.append(f"hidden_act '{config.hidden_act}' has no tfspec activation "
                        f"(supported: {', '.join(sorted(ACTIVATIONS))})")
    return problems


def spec_text(config, *, head: bool = True, padding: bool = True, name: str = "reference",
              heading: tuple[str, ...] = ()) -> str:
    """The tfspec spec a GPT-NeoX configuration describes (``padding``: mask padded keys)."""
    w = SpecWriter()
    d_model, heads = w("d_model", config.hidden_size, "hidden_size"), w("heads", config.num_attention_heads,
                                                                         "num_attention_heads")
    layers, d_ff = w("layers", config.num_hidden_layers, "num_hidden_layers"), w("d_ff", config.intermediate_size,
                                                                                 "intermediate_size")
    vocab = w("vocab", config.vocab_size, "vocab_size")
    theta, fraction = rope(config)
    theta = w("rope_theta", theta, "rope_theta")
    fraction = w("rotary_fraction", fraction, "rotary_pct") if fraction != 1.0 else None
    eps = w("eps", config.layer_norm_eps, "layer_norm_eps")
    bias = str(bool(getattr(config, "attention_bias", True))).lower()
    masks = "causal + padding" if padding else "causal"
    drop = float(getattr(config, "hidden_dropout", 0.0) or 0.0)

    def out(t: str) -> str:  # HF's post_attention_dropout / post_mlp_dropout
        return f"dropout({t}, {w('p_dropout', drop, 'hidden_dropout')})" if drop else t

    attention = out(f"attention(layernorm(x, eps={eps}), heads={heads}, mask={masks}, bias={bias})")
    feedforward = out(f"feedforward(layernorm(x, eps={eps}), d_ff={d_ff}, "
                      f"activation={ACTIVATIONS.get(config.hidden_act, 'gelu')})")
    wiring = (f"x = x + {attention} + {feedforward}   # parallel residual" if config.use_parallel_residual
              else f"x = x + {attention}\n  x = x + {feedforward}")
    projection = "tied(tokens)" if config.tie_word_embeddings else f"linear({vocab}) bias=false"
    position = f"rotary(theta={theta}" + (f", fraction={fraction})" if fraction else ")")
    text = f"""model {name}

defaults {{
  attn_dropout {w("p_attn_dropout", config.attention_dropout, "attention_dropout")}
  init normal(std={w("init_std", config.initializer_range, "initializer_range")})
}}

embedding tokens {{ vocab {vocab}; dim {d_model}; position none }}

decoder x {layers} {{
  position {position}
  {wiring}
  final layernorm(eps={eps})
}}
"""
    if head:  # the causal LM's; the base model has none
        text += f"\nhead {projection}\n"
    return w.text(text, list(heading))


def hf_config(spec) -> dict:
    """The GPT-NeoX configuration ``spec`` would be; parallel residual when the feed-forward's norm reads the
    layer's input, as the attention's does."""
    f = Facts(spec, "GPT-NeoX")
    f.kind("decoder-only")
    attention, feedforward, e = f.attention("decoder"), f.feedforward("decoder"), f.embedding
    rotary = f.rotary("decoder")
    g = f.g
    norm_input = [g.nodes[g.nodes[n]["inputs"][0]]["inputs"][0] for n, a in g.nodes(data=True)
                  if a["in_block"] and a["stack"] == "decoder" and a["op"] in ("attention", "feedforward")]
    return dict(model_type="gpt_neox", vocab_size=e.vocab, hidden_size=e.dim, num_hidden_layers=f.layers("decoder"),
                num_attention_heads=attention.heads, intermediate_size=feedforward.d_ff,
                layer_norm_eps=f.norm_option("decoder", "eps", 1e-5),
                hidden_act=f.theirs(ACTIVATIONS, feedforward.activation.name, "activation"),
                attention_bias=attention.bias, attention_dropout=attention.dropout,
                hidden_dropout=f.residual_dropout("decoder"), use_parallel_residual=len(set(norm_input)) == 1,
                tie_word_embeddings=spec.head is not None and spec.head.tied_to is not None,
                rope_parameters=rope_parameters(rotary),
                initializer_range=f.init_option("std", 0.02))


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
    if lm != (model.head is not None):
        raise InteropError(f"{type(reference).__name__} {'has' if lm else 'has no'} LM head, but spec "
                           f"'{model.spec.name}' {'has none' if lm else 'has one'}")
    name = type(reference).__name__
    problems = unsupported(reference.config)
    if not problems:
        problems = architecture_problems(model.spec, spec_text(reference.config, head=lm,
                                                                   padding=model.decoder.masks_padding),
                                         name)
    if problems:
        raise InteropError(f"cannot load {name} weights into spec '{model.spec.name}':\n"
                           + "\n".join(f"  {p}" for p in problems))
    state = reference.state_dict()
    rules, aliases = _rules(model, "gpt_neox." if lm else "", state, lm, head)
    load_state(model, state, rules, reference=name, aliases=aliases)


def to_hf_gpt_neox(model, head: str = "lm_head") -> dict:
    """A state dict for ``GPTNeoXForCausalLM`` (spec with a head; ``head="embed_out"`` for transformers < 5)
    or ``GPTNeoXModel`` (without)."""
    lm = model.head is not None
    rules, aliases = _rules(model, "gpt_neox." if lm else "", {}, lm, head)
    return export_state(model, rules, reference="Hugging Face GPT-NeoX", aliases=aliases)
