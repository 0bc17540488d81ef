"""Hugging Face ``PhiForCausalLM`` (phi-2; and ``PhiModel``) <-> a compiled spec: GPT-J's module
(``hf_gptj``: attention and feed-forward in parallel on one norm) with Phi's table -- half-split
partial rotary, every projection biased, optional per-head qk LayerNorm."""

from __future__ import annotations

from .hf_gptj import PHI_FIELDS as FIELDS
from .hf_gptj import from_hf_phi, to_hf_phi
from .hf_gptj import hf_config_phi as hf_config
from .hf_gptj import spec_text
from ..family import Family


EXPORT_PRIORITY = 300  # where export tries this module's families (lower first)
FAMILIES = (  # the families this module reads and writes (``tfspec.interop.family``)
    Family("Phi", ("phi",),
           {"PhiForCausalLM": {"head": True}, "PhiModel": {"head": False}},
           "Phi (phi-2): attention and feed-forward in parallel on one LayerNorm, half-split partial rotary "
           "positions, every projection biased, optional per-head qk LayerNorm, an untied head with a bias",
           module=__name__, fields=FIELDS, spec_text=spec_text, hf_config=hf_config, load=from_hf_phi,
           export=to_hf_phi),
)
