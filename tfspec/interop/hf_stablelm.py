"""Hugging Face ``StableLmForCausalLM`` (StableLM 2; and ``StableLmModel``) <-> a compiled spec: Cohere's module
(``tfspec.interop.hf_cohere``: Llama's projections around LayerNorms) with StableLM's table -- half-split partial
rotary, q/k/v biases where ``use_qkv_bias``, pre-norm or parallel on one norm."""

from __future__ import annotations

from .hf_cohere import STABLELM_FIELDS as FIELDS  # noqa: F401 (the family's table)
from .hf_cohere import from_hf_stablelm, to_hf_stablelm  # noqa: F401
from .hf_cohere import hf_config_stablelm as hf_config  # noqa: F401
from .hf_cohere import spec_text  # noqa: F401
