"""Hugging Face ``Mamba2ForCausalLM`` (Mamba-2, Codestral Mamba; and its base model) <-> a compiled spec.

Mamba-2 (Dao & Gu 2024) has no attention and no feed-forward: each of its layers is one RMS-normed Mamba-2 mixer
(``mixer mamba2(...)``, the layer's ``mixer``) on a residual branch, and a final RMSNorm (``norm_f``) before the head.
Its base model is the ``backbone``; its embedding ``embeddings``.
"""

from __future__ import annotations

from ..document import Document
from .. import hybrid

from . import hf_llama
from ..facts import Facts
from ..fields import Field, Fields, Fixed

_LLAMA = {e.name: e for e in hf_llama.FIELDS.fields}


FIELDS = Fields(
    *(_LLAMA[n] for n in ("d_model", "layers", "vocab", "init_std", "tied")),
    Field("eps", "layer_norm_epsilon", lambda f: f.norm_option("decoder", "eps", 1e-5)),
    *hybrid.mamba2_fields("num_heads", "head_dim", "state_size", "n_groups", "conv_kernel", "chunk_size",
                          "use_conv_bias", "use_bias", "expand"),
    Fixed("hidden_act", "silu", "hidden_act={value}: the convolution's activation, which is SiLU in tfspec's "
                                "Mamba-2"),
    ignored={**hf_llama.FIELDS.ignored, **hybrid.MAMBA2_IGNORED, **hybrid.MIXERS_ALONE_IGNORED,
             "time_step_rank": "Mamba-1's rank of the time step's projection, which Mamba-2 does not have"},
)


def document(s, *, padding: bool, head: bool) -> Document:
    """The spec a Mamba-2 configuration describes: a stack of normed Mamba-2 mixers."""
    return hybrid.mixers_alone(s, hybrid.mamba2_layer(s, s.eps), head=head)


def hf_config(spec) -> dict:
    """The Mamba-2 configuration ``spec`` would be."""
    f = Facts(spec, "Mamba-2")
    hybrid.only_mixers(f, "Mamba-2")
    return {"model_type": "mamba2", **FIELDS.config(f)}


EXAMPLES = {
    # Mamba-2: layers of a normed mixer alone; the base model's B and C in one group, biased projections
    "Mamba2ForCausalLM": dict(model_type="mamba2", vocab_size=90, hidden_size=32, num_hidden_layers=3, num_heads=4,
                              head_dim=16, expand=2, state_size=8, n_groups=2, chunk_size=8),
    "Mamba2Model": dict(model_type="mamba2", vocab_size=90, hidden_size=32, num_hidden_layers=2, num_heads=2,
                        head_dim=32, expand=2, state_size=6, n_groups=1, conv_kernel=3, use_bias=True,
                        use_conv_bias=False, chunk_size=4, layer_norm_epsilon=1e-6),
}

COVERAGE = [dict(model_type="mamba2", vocab_size=91, hidden_size=24, num_hidden_layers=3, num_heads=3,
                 head_dim=32, expand=4, state_size=6, n_groups=3, conv_kernel=3, chunk_size=4, use_bias=True,
                 use_conv_bias=False, layer_norm_epsilon=1e-6, initializer_range=0.05,
                 tie_word_embeddings=True)]


MAMBA2 = hybrid.mixers_alone_family(
    "Mamba-2", "mamba2", "Mamba-2: every layer one RMS-normed Mamba-2 mixer (mixer mamba2) on a residual branch, "
    "with no attention and no feed-forward; a final RMSNorm", 600, FIELDS, document, hf_config,
    hybrid.Mamba2Mixer("mixer"))
