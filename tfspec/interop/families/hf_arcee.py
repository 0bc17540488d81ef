"""Hugging Face ``ArceeForCausalLM`` (Arcee's AFM; and its base model) <-> a compiled spec: Llama's (``hf_llama``)
by its differences.

Arcee's decoder is Llama's but for its feed-forward, which is no gated unit: ``up_proj`` -> ReLU² -> ``down_proj``
(Nemotron's MLP, ``hidden_act`` its activation); it has no sliding window.
"""

from __future__ import annotations

from . import hf_llama
from ..family import causal_lm
from ..fields import Field
from ..layouts import covering, example

ACTIVATIONS = {"relu2": "squared_relu", "relu": "relu", "gelu": "gelu", "gelu_pytorch_tanh": "gelu_tanh",
               "silu": "silu"}

EXAMPLES = {
    "ArceeForCausalLM": example("arcee"),
    "ArceeModel": example("arcee", num_hidden_layers=1, num_key_value_heads=4, attention_bias=True, mlp_bias=True,
                          hidden_act="gelu"),
}

COVERAGE = [covering("arcee", num_hidden_layers=3, num_key_value_heads=1, head_dim=16, rms_norm_eps=1e-6,
                     attention_dropout=0.3, initializer_range=0.05, hidden_act="relu", attention_bias=True,
                     mlp_bias=True, tie_word_embeddings=True,
                     rope_parameters={"rope_type": "default", "rope_theta": 5e5, "partial_rotary_factor": 0.5}),
            *hf_llama.each_scaling(covering("arcee", num_hidden_layers=1, max_position_embeddings=32))]

FIELDS = hf_llama.FIELDS.derive(
    Field("activation", "hidden_act", lambda f: f.feedforward("decoder").activation.name, names=ACTIVATIONS),
    drop={"window", "pretraining_tp"})

ARCEE = hf_llama.LLAMA.derive(
    "Arcee", ("arcee",), causal_lm("Arcee"),
    "Arcee (AFM): Llama's decoder whose feed-forward is no gated unit but up_proj, ReLU² and down_proj",
    priority=456, fields=FIELDS, hf_config=None,
    rules=hf_llama.WEIGHTS.derive({"feedforward": None, "feedforward.up": "mlp.up_proj",
                                   "feedforward.down": "mlp.down_proj"}))
