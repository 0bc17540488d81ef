"""Lightning attention (Qin et al., "Lightning Attention-2", 2024), MiniMax-01's linear attention: per head a
head_dim × head_dim state decayed by a constant rate λ_h = exp(−slope_h) and fed k_t v_tᵀ, read by the query; the
slopes are ALiBi's, scaled down with the layer's depth in a stack of ``layers`` (MiniMax's), so the first layers
forget fastest. q, k and v are SiLU of one projection; the heads' outputs are RMS-normed together, gated by σ of a
projection of the input and projected back. Decoding keeps the states: the same size after any number of tokens.

    decoder x 80 { ...; mixer lightning(64, head_dim=128, layers=80); ... }
"""

from pydantic import BaseModel, ConfigDict, Field

from ..registry import LAYER, MIXERS, ComplexityClass, Constructor, Param, Problem, TokenMixer, linear_params


@MIXERS.register
class LightningMixer(TokenMixer):
    name = "lightning"
    title = "Lightning Attention"
    positional = ("heads",)
    module_name = "self_attn"  # MiniMax's layer attribute, as its attention's (``model.layers.0.self_attn``)
    examples = ({"heads": 2, "head_dim": 8, "block": 4, "layers": 2},
                {"heads": 3, "head_dim": 4, "block": 8, "layers": 5, "eps": 1e-5})
    doc = ("lightning(heads, head_dim=64, block=256, layers=1, eps=1e-6): MiniMax-01's lightning attention, a linear "
           "attention whose per-head state decays at a constant rate (ALiBi's slopes scaled by the layer's depth "
           "among `layers`), computed block by block in training and one step at a time while decoding, which keeps "
           "the states (heads · head_dim²)")

    class Options(BaseModel):
        model_config = ConfigDict(extra="forbid", frozen=True)
        heads: int = Field(ge=1, le=4096)
        head_dim: int = Field(64, ge=1, le=4096)
        block: int = Field(256, ge=1, le=4096)  # positions the training form computes at once
        layers: int = Field(1, ge=1, le=4096)  # the depth the slopes are scaled over (the stack's layers)
        eps: float = Field(1e-6, gt=0, lt=1)  # of the output's RMSNorm

    def check(self, options, width, layers):
        if options.layers < layers:
            return [Problem(f"lightning attention's slopes span layers={options.layers}, but the stack has {layers} "
                            "layers: past the last, a layer's state would grow instead of decaying",
                            f"give layers={layers}")]
        return []

    def params(self, width, options):
        inner = options.heads * options.head_dim
        return {**linear_params("qkv_proj", 3 * inner, width, False),
                **linear_params("output_gate", inner, width, False),
                "norm.weight": Param((inner,), "norm_weight"),
                **linear_params("out_proj", width, inner, False, residual=True)}

    def module(self, width, options):
        from ..nn.lightning import LightningAttention
        return Constructor(LightningAttention, (width, options.heads, options.head_dim, options.block, LAYER,
                                                options.layers, options.eps))

    def flops(self, width, options, length):
        n, d, h, c, p = length, width, options.heads, options.block, options.head_dim
        inner = h * p
        padded = -(-n // c) * c
        projections = 2 * n * d * 4 * inner + 2 * n * inner * d
        # per block and head: q·kᵀ and its product with v; the block's own state and the entering state's readout
        blocks = h * (2 * 2 * padded * c * p + 2 * 2 * padded * p * p)
        # SiLU, the decays, the states carried, the norm, the gate's sigmoid and product
        elementwise = 4 * 3 * n * inner + h * padded * (2 * c + 2 * p) + (padded // c) * 2 * h * p * p \
            + n * (12 * inner)
        return projections + blocks, elementwise

    def saved(self, width, options, batch, length):
        b, n, h, c, p = batch, length, options.heads, options.block, options.head_dim
        inner = h * p
        padded = -(-n // c) * c
        chunks = padded // c
        carried = chunks > 1  # (one block reads a zero state: nothing is kept for what it does with it)
        # the projection (SiLU's input); per padded position and head: q, k and v padded, q·kᵀ decayed, k decayed
        # to its block's end and, where a state is carried, q from its block's start; each block's entering state
        blocks = b * h * padded * (4 * p + c + (p if carried else 0)) + b * h * chunks * p * p
        # the norm's input (one head's: a view of the padded output), inverse norms and normed values, its output
        # (which the gate multiplies), the gate's sigmoid and the product (the out projection's input)
        norm = (b * padded * p if h == 1 else b * n * inner) + b * n * (4 * inner + 1)
        # the decays within a block, to its end, from its start, and across it: once for every sequence
        decays = h * (c * c + 2 * c) + (h if carried else 0)
        return b * n * 3 * inner + blocks + norm + decays

    def state_elements(self, width, options):
        return options.heads * options.head_dim * options.head_dim

    def state_bytes(self, width, options, element_bytes):
        return self.state_elements(width, options) * 4  # kept in float32

    def describe(self, options):
        return (f"Lightning Attention ({options.heads} heads of {options.head_dim}, blocks of {options.block}, "
                f"slopes over {options.layers} layers)")

    def complexity(self, options):
        return ComplexityClass("O(n·d²)", "O(n/c)", "O(n)", f"a state carried from block to block, c = "
                               f"{options.block} positions computed at once in training")
