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

from ..family import Family, causal_lm
from ..facts import Facts
from ..fields import Field, Fields, Fixed, standard
from ..writer import causal_masks
from .. import layouts
from ..weights import Weights, GatedMLP, Projections
from ..document import Document, Statement
from ..layouts import covering, example


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


# a rotary scaling of each kind, with its options away from their defaults: every family reading them is tested
# with each
ROPE_EXAMPLES = {
    "linear": {"rope_type": "linear", "rope_theta": 1e4, "factor": 3.0},
    "dynamic": {"rope_type": "dynamic", "rope_theta": 1e4, "factor": 2.5},
    "llama3": {"rope_type": "llama3", "rope_theta": 5e5, "factor": 8.0, "low_freq_factor": 1.5,
               "high_freq_factor": 3.0, "original_max_position_embeddings": 8},
    # Llama 4 Scout's: equal factors, no band of wavelengths blended (transformers warns, and computes it)
    "llama3 unblended": {"rope_type": "llama3", "rope_theta": 5e5, "factor": 16.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 1.0, "original_max_position_embeddings": 8},
    "yarn": {"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0, "original_max_position_embeddings": 8,
             "beta_fast": 16.0, "beta_slow": 2.0, "mscale": 0.9, "mscale_all_dim": 0.5, "truncate": False},
    "yarn with its attention factor": {"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0,
                                       "original_max_position_embeddings": 8, "attention_factor": 1.3},
}


def each_scaling(config: dict) -> list[dict]:
    """``config`` once with each rotary scaling of ``ROPE_EXAMPLES`` (a family's ``COVERAGE`` of its scaling
    fields)."""
    return [{**config, "rope_parameters": rope} for rope in ROPE_EXAMPLES.values()]


FIELDS = Fields(
    *standard("decoder", d_model="hidden_size", heads="num_attention_heads", kv_heads="num_key_value_heads",
              layers="num_hidden_layers", d_ff="intermediate_size", vocab="vocab_size"),
    Field("head_dim", "head_dim", lambda f: f.geometry("decoder").head_dim, read=written_head_dim),
    Field("rope_theta", "rope_parameters.rope_theta", lambda f: f.rotary("decoder").get("theta", 10000.0),
          read=lambda c: float(rope(c)["rope_theta"])),
    Field("rotary_fraction", "rope_parameters.partial_rotary_factor",
          lambda f: written_fraction(f.rotary("decoder").get("fraction", 1.0)),
          read=lambda c: written_fraction(rope(c)["partial_rotary_factor"])),
    Field("window", "sliding_window", lambda f: f.window("decoder"), read=_window),
    Field("eps", "rms_norm_eps", lambda f: f.norm_option("decoder", "eps", 1e-6)),
    *standard("decoder", p_attn_dropout="attention_dropout", init_std="initializer_range"),
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


def rotary(s, theta: str | None = None, interleaved: bool = False, clockwise: bool = False) -> str:
    """The stack's rotary positions, as the configuration's settings ``s`` write them (``theta``: another base;
    ``interleaved``: neighbouring dimensions paired, GLM's and Cohere's, rather than halves; ``clockwise``: the
    angles negated, NanoChat's)."""
    fraction = getattr(s, "rotary_fraction", None)
    options = [f"theta={theta or s.rope_theta}"] + ([f"fraction={fraction}"] if fraction else [])
    scaling = getattr(s, "rope_scaling", None)
    if scaling and scaling != "none":
        options.append(f"scaling={scaling}")
        options += [f"{ours}={getattr(s, f'rope_{ours}')}" for ours in SCALING_OPTIONS[scaling]
                    if getattr(s, f"rope_{ours}") is not None]
        if scaling == "dynamic":
            options.append(f"original={s.rope_context}")
    options += (["interleaved=true"] if interleaved else []) + (["clockwise=true"] if clockwise else [])
    return f"rotary({', '.join(options)})"


def hf_config(spec) -> dict:
    """The Llama configuration ``spec`` would be (Mistral's when its self-attention has a sliding window)."""
    f = Facts(spec, "Llama or Mistral")
    f.kind("decoder-only")
    return {"model_type": "mistral" if f.window("decoder") is not None else "llama", **FIELDS.config(f)}


# Llama's checkpoint, from which most decoders' tables derive
WEIGHTS = Weights({"attention": Projections(), "feedforward": GatedMLP(),
                          "attention_norm": "input_layernorm", "feedforward_norm": "post_attention_layernorm"})

EXAMPLES = {
    "LlamaForCausalLM": example("llama", rope_theta=500000.0, tie_word_embeddings=False),
    "MistralForCausalLM": example("mistral", num_key_value_heads=1, sliding_window=6),
    "LlamaModel": dict(model_type="llama", vocab_size=90, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                       intermediate_size=48, attention_bias=True),
}

COVERAGE = [covering("llama", num_hidden_layers=3, num_key_value_heads=1, head_dim=16, rms_norm_eps=1e-5,
                     rope_parameters={"rope_type": "default", "rope_theta": 5e5, "partial_rotary_factor": 0.5},
                     attention_dropout=0.1, initializer_range=0.05, hidden_act="gelu", attention_bias=True,
                     mlp_bias=True, tie_word_embeddings=True),
            covering("mistral", num_hidden_layers=2, num_key_value_heads=3, sliding_window=7),
            *each_scaling(covering("llama", num_hidden_layers=1, max_position_embeddings=32))]


LLAMA = Family("Llama", ("llama",), causal_lm("Llama"),
               "Llama: pre-norm RMSNorm, rotary positions, SwiGLU feed-forward, grouped-query attention where "
               "kv_heads < heads, no biases",
               priority=120, fields=FIELDS, document=document, hf_config=hf_config, rules=WEIGHTS)
MISTRAL = LLAMA.derive("Mistral", ("mistral",), causal_lm("Mistral"),
                       "Mistral: Llama's block with a sliding-window causal mask and grouped-query attention",
                       priority=120)
