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

from typing import Callable

from ..mapping import (InteropError, Rule, export_state, layer_modules, linear_rules, load_state,
                      refuse_other_architecture, rule, same_head)
from ..facts import Facts
from ..fields import Field, Fields, Fixed
from ..writer import SpecWriter, causal_masks
from ..family import Family
from .. import layouts, mtp
from ..document import Document, Statement

ACTIVATIONS = {"silu": "swiglu", "swish": "swiglu", "gelu": "geglu"}  # HF's act on the gate -> our gated unit



def rope(config) -> dict:
    """The rotary settings of a Llama-family configuration (``rope_parameters``, or the older ``rope_theta``)."""
    params = dict(getattr(config, "rope_parameters", None) or {})
    params.setdefault("rope_theta", getattr(config, "rope_theta", 10000.0))
    params.setdefault("rope_type", "default")
    params.setdefault("partial_rotary_factor", getattr(config, "partial_rotary_factor", 1.0) or 1.0)
    return params


def written_head_dim(config):
    """head_dim, written only where it is not hidden_size / num_attention_heads."""
    head_dim = getattr(config, "head_dim", None)
    return head_dim if head_dim and head_dim != config.hidden_size // config.num_attention_heads else None


def written_fraction(fraction) -> float | None:
    return float(fraction) if fraction != 1.0 else None


def _window(config):
    window = getattr(config, "sliding_window", None)
    return int(window) if window is not None and getattr(config, "use_sliding_window", True) is not False else None


SCALINGS = {"default": "none", "linear": "linear", "dynamic": "dynamic", "yarn": "yarn", "llama3": "llama3"}
# each scaling's options: {ours: theirs inside rope_parameters}
SCALING_OPTIONS = {"linear": {"factor": "factor"}, "dynamic": {"factor": "factor"},
                   "llama3": {"factor": "factor", "original": "original_max_position_embeddings",
                              "low_freq": "low_freq_factor", "high_freq": "high_freq_factor"},
                   "yarn": {"factor": "factor", "original": "original_max_position_embeddings",
                            "beta_fast": "beta_fast", "beta_slow": "beta_slow", "attention_factor": "attention_factor",
                            "mscale": "mscale", "mscale_all_dim": "mscale_all_dim", "truncate": "truncate"},
                   # p-RoPE (Gemma 4's full layers): the fastest partial_rotary_factor of the head's frequencies turn
                   "proportional": {"factor": "factor", "proportion": "partial_rotary_factor"}}


def scaling_fields(path: str = "rope_parameters", params: Callable = None, options: Callable = None,
                   scalings: dict[str, str] = SCALINGS) -> list[Field]:
    """The fields of a rotary scaling: its type and each scaling's options, read where the configuration's
    rope_type has them. ``path``: where the configuration holds them; ``params``: the configuration's rotary
    dict (default: ``rope``); ``options``: the spec's rotary options from its facts (default: the stack's);
    ``scalings``: the family's, ``{rope_type: ours}`` (Gemma 4 adds ``proportional``)."""
    params = params or rope
    options = options or (lambda f: f.rotary("decoder"))

    def option(ours: str, theirs: str) -> Field:
        def read(config):
            values = params(config)
            if ours not in SCALING_OPTIONS.get(values["rope_type"], {}):
                return None
            value = values.get(theirs)
            if value is None:  # Hugging Face's defaults where it has them
                value = {"beta_fast": 32.0, "beta_slow": 1.0, "truncate": True}.get(ours)
            if ours == "factor" and value is None and values["rope_type"] == "yarn":  # the stretch of the context
                value = config.max_position_embeddings / values["original_max_position_embeddings"]
            if ours == "original" and value is None:
                value = config.max_position_embeddings
            return value

        def fact(f):
            spec = options(f)
            scaling = spec.get("scaling", "none")
            value = spec.get(ours) if ours in SCALING_OPTIONS.get(scaling, {}) else None
            # Hugging Face's defaults, left to it: yarn's truncation, p-RoPE's unstretched frequencies
            return None if (ours == "truncate" and value) or (scaling, ours, value) == ("proportional", "factor", 1.0) \
                else value

        return Field(f"rope_{ours}", f"{path}.{theirs}", fact, read=read, let=ours != "truncate")  # no bool lets

    theirs_of = {k: v for ours, table in SCALING_OPTIONS.items() if ours in scalings.values() for k, v in table.items()}
    return [Field("rope_scaling", f"{path}.rope_type", lambda f: options(f).get("scaling", "none"),
                  read=lambda c: params(c)["rope_type"], names=scalings),
            *(option(ours, theirs) for ours, theirs in theirs_of.items()),
            # dynamic scaling's original context is max_position_embeddings
            *([Field("rope_context", "max_position_embeddings",
                     lambda f: options(f).get("original") if options(f).get("scaling") == "dynamic" else None,
                     read=lambda c: c.max_position_embeddings if params(c)["rope_type"] == "dynamic" else None)]
              if "dynamic" in scalings.values() else [])]


ROPE_SCALING = scaling_fields()


FIELDS = Fields(
    Field("d_model", "hidden_size", lambda f: f.embedding.dim),
    Field("heads", "num_attention_heads", lambda f: f.geometry("decoder").heads),
    Field("kv_heads", "num_key_value_heads", lambda f: f.geometry("decoder").kv_heads),
    Field("layers", "num_hidden_layers", lambda f: f.layers("decoder")),
    Field("d_ff", "intermediate_size", lambda f: f.feedforward("decoder").d_ff),
    Field("vocab", "vocab_size", lambda f: f.embedding.vocab),
    Field("head_dim", "head_dim", lambda f: f.geometry("decoder").head_dim, read=written_head_dim),
    Field("rope_theta", "rope_parameters.rope_theta", lambda f: f.rotary("decoder").get("theta", 10000.0),
          read=lambda c: float(rope(c)["rope_theta"])),
    Field("rotary_fraction", "rope_parameters.partial_rotary_factor",
          lambda f: written_fraction(f.rotary("decoder").get("fraction", 1.0)),
          read=lambda c: written_fraction(rope(c)["partial_rotary_factor"])),
    Field("window", "sliding_window", lambda f: f.window("decoder"), read=_window),
    Field("eps", "rms_norm_eps", lambda f: f.norm_option("decoder", "eps", 1e-6)),
    Field("p_attn_dropout", "attention_dropout", lambda f: f.attention("decoder").dropout),
    Field("init_std", "initializer_range", lambda f: f.init_option("std", 0.02)),
    Field("activation", "hidden_act", lambda f: f.feedforward("decoder").activation.name, names=ACTIVATIONS),
    # exported only where set: Mistral has no such fields (a bias there is then a weight it cannot take)
    Field("attention_bias", "attention_bias", lambda f: f.attention("decoder").bias or None,
          read=lambda c: bool(getattr(c, "attention_bias", False)), let=False),
    Field("mlp_bias", "mlp_bias", lambda f: f.feedforward("decoder").bias or None,
          read=lambda c: bool(getattr(c, "mlp_bias", False)), let=False),
    Field("tied", "tie_word_embeddings", lambda f: f.tied, let=False),
    *ROPE_SCALING,
    Fixed("pretraining_tp", 1, "pretraining_tp={value} splits the projections' matmuls; use 1",
          read=lambda c: getattr(c, "pretraining_tp", 1) or 1),
    ignored={"max_position_embeddings": "the longest sequence trained on; rotary positions compute the same at "
                                        "any length (read as the original context of dynamic scaling)",
             "partial_rotary_factor": "rope_parameters.partial_rotary_factor where transformers before 5.2x keeps "
                                      "it, at the top level (read from there too: rotary_fraction)"},
)


def document(s, *, padding: bool, head: bool, norm: str = "rmsnorm") -> Document:
    """Llama's spec from the settings ``s``: the decoder layout with ``norm`` (RMSNorm), rotary positions in the
    stack, a sliding window where the table has one, biases as ``attention_bias`` and ``mlp_bias`` say (none where
    the table says nothing), an untied head without a bias."""
    window = s.window if s.has("window") else None
    return (layouts.decoder(s, norm=f"{norm}(eps={s.eps})", padding=padding, head=head)
            .add("decoder", Statement("position", rotary(s)), before="attention")
            .change("decoder", "attention", mask=causal_masks(window, padding),
                    bias=s.attention_bias if s.has("attention_bias") else "false")
            .change("decoder", "feedforward", bias=s.mlp_bias if s.has("mlp_bias") else "false"))


def spec_text(config, *, head: bool = True, padding: bool = True, name: str = "reference",
              heading: tuple[str, ...] = ()) -> str:
    """The tfspec spec a Llama or Mistral configuration describes (``padding``: mask padded keys)."""
    w = SpecWriter()
    return w.text(document(FIELDS.write(config, w), padding=padding, head=head).text(name), list(heading))


def rotary(s, theta: str | None = None, interleaved: bool = False) -> str:
    """The stack's rotary positions, as the configuration's settings ``s`` write them (``theta``: another base;
    ``interleaved``: neighbouring dimensions paired, GLM's and Cohere's, rather than halves)."""
    fraction = getattr(s, "rotary_fraction", None)
    options = [f"theta={theta or s.rope_theta}"] + ([f"fraction={fraction}"] if fraction else [])
    scaling = getattr(s, "rope_scaling", None)
    if scaling and scaling != "none":
        options.append(f"scaling={scaling}")
        options += [f"{ours}={getattr(s, f'rope_{ours}')}" for ours in SCALING_OPTIONS[scaling]
                    if getattr(s, f"rope_{ours}") is not None]
        if scaling == "dynamic":
            options.append(f"original={s.rope_context}")
    return f"rotary({', '.join(options + (['interleaved=true'] if interleaved else []))})"


def hf_config(spec) -> dict:
    """The Llama configuration ``spec`` would be (Mistral's when its self-attention has a sliding window)."""
    f = Facts(spec, "Llama or Mistral")
    f.kind("decoder-only")
    return {"model_type": "mistral" if f.window("decoder") is not None else "llama", **FIELDS.config(f)}


def weight_rules(model, prefix: str, state: dict, lm: bool) -> tuple[list[Rule], dict[str, str]]:
    if model.spec.kind != "decoder-only":
        raise InteropError(f"Llama and Mistral are decoder-only; spec '{model.spec.name}' is {model.spec.kind}")
    return layout_rules(model, prefix, state, lm, projection_rules)


def layout_rules(model, prefix: str, state: dict, lm: bool, sublayers: Callable,
                 norms: tuple[str, str] = ("input_layernorm", "post_attention_layernorm")
                 ) -> tuple[list[Rule], dict[str, str]]:
    """Llama's layout: the token table, the final norm, each layer's two norms (``norms``: their names, Llama's
    by default; Apertus's differ) and the causal LM's head; ``sublayers(model, attention, feedforward, theirs,
    state, ours_state)``: the rules of one layer's attention and feed-forward (their module paths; ``theirs``: the
    layer's prefix), which is where Llama's relatives differ."""
    ours_state = model.state_dict()
    parts = layer_modules(model)

    def layer(ours: str, theirs: str) -> list[Rule]:
        return sublayers(model, f"{ours}.{parts['attention']}", f"{ours}.{parts['feedforward']}", theirs, state,
                         ours_state) + [rule(f"{ours}.{parts['attention_norm']}.weight", f"{theirs}.{norms[0]}.weight"),
                                        rule(f"{ours}.{parts['feedforward_norm']}.weight", f"{theirs}.{norms[1]}.weight")]

    rules = [rule("embeddings.tokens.tokens.weight", f"{prefix}embed_tokens.weight"),
             rule("decoder.final_norm.weight", f"{prefix}norm.weight")]
    for i in range(len(model.decoder.layers)):
        rules += layer(f"decoder.layers.{i}", f"{prefix}layers.{i}")
    head, aliases = lm_head_rules(model, lm)
    ahead, shared = mtp.rules(model, prefix, state, layer) if lm else ([], {})  # (checkpoints' layers L, L + 1, ...)
    return rules + head + ahead, {**aliases, **shared}


def projection_rules(model, attention: str, feedforward: str, theirs: str, state: dict, ours_state: dict
                     ) -> list[Rule]:
    """One Llama-layout layer's projections (``theirs``: its prefix): q, k and v into our fused ``qkv``, ``o``
    into ``out``, ``gate`` and ``up`` into our ``up`` (gate first), ``down``."""
    return attention_rules(model, attention, theirs, state, ours_state) + \
        mlp_rules(feedforward, f"{theirs}.mlp", state, ours_state)


def attention_rules(model, attention: str, theirs: str, state: dict, ours_state: dict,
                    module: str = "self_attn") -> list[Rule]:
    """q, k and v into our fused ``qkv``, ``o`` into ``out`` (``theirs``: the layer's prefix; ``module``: the
    layer's attribute holding the projections, Nemotron-H's ``mixer``)."""
    core = model.get_submodule(attention)
    theirs = f"{theirs}.{module}"
    if not hasattr(core, "qkv"):  # it reads another layer's keys and values: it projects queries alone
        return linear_rules(f"{attention}.q", f"{theirs}.q_proj", state, ours_state) + \
            linear_rules(f"{attention}.out", f"{theirs}.o_proj", state, ours_state)
    q_width, kv_width = core.heads * core.head_dim, core.kv_heads * core.head_dim
    names, split = tuple(f"{theirs}.{p}_proj" for p in "qkv"), (q_width, kv_width, kv_width)
    if core.qkv.out_features == q_width + kv_width:  # its values are its keys' projection: no v_proj (Gemma 4's)
        names, split = names[:2], split[:2]
    rules = linear_rules(f"{attention}.qkv", names, state, ours_state, split=split)
    return rules + linear_rules(f"{attention}.out", f"{theirs}.o_proj", state, ours_state)


def mlp_rules(ours: str, theirs: str, state: dict, ours_state: dict) -> list[Rule]:
    """A gated MLP's ``gate_proj`` and ``up_proj`` into our ``up`` (gate first), ``down_proj`` into ``down``."""
    rules = linear_rules(f"{ours}.up", (f"{theirs}.gate_proj", f"{theirs}.up_proj"), state, ours_state)
    return rules + linear_rules(f"{ours}.down", f"{theirs}.down_proj", state, ours_state)


def lm_head_rules(model, lm: bool) -> tuple[list[Rule], dict[str, str]]:
    """The causal LM's head: an alias of the token embedding when tied, else ``lm_head`` (none without ``lm``)."""
    if lm and model.tied_to is not None:
        return [], {"lm_head.weight": "embeddings.tokens.tokens.weight"}
    return ([rule("head.weight", "lm_head.weight")] if lm else []), {}


def load_decoder(model, reference, fields, hf_config, spec_text, rules, prefix: str = "model.",
                 derived: Callable | None = None) -> None:
    """Copy a decoder-only causal LM's (or base model's) weights into ``model`` by ``rules(model, prefix, state,
    lm)``, once ``model``'s spec is the architecture the reference's configuration describes (``spec_text``,
    read field by field through ``fields`` and ``hf_config``); every tensor must be accounted for. ``prefix``:
    where the causal LM holds its base model (Llama's ``model.``, BLOOM's ``transformer.``); ``derived(model,
    prefix)``: the tensors the reference holds that the model computes (MiniMax's decays), checked."""
    lm = hasattr(reference, "lm_head")
    same_head(model, reference, lm)
    refuse_other_architecture(model, reference, fields, hf_config, lambda: spec_text(
        reference.config, head=lm, padding=model.decoder.masks_padding))
    # multi-token prediction's modules, which Hugging Face's model leaves out: from its checkpoint's files
    state = {**reference.state_dict(), **(mtp.checkpoint_tensors(reference, model, prefix) if lm else {})}
    names, aliases = rules(model, prefix if lm else "", state, lm)
    names, aliases, outside = mtp.without_missing(model, state, names, aliases, prefix, type(reference).__name__)
    load_state(model, state, names, reference=type(reference).__name__, aliases=aliases, outside=outside,
               derived=derived(model, prefix if lm else "") if derived else None)


def export_decoder(model, rules, reference: str, prefix: str = "model.", derived: Callable | None = None) -> dict:
    """A decoder-only state dict of ``model`` by ``rules``: the causal LM's (spec with a head; its base model under
    ``prefix``) or the base model's; ``derived``: as ``load_decoder``'s, written as computed."""
    lm = model.head is not None
    names, aliases = rules(model, prefix if lm else "", {}, lm)
    return export_state(model, names, reference=reference, aliases=aliases,
                        derived=derived(model, prefix if lm else "") if derived else None)


def decoder_family(name: str, model_types: tuple[str, ...], classes: dict, conventions: str, *, module: str,
                   fields, spec_text, hf_config, rules, carried: tuple[str, ...] = (),
                   derived: Callable | None = None, prefix: str = "model.") -> Family:
    """A decoder-only family whose weights copy as Llama's do (``load_decoder``, ``export_decoder``) by
    ``rules(model, prefix, state, lm)``: what most families declare beyond their table and spec text;
    ``carried``: as ``Family.carried``; ``derived`` and ``prefix``: as ``load_decoder``'s."""
    return Family(name, model_types, classes, conventions, module=module, fields=fields, spec_text=spec_text,
                  hf_config=hf_config, carried=carried,
                  load=lambda model, reference: load_decoder(model, reference, fields, hf_config, spec_text, rules,
                                                             prefix=prefix, derived=derived),
                  export=lambda model: export_decoder(model, rules, f"Hugging Face {name}", prefix=prefix,
                                                      derived=derived))


def from_hf_llama(model, reference) -> None:
    """Copy a ``LlamaForCausalLM``/``MistralForCausalLM`` (or base model)'s weights into ``model``.

    Every tensor must be accounted for and the spec must be the architecture the
    reference's configuration describes; otherwise an ``InteropError`` lists every difference.
    """
    load_decoder(model, reference, FIELDS, hf_config, spec_text, weight_rules)


def to_hf_llama(model) -> dict:
    """A state dict for ``LlamaForCausalLM``/``MistralForCausalLM`` (spec with a head) or the base model."""
    return export_decoder(model, weight_rules, "Hugging Face Llama")


EXPORT_PRIORITY = 120  # where export tries this module's families (lower first)
FAMILIES = (  # the families this module reads and writes (``tfspec.interop.family``)
    Family("Llama", ("llama",),
           {"LlamaForCausalLM": {"head": True}, "LlamaModel": {"head": False}},
           "Llama: pre-norm RMSNorm, rotary positions, SwiGLU feed-forward, grouped-query attention where "
           "kv_heads < heads, no biases",
           module=__name__, fields=FIELDS, spec_text=spec_text, hf_config=hf_config, load=from_hf_llama,
           export=to_hf_llama),
    Family("Mistral", ("mistral",),
           {"MistralForCausalLM": {"head": True}, "MistralModel": {"head": False}},
           "Mistral: Llama's block with a sliding-window causal mask and grouped-query attention",
           module=__name__, fields=FIELDS, spec_text=spec_text, hf_config=hf_config, load=from_hf_llama,
           export=to_hf_llama),
)
