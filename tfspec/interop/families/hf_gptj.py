"""Hugging Face ``GPTJForCausalLM`` / ``GPTJModel`` (and ``PhiForCausalLM`` / ``PhiModel``, phi-2) <-> a spec.

GPT-J (Wang and Komatsuzaki 2021) and Phi (Li et al. 2023; phi-2) run attention and the feed-forward in
parallel on one LayerNorm's output (``h = norm(x); x = x + attention(h) + feedforward(h)``, the wiring form),
with rotary positions on part of each head, a GELU (tanh) feed-forward with biases, a final LayerNorm and an
untied head with a bias. GPT-J pairs neighbouring dimensions (``interleaved=true``) and has no attention
biases; Phi pairs halves, biases every projection, and may norm each head's queries and keys
(``qk_layernorm``). Dropout of the embeddings and of each branch's output is carried over.
"""

from __future__ import annotations

from . import hf_llama
from ...registry import NORMS
from ..facts import Facts
from ..fields import Field, Fields
from ..mapping import InteropError, Rule, layer_modules, linear_rules, rule
from .. import layouts
from ..document import Statement
from ..writer import SpecWriter, causal_masks
from ..family import Family

ACTIVATIONS = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu", "relu": "relu",
               "silu": "silu"}


def _fraction(f) -> float:
    return f.rotary("decoder").get("fraction", 1.0)


def _d_ff(f) -> int | None:
    """n_inner, left out where it is GPT-J's default of 4 * n_embd."""
    d_ff = f.feedforward("decoder").d_ff
    return None if d_ff == 4 * f.embedding.dim else d_ff


def _branch_dropout(f) -> float:
    """The dropout on each parallel branch's output (GPT-J's resid_pdrop, Phi's)."""
    return f.residual_dropout("decoder")


GPTJ_FIELDS = Fields(
    Field("d_model", "n_embd", lambda f: f.embedding.dim),
    Field("heads", "n_head", lambda f: f.attention("decoder").heads),
    Field("layers", "n_layer", lambda f: f.layers("decoder")),
    Field("d_ff", "n_inner", _d_ff, read=lambda c: c.n_inner or None),
    Field("vocab", "vocab_size", lambda f: f.embedding.vocab),
    Field("rotary_dim", "rotary_dim", lambda f: round(_fraction(f) * f.geometry("decoder").head_dim),
          read=lambda c: c.rotary_dim or c.n_embd // c.n_head, let=False),
    Field("eps", "layer_norm_epsilon", lambda f: f.norm_option("decoder", "eps", 1e-5)),
    Field("p_dropout", "resid_pdrop", _branch_dropout),
    Field("p_embd_dropout", "embd_pdrop", lambda f: f.embedding.dropout),
    Field("p_attn_dropout", "attn_pdrop", lambda f: f.attention("decoder").dropout),
    Field("init_std", "initializer_range", lambda f: f.init_option("std", 0.02)),
    Field("activation", "activation_function", lambda f: f.feedforward("decoder").activation.name,
          names=ACTIVATIONS),
    Field("tied", "tie_word_embeddings", lambda f: f.tied, let=False),
    ignored={"n_positions": "the length of GPT-J's precomputed sin/cos table; tfspec's rotary positions compute "
                            "any position"},
)

PHI_FIELDS = Fields(
    *(e for e in hf_llama.FIELDS.fields if e.name in ("d_model", "heads", "kv_heads", "layers", "d_ff", "vocab",
                                                        "rope_theta", "rotary_fraction", "init_std")),
    *hf_llama.ROPE_SCALING,
    Field("eps", "layer_norm_eps", lambda f: f.norm_option("decoder", "eps", 1e-5)),
    Field("p_dropout", "resid_pdrop", _branch_dropout),
    Field("p_embd_dropout", "embd_pdrop", lambda f: f.embedding.dropout),
    Field("p_attn_dropout", "attention_dropout", lambda f: f.attention("decoder").dropout),
    Field("activation", "hidden_act", lambda f: f.feedforward("decoder").activation.name, names=ACTIVATIONS),
    Field("qk_layernorm", "qk_layernorm", lambda f: not NORMS[f.attention("decoder").qk_norm.name].absent,
          let=False),
    Field("tied", "tie_word_embeddings", lambda f: f.tied, let=False),
    ignored=hf_llama.FIELDS.ignored,
)
FIELDS = GPTJ_FIELDS  # GPT-J's table; Phi's module (hf_phi) names PHI_FIELDS


def spec_text(config, *, head: bool = True, padding: bool = True, name: str = "reference",
              heading: tuple[str, ...] = ()) -> str:
    """The tfspec spec a GPT-J or Phi configuration describes: one norm, attention and feed-forward in
    parallel."""
    phi = config.model_type == "phi"
    w = SpecWriter()
    s = (PHI_FIELDS if phi else GPTJ_FIELDS).write(config, w)
    masks = causal_masks(padding=padding)
    if phi:
        position = hf_llama.rotary(s)
        kv = f", kv_heads={s.kv_heads}"
        attention_extra = ", bias=true" + (f", qk_norm=layernorm(eps={s.eps})" if s.value("qk_layernorm") else "")
        d_ff = s.d_ff
    else:
        head_dim = config.n_embd // config.n_head
        fraction = s.value("rotary_dim") / head_dim
        position = "rotary(theta=10000.0, interleaved=true" + (f", fraction={fraction!r})" if fraction != 1 else ")")
        kv, attention_extra = "", ", bias=false"
        d_ff = s.d_ff or f"4 * {s.d_model}"

    def out(t: str) -> str:  # each branch's dropout before the sum
        return f"dropout({t}, {s.p_dropout})" if s.value("p_dropout") else t

    attention = out(f"attention(h, heads={s.heads}{kv}, mask={masks}{attention_extra})")
    feedforward = out(f"feedforward(h, d_ff={d_ff}, activation={s.activation})")
    wiring = f"h = norm(x)\nx = x + {attention} + \\\n    {feedforward}   # in parallel, on one norm"
    document = layouts.wired(s, norm=f"layernorm(eps={s.eps})", position=position, wiring=wiring, head=head)
    if s.value("p_embd_dropout"):
        document = document.add("embedding tokens", Statement("dropout", s.p_embd_dropout))
    if head:  # the causal LM's, with a bias
        document = document.change_tail("head", bias="true")
    return w.text(document.text(name), list(heading))


def hf_config(spec) -> dict:
    """The GPT-J configuration ``spec`` would be."""
    f = Facts(spec, "GPT-J")
    f.kind("decoder-only")
    if not f.rotary("decoder").get("interleaved") or f.rotary("decoder").get("theta") != 10000.0:
        raise f.refuse("its rotary positions are not GPT-J's (interleaved, theta 10000)")
    if f.attention("decoder").bias:
        raise f.refuse("its attention projections have biases; GPT-J's have none")
    return {"model_type": "gptj", **GPTJ_FIELDS.config(f)}


def hf_config_phi(spec) -> dict:
    """The Phi configuration ``spec`` would be."""
    f = Facts(spec, "Phi")
    f.kind("decoder-only")
    if not f.attention("decoder").bias:
        raise f.refuse("its attention projections have no biases; Phi's have")
    return {"model_type": "phi", **PHI_FIELDS.config(f)}


def _rules(model, prefix: str, state: dict, lm: bool, phi: bool) -> tuple[list[Rule], dict[str, str]]:
    if model.spec.kind != "decoder-only":
        raise InteropError(f"{'Phi' if phi else 'GPT-J'} is decoder-only; spec '{model.spec.name}' is "
                           f"{model.spec.kind}")
    ours_state = model.state_dict()
    parts = layer_modules(model)
    if parts.get("attention_norm") != parts.get("feedforward_norm"):
        raise InteropError(f"spec '{model.spec.name}' does not read one norm for attention and feed-forward")
    names = ({"layer": "layers", "norm": "input_layernorm", "attention": "self_attn", "out": "dense", "up": "mlp.fc1",
              "down": "mlp.fc2", "final": "final_layernorm", "tokens": "embed_tokens"} if phi else
             {"layer": "h", "norm": "ln_1", "attention": "attn", "out": "out_proj", "up": "mlp.fc_in",
              "down": "mlp.fc_out", "final": "ln_f", "tokens": "wte"})
    rules = [rule("embeddings.tokens.tokens.weight", f"{prefix}{names['tokens']}.weight"),
             *linear_rules("decoder.final_norm", f"{prefix}{names['final']}", state, ours_state)]
    for i in range(len(model.decoder.layers)):
        ours, theirs = f"decoder.layers.{i}", f"{prefix}{names['layer']}.{i}"
        attention, feedforward = f"{ours}.{parts['attention']}", f"{ours}.{parts['feedforward']}"
        core = model.get_submodule(attention)
        q_width, kv_width = core.heads * core.head_dim, core.kv_heads * core.head_dim
        a = f"{theirs}.{names['attention']}"
        rules += [*linear_rules(f"{attention}.qkv", tuple(f"{a}.{p}_proj" for p in "qkv"), state, ours_state,
                                split=(q_width, kv_width, kv_width)),
                  *linear_rules(f"{attention}.out", f"{a}.{names['out']}", state, ours_state),
                  *linear_rules(f"{feedforward}.up", f"{theirs}.{names['up']}", state, ours_state),
                  *linear_rules(f"{feedforward}.down", f"{theirs}.{names['down']}", state, ours_state),
                  *linear_rules(f"{ours}.{parts['attention_norm']}", f"{theirs}.{names['norm']}", state, ours_state)]
        if phi and core.q_norm is not None:
            rules += [*linear_rules(f"{attention}.q_norm", f"{a}.q_layernorm", state, ours_state),
                      *linear_rules(f"{attention}.k_norm", f"{a}.k_layernorm", state, ours_state)]
    if not lm:
        return rules, {}
    rules.append(rule("head.bias", "lm_head.bias"))
    if model.tied_to is not None:
        return rules, {"lm_head.weight": "embeddings.tokens.tokens.weight"}
    return rules + [rule("head.weight", "lm_head.weight")], {}


def _gptj_rules(model, prefix: str, state: dict, lm: bool):
    return _rules(model, prefix, state, lm, phi=False)


def _phi_rules(model, prefix: str, state: dict, lm: bool):
    return _rules(model, prefix, state, lm, phi=True)


def from_hf_gptj(model, reference) -> None:
    """Copy a ``GPTJForCausalLM`` (or ``GPTJModel``)'s weights into ``model``; the spec must be the architecture
    the reference's configuration describes."""
    hf_llama.load_decoder(model, reference, GPTJ_FIELDS, hf_config, spec_text, _gptj_rules, prefix="transformer.")


def to_hf_gptj(model) -> dict:
    """A state dict for ``GPTJForCausalLM`` (spec with a head) or ``GPTJModel``."""
    return hf_llama.export_decoder(model, _gptj_rules, "Hugging Face GPT-J", prefix="transformer.")


def from_hf_phi(model, reference) -> None:
    """Copy a ``PhiForCausalLM`` (or ``PhiModel``)'s weights into ``model``, as ``from_hf_gptj`` does."""
    hf_llama.load_decoder(model, reference, PHI_FIELDS, hf_config_phi, spec_text, _phi_rules)


def to_hf_phi(model) -> dict:
    """A state dict for ``PhiForCausalLM`` (spec with a head) or ``PhiModel``."""
    return hf_llama.export_decoder(model, _phi_rules, "Hugging Face Phi")


EXPORT_PRIORITY = 290  # where export tries this module's families (lower first)
FAMILIES = (  # the families this module reads and writes (``tfspec.interop.family``)
    Family("GPT-J", ("gptj",),
           {"GPTJForCausalLM": {"head": True}, "GPTJModel": {"head": False}},
           "GPT-J: attention and feed-forward in parallel on one LayerNorm (the wiring form), interleaved "
           "partial rotary positions, no attention biases, an untied head with a bias",
           module=__name__, fields=FIELDS, spec_text=spec_text, hf_config=hf_config, load=from_hf_gptj,
           export=to_hf_gptj),
)
