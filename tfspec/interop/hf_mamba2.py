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
from .mapping import Rule
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
    ignored={**hf_llama.FIELDS.ignored, **hybrid.MAMBA2_IGNORED, **hybrid.MIXERS_ALONE_IGNORED,
             "time_step_rank": "Mamba-1's rank of the time step's projection, which Mamba-2 does not have"},
)


def spec_text(config, *, head: bool = True, padding: bool = True, name: str = "reference",
              heading: tuple[str, ...] = ()) -> str:
    """The tfspec spec a Mamba-2 configuration describes: a stack of normed Mamba-2 mixers."""
    w = SpecWriter()
    s = FIELDS.write(config, w)
    return hybrid.mixers_alone_text(w, s, hybrid.mamba2_layer(s, s.eps), name=name, heading=heading, head=head)


def hf_config(spec) -> dict:
    """The Mamba-2 configuration ``spec`` would be."""
    f = Facts(spec, "Mamba-2")
    f.kind("decoder-only")
    _only_mixers(f)
    return {"model_type": "mamba2", **FIELDS.config(f)}


def _rules(model, prefix: str, state: dict, lm: bool) -> tuple[list[Rule], dict[str, str]]:
    return hybrid.mixers_alone_rules(model, prefix, state, lm, "Mamba-2", hybrid.mamba2_rules)


FAMILIES = (  # the families this module reads and writes (``tfspec.interop.family``)
    Family("Mamba-2", ("mamba2",), {"Mamba2ForCausalLM": {"head": True}, "Mamba2Model": {"head": False}},
           "Mamba-2: every layer one RMS-normed Mamba-2 mixer (mixer mamba2) on a residual branch, with no "
           "attention and no feed-forward; a final RMSNorm",
           module=__name__, fields=FIELDS, spec_text=spec_text, hf_config=hf_config,
           load=lambda model, reference: hf_llama.load_decoder(model, reference, FIELDS, hf_config, spec_text, _rules,
                                                               prefix="backbone."),
           export=lambda model: hf_llama.export_decoder(model, _rules, "Hugging Face Mamba-2", prefix="backbone.")),
)
