"""Hugging Face ``MambaForCausalLM`` (Mamba, Gu & Dao 2023; and its base model) <-> a compiled spec.

Mamba has no attention and no feed-forward: each of its layers is one RMS-normed Mamba mixer (``mixer mamba(...)``:
Mamba-1's selective scan, without Jamba's inner RMSNorms) on a residual branch, and a final RMSNorm (``norm_f``)
before the head. Its base model is the ``backbone``; its embedding ``embeddings``.
"""

from __future__ import annotations

import math

from ..document import Document
from .. import hybrid
from . import hf_jamba, hf_llama
from ..facts import Facts
from ..fields import Field, Fields, Fixed


_LLAMA = {e.name: e for e in hf_llama.FIELDS.fields}


def _mamba(f):
    """The options of the layers' Mamba mixer; refused where a layer attends or has a feed-forward, or its mixer is
    another kind or norms inside (Jamba's)."""
    hybrid.only_mixers(f, "Mamba")
    options = f.mixer("decoder")
    if not hasattr(options, "dt_rank"):
        raise f.refuse(f"its layers' mixer is {f.layer_mixers('decoder')[0].kind.name}, not Mamba (mixer mamba)")
    if options.norms:
        raise f.refuse("its Mamba layers RMS-norm the time step's input, B and C (Jamba's norms=true); Mamba's do "
                       "not")
    if options.inner % f.embedding.dim:
        raise f.refuse(f"its Mamba layers are {options.inner} wide, not a multiple of d_model (expand)")
    return options


FIELDS = Fields(
    *(_LLAMA[n] for n in ("d_model", "layers", "vocab", "init_std", "tied")),
    Field("eps", "layer_norm_epsilon", lambda f: f.norm_option("decoder", "eps", 1e-5)),
    Field("expand", "expand", lambda f: _mamba(f).inner // f.embedding.dim),
    Field("state", "state_size", lambda f: _mamba(f).state),
    Field("kernel", "conv_kernel", lambda f: _mamba(f).kernel),
    Field("dt_rank", "time_step_rank", lambda f: _mamba(f).dt_rank or math.ceil(f.embedding.dim / 16)),
    Field("conv_bias", "use_conv_bias", lambda f: _mamba(f).conv_bias, let=False),
    Field("bias", "use_bias", lambda f: _mamba(f).bias, let=False),
    Fixed("hidden_act", "silu", "hidden_act={value}: the convolution's activation, which is SiLU in tfspec's Mamba"),
    ignored={**hf_llama.FIELDS.ignored, **hybrid.MIXERS_ALONE_IGNORED,
             "time_step_scale": "scales a new model's draw of the time step's projection; a checkpoint holds it",
             "time_step_min": "bounds a new model's draw of the time step's bias; a checkpoint holds it",
             "time_step_max": "bounds a new model's draw of the time step's bias; a checkpoint holds it",
             "time_step_floor": "bounds a new model's draw of the time step's bias; a checkpoint holds it",
             "time_step_init_scheme": "how a new model draws the time step's projection; a checkpoint holds it",
             "intermediate_size": "expand × hidden_size, which transformers derives from them",
             "use_mambapy": "which torch implementation of the scan runs; the result is the same",
             "use_associative_scan": "which torch implementation of the scan runs; the result is the same"},
)


def document(s, *, padding: bool, head: bool) -> Document:
    """The spec a Mamba configuration describes: a stack of normed Mamba mixers."""
    mixer = (f"mamba({s.expand} * {s.d_model}, state={s.state}, kernel={s.kernel}, dt_rank={s.dt_rank}, "
             f"conv_bias={s.conv_bias}, bias={s.bias})")
    return hybrid.mixers_alone(s, mixer, head=head)


def hf_config(spec) -> dict:
    """The Mamba configuration ``spec`` would be."""
    f = Facts(spec, "Mamba")
    _mamba(f)
    return {"model_type": "mamba", **FIELDS.config(f)}


EXAMPLES = {
    # Mamba: layers of a normed Mamba-1 mixer alone; the base model's biased projections, no convolution bias
    "MambaForCausalLM": dict(model_type="mamba", vocab_size=90, hidden_size=32, num_hidden_layers=3, state_size=8,
                             expand=2, conv_kernel=4, tie_word_embeddings=False),
    "MambaModel": dict(model_type="mamba", vocab_size=90, hidden_size=16, num_hidden_layers=2, state_size=6, expand=3,
                       conv_kernel=3, use_bias=True, use_conv_bias=False, time_step_rank=5, layer_norm_epsilon=1e-6),
}

COVERAGE = [dict(model_type="mamba", vocab_size=91, hidden_size=24, num_hidden_layers=3, state_size=6, expand=3,
                 conv_kernel=3, use_bias=True, use_conv_bias=False, time_step_rank=7, layer_norm_epsilon=1e-6,
                 initializer_range=0.05, tie_word_embeddings=False)]


MAMBA = hybrid.mixers_alone_family(
    "Mamba", "mamba", "Mamba: every layer one RMS-normed Mamba mixer (mixer mamba, Mamba-1's selective scan) on a "
    "residual branch, with no attention and no feed-forward; a final RMSNorm", 680, FIELDS, document,
    hf_config, hf_jamba.MambaMixer("mixer"))
