"""Hugging Face ``SmolLM3ForCausalLM`` (and its base model) <-> a compiled spec: Qwen2's (``hf_qwen2``) with Llama's
bias switches, and ``no_rope_layers`` leaving rotary out of some layers (``layers every(4, from=3) { position none
}``: a layer schedule), which export reads back from each layer."""

from __future__ import annotations

from ..family import causal_lm
from . import hf_llama, hf_qwen2
from ..document import Document
from ..fields import Field
from ..layouts import example

EXAMPLES = {
    "SmolLM3ForCausalLM": example("smollm3", num_hidden_layers=4, pad_token_id=0, bos_token_id=1, eos_token_id=2),
    "SmolLM3Model": dict(model_type="smollm3", vocab_size=90, hidden_size=32, num_hidden_layers=2,
                         num_attention_heads=4, intermediate_size=48, no_rope_layers=[0, 1], use_sliding_window=True,
                         sliding_window=5, pad_token_id=0, bos_token_id=1, eos_token_id=2),
}


FIELDS = hf_qwen2.FIELDS.derive(
    hf_llama.FIELDS["attention_bias"], hf_llama.FIELDS["mlp_bias"],
    Field("no_rope_layers", "no_rope_layers", lambda f: [int(f.rotates(a.position))
                                                         for a in f.layer_attentions("decoder")],
          read=lambda c: None),
    ignored={"no_rope_layer_interval": "how no_rope_layers is derived when a configuration leaves it out; "
                                       "tfspec reads no_rope_layers"})


def document(s, *, padding: bool, head: bool) -> Document:
    """SmolLM3's spec: Llama's bias switches, rotary positions where ``no_rope_layers`` says."""
    return hf_qwen2.layered(s, padding=padding, head=head, attention={"bias": s.attention_bias},
                            feedforward_bias=s.mlp_bias, ropes=[bool(r) for r in s.config.no_rope_layers])


SMOLLM3 = hf_qwen2.QWEN2.derive(
    "SmolLM3", ("smollm3",), causal_lm("SmolLM3"),
    "SmolLM3: Llama's block without rotary positions in every 4th layer (no_rope_layers: a layer "
    "schedule), the head tied to the token embedding",
    priority=220, fields=FIELDS, document=document)
