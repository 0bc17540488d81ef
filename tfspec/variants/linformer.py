"""Linformer (Wang et al. 2020, "Linformer: Self-Attention with Linear Complexity"): keys and values projected
along the sequence, from n rows to k, by learned E and F of shape (k, max_len).

    head_i = softmax(q_i (E_i K_i)^T / sqrt(d)) (F_i V_i)

Attention costs O(n·k·d) instead of O(n²·d). Sharing, section 4 of the paper: by default one E and one F
per layer serve all heads (headwise sharing); ``shared_heads=false`` gives each key/value head its own,
``shared_kv=true`` makes E = F (key-value sharing), and ``shared_layers=true`` gives the stack one E (and F)
for all its layers (layer-wise sharing: with ``shared_kv``, the paper's single matrix for the whole model's
stack). Shared tables belong to the stack (``encoder.shared.self_attn.proj_k``), a node of their own in the
IR and in diagrams, and every layer's gradients add up in them.
Sequences up to ``max_len`` are accepted (E's first n columns). Because every projected row mixes all
positions, no mask of structure can hold (a causal query would see its future through E), so such masks are
a spec error; padding is honoured by zeroing padded keys and values before the projection.

    encoder x 12 { attention self heads=12 kind=linformer(256, max_len=4096, shared_kv=true) mask=padding; ... }
"""

from pydantic import BaseModel, ConfigDict, Field

from ..registry import ATTENTION_KINDS, AttentionKind, ComplexityClass, Constructor, Param, Problem
from .dot import projection_params


@ATTENTION_KINDS.register
class Linformer(AttentionKind):
    name = "linformer"
    title = "Linformer"
    positional = ("k",)
    fuses_causal = False
    runs_in_blocks = False  # it mixes positions before scoring
    mixes_positions = True
    examples = ({"k": 4, "max_len": 80}, {"k": 8, "max_len": 32, "shared_kv": True},
                {"k": 3, "max_len": 80, "shared_heads": False},
                {"k": 4, "max_len": 80, "shared_kv": True, "shared_layers": True},
                {"k": 3, "max_len": 80, "shared_heads": False, "shared_layers": True})
    doc = "Linformer: keys and values projected along the sequence to k rows (E, F), O(n·k·d)"

    class Options(BaseModel):
        model_config = ConfigDict(extra="forbid", frozen=True)
        k: int = Field(gt=0, le=1 << 20)  # projected length
        max_len: int = Field(gt=0, le=1 << 24)  # the longest sequence E and F cover
        shared_heads: bool = True  # one E and F for all heads of a layer (the paper's headwise sharing)
        shared_kv: bool = False  # E = F (key-value sharing)
        shared_layers: bool = False  # one E (and F) for every layer of the stack (layer-wise sharing)

    def params(self, shape, options):
        own = {} if options.shared_layers else self.projection_tables(shape, options)
        return {**projection_params(shape), **own}

    def projection_tables(self, shape, options):
        table = (() if options.shared_heads else (shape.kv_heads,)) + (options.k, options.max_len)
        # projections along the sequence: vectors to a scheme (T5's draws them by their last dimension)
        return {"proj_k": Param(table, "vector"), **({} if options.shared_kv else {"proj_v": Param(table, "vector")})}

    def stack_params(self, shape, options):
        return self.projection_tables(shape, options) if options.shared_layers else {}

    def stack_module(self, shape, options):
        if not options.shared_layers:
            return None
        from ..nn.linformer import LinformerProjections
        return Constructor(LinformerProjections, (options.k, options.max_len, shape.kv_heads, options.shared_heads,
                                                  options.shared_kv))

    def stack_label(self, options):
        tables = "E" if options.shared_kv else "E, F"
        return f"Linformer Projections ({tables}: {options.k} × {options.max_len}, shared by the layers)"

    def check(self, options, shape):
        problems = []
        if shape.cross:
            problems.append(Problem("Linformer on cross-attention: its projections are learned over positions of "
                                    "the sequence the keys come from, which is the attention's own",
                                    "use kind=dot on cross-attention"))
        if options.k > options.max_len:
            problems.append(Problem(f"linformer(k={options.k}) projects to more rows than the {options.max_len} "
                                    "positions it covers", "choose k <= max_len"))
        return problems

    def max_len(self, options):
        return options.max_len

    def pattern_note(self, options):
        return f"keys and values projected along the sequence to {options.k} rows: every query mixes every key"

    def core_flops(self, shape, options, queries, keys, pairs):
        rows = options.k  # E has k rows whatever the length
        projections = 2 * 2 * shape.kv_heads * options.k * keys * shape.head_dim  # E K and F V
        # scores and the value sum against k rows; zeroing padded keys and values is element-wise
        return projections + 4 * shape.heads * queries * rows * shape.head_dim, 6 * shape.heads * queries * rows

    def core_saved(self, shape, options, batch, queries, keys, dropout, fused):
        heads, kv_heads, head_dim, k = shape.heads, shape.kv_heads, shape.head_dim, options.k
        # k and v (what E and F multiply), the projected k and v, q, the output; then SDPA's kept state
        vectors = batch * head_dim * (2 * kv_heads * keys + 2 * heads * queries)
        if not options.shared_heads and batch > 1 and kv_heads > 1:  # per-head E, F broadcast over the batch: copied
            vectors += 2 * batch * kv_heads * k * keys
        if fused:
            return vectors + batch * head_dim * 2 * kv_heads * k, batch * heads * queries
        projected = batch * head_dim * 2 * (heads if kv_heads != heads else kv_heads) * k
        return vectors + projected + batch * heads * queries * k * (3 if dropout else 1), 0

    def complexity(self, options, cross, reach):
        return ComplexityClass("O(n·k·d)", "O(1)", "O(1)", f"keys and values projected to k = {options.k} rows")

    def core(self, config, options):
        from ..nn.attention import core_arguments
        from ..nn.linformer import LinformerAttention
        return Constructor(LinformerAttention, kwargs={**core_arguments(config), "k": options.k,
                                                       "max_len": options.max_len, "shared_heads": options.shared_heads,
                                                       "shared_kv": options.shared_kv,
                                                       "shared_layers": options.shared_layers})
