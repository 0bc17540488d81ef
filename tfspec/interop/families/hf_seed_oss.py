"""Hugging Face ``SeedOssForCausalLM`` (ByteDance Seed-OSS; and its base model) <-> a compiled spec.

Seed-OSS is Llama's layout (``hf_llama``'s weight rules) with three switches of its own: biases on
the q/k/v projections (``attention_bias``) apart from the output projection's (``attention_out_bias``), a bias on
the gated MLP (``mlp_bias``), and dropout on each sublayer's output (``residual_dropout``); ``head_dim`` is its
own (128 by default, whatever hidden_size / heads is).
"""

from __future__ import annotations

from ..family import causal_lm
from . import hf_llama
from ..document import Document
from ..fields import Field
from ..layouts import covering, example

EXAMPLES = {
    "SeedOssForCausalLM": example("seed_oss", head_dim=16, attention_dropout=0.0, residual_dropout=0.1),
    "SeedOssModel": example("seed_oss", num_hidden_layers=1, num_key_value_heads=4, head_dim=8, attention_out_bias=True,
                            mlp_bias=True, attention_bias=False),
}

COVERAGE = [covering("seed_oss", num_hidden_layers=3, num_key_value_heads=1, head_dim=12, rms_norm_eps=1e-7,
                     attention_dropout=0.3, initializer_range=0.05, hidden_act="gelu", tie_word_embeddings=True,
                     attention_bias=False, attention_out_bias=True, mlp_bias=True, residual_dropout=0.2,
                     rope_parameters={"rope_type": "default", "rope_theta": 5e5, "partial_rotary_factor": 0.5}),
            *hf_llama.each_scaling(covering("seed_oss", num_hidden_layers=1, num_key_value_heads=3, head_dim=8,
                                            max_position_embeddings=32))]


FIELDS = hf_llama.FIELDS.derive(
    Field("head_dim", "head_dim", lambda f: f.geometry("decoder").head_dim),
    Field("qkv_bias", "attention_bias", lambda f: f.attention("decoder").bias, let=False),
    Field("out_bias", "attention_out_bias", lambda f: f.attention("decoder").out_bias, let=False),
    Field("mlp_bias", "mlp_bias", lambda f: f.feedforward("decoder").bias, let=False),
    Field("p_dropout", "residual_dropout", lambda f: f.residual_dropout("decoder")),
    drop={"head_dim", "window", "attention_bias", "mlp_bias"},
    ignored={"sliding_window": "Seed-OSS's attention reads no window"})


def document(s, *, padding: bool, head: bool) -> Document:
    """Seed-OSS's spec: Llama's with its three biases."""
    return hf_llama.document(s, padding=padding, head=head).change(
        "decoder", "attention", bias=s.qkv_bias, out_bias=s.out_bias)


SEED_OSS = hf_llama.LLAMA.derive(
    "Seed-OSS", ("seed_oss",), causal_lm("SeedOss"),
    "Seed-OSS: Llama's block with biased q/k/v projections apart from the output's (attention_out_bias), "
    "an optionally biased MLP, dropout on each sublayer's output (residual_dropout), head_dim its own",
    priority=370, fields=FIELDS, document=document, hf_config=None)
