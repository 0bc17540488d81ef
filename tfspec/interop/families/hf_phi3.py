"""Hugging Face ``Phi3ForCausalLM`` (and its base model) <-> a compiled spec.

Phi-3 (Abdin et al. 2024) is Llama's block with its projections fused as tfspec fuses them: ``qkv_proj`` is our
``qkv`` (rows [q; k; v]) and ``gate_up_proj`` our gated ``up`` (gate first), so tensors copy without splitting.
A ``sliding_window`` masks each layer as Mistral's does, ``resid_pdrop`` is dropout on each sublayer's output,
and ``partial_rotary_factor`` rotates part of each head. Phi-3.5's ``longrope`` scaling (two frequency sets
switched by length) is not expressed and is refused.
"""

from __future__ import annotations

from ..family import causal_lm
from . import hf_llama
from ..fields import Field, Fields, Fixed
from ..layouts import covering, example

_LLAMA = {e.name: e for e in hf_llama.FIELDS.fields}

FIELDS = Fields(
    *(_LLAMA[n] for n in ("d_model", "heads", "kv_heads", "layers", "d_ff", "vocab", "rope_theta", "rotary_fraction",
                          "window", "eps", "p_attn_dropout", "init_std", "activation", "tied")),
    Fixed("rope_parameters.rope_type", "default", "rope scaling '{value}' is not expressed (Phi-3 has only "
          "longrope, whose two frequency sets switch by length)", read=lambda c: hf_llama.rope(c)["rope_type"],
          exported=True),
    Field("p_dropout", "resid_pdrop", lambda f: f.residual_dropout("decoder")),
    Fixed("pretraining_tp", 1, "pretraining_tp={value} splits the projections' matmuls; use 1",
          read=lambda c: getattr(c, "pretraining_tp", 1) or 1),
    ignored={**hf_llama.FIELDS.ignored,
             "embd_pdrop": "Phi3Model applies no dropout to its embeddings, whatever this says",
             "original_max_position_embeddings": "the context longrope scaling (refused) switches at"},
)


EXAMPLES = {
    "Phi3ForCausalLM": example("phi3", sliding_window=6, pad_token_id=0, bos_token_id=1, eos_token_id=2),
    "Phi3Model": dict(model_type="phi3", vocab_size=90, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                      intermediate_size=48, partial_rotary_factor=0.5, pad_token_id=0, bos_token_id=1, eos_token_id=2),
}

COVERAGE = [covering("phi3", num_hidden_layers=3, num_key_value_heads=1, rms_norm_eps=1e-6, sliding_window=7,
                     rope_parameters={"rope_type": "default", "rope_theta": 5e5, "partial_rotary_factor": 0.5},
                     attention_dropout=0.1, resid_pdrop=0.2, initializer_range=0.05, hidden_act="gelu",
                     tie_word_embeddings=True, pad_token_id=0, bos_token_id=1, eos_token_id=2)]


PHI3 = hf_llama.LLAMA.derive(
    "Phi-3", ("phi3",), causal_lm("Phi3"),
    "Phi-3: Llama's block with fused qkv and gate-up projections (copied unsplit), dropout on each "
    "sublayer's output (resid_pdrop), an optional sliding window",
    priority=230, fields=FIELDS, hf_config=None,
    # its fused projections are tfspec's own: copied unsplit
    rules=hf_llama.WEIGHTS.derive({"attention": None, "attention.qkv": "self_attn.qkv_proj",
                                   "attention.out": "self_attn.o_proj", "feedforward": None,
                                   "feedforward.up": "mlp.gate_up_proj", "feedforward.down": "mlp.down_proj"}))
