"""Hugging Face ``LlamaForCausalLM`` / ``MistralForCausalLM`` (and their base models) <-> a compiled spec.

Both families share one layout: separate q/k/v/o projections (concatenated into
our fused ``qkv``), a gated MLP whose ``gate_proj`` and ``up_proj`` are our
``up`` (gate first), RMSNorms before each sublayer and after the last layer.
``spec_text(config)`` writes the spec a configuration describes; loading
compares the model's spec with it fact by fact (``architecture_problems``), so
a differing rope θ, partial rotary factor, norm eps, kv heads, head dim,
sliding window, bias or tying is an ``InteropError``, never a silent copy.
"""

from __future__ import annotations

from .mapping import (InteropError, Rule, architecture_problems, export_state, layer_modules, linear_rules,
                      load_state, rule)
from .facts import Facts
from .writer import SpecWriter, number

ACTIVATIONS = {"silu": "swiglu", "swish": "swiglu", "gelu": "geglu"}  # HF's act on the gate -> our gated unit



def rope(config) -> dict:
    """The rotary settings of a Llama-family configuration (``rope_parameters``, or the older ``rope_theta``)."""
    params = dict(getattr(config, "rope_parameters", None) or {})
    params.setdefault("rope_theta", getattr(config, "rope_theta", 10000.0))
    params.setdefault("rope_type", "default")
    params.setdefault("partial_rotary_factor", getattr(config, "partial_rotary_factor", 1.0) or 1.0)
    return params


def unsupported(config) -> list[str]:
    """Configuration values tfspec cannot express (reported rather than approximated)."""
    problems = []
    if rope(config)["rope_type"] != "default":
        problems.append(f"rope scaling '{rope(config)['rope_type']}' is not supported (only unscaled RoPE)")
    if config.hidden_act not in ACTIVATIONS:
        problems.append(f"hidden_act '{config.hidden_act}' has no gated tfspec activation "
                        f"(supported: {', '.join(sorted(ACTIVATIONS))})")
    if getattr(config, "pretraining_tp", 1) not in (None, 1):
        problems.append(f"pretraining_tp={config.pretraining_tp} splits the projections' matmuls; use 1")
    return problems


def spec_text(config, *, head: bool = True, padding: bool = True, name: str = "reference",
              heading: tuple[str, ...] = ()) -> str:
    """The tfspec spec a Llama or Mistral configuration describes (``padding``: mask padded keys)."""
    w = SpecWriter()
    d_model, heads = w("d_model", config.hidden_size, "hidden_size"), w("heads", config.num_attention_heads,
                                                                         "num_attention_heads")
    kv_heads = w("kv_heads", config.num_key_value_heads, "num_key_value_heads")
    layers, d_ff = w("layers", config.num_hidden_layers, "num_hidden_layers"), w("d_ff", config.intermediate_size,
                                                                                 "intermediate_size")
    vocab = w("vocab", config.vocab_size, "vocab_size")
    head_dim = getattr(config, "head_dim", None)
    head_dim = (f" head_dim={w('head_dim', head_dim, 'head_dim')}"
                if head_dim and head_dim != config.hidden_size // config.num_attention_heads else "")
    rotary = rope(config)
    fraction = float(rotary["partial_rotary_factor"])
    theta = w("rope_theta", float(rotary["rope_theta"]), "rope_theta")
    position = f"rotary(theta={theta}" + (f", fraction={number(fraction)})" if fraction != 1.0 else ")")
    masks = ["causal"]
    window = getattr(config, "sliding_window", None)
    if window is not None and getattr(config, "use_sliding_window", True) is not False:
        masks.append(f"window({w('window', int(window), 'sliding_window')})")
    if padding:
        masks.append("padding")
    eps = w("eps", config.rms_norm_eps, "rms_norm_eps")
    attention_bias = str(bool(getattr(config, "attention_bias", False))).lower()
    mlp_bias = str(bool(getattr(config, "mlp_bias", False))).lower()
    projection = "tied(tokens)" if config.tie_word_embeddings else f"linear({vocab}) bias=false"
    text = f"""model {name}

defaults {{
  residual pre
  norm rmsnorm(eps={eps})
  attn_dropout {w("p_attn_dropout", config.attention_dropout, "attention_dropout")}
  init normal(std={w("init_std", config.initializer_range, "initializer_range")})
}}

embedding tokens {{ vocab {vocab}; dim {d_model}; position none }}

decoder x {layers} {{
  position {position}
  attention self heads={heads} kv_heads={kv_heads}{head_dim} mask={' + '.join(masks)} bias={attention_bias}
  feedforward d_ff={d_ff} activation={ACTIVATIONS.get(config.hidden_act, 'swiglu')} bias={mlp_bias}
  final rmsnorm(eps={eps})
}}
"""
    if head:  # the causal LM's; the base model has none
        text += f"\nhead {projection}\n"
    return w.text(text, list(heading))


def hf_config(spec) -> dict:
    """The Llama configuration ``spec`` would be (Mistral's when its self-attention has a sliding window)."""
    f = Facts(spec, "Llama or Mistral")
    f.kind("decoder-only")
    attention, feedforward, e = f.attention("decoder"), f.feedforward("decoder"), f.embedding
    rotary, window = f.rotary("decoder"), f.window("decoder")
    shape = f.node("decoder", "attention")["geometry"]
    config = dict(model_type="mistral" if window is not None else "llama", vocab_size=e.vocab, hidden_size=e.dim,
                  num_hidden_layers=f.layers("decoder"), num_attention_heads=shape.heads,
                  num_key_value_heads=shape.kv_heads, head_dim=shape.head_dim,
                  intermediate_size=feedforward.d_ff, rms_norm_eps=f.norm_option("decoder", "eps", 1e-6),
                  hidden_act=f.theirs(ACTIVATIONS, feedforward.activation.name, "activation"),
                  attention_dropout=attention.dropout,
                  tie_word_embeddings=spec.head is not None and spec.head.tied_to is not None,
                  rope_parameters=rope_parameters(rotary),
                  initializer_range=f.init_option("std", 0.02))
    if window is not None:
        config["sliding_window"] = window
    # only where set: Mistral has no such fields (a bias there is then a weight it cannot take)
    config.update({k: True for k, v in (("attention_bias", attention.bias), ("mlp_bias", feedforward.bias)) if v})
    return config


def rope_parameters(rotary: dict) -> dict:
    """Hugging Face's ``rope_parameters`` for our rotary options (the fraction only when partial)."""
    fraction = rotary.get("fraction", 1.0)
    return {"rope_type": "default", "rope_theta": rotary.get("theta", 10000.0),
            **({"partial_rotary_factor": fraction} if fraction != 1.0 else {})}


def _rules(model, prefix: str, state: dict, lm: bool) -> tuple[list[Rule], dict[str, str]]:
    if model.spec.kind != "decoder-only":
        raise InteropError(f"Llama and Mistral are decoder-only; spec '{model.spec.name}' is {model.spec.kind}")
    ours_state = model.state_dict()
    parts = layer_modules(model)
    attention = model.decoder.layers[0].get_submodule(parts["attention"])
    q_width, kv_width = attention.heads * attention.head_dim, attention.kv_heads * attention.head_dim
    rules = [rule("embeddings.tokens.tokens.weight", f"{prefix}embed_tokens.weight"),
             rule("decoder.final_norm.weight", f"{prefix}norm.weight")]
    for i in range(len(model.decoder.layers)):
        ours, theirs = f"decoder.layers.{i}", f"{prefix}layers.{i}"
        a, f = f"{ours}.{parts['attention']}", f"{ours}.{parts['feedforward']}"
        rules += linear_rules(f"{a}.qkv", tuple(f"{theirs}.self_attn.{p}_proj" for p in "qkv"), state, ours_state,
                              split=(q_width, kv_width, kv_width))
        rules += linear_rules(f"{a}.out", f"{theirs}.self_attn.o_proj", state, ours_state)
        rules += linear_rules(f"{f}.up", (f"{theirs}.mlp.gate_proj", f"{theirs}.mlp.up_proj"), state, ours_state)
        rules += linear_rules(f"{f}.down", f"{theirs}.mlp.down_proj", state, ours_state)
        rules += [rule(f"{ours}.{parts['attention_norm']}.weight", f"{theirs}.input_layernorm.weight"),
                  rule(f"{ours}.{parts['feedforward_norm']}.weight", f"{theirs}.post_attention_layernorm.weight")]
    aliases = {}
    if lm and model.tied_to is not None:
        aliases["lm_head.weight"] = "embeddings.tokens.tokens.weight"
    elif lm:
        rules.append(rule("head.weight", "lm_head.weight"))
    return rules, aliases


def from_hf_llama(model, reference) -> None:
    """Copy a ``LlamaForCausalLM``/``MistralForCausalLM`` (or base model)'s weights into ``model``.

    Every tensor must be accounted for and the spec must be the architecture the
    reference's configuration describes; otherwise an ``InteropError`` lists every difference.
    """
    lm = hasattr(reference, "lm_head")
    if lm != (model.head is not None):
        raise InteropError(f"{type(reference).__name__} {'has' if lm else 'has no'} LM head, but spec "
                           f"'{model.spec.name}' {'has none' if lm else 'has one'}")
    config = reference.config
    name = type(reference).__name__
    problems = unsupported(config)
    if not problems:
        padding = model.decoder.masks_padding
        problems = architecture_problems(model.spec, spec_text(config, head=lm, padding=padding), name)
    if problems:  # the mapping below assumes this architecture: stop before naming tensors
        raise InteropError(f"cannot load {name} weights into spec '{model.spec.name}':\n"
                           + "\n".join(f"  {p}" for p in problems))
    state = reference.state_dict()
    rules, aliases = _rules(model, "model." if lm else "", state, lm)
    load_state(model, state, rules, reference=name, aliases=aliases)


def to_hf_llama(model) -> dict:
    """A state dict for ``LlamaForCausalLM``/``MistralForCausalLM`` (spec with a head) or the base model."""
    lm = model.head is not None
    rules, aliases = _rules(model, "model." if lm else "", {}, lm)
    return export_state(model, rules, reference="Hugging Face Llama", aliases=aliases)
