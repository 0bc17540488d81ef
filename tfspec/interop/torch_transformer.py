"""``torch.nn.Transformer`` <-> a compiled encoder-decoder spec.

The spec must use the sequential form with the default sublayer names
(``self_attn``, ``cross_attn``, ``ffn``), and final norms in both stacks
(``nn.Transformer`` always has them). ``nn.Transformer`` has no embeddings or
output head: those are left as they are (and listed in the return value).

>>> import torch, tfspec
>>> from tfspec.interop.torch_transformer import from_torch_transformer, to_torch_transformer
>>> reference = torch.nn.Transformer(d_model=32, nhead=4, num_encoder_layers=1, num_decoder_layers=1,
...                                  dim_feedforward=64, batch_first=True)
>>> model = tfspec.compile('''
... embedding tokens { vocab 10; dim 32 }
... encoder x 1 { attention self heads=4 mask=padding; feedforward d_ff=64; final layernorm }
... decoder x 1 { attention self heads=4 mask=causal; attention cross heads=4; feedforward d_ff=64; final layernorm }''')
>>> from_torch_transformer(model, reference)
['embeddings.tokens.tokens.weight']
>>> reference.load_state_dict(to_torch_transformer(model))
<All keys matched successfully>
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import nn

from ..front.schema import Choice
from .mapping import InteropError, Rule, export_state, load_state, rule, sublayer_problems

OUTSIDE = ("embeddings.", "head.")
REFERENCE = "torch.nn.Transformer"


def _rules(model) -> list[Rule]:
    rules = []
    for role, sublayers in (("encoder", ("self_attn", "ffn")), ("decoder", ("self_attn", "cross_attn", "ffn"))):
        stack = getattr(model, role, None)
        if stack is None:
            raise InteropError(f"{REFERENCE} is an encoder-decoder; spec '{model.spec.name}' is {model.spec.kind}")
        for i in range(len(stack.layers)):
            ours, theirs = f"{role}.layers.{i}", f"{role}.layers.{i}"
            for n, name in enumerate(sublayers, start=1):
                rules.append(rule(f"{ours}.{name}_norm.weight", f"{theirs}.norm{n}.weight"))
                rules.append(rule(f"{ours}.{name}_norm.bias", f"{theirs}.norm{n}.bias"))
            rules += _attention(f"{ours}.self_attn", f"{theirs}.self_attn", cross=False)
            if role == "decoder":
                rules += _attention(f"{ours}.cross_attn", f"{theirs}.multihead_attn", cross=True)
            for ours_part, theirs_part in (("up", "linear1"), ("down", "linear2")):
                for p in ("weight", "bias"):
                    rules.append(rule(f"{ours}.ffn.{ours_part}.{p}", f"{theirs}.{theirs_part}.{p}"))
        for p in ("weight", "bias"):
            rules.append(rule(f"{role}.final_norm.{p}", f"{role}.norm.{p}"))
    return rules


def _attention(ours: str, theirs: str, cross: bool) -> list[Rule]:
    projections = (f"{ours}.q", f"{ours}.kv") if cross else (f"{ours}.qkv",)
    return [rule(tuple(f"{p}.weight" for p in projections), f"{theirs}.in_proj_weight"),
            rule(tuple(f"{p}.bias" for p in projections), f"{theirs}.in_proj_bias"),
            rule(f"{ours}.out.weight", f"{theirs}.out_proj.weight"),
            rule(f"{ours}.out.bias", f"{theirs}.out_proj.bias")]


def _activation_name(fn) -> str | None:
    if fn is F.relu or isinstance(fn, nn.ReLU):
        return "relu"
    if fn is F.gelu or isinstance(fn, nn.GELU) and fn.approximate == "none":
        return "gelu"
    return None  # a custom callable: shapes still have to agree


def _config_problems(model, reference: nn.Transformer) -> list[str]:
    problems = []
    for role in ("encoder", "decoder"):
        layers = getattr(reference, role).layers
        if len(layers):
            layer = layers[0]
            # (the reference's norm in the spec's terms: torch's LayerNorm, weight and bias)
            norm = Choice(name="layernorm", options={"eps": layer.norm1.eps})
            problems += sublayer_problems(model, role, reference=REFERENCE, norm=norm,
                                          residual="pre" if layer.norm_first else "post",
                                          heads=layer.self_attn.num_heads, activation=_activation_name(layer.activation))
    return problems


def from_torch_transformer(model, reference: nn.Transformer) -> list[str]:
    """Copy an ``nn.Transformer``'s weights into ``model``; returns the names it left alone (embeddings, head)."""
    return load_state(model, reference.state_dict(), _rules(model), reference=REFERENCE, outside=OUTSIDE,
                      config_problems=_config_problems(model, reference))


def to_torch_transformer(model) -> dict:
    """A state dict ``nn.Transformer(...).load_state_dict`` accepts (embeddings and head are not part of it)."""
    return export_state(model, _rules(model), reference=REFERENCE, outside=OUTSIDE)
