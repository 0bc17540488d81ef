"""Hugging Face ``Ernie4_5ForCausalLM`` (Baidu's ERNIE 4.5, dense; and its base model) <-> a compiled spec.

ERNIE 4.5 is Llama's layout (``hf_llama``'s weight rules) whose rotary positions pair neighbouring
dimensions (GLM's style: ``interleaved=true``), with one switch biasing every projection (``use_bias``), its own
``head_dim``, the head tied by default, and no attention dropout at all.
"""

from __future__ import annotations

from ..family import Requires, causal_lm
from . import hf_llama
from ..document import Document
from ..fields import Field, Fixed
from ..layouts import covering, example

def _use_bias(f) -> bool:
    """One switch for every projection's bias: the attention's (output too) and the MLP's must agree."""
    attention, feedforward = f.attention("decoder"), f.feedforward("decoder")
    if len({attention.bias, attention.out_bias, feedforward.bias}) > 1:
        raise f.refuse("its projections are not all biased or all unbiased (ERNIE 4.5 has one switch, use_bias)")
    return attention.bias


EXAMPLES = {
    "Ernie4_5ForCausalLM": example("ernie4_5", head_dim=8),
    "Ernie4_5Model": example("ernie4_5", num_hidden_layers=1, num_key_value_heads=4, head_dim=16, use_bias=True),
}

COVERAGE = [covering("ernie4_5", num_hidden_layers=3, num_key_value_heads=1, head_dim=10, rms_norm_eps=1e-7,
                     attention_dropout=0.3, initializer_range=0.05, hidden_act="gelu", tie_word_embeddings=False,
                     use_bias=True, rope_parameters={"rope_type": "default", "rope_theta": 5e5}),
            *hf_llama.each_scaling(covering("ernie4_5", num_hidden_layers=1, num_key_value_heads=3, head_dim=8,
                                            max_position_embeddings=32))]


FIELDS = hf_llama.FIELDS.derive(
    Field("head_dim", "head_dim", lambda f: f.geometry("decoder").head_dim),
    Field("use_bias", "use_bias", _use_bias, let=False),
    # ERNIE 4.5 has no attention dropout (its attention sets it to 0); export writes none
    Field("p_attn_dropout", "attention_dropout", lambda f: None, read=lambda c: 0.0, constant=True),
    Fixed("rope_parameters.partial_rotary_factor", 1.0, "partial rotary positions ({value}) are not ERNIE 4.5's: "
          "its rotation spans each head", read=lambda c: float(hf_llama.rope(c)["partial_rotary_factor"])),
    drop={"head_dim", "window", "attention_bias", "mlp_bias", "p_attn_dropout", "rotary_fraction", "pretraining_tp"})


def document(s, *, padding: bool, head: bool) -> Document:
    """ERNIE 4.5's spec: Llama's, its rotary positions pairing neighbouring dimensions, biases as use_bias says."""
    return (hf_llama.document(s, padding=padding, head=head)
            .change("decoder", "position", hf_llama.rotary(s, interleaved=True))
            .change("decoder", "attention", bias=s.use_bias)
            .change("decoder", "feedforward", bias=s.use_bias))


# its rotary positions pair neighbouring dimensions, which its fields do not say
INTERLEAVED = Requires(lambda f: f.rotary("decoder").get("interleaved"),
                       "its rotary positions pair halves, ERNIE 4.5's neighbouring dimensions (interleaved=true)")

ERNIE4_5 = hf_llama.LLAMA.derive(
    "ERNIE 4.5", ("ernie4_5",), causal_lm("Ernie4_5"),
    "ERNIE 4.5 (dense): Llama's block with interleaved rotary positions (neighbouring dimensions paired), "
    "one switch biasing every projection (use_bias), head_dim its own, the head tied by default",
    priority=400, fields=FIELDS, document=document, hf_config=None, requires=(INTERLEAVED,))
