"""Mamba-2 (Dao & Gu, "Transformers are SSMs: Generalized Models and Efficient Algorithms Through Structured State
Space Duality", ICML 2024), the state-space layer of Mamba-2, Granite 4.0-H, Bamba and Nemotron-H: per head a
head_dim × state state S_t = exp(Δ_t A) S_{t-1} + Δ_t x_t B_tᵀ, read by y_t = S_t C_t + D x_t, with the time step
Δ_t = softplus(dt_t + dt_bias) and B, C shared within a group of heads; x, B and C come through a short causal
convolution and SiLU; y · SiLU(z) is RMS-normed per group and projected back. Decoding keeps the state and the
convolution's last inputs: the same size after any number of tokens.

    decoder x 40 { residual pre; norm rmsnorm; mixer mamba2(128, head_dim=64, state=128); feedforward ... }
"""

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..registry import MIXERS, ComplexityClass, Constructor, Param, TokenMixer, linear_params


@MIXERS.register
class Mamba2Mixer(TokenMixer):
    name = "mamba2"
    title = "Mamba-2"
    positional = ("heads",)
    module_name = "mamba"  # Granite 4.0-H's, Bamba's and Falcon-H1's layer attribute (``model.layers.0.mamba``)
    examples = ({"heads": 2, "head_dim": 8, "state": 4, "chunk": 4},
                {"heads": 4, "head_dim": 4, "state": 6, "groups": 2, "kernel": 3, "chunk": 8, "conv_bias": False,
                 "bias": True},
                {"heads": 2, "head_dim": 4, "state": 4, "groups": 2, "chunk": 4, "norm": "before_gate",
                 "z_scale": 0.5, "x_scale": 2.0, "b_scale": 0.25, "c_scale": 1.5, "dt_scale": 0.75},
                {"heads": 2, "head_dim": 4, "state": 4, "chunk": 4, "norm": "none"})
    doc = ("mamba2(heads, head_dim=64, state=128, groups=1, kernel=4, chunk=256, conv_bias=true, bias=false, "
           "eps=1e-5, norm=gated, z_scale=1, x_scale=1, b_scale=1, c_scale=1, dt_scale=1): Mamba-2's selective "
           "state-space layer (SSD): per head a head_dim × state state decayed by exp(Δ·A) and fed Δ·x·Bᵀ, read "
           "through C, B and C shared by the heads of each of `groups` groups, computed chunk by chunk in training "
           "and one step at a time while decoding, which keeps the state (heads · head_dim · state) and the "
           "convolution's last inputs")

    class Options(BaseModel):
        model_config = ConfigDict(extra="forbid", frozen=True)
        heads: int = Field(ge=1, le=4096)  # each with its own state, decay and time step
        head_dim: int = Field(64, ge=1, le=4096)
        state: int = Field(128, ge=1, le=4096)  # the state's width: B's and C's features per group
        groups: int = Field(1, ge=1, le=4096)  # B and C each serve heads / groups heads
        kernel: int = Field(4, ge=1, le=64)  # the short convolution's positions
        chunk: int = Field(256, ge=1, le=4096)  # positions the training form computes at once
        conv_bias: bool = True
        bias: bool = False  # on the in and out projections
        eps: float = Field(1e-5, gt=0, lt=1)  # of the gated RMSNorm
        # the output's norm: of y · SiLU(z) (Mamba-2's), of y then times SiLU(z) (Falcon-H1's norm_before_gate), or
        # none, y · SiLU(z) alone (Falcon-H1 without mamba_rms_norm)
        norm: Literal["gated", "before_gate", "none"] = "gated"
        # each part of the in-projection times a constant (Falcon-H1's ssm_multipliers, µP): z, x, B, C, dt
        z_scale: float = Field(1.0, gt=0, le=1e6)
        x_scale: float = Field(1.0, gt=0, le=1e6)
        b_scale: float = Field(1.0, gt=0, le=1e6)
        c_scale: float = Field(1.0, gt=0, le=1e6)
        dt_scale: float = Field(1.0, gt=0, le=1e6)

        @model_validator(mode="after")
        def _groups(self):
            if self.heads % self.groups:
                raise ValueError(f"heads={self.heads} is not a multiple of groups={self.groups}: each group's B "
                                 "and C serve the same number of heads")
            return self

    @staticmethod
    def _sizes(options) -> tuple[int, int]:
        """(the scan's width heads · head_dim, the convolution's channels [x; B; C])."""
        inner = options.heads * options.head_dim
        return inner, inner + 2 * options.groups * options.state

    @staticmethod
    def _scales(options) -> tuple[float, ...]:
        return options.z_scale, options.x_scale, options.b_scale, options.c_scale, options.dt_scale

    def params(self, width, options):
        inner, conv = self._sizes(options)
        heads = options.heads
        return {**linear_params("in_proj", inner + conv + heads, width, options.bias),
                "conv1d.weight": Param((conv, 1, options.kernel), "vector"),  # a filter along the sequence
                **({"conv1d.bias": Param((conv,), "bias")} if options.conv_bias else {}),
                # the paper's: Δ log-uniform in [0.001, 0.1] (at least 1e-4), kept so that softplus gives it back
                "dt_bias": Param((heads,), "vector", uniform=(0.001, 0.1), log_spaced=True, floor=1e-4,
                                 stored="inverse_softplus"),
                "A_log": Param((heads,), "vector", uniform=(1.0, 16.0), stored="log"),  # A ~ U(1, 16), kept as log
                "D": Param((heads,), "vector", value=1.0),
                **({"norm.weight": Param((inner,), "norm_weight")} if options.norm != "none" else {}),
                **linear_params("out_proj", width, inner, options.bias, residual=True)}

    def module(self, width, options):
        from ..nn.mamba2 import Mamba2
        return Constructor(Mamba2, (width, options.heads, options.head_dim, options.state, options.groups,
                                    options.kernel, options.chunk, options.conv_bias, options.bias, options.eps,
                                    options.norm, self._scales(options)))

    def flops(self, width, options, length):
        n, d, h, c = length, width, options.heads, options.chunk
        p, s, g = options.head_dim, options.state, options.groups
        inner, conv = self._sizes(options)
        padded = -(-n // c) * c  # the chunks cover the length rounded up
        projections = 2 * n * d * (inner + conv + h) + 2 * n * options.kernel * conv + 2 * n * inner * d
        # per chunk: each group's C·Bᵀ, each head's scores times its inputs; each group's state made and read
        chunks = 2 * padded * c * (g * s + h * p) + 2 * 2 * padded * s * h * p
        # decays between positions, the scores' decays, Δ·x, the states carried, D's term, SiLUs, the gate and its
        # norm; the projection's constants
        gate = {"none": 5, "gated": 8, "before_gate": 8}[options.norm] * inner
        scaled = (2 * inner + conv + h) * n if any(v != 1.0 for v in self._scales(options)) else 0
        elementwise = h * padded * (2 * c + 3 * p) + (padded // c) * 2 * h * s * p + n * (3 * conv + gate + 4 * h)
        return projections + chunks, elementwise + scaled

    def saved(self, width, options, batch, length):
        b, n, h, c = batch, length, options.heads, options.chunk
        p, s, g = options.head_dim, options.state, options.groups
        inner, conv = self._sizes(options)
        padded = -(-n // c) * c
        chunks = padded // c
        # the projection (its gate z is SiLU's input in the norm), the convolution's zero-padded input, its output
        # (SiLU's input) and SiLU's output (x, B, C), softplus's input and output; exp(A_log) and A
        front = b * ((inner + conv + h) * n + conv * (n + options.kernel - 1) + 2 * conv * n + 2 * n * h) + 2 * h
        # per padded position and head: the decays between positions (before and after their upper part is zeroed),
        # the decayed scores, Δ·x padded and decayed to the chunk's end, and heads first (a copy, unless the order
        # is already that: one head, or one chunk of one sequence), the intra-chunk states' readout, three decays;
        # per group C·Bᵀ, B and C chunked; per chunk the state entering it twice (each step's product, and stacked)
        # and its decay
        heads_first = 0 if h == 1 or (b == 1 and chunks == 1) else 1
        scan = b * h * padded * (3 * c + (3 + heads_first) * p + 2) + b * g * padded * (c + 2 * s) + \
            b * h * chunks * (2 * s * p + 1)
        # the gated norm: its input (y + D·x), SiLU(z), their product (or y normed and scaled), inverse norms,
        # normed; the out projection's input (without a norm: y, SiLU(z) and their product); the projection's
        # constants, where it has them
        norm = b * n * (3 * inner if options.norm == "none" else 5 * inner + g)
        scaled = inner + conv + h if any(v != 1.0 for v in self._scales(options)) else 0
        return front + scan + norm + scaled

    def state_elements(self, width, options):
        _, conv = self._sizes(options)
        return conv * (options.kernel - 1) + options.heads * options.head_dim * options.state

    def state_bytes(self, width, options, element_bytes):
        _, conv = self._sizes(options)  # the convolution's inputs as the activations; the state in float32
        return conv * (options.kernel - 1) * element_bytes + options.heads * options.head_dim * options.state * 4

    def describe(self, options):
        grouped = f", {options.groups} groups" if options.groups != 1 else ""
        norm = {"gated": "", "before_gate": ", normed before its gate", "none": ", gated without a norm"}
        scaled = ", its projection scaled" if any(v != 1.0 for v in self._scales(options)) else ""
        return (f"Mamba-2 ({options.heads} heads of {options.head_dim}, state {options.state}{grouped}, "
                f"kernel {options.kernel}, chunks of {options.chunk}{norm[options.norm]}{scaled})")

    def complexity(self, options):
        return ComplexityClass("O(n·d²)", "O(n/c)", "O(n)", f"a state carried from chunk to chunk, c = "
                               f"{options.chunk} positions computed at once in training")
