"""Rotary frequencies, unscaled or stretched for contexts longer than those trained on (torch only: ``tfspec emit``
copies it). Each computes, in float32, what Hugging Face's ``modeling_rope_utils`` computes for its ``rope_type``:

- ``linear`` (Chen et al. 2023, position interpolation): every frequency divided by ``factor``;
- ``dynamic`` (NTK-aware, "dynamic NTK"): the base grows with the call's longest position once it passes
  ``original`` -- the frequencies of a call are those of its longest position, which is what Hugging Face's
  cached frequencies are while a sequence grows from its start;
- ``yarn`` (Peng et al. 2023): low frequencies interpolated, high ones kept, a linear ramp between (``beta_fast``,
  ``beta_slow`` rotations), and cos/sin scaled by an attention factor (0.1 ln(factor) + 1 unless given);
- ``llama3`` (Llama 3.1): wavelengths longer than ``original / low_freq`` divided by ``factor``, shorter than
  ``original / high_freq`` kept, a smooth blend between;
- ``ntk_alpha`` (Hunyuan's "dynamic" with a fixed ``alpha``): the base times ``alpha ** (d / (d - 2))``, at any
  length;
- ``proportional`` (p-RoPE, Barbero et al. 2024; Gemma 4's global layers): only the fastest ``proportion`` of the
  frequencies turn, the others are 0 (those pairs pass unrotated), all divided by ``factor``.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def rope_frequencies(rotary_dim: int, theta: float, scaling: dict | None = None, longest: Tensor | None = None,
                     device=None) -> tuple[Tensor, float]:
    """(inverse frequencies ``(rotary_dim / 2,)`` in float32, the factor cos and sin are scaled by).
    ``scaling``: ``{"kind": ..., option: value}`` (None: unscaled); ``longest``: the call's longest position + 1
    (dynamic scaling reads it)."""
    kind = (scaling or {}).get("kind", "none")
    exponents = torch.arange(0, rotary_dim, 2, dtype=torch.int64, device=device).float() / rotary_dim
    if kind == "dynamic" and longest is not None:
        original, factor = scaling["original"], scaling["factor"]
        length = torch.clamp(longest, min=original)
        base = theta * ((factor * length / original) - (factor - 1)) ** (rotary_dim / (rotary_dim - 2))
        return 1.0 / (base ** exponents), 1.0
    if kind == "yarn":
        return _yarn(rotary_dim, theta, scaling, exponents)
    if kind == "ntk_alpha":  # a fixed NTK stretch of the base (Hunyuan's), whatever the call's length
        return 1.0 / ((theta * scaling["alpha"] ** (rotary_dim / (rotary_dim - 2))) ** exponents), 1.0
    if kind == "proportional":  # the first (fastest) angles of the head's, the rest 0 (as Hugging Face rounds)
        turning = int(scaling["proportion"] * rotary_dim // 2)
        inv_freq = torch.cat((1.0 / (theta ** exponents[:turning]),
                              torch.zeros(rotary_dim // 2 - turning, device=device)))
        return inv_freq / scaling["factor"], 1.0
    inv_freq = 1.0 / (theta ** exponents)
    if kind == "linear":
        return inv_freq / scaling["factor"], 1.0
    if kind == "llama3":
        return _llama3(inv_freq, scaling), 1.0
    return inv_freq, 1.0


def _llama3(inv_freq: Tensor, scaling: dict) -> Tensor:
    factor, low, high, original = scaling["factor"], scaling["low_freq"], scaling["high_freq"], scaling["original"]
    wavelength = 2 * math.pi / inv_freq
    long = torch.where(wavelength > original / low, inv_freq / factor, inv_freq)
    smooth = (original / wavelength - low) / (high - low)
    blended = (1 - smooth) * long / factor + smooth * long
    medium = ~(wavelength < original / high) * ~(wavelength > original / low)
    return torch.where(medium, blended, long)


def _yarn(rotary_dim: int, theta: float, scaling: dict, exponents: Tensor) -> tuple[Tensor, float]:
    factor, original = scaling["factor"], scaling["original"]

    def magnitude(scale: float, m: float = 1.0) -> float:
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

    attention = scaling.get("attention_factor")
    if attention is None:
        mscale, all_dims = scaling.get("mscale"), scaling.get("mscale_all_dim")
        attention = magnitude(factor, mscale) / magnitude(factor, all_dims) if mscale and all_dims \
            else magnitude(factor)

    def correction(rotations: float) -> float:  # the dimension that turns ``rotations`` times over ``original``
        return rotary_dim * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(theta))

    low, high = correction(scaling["beta_fast"]), correction(scaling["beta_slow"])
    if scaling["truncate"]:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, rotary_dim - 1)
    high = high + 0.001 if low == high else high  # no division by zero
    ramp = torch.clamp((torch.arange(rotary_dim // 2, dtype=torch.float32) - low) / (high - low), 0, 1)
    kept = (1 - ramp).to(exponents.device)
    powers = theta ** exponents
    inv_freq = 1.0 / (factor * powers) * (1 - kept) + 1.0 / powers * kept
    return inv_freq, float(attention)
