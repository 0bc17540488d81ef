"""Gated DeltaNet (Yang, Kautz & Hatamizadeh, "Gated Delta Networks", ICLR 2025), the linear-attention layer of
Qwen3-Next and Qwen3.5: per value head a state S (key_dim × value_dim) that decays by α_t and is corrected by the
delta rule, S_t = α_t S_{t-1} (I − β_t k_t k_tᵀ) + β_t k_t v_tᵀ, read by o_t = S_tᵀ q_t / √key_dim. q, k and v come
through a short causal convolution and SiLU, q and k L2-normed; α_t = exp(−exp(A_log) · softplus(a_t + dt_bias)),
β_t = σ(b_t); the output is RMS-normed per head, gated by SiLU(z) and projected back. Decoding keeps the state and
the convolution's last inputs: the same size after any number of tokens.

    decoder x 48 { residual pre; norm rmsnorm; mixer gated_deltanet(32, key_heads=16); feedforward ... }
"""

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..registry import MIXERS, ComplexityClass, Constructor, Param, TokenMixer, linear_params


@MIXERS.register
class GatedDeltaNetMixer(TokenMixer):
    name = "gated_deltanet"
    title = "Gated DeltaNet"
    positional = ("heads",)
    module_name = "linear_attn"  # Qwen3-Next's and Qwen3.5's layer attribute (``model.layers.0.linear_attn``)
    examples = ({"heads": 2, "key_dim": 8, "value_dim": 8, "chunk": 4},
                {"heads": 4, "key_heads": 2, "key_dim": 6, "value_dim": 5, "kernel": 3, "chunk": 8})
    doc = ("gated_deltanet(heads, key_heads=heads, key_dim=128, value_dim=128, kernel=4, chunk=64, eps=1e-6): "
           "Gated DeltaNet, Qwen3-Next's and Qwen3.5's linear attention: a per-head state corrected by the delta "
           "rule and decayed by a learned gate, computed chunk by chunk in training and one step at a time while "
           "decoding, which keeps the state (heads · key_dim · value_dim) and the convolution's last inputs")

    class Options(BaseModel):
        model_config = ConfigDict(extra="forbid", frozen=True)
        heads: int = Field(ge=1, le=4096)  # value heads, each with its own state
        key_heads: int | None = Field(None, ge=1, le=4096)  # query and key heads, each serving a group (None: heads)
        key_dim: int = Field(128, ge=1, le=4096)
        value_dim: int = Field(128, ge=1, le=4096)
        kernel: int = Field(4, ge=1, le=64)  # the short convolution's positions
        chunk: int = Field(64, ge=1, le=4096)  # positions the training form solves at once
        eps: float = Field(1e-6, gt=0, lt=1)  # of the output's RMSNorm

        @model_validator(mode="after")
        def _groups(self):
            if self.heads % (self.key_heads or self.heads):
                raise ValueError(f"heads={self.heads} is not a multiple of key_heads={self.key_heads}: each key head "
                                 "serves a group of value heads")
            return self

    @staticmethod
    def _sizes(options) -> tuple[int, int, int]:
        """(key heads, the convolution's channels [q; k; v], the values' width)."""
        key_heads = options.key_heads or options.heads
        values = options.heads * options.value_dim
        return key_heads, 2 * key_heads * options.key_dim + values, values

    def params(self, width, options):
        _, mixed, values = self._sizes(options)
        heads = options.heads
        return {**linear_params("in_proj_qkv", mixed, width, False), **linear_params("in_proj_z", values, width, False),
                **linear_params("in_proj_b", heads, width, False), **linear_params("in_proj_a", heads, width, False),
                "conv1d.weight": Param((mixed, 1, options.kernel), "vector"),  # a filter along the sequence
                "dt_bias": Param((heads,), "vector", value=1.0),
                "A_log": Param((heads,), "vector", uniform=(0.01, 16.0), stored="log"),  # A ~ U(0.01, 16), kept as log
                "norm.weight": Param((options.value_dim,), "norm_weight"),
                **linear_params("out_proj", width, values, False, residual=True)}

    def module(self, width, options):
        from ..nn.deltanet import GatedDeltaNet
        key_heads, _, _ = self._sizes(options)
        return Constructor(GatedDeltaNet, (width, options.heads, key_heads, options.key_dim, options.value_dim,
                                           options.kernel, options.chunk, options.eps))

    def flops(self, width, options, length):
        n, d, h, c = length, width, options.heads, options.chunk
        dk, dv = options.key_dim, options.value_dim
        _, mixed, values = self._sizes(options)
        padded = -(-n // c) * c  # the chunks cover the length rounded up
        projections = 2 * n * d * (mixed + values + 2 * h) + 2 * n * options.kernel * mixed + 2 * n * values * d
        # per head: within chunks k_β·kᵀ and q·kᵀ; per chunk the state read twice, the outputs, the update
        chunks = h * (2 * 2 * padded * c * dk + padded * (6 * dk * dv + 2 * c * dv))
        # the triangular solves (C²·width each, not counted as products), decays, the norms, gates and SiLUs
        elementwise = h * padded * c * (dk + dv) + n * (3 * mixed + 8 * values + 6 * h)
        return projections + chunks, elementwise

    def saved(self, width, options, batch, length):
        b, n, h, c = batch, length, options.heads, options.chunk
        dk, dv = options.key_dim, options.value_dim
        key_heads, mixed, _ = self._sizes(options)
        padded = -(-n // c) * c
        # the convolution's zero-padded input and its output (SiLU's input); β, softplus's input and output; the
        # query and key heads the L2 norms read (the convolution's SiLU output, or their copies serving groups)
        # and their inverse norms
        front = b * (mixed * (n + options.kernel - 1) + mixed * n + 3 * n * h + 2 * h * n) + 2 * h
        front += 2 * b * n * h * dk if key_heads != h else b * n * mixed
        # per padded position and head: six chunk × chunk tensors (the decays between positions, before and after
        # their upper part is zeroed; k·kᵀ and q·kᵀ, each before and after the decays), six query/key tensors
        # (q and k padded, k·β, k·β solved, q and k decayed), three of values (padded, solved, corrected), β and two decays; the state
        # entering each chunk and each chunk's decay
        # (the decayed queries read only the state the chunks before make: one chunk keeps them for nothing)
        keys = 6 if padded > c else 5
        chunks = b * h * padded * (6 * c + keys * dk + 3 * dv + 3) + b * h * (padded // c) * (1 + dk * dv)
        # the output's norm: its input (the chunks' whole output), inverse norms, normed, scaled, the gate, its
        # SiLU and their product (the out projection's input)
        norm = b * h * (padded * dv + n + 5 * n * dv)
        return front + chunks + norm

    def state_elements(self, width, options):
        _, mixed, _ = self._sizes(options)
        return mixed * (options.kernel - 1) + options.heads * options.key_dim * options.value_dim

    def state_bytes(self, width, options, element_bytes):
        _, mixed, _ = self._sizes(options)  # the convolution's inputs as the activations; the state in float32
        return mixed * (options.kernel - 1) * element_bytes + options.heads * options.key_dim * options.value_dim * 4

    def describe(self, options):
        key_heads = options.key_heads or options.heads
        grouped = f", {key_heads} key heads" if key_heads != options.heads else ""
        return (f"Gated DeltaNet ({options.heads} heads{grouped}, {options.key_dim}×{options.value_dim} state, "
                f"kernel {options.kernel}, chunks of {options.chunk})")

    def complexity(self, options):
        return ComplexityClass("O(n·d²)", "O(n/c)", "O(n)", f"a state carried from chunk to chunk, c = "
                               f"{options.chunk} positions solved at once in training")
