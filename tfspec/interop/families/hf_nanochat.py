"""Hugging Face ``NanoChatForCausalLM`` (Karpathy's nanochat; and its base model) <-> a compiled spec: Llama's
(``hf_llama``) by its differences.

NanoChat normalises by an RMSNorm without a weight everywhere: before each sublayer, after the last layer, on the
embeddings before the first (one module, ``norm``, serving both ends), and each head's queries and keys after the
rotary positions turn them (``steps=rotated_qk_norm``); its rotary positions turn the other way
(``clockwise=true``: the quarter turn (a, b) -> (b, -a)); its feed-forward is no gated unit but ``fc1`` -> ReLU²
-> ``fc2``; its logits are soft-capped (``final_logit_softcapping``), its head its own.
"""

from __future__ import annotations

from . import hf_gemma2, hf_llama
from ..document import Document, Statement
from ..family import Requires, causal_lm
from ..fields import Field
from ..layouts import covering, example

ACTIVATIONS = {"relu2": "squared_relu", "relu": "relu", "gelu": "gelu", "gelu_pytorch_tanh": "gelu_tanh",
               "silu": "silu"}

EXAMPLES = {
    "NanoChatForCausalLM": example("nanochat", final_logit_softcapping=0.5),
    "NanoChatModel": dict(model_type="nanochat", vocab_size=90, hidden_size=32, num_hidden_layers=1,
                          num_attention_heads=4, intermediate_size=48, attention_bias=True, hidden_act="gelu"),
}

COVERAGE = [covering("nanochat", num_hidden_layers=3, num_key_value_heads=1, rms_norm_eps=1e-5, attention_dropout=0.3,
                     initializer_range=0.05, hidden_act="relu", attention_bias=True, tie_word_embeddings=True,
                     final_logit_softcapping=None,
                     rope_parameters={"rope_type": "default", "rope_theta": 5e5, "partial_rotary_factor": 0.5}),
            *hf_llama.each_scaling(covering("nanochat", num_hidden_layers=1, max_position_embeddings=32))]


FIELDS = hf_llama.FIELDS.derive(
    Field("activation", "hidden_act", lambda f: f.feedforward("decoder").activation.name, names=ACTIVATIONS),
    hf_gemma2.FIELDS["final_softcap"],
    drop={"head_dim", "window", "mlp_bias", "pretraining_tp"})


def document(s, *, padding: bool, head: bool) -> Document:
    """NanoChat's spec: Llama's with weightless RMSNorms (one on the embeddings too, and on the rotated queries and
    keys), clockwise rotary positions, a plain ReLU² feed-forward and the logits soft-capped."""
    norm = f"rmsnorm(eps={s.eps}, weight=false)"
    document = (hf_llama.document(s, padding=padding, head=head)
                .change("defaults", "norm", norm).change("decoder", "final", norm)
                .add("embedding tokens", Statement("norm", norm))
                .change("decoder", "position", hf_llama.rotary(s, clockwise=True))
                .change("decoder", "attention", steps=f"rotated_qk_norm(eps={s.eps}, weight=false)"))
    if not head:  # the base model computes no logits to cap
        s.writer.forget("final_softcap")
        return document
    return document.change_tail("head", softcap=s.final_softcap)


NANOCHAT = hf_llama.LLAMA.derive(
    "NanoChat", ("nanochat",), causal_lm("NanoChat"),
    "NanoChat: Llama's layout with weightless RMSNorms (also on the embeddings, and on the rotated queries and "
    "keys: steps=rotated_qk_norm), clockwise rotary positions, a plain ReLU² feed-forward (fc1, fc2) and "
    "soft-capped logits",
    priority=455, fields=FIELDS, document=document, hf_config=None,
    requires=(Requires(lambda f: f.rotary("decoder").get("clockwise"),
                       "its rotary positions turn counter-clockwise; NanoChat's turn the other way (clockwise=true)"),),
    rules=hf_llama.WEIGHTS.derive({"feedforward": None, "feedforward.up": "mlp.fc1", "feedforward.down": "mlp.fc2"}))
