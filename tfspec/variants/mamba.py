"""Mamba (Gu & Dao, "Mamba: Linear-Time Sequence Modeling with Selective State Spaces", 2023), the selective
state-space layer of Mamba and of Jamba's Mamba layers: per channel a state of ``state`` numbers, each decaying at
its own rate exp(Δ_t A) and fed Δ_t x_t B_t, read through C_t, with an input-dependent time step Δ from a low-rank
projection; x comes through a short causal convolution and SiLU, and the output is gated by SiLU(z). Decoding keeps
the state and the convolution's last inputs: the same size after any number of tokens.

    decoder x 32 { residual pre; norm rmsnorm; mixer mamba(8192, state=16, norms=true); feedforward ... }
"""

import math

from pydantic import BaseModel, ConfigDict, Field

from ..registry import MIXERS, ComplexityClass, Constructor, Param, TokenMixer, linear_params


@MIXERS.register
class MambaMixer(TokenMixer):
    name = "mamba"
    title = "Mamba"
    positional = ("inner",)
    module_name = "mamba"  # Jamba's layer attribute (``model.layers.0.mamba``)
    examples = ({"inner": 16, "state": 4, "dt_rank": 2},
                {"inner": 12, "state": 3, "kernel": 3, "conv_bias": False, "bias": True, "norms": True,
                 "eps": 1e-5})
    doc = ("mamba(inner, state=16, kernel=4, dt_rank=none, conv_bias=true, bias=false, norms=false, eps=1e-6): "
           "Mamba's selective scan over `inner` channels, each with a state of `state` numbers decaying at rates "
           "of their own (dt_rank: the time step's low rank, none: ⌈width/16⌉; norms: Jamba's RMSNorms of the "
           "time step's input, B and C); decoding keeps the state (inner · state) and the convolution's last inputs")

    class Options(BaseModel):
        model_config = ConfigDict(extra="forbid", frozen=True)
        inner: int = Field(ge=1, le=1 << 16)  # the channels the scan runs over
        state: int = Field(16, ge=1, le=4096)
        kernel: int = Field(4, ge=1, le=64)
        dt_rank: int | None = Field(None, ge=1, le=1 << 16)  # none: ⌈width / 16⌉, Mamba's "auto"
        conv_bias: bool = True
        bias: bool = False  # on the in and out projections
        norms: bool = False  # Jamba's RMSNorms of the time step's input, B and C
        eps: float = Field(1e-6, gt=0, lt=1)  # of those norms

    @staticmethod
    def rank(width, options) -> int:
        return options.dt_rank or math.ceil(width / 16)

    def params(self, width, options):
        d, s, r = options.inner, options.state, self.rank(width, options)
        params = {**linear_params("in_proj", 2 * d, width, options.bias),
                  "conv1d.weight": Param((d, 1, options.kernel), "vector"),
                  **({"conv1d.bias": Param((d,), "bias")} if options.conv_bias else {}),
                  **linear_params("x_proj", r + 2 * s, d, False),
                  **linear_params("dt_proj", d, r, False),
                  # the paper's: Δ log-uniform in [0.001, 0.1] (at least 1e-4), kept so that softplus gives it back
                  "dt_proj.bias": Param((d,), "vector", uniform=(0.001, 0.1), log_spaced=True, floor=1e-4,
                                        stored="inverse_softplus"),
                  # the paper's: A's n-th column n (S4D-real), kept as its log; D 1
                  "A_log": Param((d, s), "vector", ramp=True, stored="log"),
                  "D": Param((d,), "vector", value=1.0),
                  **linear_params("out_proj", width, d, options.bias, residual=True)}
        if options.norms:
            params.update({f"{n}_layernorm.weight": Param((k,), "norm_weight")
                           for n, k in (("dt", r), ("b", s), ("c", s))})
        return params

    def module(self, width, options):
        from ..nn.mamba import Mamba
        return Constructor(Mamba, (width, options.inner, options.state, options.kernel, self.rank(width, options),
                                   options.conv_bias, options.bias, options.norms, options.eps))

    def flops(self, width, options, length):
        n, w, d, s, r = length, width, options.inner, options.state, self.rank(width, options)
        matmul = 2 * n * (w * 2 * d + options.kernel * d + d * (r + 2 * s) + r * d + d * w)
        # the decays and their exp, the inputs fed, the recurrence, the readout and its sum, D, the gate
        elementwise = n * (d * s * 8 + 2 * d + 8 * d) + (12 * n * (r + 2 * s) if options.norms else 0)
        return matmul, elementwise

    def saved(self, width, options, batch, length):
        b, n, d, s, r = batch, length, options.inner, options.state, self.rank(width, options)
        # the projection (its z: SiLU's input), the convolution's zero-padded input, its output (SiLU's input) and
        # SiLU's output (x), the x projection's output (the time step's input, B and C), the time step's
        # projection (softplus's input) and Δ; A, kept twice
        front = b * (2 * d * n + d * (n + options.kernel - 1) + 3 * d * n + (r + 2 * s) * n + d * n) + 2 * d * s
        # Jamba's norms: their inputs' inverse norms, normed values and outputs
        norms = b * n * (2 * (r + 2 * s) + 3) if options.norms else 0
        # per position: the decays, Δ·x, the state after it (and the zero state before the first)
        scan = b * n * (d * s + d) + b * (n + 1) * d * s
        # y + D·x, SiLU(z), the gated product (the out projection's input)
        gate = b * n * 3 * d
        return front + norms + scan + gate

    def state_elements(self, width, options):
        return options.inner * (options.kernel - 1) + options.inner * options.state

    def state_bytes(self, width, options, element_bytes):
        return options.inner * (options.kernel - 1) * element_bytes + options.inner * options.state * 4

    def describe(self, options):
        return f"Mamba ({options.inner} channels, state {options.state}, kernel {options.kernel})"

    def complexity(self, options):
        return ComplexityClass("O(n·d·s)", "O(n)", "O(n)", "a state carried from position to position")
