"""Hugging Face ``GPT2Model`` / ``GPT2LMHeadModel`` <-> a compiled decoder-only spec.

GPT-2 stores its linear maps as ``Conv1D`` (input-major), so every matrix is
transposed on the way; ``lm_head.weight`` is the token embedding (tied).
"""

from __future__ import annotations

from .mapping import InteropError, Rule, architecture_problems, export_state, load_state, rule
from .facts import Facts
from .writer import SpecWriter

REFERENCE = "Hugging Face GPT-2"
ACTIVATIONS = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu", "relu": "relu",
               "silu": "silu", "swish": "silu", "tanh": "tanh"}


def _rules(model, prefix: str) -> tuple[list[Rule], dict[str, str]]:
    if model.spec.kind != "decoder-only":
        raise InteropError(f"GPT-2 is decoder-only; spec '{model.spec.name}' is {model.spec.kind}")
    rules = [rule("embeddings.tokens.tokens.weight", f"{prefix}wte.weight"),
             rule("embeddings.tokens.positions.weight", f"{prefix}wpe.weight")]
    for i in range(len(model.decoder.layers)):
        ours, theirs = f"decoder.layers.{i}", f"{prefix}h.{i}"
        for ours_part, theirs_part in (("self_attn.qkv", "attn.c_attn"), ("self_attn.out", "attn.c_proj"),
                                       ("ffn.up", "mlp.c_fc"), ("ffn.down", "mlp.c_proj")):
            rules += [rule(f"{ours}.{ours_part}.weight", f"{theirs}.{theirs_part}.weight", transpose=True),
                      rule(f"{ours}.{ours_part}.bias", f"{theirs}.{theirs_part}.bias")]
        for ours_part, theirs_part in (("self_attn_norm", "ln_1"), ("ffn_norm", "ln_2")):
            rules += [rule(f"{ours}.{ours_part}.{p}", f"{theirs}.{theirs_part}.{p}") for p in ("weight", "bias")]
    rules += [rule(f"decoder.final_norm.{p}", f"{prefix}ln_f.{p}") for p in ("weight", "bias")]
    aliases = {"lm_head.weight": "embeddings.tokens.tokens.weight"} if prefix else {}
    return rules, aliases


def unsupported(config) -> list[str]:
    """Configuration values tfspec cannot express (reported rather than approximated)."""
    problems = []
    if config.activation_function not in ACTIVATIONS:
        problems.append(f"activation_function '{config.activation_function}' has no tfspec activation "
                        f"(supported: {', '.join(sorted(ACTIVATIONS))})")
    if getattr(config, "scale_attn_by_inverse_layer_idx", False):
        problems.append("scale_attn_by_inverse_layer_idx scales each layer's scores by 1/(layer + 1); "
                        "tfspec's softmax scale is one per sublayer, the same in every layer")
    if not getattr(config, "scale_attn_weights", True):
        problems.append("scale_attn_weights=False leaves scores unscaled: write it as `scale=1` by hand")
    return problems


def spec_text(config, *, head: bool = True, padding: bool = True, name: str = "reference",
              heading: tuple[str, ...] = ()) -> str:
    """The tfspec spec a GPT-2 configuration describes: ``GPT2LMHeadModel``'s, or ``GPT2Model``'s with
    ``head=False`` (``padding``: mask padded keys)."""
    w = SpecWriter()
    d_model = w("d_model", config.n_embd, "n_embd")
    heads, layers = w("heads", config.n_head, "n_head"), w("layers", config.n_layer, "n_layer")
    vocab, context = w("vocab", config.vocab_size, "vocab_size"), w("context", config.n_positions, "n_positions")
    d_ff = w("d_ff", config.n_inner, "n_inner") if config.n_inner else "4 * d_model"
    eps = w("eps", config.layer_norm_epsilon, "layer_norm_epsilon")
    dropout = w("p_dropout", config.resid_pdrop, "resid_pdrop")
    embedding_dropout = (f"\n  dropout {w('p_embd_dropout', config.embd_pdrop, 'embd_pdrop')}"
                         if config.embd_pdrop != config.resid_pdrop else "")
    text = f"""model {name}

defaults {{
  residual pre                  # x = x + Dropout(Sublayer(LayerNorm(x)))
  norm layernorm(eps={eps})
  dropout {dropout}
  attn_dropout {w("p_attn_dropout", config.attn_pdrop, "attn_pdrop")}
  init gpt2(std={w("init_std", config.initializer_range, "initializer_range")})
}}

embedding tokens {{
  vocab {vocab}
  dim {d_model}
  position learned({context}){embedding_dropout}
}}

decoder x {layers} {{
  attention self heads={heads} mask={"causal + padding" if padding else "causal"}
  feedforward d_ff={d_ff} activation={ACTIVATIONS.get(config.activation_function, "gelu_tanh")}
  final layernorm(eps={eps})
}}
"""
    if head:
        text += "\nhead tied(tokens)\n"
    return w.text(text, list(heading))


def hf_config(spec) -> dict:
    """The GPT-2 configuration ``spec`` would be (exported after ``architecture_problems`` finds no difference)."""
    f = Facts(spec, "GPT-2")
    f.kind("decoder-only")
    attention, feedforward = f.attention("decoder"), f.feedforward("decoder")
    return dict(model_type="gpt2", vocab_size=f.embedding.vocab, n_embd=f.embedding.dim,
                n_layer=f.layers("decoder"), n_head=attention.heads, n_positions=f.learned_positions(),
                n_inner=None if feedforward.d_ff == 4 * f.embedding.dim else feedforward.d_ff, activation_function=f.theirs(ACTIVATIONS, feedforward.activation.name,
                                                                      "activation"),
                layer_norm_epsilon=f.norm_option("decoder", "eps", 1e-5),
                resid_pdrop=f.residual_dropout("decoder"), embd_pdrop=f.embedding.dropout,
                attn_pdrop=attention.dropout, initializer_range=f.init_option("std", 0.02),
                tie_word_embeddings=True)


def _config_problems(model, reference) -> list[str]:
    config = reference.config
    problems = unsupported(config)
    if problems:
        return problems
    expected = spec_text(config, head=hasattr(reference, "transformer"), padding=model.decoder.masks_padding)
    return architecture_problems(model.spec, expected, type(reference).__name__)


def from_hf_gpt2(model, reference) -> None:
    """Copy a ``GPT2Model`` or ``GPT2LMHeadModel``'s weights into ``model`` (every tensor accounted for)."""
    lm = hasattr(reference, "transformer")
    if lm != (model.head is not None):
        raise InteropError(f"{type(reference).__name__} {'has' if lm else 'has no'} LM head, but spec "
                           f"'{model.spec.name}' {'has none' if lm else 'has one'}")
    rules, aliases = _rules(model, "transformer." if lm else "")
    load_state(model, reference.state_dict(), rules, reference=REFERENCE, aliases=aliases,
               config_problems=_config_problems(model, reference))


def to_hf_gpt2(model) -> dict:
    """A state dict for ``GPT2LMHeadModel`` (spec with a head) or ``GPT2Model`` (without)."""
    rules, aliases = _rules(model, "transformer." if model.head is not None else "")
    return export_state(model, rules, reference=REFERENCE, aliases=aliases)
