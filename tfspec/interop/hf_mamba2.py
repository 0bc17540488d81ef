"""Hugging Face ``Mamba2ForCausalLM`` (Mamba-2, Codestral Mamba; and its base model) <-> a compiled spec.

Mamba-2 (Dao & Gu 2024) has no attention and no feed-forward: each of its layers is one RMS-normed Mamba-2 mixer
(``mixer mamba2(...)``, the layer's ``mixer``) on a residual branch, and a final RMSNorm (``norm_f``) before the head.
Its base model is the ``backbone``; its embedding ``embeddings``.
"""

from __future__ import annotations

from ..ir import nodes as ir
from . import hf_llama, hybrid
from .facts import Facts
from .family import Family
from .fields import Field, Fields, Fixed
from .mapping import Rule, rule
from .writer import SpecWriter

_LLAMA = {e.name: e for e in hf_llama.FIELDS.fields}


def _only_mixers(f) -> None:
    """Refused where a layer attends or has a feed-forward: Mamba-2's layers are one mixer each."""
    if any(m is None for m in f.layer_mixers("decoder")):
        raise f.refuse("some of its layers attend: Mamba-2's layers are one Mamba-2 mixer each")
    if f.g.of(ir.FeedForward, stack="decoder", in_block=True):
        raise f.refuse("its layers have feed-forwards: Mamba-2's layers are one Mamba-2 mixer each")


FIELDS = Fields(
    *(_LLAMA[n] for n in ("d_model", "layers", "vocab", "init_std", "tied")),
    Field("eps", "layer_norm_epsilon", lambda f: f.norm_option("decoder", "eps", 1e-5)),
    *hybrid.mamba2_fields("num_heads", "head_dim", "state_size", "n_groups", "conv_kernel", "chunk_size",
                          "use_conv_bias", "use_bias", "expand"),
    Fixed("hidden_act", "silu", "hidden_act={value}: the convolution's activation, which is SiLU in tfspec's "
                                "Mamba-2"),
    ignored={**hf_llama.FIELDS.ignored, **hybrid.MAMBA2_IGNORED,
             "residual_in_fp32": "keeps the residual stream in float32 under half precision (a float32 model's "
                                 "is float32 anyway); tfspec's stream has the model's dtype",
             "time_step_rank": "Mamba-1's rank of the time step's projection, which Mamba-2 does not have",
             "rescale_prenorm_residual": "scales a new model's out_proj draw; a checkpoint holds out_proj"},
)


def spec_text(config, *, head: bool = True, padding: bool = True, name: str = "reference",
              heading: tuple[str, ...] = ()) -> str:
    """The tfspec spec a Mamba-2 configuration describes: a stack of normed Mamba-2 mixers."""
    w = SpecWriter()
    s = FIELDS.write(config, w)
    norm = f"rmsnorm(eps={s.eps})"
    text = f"""model {name}

defaults {{
  residual pre
  norm {norm}
  init normal(std={s.init_std})
}}

embedding tokens {{ vocab {s.vocab}; dim {s.d_model}; position none }}

decoder x {s.layers} {{
  mixer {hybrid.mamba2_layer(s, s.eps)}
  final {norm}
}}
"""
    if head:
        text += "\nhead " + ("tied(tokens)" if s.value("tied") else f"linear({s.vocab}) bias=false") + "\n"
    return w.text(text, list(heading))


def hf_config(spec) -> dict:
    """The Mamba-2 configuration ``spec`` would be."""
    f = Facts(spec, "Mamba-2")
    f.kind("decoder-only")
    _only_mixers(f)
    return {"model_type": "mamba2", **FIELDS.config(f)}


def _rules(model, prefix: str, state: dict, lm: bool) -> tuple[list[Rule], dict[str, str]]:
    ours_state = model.state_dict()
    rules = [rule("embeddings.tokens.tokens.weight", f"{prefix}embeddings.weight"),
             rule("decoder.final_norm.weight", f"{prefix}norm_f.weight")]
    for i in range(len(model.decoder.layers)):
        ours, theirs, parts = f"decoder.layers.{i}", f"{prefix}layers.{i}", hybrid.layer_parts(model, i, "Mamba-2")
        rules += hybrid.mamba2_rules(f"{ours}.{parts['operator']}", f"{theirs}.mixer", state, ours_state)
        rules.append(rule(f"{ours}.{parts['operator_norm']}.weight", f"{theirs}.norm.weight"))
    if lm and model.tied_to is not None:
        return rules, {"lm_head.weight": "embeddings.tokens.tokens.weight"}
    return rules + ([rule("head.weight", "lm_head.weight")] if lm else []), {}


FAMILIES = (  # the families this module reads and writes (``tfspec.interop.family``)
    Family("Mamba-2", ("mamba2",), {"Mamba2ForCausalLM": {"head": True}, "Mamba2Model": {"head": False}},
           "Mamba-2: every layer one RMS-normed Mamba-2 mixer (mixer mamba2) on a residual branch, with no "
           "attention and no feed-forward; a final RMSNorm",
           module=__name__, fields=FIELDS, spec_text=spec_text, hf_config=hf_config,
           load=lambda model, reference: hf_llama.load_decoder(model, reference, FIELDS, hf_config, spec_text, _rules,
                                                               prefix="backbone."),
           export=lambda model: hf_llama.export_decoder(model, _rules, "Hugging Face Mamba-2", prefix="backbone.")),
)
