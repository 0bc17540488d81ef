"""Hugging Face ``ApertusForCausalLM`` (the Swiss AI Initiative's Apertus; and its base model) <-> a compiled spec.

Apertus is Llama's attention (``hf_llama``: q/k/v/o projections, rotary positions, scaled as Llama
3.1's where ``rope_parameters`` say) with each head's queries and keys RMS-normed before rotating (as Qwen3's), and
a feed-forward that is no gated unit: ``down(act(up(x)))`` with xIELU (``activation=xielu``), whose two trained
values each network holds (``act_fn.alpha_p``, ``act_fn.alpha_n``) and whose constants Hugging Face keeps as
buffers (``act_fn.beta``, ``act_fn.eps``: checked against the spec's, and written back). Its norms are named
``attention_layernorm`` and ``feedforward_layernorm``.
"""

from __future__ import annotations

from ..family import causal_lm
from . import hf_llama
from ..document import Document
from ..fields import Field
from ..mapping import layer_modules
from ..weights import Tensor
from ..layouts import covering, example

ACTIVATIONS = {"xielu": "xielu", "silu": "silu", "gelu": "gelu", "relu": "relu", "relu2": "squared_relu",
               "gelu_pytorch_tanh": "gelu_tanh"}

EXAMPLES = {
    "ApertusForCausalLM": dict(model_type="apertus", vocab_size=90, hidden_size=32, num_hidden_layers=2,
                               num_attention_heads=4, num_key_value_heads=2, intermediate_size=48,
                               max_position_embeddings=64,
                               rope_parameters={"rope_type": "llama3", "rope_theta": 12000000.0, "factor": 8.0,
                                                "original_max_position_embeddings": 16, "low_freq_factor": 1.0,
                                                "high_freq_factor": 4.0},
                               pad_token_id=0, bos_token_id=1, eos_token_id=2),
    "ApertusModel": example("apertus", num_hidden_layers=1, num_key_value_heads=4, attention_bias=True,
                            rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, pad_token_id=0,
                            bos_token_id=1, eos_token_id=2),
}

COVERAGE = [covering("apertus", num_hidden_layers=3, num_key_value_heads=1, rms_norm_eps=1e-7, attention_dropout=0.3,
                     initializer_range=0.05, hidden_act="relu", tie_word_embeddings=True, attention_bias=True,
                     rope_parameters={"rope_type": "default", "rope_theta": 5e5}),
            *hf_llama.each_scaling(covering("apertus", num_hidden_layers=1, num_key_value_heads=3,
                                            max_position_embeddings=32))]


FIELDS = hf_llama.FIELDS.derive(
    Field("activation", "hidden_act", lambda f: f.feedforward("decoder").activation.name, names=ACTIVATIONS),
    drop={"head_dim", "window", "mlp_bias", "activation", "rotary_fraction", "pretraining_tp"},
    ignored={"rope_parameters.partial_rotary_factor": "Apertus's rotary rotates every dimension"})


def document(s, *, padding: bool, head: bool) -> Document:
    """Apertus's spec: Llama's with each head's queries and keys RMS-normed."""
    return hf_llama.document(s, padding=padding, head=head).change(
        "decoder", "attention", qk_norm=f"rmsnorm(eps={s.eps})")


def _constants(model, prefix: str, state: dict) -> dict:
    """xIELU's constants, which Hugging Face keeps as buffers of each network's ``act_fn``, from the spec's."""
    import torch

    parts, constants = layer_modules(model), {}
    for i, layer in enumerate(model.decoder.layers):
        activation = getattr(layer.get_submodule(parts["feedforward"]), "activation", None)
        if hasattr(activation, "beta") and hasattr(activation, "eps"):
            for n in ("beta", "eps"):
                constants[f"{prefix}layers.{i}.mlp.act_fn.{n}"] = torch.tensor(getattr(activation, n))
    return constants


APERTUS = hf_llama.LLAMA.derive(
    "Apertus", ("apertus",), causal_lm("Apertus"),
    "Apertus: Llama's attention with each head's queries and keys RMS-normed, and a feed-forward of one "
    "projection up, xIELU (activation=xielu, its two trained values per network) and one down",
    priority=500, fields=FIELDS, document=document, hf_config=None, computed=_constants,
    rules=hf_llama.WEIGHTS.derive({
        "attention.q_norm": "self_attn.q_norm", "attention.k_norm": "self_attn.k_norm",
        "feedforward": None, "feedforward.up": "mlp.up_proj", "feedforward.down": "mlp.down_proj",
        "feedforward.activation.alpha_p": Tensor("mlp.act_fn.alpha_p"),
        "feedforward.activation.alpha_n": Tensor("mlp.act_fn.alpha_n"),
        "attention_norm": "attention_layernorm", "feedforward_norm": "feedforward_layernorm"}))
