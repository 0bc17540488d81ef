"""Rotary position embedding (RoPE; Su et al. 2021): rotate each head's queries and keys by their positions.

Pairs of dimensions (i, i + d/2) of a query or key at position p are rotated by
the angle p · θ^(-2i/d), so a query-key dot product depends only on the
difference of their positions: attention becomes offset invariant, and keys
rotated once stay valid in a KV cache. ``fraction`` rotates only the first
``fraction · head_dim`` dimensions of each head and passes the rest through
(GPT-NeoX, Pythia: 0.25). The half-split pairing is Hugging Face's layout
(Llama, Mistral, GPT-NeoX); ``interleaved=true`` pairs neighbours (2i, 2i + 1)
as GPT-J and Meta's original Llama code do; ``clockwise=true`` turns every pair by the negated angle (NanoChat's
quarter turn (a, b) -> (b, -a)).

``scaling`` stretches the frequencies for contexts longer than the ``original`` one trained on, as Hugging Face's
``rope_parameters`` say (``tfspec.nn.rope_scaling`` computes them): ``linear`` (by ``factor``), ``dynamic``
(NTK-aware, from the call's longest position), ``yarn`` (``beta_fast``, ``beta_slow``, an attention factor) and
``llama3`` (Llama 3.1: ``low_freq``, ``high_freq``), ``ntk_alpha`` (NTK-aware with a fixed ``alpha``: the base
times ``alpha ** (d / (d - 2))``, Hunyuan's) and ``proportional`` (p-RoPE, Gemma 4's global layers: only the fastest
``proportion`` of the frequencies turn, the slowest pairs pass unrotated; divided by ``factor``). Options of another
scaling than the one chosen are refused.

    decoder x 32 { position rotary(theta=10000); attention self heads=32 mask=causal; ... }
    position rotary(theta=500000, scaling=llama3, factor=8, original=8192)  # Llama 3.1
"""

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from ..registry import POSITIONS, Constructor, Position, Problem


def on_cross(shape) -> list[Problem]:
    """A rotary scheme's objection to a cross-attention (every rotary scheme's: 1-D, 2-D, M-RoPE)."""
    if shape.cross:
        return [Problem("rotary positions on cross-attention: queries and keys are positions of different sequences",
                        "set position=none on the cross-attention")]
    return []


@POSITIONS.register
class Rotary(Position):
    name = "rotary"
    title = "rotary"
    acts = "attention"
    rotates = True
    enters = "rotates q, k"
    relative = True
    needs_dot_product = True  # only q·k of two rotated vectors depends on their offset alone
    doc = "rotary position embedding: queries and keys rotated by position-dependent angles (RoPE)"
    examples = ({}, {"theta": 500000.0, "fraction": 0.5}, {"interleaved": True},
                {"scaling": "llama3", "factor": 8.0, "original": 8}, {"scaling": "yarn", "factor": 4.0, "original": 6},
                {"scaling": "dynamic", "factor": 2.0, "original": 4}, {"scaling": "linear", "factor": 2.0},
                {"scaling": "ntk_alpha", "alpha": 1000.0}, {"scaling": "proportional", "proportion": 0.5},
                {"clockwise": True})

    class Options(BaseModel):
        model_config = ConfigDict(extra="forbid", frozen=True)
        theta: float = Field(10000.0, gt=1.0)  # the base of the angles' geometric progression
        fraction: float = Field(1.0, gt=0.0, le=1.0)  # of each head's dimensions that rotate
        interleaved: bool = False  # pair dimensions (2i, 2i+1) instead of (i, i + d/2)
        scaling: Literal["none", "linear", "dynamic", "yarn", "llama3", "ntk_alpha", "proportional"] = "none"
        factor: float = Field(1.0, gt=0.0, le=1e6)  # how much longer the context is stretched
        original: int | None = Field(None, gt=0)  # the context trained on (dynamic, yarn, llama3)
        low_freq: float = Field(1.0, gt=0.0)  # llama3: wavelengths beyond original / low_freq are divided
        high_freq: float = Field(4.0, gt=0.0)  # llama3: wavelengths below original / high_freq are kept
        beta_fast: float = Field(32.0, gt=0.0)  # yarn: rotations over original below which dimensions interpolate
        beta_slow: float = Field(1.0, gt=0.0)  # yarn: ... and above which they are kept
        attention_factor: float | None = Field(None, gt=0.0)  # yarn: cos and sin scaled (None: 0.1 ln(factor) + 1)
        mscale: float | None = None  # yarn (DeepSeek): the attention factor as a ratio of two magnitudes
        mscale_all_dim: float | None = None
        truncate: bool = True  # yarn: round the ramp's ends to whole dimensions
        alpha: float = Field(1.0, gt=0.0)  # ntk_alpha: the base times alpha ** (d / (d - 2)), fixed (Hunyuan)
        proportion: float = Field(1.0, ge=0.0, le=1.0)  # proportional: of the frequencies, the fastest that turn
        # the angles turn the other way: each pair (a, b) by -angle, NanoChat's quarter turn (a, b) -> (b, -a)
        clockwise: bool = False

    SCALING_OPTIONS = {"linear": {"factor"}, "dynamic": {"factor", "original"},
                       "llama3": {"factor", "original", "low_freq", "high_freq"},
                       "yarn": {"factor", "original", "beta_fast", "beta_slow", "attention_factor", "mscale",
                                "mscale_all_dim", "truncate"},
                       "ntk_alpha": {"alpha"}, "proportional": {"factor", "proportion"}}

    def relative_with(self, options) -> bool:
        return options.scaling != "dynamic"  # its frequencies depend on the longest position of a call

    def cacheable(self, options) -> bool:
        return options.scaling != "dynamic"  # ... so a cached key would keep the frequencies of an earlier call

    def scaling(self, options) -> dict | None:
        """The scaling's settings for ``tfspec.nn.rope_scaling`` (None: unscaled)."""
        if options.scaling == "none":
            return None
        values = options.model_dump()
        return {"kind": options.scaling, **{k: values[k] for k in sorted(self.SCALING_OPTIONS[options.scaling])}}

    def rotary_dim(self, options, head_dim: int) -> int:
        return int(head_dim * options.fraction)  # truncated, as Hugging Face and GPT-NeoX do

    def check(self, options, shape):
        used = self.SCALING_OPTIONS.get(options.scaling, set())
        defaults = self.Options()
        stray = [k for k in sorted(set().union(*self.SCALING_OPTIONS.values()) - used)
                 if getattr(options, k) != getattr(defaults, k)]
        if stray:
            which = f"scaling={options.scaling}" if options.scaling != "none" else "unscaled rotary positions"
            return [Problem(f"{', '.join(stray)} {'does' if len(stray) == 1 else 'do'} nothing with {which}",
                            "choose the scaling these options belong to (scaling=linear, dynamic, yarn, llama3, "
                            "ntk_alpha or proportional)")]
        if "original" in used and options.original is None:
            return [Problem(f"scaling={options.scaling} needs original=, the context length trained on",
                            "e.g. original=8192")]
        # (equal: no band of wavelengths blended, each either divided or kept; Llama 4 Scout's 1 and 1)
        if options.scaling == "llama3" and options.high_freq < options.low_freq:
            return [Problem(f"llama3 scaling needs high_freq >= low_freq (got {options.high_freq:g} and "
                            f"{options.low_freq:g})", "Llama 3.1 uses low_freq=1, high_freq=4")]
        rotated = self.rotary_dim(options, shape.head_dim)
        if options.scaling in ("dynamic", "ntk_alpha") and rotated == 2:  # the base grows as a power dim / (dim - 2)
            return [Problem(f"scaling={options.scaling} needs more than 2 rotated dimensions per head (its base "
                            "grows by a power rotary_dim / (rotary_dim - 2))",
                            "rotate more dimensions, or choose another scaling")]
        if shape.head_dim == 0:  # an attention that hands positions no part of its heads (latent's rope_dim=0)
            return [Problem("rotary positions have no dimension to rotate: the attention gives positions 0 of each "
                            "head's dimensions", "give it dimensions to rotate (latent's rope_dim), or position none")]
        if rotated < 2 or rotated % 2:
            return [Problem(f"rotary(fraction={options.fraction:g}) rotates {rotated} of the {shape.head_dim} "
                            "dimensions per head; rotation needs an even number, at least 2",
                            f"choose a fraction with an even head_dim · fraction (e.g. "
                            f"{2 * max(1, shape.head_dim // 4) / shape.head_dim:g})")]
        return on_cross(shape)

    def attention_flops(self, options, shape, queries, keys):
        # x·cos + rotate(x)·sin per rotated element of the queries and of the new keys
        rotated = self.rotary_dim(options, shape.head_dim)
        return 3 * rotated * (shape.heads * queries + shape.kv_heads * keys)

    def key_flops(self, options, shape, keys):
        return 3 * self.rotary_dim(options, shape.head_dim) * shape.kv_heads * keys

    def call_saved(self, options, shape, length):
        return 2 * length * self.rotary_dim(options, shape.head_dim)  # cos and sin, kept by q·cos and turn(q)·sin

    def module(self, where, options):
        from ..nn.rotary import RotaryPositions
        return Constructor(RotaryPositions, (self.rotary_dim(options, where.head_dim), options.theta),
                           {"interleaved": options.interleaved, "scaling": self.scaling(options),
                            "clockwise": options.clockwise})
