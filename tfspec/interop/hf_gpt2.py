"""Hugging Face ``GPT2Model`` / ``GPT2LMHeadModel`` <-> a compiled decoder-only spec.

GPT-2 stores its linear maps as ``Conv1D`` (input-major), so every matrix is
transposed on the way; ``lm_head.weight`` is the token embedding (tied).
"""

from __future__ import annotations

from .mapping import InteropError, Rule, export_state, load_state, rule, sublayer_problems

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


def _config_problems(model, config) -> list[str]:
    problems = sublayer_problems(model, "decoder", reference="GPT-2", residual="pre", eps=config.layer_norm_epsilon,
                                 heads=config.n_head, self_masks=["causal"],
                                 activation=ACTIVATIONS.get(config.activation_function, config.activation_function))
    if model.head is not None and (model.head.transform is not None or model.head.bias is not None or not model.head.tied):
        problems.append("GPT-2's head is a bias-free projection tied to the token embedding: use `head tied(tokens)`")
    return problems


def from_hf_gpt2(model, reference) -> None:
    """Copy a ``GPT2Model`` or ``GPT2LMHeadModel``'s weights into ``model`` (every tensor accounted for)."""
    lm = hasattr(reference, "transformer")
    if lm != (model.head is not None):
        raise InteropError(f"{type(reference).__name__} {'has' if lm else 'has no'} LM head, but spec "
                           f"'{model.spec.name}' {'has none' if lm else 'has one'}")
    rules, aliases = _rules(model, "transformer." if lm else "")
    load_state(model, reference.state_dict(), rules, reference=REFERENCE, aliases=aliases,
               config_problems=_config_problems(model, reference.config))


def to_hf_gpt2(model) -> dict:
    """A state dict for ``GPT2LMHeadModel`` (spec with a head) or ``GPT2Model`` (without)."""
    rules, aliases = _rules(model, "transformer." if model.head is not None else "")
    return export_state(model, rules, reference=REFERENCE, aliases=aliases)
