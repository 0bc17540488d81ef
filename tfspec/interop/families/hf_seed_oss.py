"""Hugging Face ``SeedOssForCausalLM`` (ByteDance Seed-OSS; and its base model) <-> a compiled spec.

Seed-OSS is Llama's layout (``hf_llama``'s weight rules) with three switches of its own: biases on
the q/k/v projections (``attention_bias``) apart from the output projection's (``attention_out_bias``), a bias on
the gated MLP (``mlp_bias``), and dropout on each sublayer's output (``residual_dropout``); ``head_dim`` is its
own (128 by default, whatever hidden_size / heads is).
"""

from __future__ import annotations

from . import hf_llama
from ..family import exported_config
from ..fields import Field, Fields
from ..writer import SpecWriter

_LLAMA = [e for e in hf_llama.FIELDS.entries if getattr(e, "name", None) not in
          {"head_dim", "window", "attention_bias", "mlp_bias"}]

FIELDS = Fields(
    *_LLAMA,
    Field("head_dim", "head_dim", lambda f: f.geometry("decoder").head_dim),
    Field("qkv_bias", "attention_bias", lambda f: f.attention("decoder").bias, let=False),
    Field("out_bias", "attention_out_bias", lambda f: f.attention("decoder").out_bias, let=False),
    Field("mlp_bias", "mlp_bias", lambda f: f.feedforward("decoder").bias, let=False),
    Field("p_dropout", "residual_dropout", lambda f: f.residual_dropout("decoder")),
    ignored={**hf_llama.FIELDS.ignored, "sliding_window": "Seed-OSS's attention reads no window"},
)


def spec_text(config, *, head: bool = True, padding: bool = True, name: str = "reference",
              heading: tuple[str, ...] = ()) -> str:
    """The tfspec spec a Seed-OSS configuration describes: Llama's with its three biases."""
    w = SpecWriter()
    s = FIELDS.write(config, w)
    document = hf_llama.document(s, padding=padding, head=head).change(
        "decoder", "attention", bias=s.qkv_bias, out_bias=s.out_bias)
    return w.text(document.text(name), list(heading))

hf_config = exported_config("Seed-OSS", "seed_oss", "decoder-only", FIELDS)


EXPORT_PRIORITY = 370  # where export tries this module's families (lower first)
FAMILIES = (  # the families this module reads and writes (``tfspec.interop.family``)
    hf_llama.decoder_family(
        "Seed-OSS", ("seed_oss",), {"SeedOssForCausalLM": {"head": True}, "SeedOssModel": {"head": False}},
        "Seed-OSS: Llama's block with biased q/k/v projections apart from the output's (attention_out_bias), "
        "an optionally biased MLP, dropout on each sublayer's output (residual_dropout), head_dim its own",
        module=__name__, fields=FIELDS, spec_text=spec_text, hf_config=hf_config, rules=hf_llama.weight_rules),
)
