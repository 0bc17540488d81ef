"""Hugging Face ``StableLmForCausalLM`` (StableLM 2; and ``StableLmModel``) <-> a compiled spec: Cohere's module
(``hf_cohere``: Llama's projections around LayerNorms) with StableLM's table -- half-split partial
rotary, q/k/v biases where ``use_qkv_bias``, pre-norm or parallel on one norm."""

from __future__ import annotations

from .hf_cohere import STABLELM_FIELDS as FIELDS
from .hf_cohere import from_hf_stablelm, to_hf_stablelm
from .hf_cohere import hf_config_stablelm as hf_config
from .hf_cohere import spec_text
from ..family import Family


EXPORT_PRIORITY = 320  # where export tries this module's families (lower first)
FAMILIES = (  # the families this module reads and writes (``tfspec.interop.family``)
    Family("StableLM", ("stablelm",),
           {"StableLmForCausalLM": {"head": True}, "StableLmModel": {"head": False}},
           "StableLM 2: Llama's projections around LayerNorms (with bias), partial rotary positions, optional q/k/v "
           "biases, pre-norm or parallel on one norm, dropout on the feed-forward's output",
           module=__name__, fields=FIELDS, spec_text=spec_text, hf_config=hf_config, load=from_hf_stablelm,
           export=to_hf_stablelm),
)
