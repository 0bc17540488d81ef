"""Hugging Face ``Qwen3ForCausalLM`` (and its base model) <-> a compiled spec: Qwen2's (``hf_qwen2``) with each
head's queries and keys RMS-normed (``qk_norm=rmsnorm``, weights ``q_norm``/``k_norm``), every projection biased
by one switch and ``head_dim`` always written (its default is 128, not hidden_size / heads)."""

from __future__ import annotations

from ..family import Requires, causal_lm
from . import hf_llama, hf_qwen2
from ...registry import NORMS
from ..document import Document
from ..fields import Field
from ..layouts import covering, example

EXAMPLES = {
    "Qwen3ForCausalLM": example("qwen3", num_hidden_layers=3, head_dim=16, use_sliding_window=True, sliding_window=6,
                                max_window_layers=1),
    "Qwen3Model": example("qwen3", num_hidden_layers=1, num_key_value_heads=4, head_dim=8, attention_bias=True,
                          rms_norm_eps=1e-5),
}

COVERAGE = [covering("qwen3", num_hidden_layers=3, num_key_value_heads=1, head_dim=16, rms_norm_eps=1e-5,
                     rope_parameters={"rope_type": "default", "rope_theta": 5e5, "partial_rotary_factor": 0.5},
                     attention_dropout=0.1, initializer_range=0.05, hidden_act="gelu", attention_bias=True,
                     tie_word_embeddings=True, use_sliding_window=True, sliding_window=7, max_window_layers=1),
            *hf_llama.each_scaling(covering("qwen3", num_hidden_layers=1, num_key_value_heads=3, head_dim=8,
                                            max_position_embeddings=32))]


FIELDS = hf_qwen2.FIELDS.derive(
    Field("head_dim", "head_dim", lambda f: f.geometry("decoder").head_dim),
    hf_llama.FIELDS["attention_bias"])


def document(s, *, padding: bool, head: bool) -> Document:
    """Qwen3's spec: Llama's one bias switch, each head's queries and keys RMS-normed."""
    return hf_qwen2.layered(s, padding=padding, head=head,
                            attention={"bias": s.attention_bias, "qk_norm": f"rmsnorm(eps={s.eps})"})


QWEN3 = hf_qwen2.QWEN2.derive(
    "Qwen3", ("qwen3",), causal_lm("Qwen3"),
    "Qwen3: Llama's block with each head's queries and keys RMS-normed before rotary positions "
    "(qk_norm), head_dim set apart from hidden_size / heads; layer_types give some layers a sliding window",
    priority=210, fields=FIELDS, document=document,
    requires=(Requires(lambda f: not NORMS[f.attention("decoder").qk_norm.name].absent,  # (its kind compared after)
                       "its queries and keys are not normed, as Qwen3's are (by rmsnorm)"),),
    rules=hf_qwen2.QWEN2.rules.derive({"attention.q_norm": "self_attn.q_norm", "attention.k_norm": "self_attn.k_norm"}))
