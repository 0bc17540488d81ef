"""Low-rank adapters (LoRA; Hu et al. 2021) for fine-tuning, through ``peft``: ``tfspec train --init WEIGHTS
--lora r=8,alpha=16,targets=q,v``.

Targets name linear maps by their last name in the model (``out``, ``up``, ``down``, ``qkv``). Attention
projects queries, keys and values with one fused ``qkv`` (cross-attention: ``q`` and a fused ``kv``); naming
``q``, ``k`` or ``v`` splits those into one linear map each (``qkv.parts.q``, ...), so an adapter adapts the
queries alone, as ``q_proj`` does in Hugging Face models. Everything but the adapters is frozen.

A checkpoint's ``model.safetensors`` holds the merged weights ``W + (alpha / r) B A``, in the model's own
layout (the parts fused again): ``export``, ``generate``, ``--init`` and ``Checkpoint.model()`` read a plain
model. The adapters and the frozen weights they adapt go into the training state, so a resumed run is exact.

Needs ``pip install 'tfspec[lora]'``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import re

import torch
from pydantic import BaseModel, ConfigDict, Field
from torch import nn

PARTS = ("q", "k", "v")  # the order a fused projection stacks its parts' rows in


class LoraSettings(BaseModel):
    """``r=8,alpha=16,dropout=0.05,targets=q,v``."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    r: int = Field(8, ge=1, le=4096)  # the adapters' rank
    alpha: float = Field(16.0, gt=0)  # the update is scaled by alpha / r
    dropout: float = Field(0.0, ge=0, lt=1)  # on the adapters' input
    targets: tuple[str, ...] = Field(("q", "v"), min_length=1)

    @property
    def scaling(self) -> float:
        return self.alpha / self.r

    def describe(self) -> str:
        return f"r={self.r}, alpha={self.alpha:g}" + (f", dropout={self.dropout:g}" if self.dropout else "") + \
            f", on {', '.join(self.targets)}"


def parse_settings(text: str) -> LoraSettings:
    """``"r=8,alpha=16,targets=q,v"`` -> settings; a word without ``=`` continues the list before it.

    >>> parse_settings("r=4,targets=q,v,out").targets
    ('q', 'v', 'out')
    """
    values: dict[str, object] = {}
    key = None
    for piece in (p.strip() for p in text.split(",")):
        if "=" in piece:
            key, _, value = (s.strip() for s in piece.partition("="))
            if key in values:
                raise ValueError(f"{key} is given twice")
            values[key] = [value] if key == "targets" else value
        elif key == "targets" and piece:
            values["targets"].append(piece)
        else:
            raise ValueError(f"expected NAME=VALUE, got {piece!r} (e.g. r=8,alpha=16,targets=q,v)")
    unknown = sorted(set(values) - set(LoraSettings.model_fields))
    if unknown:
        raise ValueError(f"no setting {unknown[0]!r}; the settings are r, alpha, dropout and targets")
    bad = [t for t in values.get("targets", ["q"]) if not re.fullmatch(r"[A-Za-z_]\w*", t)]
    if bad:
        raise ValueError(f"targets: {bad[0]!r} is not the name of a linear map (e.g. targets=q,v)")
    return LoraSettings(**values)


def missing() -> str | None:
    if importlib.util.find_spec("peft") is None:
        return "--lora needs the peft package: pip install 'tfspec[lora]'"
    return None


class SplitProjection(nn.Module):
    """A fused projection as one linear map per part (``parts.q``, ``parts.k``, ``parts.v``), their outputs
    concatenated as the fused map's are."""

    def __init__(self, fused: nn.Linear, sizes: dict[str, int]):
        super().__init__()
        self.parts = nn.ModuleDict()
        start = 0
        for name, rows in sizes.items():
            part = nn.Linear(fused.in_features, rows, bias=fused.bias is not None, device=fused.weight.device,
                             dtype=fused.weight.dtype)
            with torch.no_grad():
                part.weight.copy_(fused.weight[start:start + rows])
                if fused.bias is not None:
                    part.bias.copy_(fused.bias[start:start + rows])
            self.parts[name] = part
            start += rows

    def forward(self, x):
        return torch.cat([part(x) for part in self.parts.values()], dim=-1)


def _split_attention(model: nn.Module) -> None:
    """Each attention's fused ``qkv`` (``kv``) as a ``SplitProjection``."""
    for module in list(model.modules()):
        heads, kv_heads, head_dim = (getattr(module, n, None) for n in ("heads", "kv_heads", "head_dim"))
        if heads is None or kv_heads is None or head_dim is None:
            continue
        sizes = {"q": heads * head_dim, "k": kv_heads * head_dim, "v": kv_heads * head_dim}
        for attribute, parts in (("qkv", PARTS), ("kv", PARTS[1:])):
            fused = getattr(module, attribute, None)
            if isinstance(fused, nn.Linear) and fused.out_features == sum(sizes[p] for p in parts):
                setattr(module, attribute, SplitProjection(fused, {p: sizes[p] for p in parts}))


def linear_names(model: nn.Module) -> set[str]:
    """The last names of the model's linear maps: what ``targets`` may name."""
    return {name.rsplit(".", 1)[-1] for name, m in model.named_modules() if isinstance(m, nn.Linear)}


def apply(model: nn.Module, settings: LoraSettings, seed: int = 0) -> tuple[int, int]:
    """Add adapters to ``model`` in place and freeze everything else; (trainable, all) parameter counts.

    Raises ``ValueError`` naming a target that is no linear map of the model."""
    from peft import LoraConfig, inject_adapter_in_model

    if set(settings.targets) & set(PARTS):
        _split_attention(model)
    names = linear_names(model)
    unknown = [t for t in settings.targets if t not in names]
    if unknown:
        raise ValueError(f"--lora targets={unknown[0]}: no linear map of this model is named so; its linear maps: "
                         f"{', '.join(sorted(names))}")
    config = LoraConfig(r=settings.r, lora_alpha=settings.alpha, lora_dropout=settings.dropout,
                        target_modules=list(settings.targets), bias="none")
    with torch.random.fork_rng(devices=[]):  # the adapters' initialisation: the run's seed, not the global stream
        torch.manual_seed(seed)
        with contextlib.redirect_stdout(None):
            inject_adapter_in_model(config, model)
    for name, parameter in model.named_parameters():
        parameter.requires_grad_(".lora_" in name)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return trainable, sum(p.numel() for p in model.parameters())


_ADAPTER = re.compile(r"^(?P<module>.+)\.lora_(?P<which>[AB])\.[^.]+\.weight$")
_BASE = re.compile(r"^(?P<module>.+)\.base_layer\.(?P<what>weight|bias)$")
_PART = re.compile(r"^(?P<module>.+)\.parts\.(?P<part>[qkv])\.(?P<what>weight|bias)$")


def adapted(state: dict) -> bool:
    return any(_ADAPTER.match(k) for k in state)


def merged(state: dict, settings: LoraSettings) -> dict:
    """An adapted model's state dict as the plain model's: each adapted weight ``W + (alpha / r) B A``, the parts
    of a split projection fused again."""
    adapters: dict[str, dict[str, torch.Tensor]] = {}
    for key, tensor in state.items():
        m = _ADAPTER.match(key)
        if m:
            adapters.setdefault(m["module"], {})[m["which"]] = tensor
    plain: dict[str, torch.Tensor] = {}
    for key, tensor in state.items():
        if _ADAPTER.match(key):
            continue
        m = _BASE.match(key)
        if m:
            key = f"{m['module']}.{m['what']}"
            if m["what"] == "weight":
                pair = adapters[m["module"]]
                delta = (pair["B"].float() @ pair["A"].float()) * settings.scaling
                tensor = (tensor.float() + delta).to(tensor.dtype)
        plain[key] = tensor
    fused: dict[str, dict[str, torch.Tensor]] = {}
    out = {}
    for key, tensor in plain.items():
        m = _PART.match(key)
        if m:
            fused.setdefault(f"{m['module']}.{m['what']}", {})[m["part"]] = tensor
        else:
            out[key] = tensor
    for key, parts in fused.items():
        out[key] = torch.cat([parts[p] for p in PARTS if p in parts])
    return out


def training_tensors(state: dict) -> dict:
    """What a resumed run needs beyond the merged weights: the adapters and the frozen weights they adapt (the
    split parts' too)."""
    return {k: v for k, v in state.items() if _ADAPTER.match(k) or _BASE.match(k) or _PART.match(k)}


def restore(model: nn.Module, tensors: dict) -> None:
    """Load ``training_tensors`` into an adapted model."""
    own = model.state_dict()
    absent = sorted(set(tensors) - set(own))
    needed = sorted(set(training_tensors(own)) - set(tensors))
    if absent or needed:
        raise ValueError(f"the saved adapters do not fit this model: {(absent or needed)[0]} "
                         f"{'is not in the model' if absent else 'was not saved'}")
    model.load_state_dict(tensors, strict=False)
