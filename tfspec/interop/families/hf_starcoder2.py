"""Hugging Face ``Starcoder2ForCausalLM`` (and its base model) <-> a compiled spec.

StarCoder2 (Lozhkov et al. 2024) is a pre-norm decoder with LayerNorms (with bias), rotary positions,
grouped-query attention, an optional sliding window and a plain (not gated) feed-forward ``c_fc`` -> GELU (tanh)
-> ``c_proj``; ``use_bias`` switches every projection's bias at once. ``residual_dropout`` drops each sublayer's
output and ``embedding_dropout`` the embeddings (both carried over). The head is tied by default.
"""

from __future__ import annotations

from . import hf_llama
from ..facts import Facts
from ..fields import Field, Fields
from ..mapping import InteropError, Rule, layer_modules, linear_rules, rule
from ..document import Statement
from ..writer import SpecWriter

ACTIVATIONS = {"gelu_pytorch_tanh": "gelu_tanh", "gelu_new": "gelu_tanh", "gelu": "gelu", "relu": "relu",
               "silu": "silu"}
_LLAMA = {e.name: e for e in hf_llama.FIELDS.fields}

FIELDS = Fields(
    *(_LLAMA[n] for n in ("d_model", "heads", "kv_heads", "layers", "d_ff", "vocab", "rope_theta", "rotary_fraction",
                          "window", "p_attn_dropout", "init_std", "tied")),
    *hf_llama.ROPE_SCALING,
    Field("eps", "norm_epsilon", lambda f: f.norm_option("decoder", "eps", 1e-5)),
    Field("activation", "hidden_act", lambda f: f.feedforward("decoder").activation.name, names=ACTIVATIONS),
    Field("use_bias", "use_bias", lambda f: f.attention("decoder").bias, let=False),
    Field("p_dropout", "residual_dropout", lambda f: f.residual_dropout("decoder")),
    Field("p_embd_dropout", "embedding_dropout", lambda f: f.embedding.dropout),
    ignored=hf_llama.FIELDS.ignored,
)


def spec_text(config, *, head: bool = True, padding: bool = True, name: str = "reference",
              heading: tuple[str, ...] = ()) -> str:
    """The tfspec spec a StarCoder2 configuration describes: Llama's with LayerNorms, biases as use_bias says and
    dropout on the embeddings."""
    w = SpecWriter()
    s = FIELDS.write(config, w)
    document = (hf_llama.document(s, padding=padding, head=head, norm="layernorm")
                .add("embedding tokens", Statement("dropout", s.p_embd_dropout))
                .change("decoder", "attention", bias=s.use_bias)
                .change("decoder", "feedforward", bias=s.use_bias))
    return w.text(document.text(name), list(heading))

def hf_config(spec) -> dict:
    """The StarCoder2 configuration ``spec`` would be."""
    f = Facts(spec, "StarCoder2")
    f.kind("decoder-only")
    if f.feedforward("decoder").bias != f.attention("decoder").bias:
        raise f.refuse("its attention and feed-forward differ in bias; StarCoder2's use_bias sets both")
    return {"model_type": "starcoder2", **FIELDS.config(f)}


def _rules(model, prefix: str, state: dict, lm: bool) -> tuple[list[Rule], dict[str, str]]:
    if model.spec.kind != "decoder-only":
        raise InteropError(f"StarCoder2 is decoder-only; spec '{model.spec.name}' is {model.spec.kind}")
    ours_state = model.state_dict()
    parts = layer_modules(model)
    rules = [rule("embeddings.tokens.tokens.weight", f"{prefix}embed_tokens.weight"),
             *linear_rules("decoder.final_norm", f"{prefix}norm", state, ours_state)]
    for i in range(len(model.decoder.layers)):
        ours, theirs = f"decoder.layers.{i}", f"{prefix}layers.{i}"
        attention, feedforward = f"{ours}.{parts['attention']}", f"{ours}.{parts['feedforward']}"
        core = model.get_submodule(attention)
        q_width, kv_width = core.heads * core.head_dim, core.kv_heads * core.head_dim
        rules += [*linear_rules(f"{attention}.qkv", tuple(f"{theirs}.self_attn.{p}_proj" for p in "qkv"), state,
                                ours_state, split=(q_width, kv_width, kv_width)),
                  *linear_rules(f"{attention}.out", f"{theirs}.self_attn.o_proj", state, ours_state),
                  *linear_rules(f"{feedforward}.up", f"{theirs}.mlp.c_fc", state, ours_state),
                  *linear_rules(f"{feedforward}.down", f"{theirs}.mlp.c_proj", state, ours_state),
                  *linear_rules(f"{ours}.{parts['attention_norm']}", f"{theirs}.input_layernorm", state, ours_state),
                  *linear_rules(f"{ours}.{parts['feedforward_norm']}", f"{theirs}.post_attention_layernorm", state,
                                ours_state)]
    head, aliases = hf_llama.lm_head_rules(model, lm)
    return rules + head, aliases


EXPORT_PRIORITY = 240  # where export tries this module's families (lower first)
FAMILIES = (  # the families this module reads and writes (``tfspec.interop.family``)
    hf_llama.decoder_family(
        "StarCoder2", ("starcoder2",),
        {"Starcoder2ForCausalLM": {"head": True},
        "Starcoder2Model": {"head": False}},
        "StarCoder2: pre-norm LayerNorm (with bias), rotary positions, grouped-query attention, an optional "
        "sliding window, a plain GELU (tanh) feed-forward, every projection biased by use_bias, the head tied",
        module=__name__, fields=FIELDS, spec_text=spec_text, hf_config=hf_config, rules=_rules),
)
