"""DeepSeek Sparse Attention (DSA; DeepSeek-V3.2, 2025, and GLM-5): multi-head latent attention (``latent``) in which
each query attends only to the ``topk`` keys a lightning indexer ranks highest among those its masks allow.

The indexer is small and cheap per pair: ``index_heads`` query heads of ``index_dim`` features projected from the
query latent (so ``q_rank`` is required), one key of ``index_dim`` features per position (LayerNorm-ed), their
first ``rope_dim`` features rotated with the attention's own rotary frequencies (halves paired), and a weight per
head and query from the input (with rotary positions; without, nothing rotates). A key's score for a query is Σ_h w_h · relu(q_h · k / √index_dim); a query keeps
its ``topk`` best (equal scores: the earlier key), so from ``topk`` keys on its attention is sparse. The selection
is not differentiated, and the indexer reads its inputs detached: it learns from its own objective alone, as
DeepSeek-V3.2's sparse training stage trains it -- KL(p ‖ softmax(index scores)) over each query's selected keys,
p the attention's distribution there summed over its heads and normalised --, which a training call adds to the
loss as ``dsa_index``, weighted by ``index_loss`` (0: the indexer is not trained), and which changes nothing else.

A KV cache keeps, per position, the latent, the shared rotated key and the indexer's key:
``kv_rank + rope_dim + index_dim`` numbers. The cost counted is what runs on these machines: every query scored
against every key by the indexer and by the attention, whose softmax the selection masks (a kernel that gathers
the selected keys would score ``topk`` per query instead).

    decoder x 61 { position rotary(theta=10000, interleaved=true)
                   attention self heads=128 head_dim=192 mask=causal
                       kind=dsa(512, 64, topk=2048, index_heads=64, index_dim=128, q_rank=1536, v_dim=128) }
"""

from pydantic import BaseModel, ConfigDict, Field

from ..registry import ATTENTION_KINDS, NORMS, Constructor, Param, Problem, linear_params
from .latent import Latent


@ATTENTION_KINDS.register
class DeepSeekSparse(Latent):
    name = "dsa"
    title = "DeepSeek Sparse"
    positional = ("kv_rank", "rope_dim")
    fuses_causal = False  # the selection is a mask of its own
    runs_in_blocks = False  # each query selects among its whole row of keys
    doc = ("dsa(kv_rank, rope_dim, topk, index_heads, index_dim, q_rank): DeepSeek Sparse Attention, latent "
           "attention whose queries each see only the topk keys a lightning indexer ranks highest")
    examples = ({"kv_rank": 6, "rope_dim": 2, "topk": 3, "index_heads": 2, "index_dim": 4, "q_rank": 6},
                {"kv_rank": 5, "rope_dim": 2, "topk": 5, "index_heads": 3, "index_dim": 6, "q_rank": 4, "v_dim": 5,
                 "eps": 1e-5})

    class Options(BaseModel):
        model_config = ConfigDict(extra="forbid", frozen=True)
        kv_rank: int = Field(gt=0, le=1 << 20)  # the latent's features per position
        rope_dim: int = Field(gt=0, le=1 << 16)  # of each head's query and key (and the indexer's), those rotated
        topk: int = Field(gt=0, le=1 << 24)  # the keys each query attends to
        index_heads: int = Field(gt=0, le=1 << 12)  # the indexer's query heads
        index_dim: int = Field(gt=0, le=1 << 16)  # the indexer's query and key width
        q_rank: int = Field(gt=0, le=1 << 20)  # the query latent, which the indexer's queries come from too
        v_dim: int | None = Field(None, gt=0, le=1 << 16)  # each head's value width; None: head_dim - rope_dim
        eps: float = Field(1e-6, gt=0, lt=1)  # of the latents' RMS norms
        index_loss: float = Field(1.0, ge=0, le=1e3)  # the indexer's training objective's weight (0: not trained)

    def check(self, options, shape):
        problems = super().check(options, shape)
        if options.rope_dim > options.index_dim:
            problems.append(Problem(f"rope_dim={options.rope_dim} rotates more than the indexer's "
                                    f"index_dim={options.index_dim} features", "give index_dim >= rope_dim"))
        return problems

    def shrunk(self, options, head_dim, width):
        shrunk = super().shrunk(options, head_dim, width)
        return shrunk.model_copy(update={"q_rank": max(1, shrunk.q_rank),
                                         "index_dim": max(shrunk.rope_dim, min(options.index_dim, head_dim))})

    def params(self, shape, options):
        dim, heads = options.index_dim, options.index_heads
        return {**super().params(shape, options),
                **linear_params("indexer.q", heads * dim, options.q_rank, False),
                **linear_params("indexer.k", dim, shape.width, False),
                "indexer.k_norm.weight": Param((dim,), "norm_weight"), "indexer.k_norm.bias": Param((dim,), "norm_bias"),
                **linear_params("indexer.weights", heads, shape.width, False)}

    def projection_flops(self, shape, options, queries, keys):
        matmul, elementwise = super().projection_flops(shape, options, queries, keys)
        dim, heads, rotated = options.index_dim, options.index_heads, options.rope_dim
        matmul += 2 * queries * (options.q_rank * heads * dim + shape.width * heads) + 2 * keys * shape.width * dim
        # the key's LayerNorm; rotating the queries' and the key's first features; the weights' scale
        elementwise += NORMS["layernorm"].flops_per_element * keys * dim + 3 * rotated * (queries * heads + keys) \
            + queries * heads
        return matmul, elementwise

    def cache_elements(self, shape, options):
        return options.kv_rank + options.rope_dim + options.index_dim

    @property
    def mixes_by_place(self):
        return True  # keys of equal index scores (every indexer head's relu 0) rank by where they stand

    def pattern_note(self, options):
        return f"of these keys only the {options.topk} its indexer ranks highest per query are seen, chosen at run time"

    def kept_keys(self, options, heads):
        return options.topk  # one choice for every head

    def call_saved(self, options, position, positioned, length):
        # training the indexer: its cos and sin (halves paired, unlike an interleaved attention's), built once a call
        return 2 * length * options.rope_dim if options.index_loss and position.rotates else 0

    def core_flops(self, shape, options, queries, keys, pairs):
        matmul, elementwise = super().core_flops(shape, options, queries, keys, pairs)
        heads = options.index_heads
        # every pair's index score (q·k per head, their weighted sum) and its scale, relu and mask; the selection
        matmul, elementwise = matmul + 2 * pairs * heads * (options.index_dim + 1), elementwise + pairs * (2 * heads + 3)
        if options.index_loss:  # training: the attention's distribution again (its scores, softmax, head mean), KL
            matmul += 2 * pairs * shape.heads * shape.head_dim
            elementwise += pairs * (7 * shape.heads + 6)
        return matmul, elementwise

    def core_saved(self, shape, options, batch, queries, keys, dropout, fused):
        elements, words = super().core_saved(shape, options, batch, queries, keys, dropout, False)
        if options.index_loss:  # training the indexer: what its loss's backward reads, float32 but the norm's input
            heads, dim = options.index_heads, options.index_dim
            elements += batch * keys * dim  # the key's LayerNorm input (and its mean and 1/std: words)
            # per query its heads' queries and weights; per pair the relu'd scores, the predicted log-probabilities
            # and the target they are weighed by; the keys, of which the product keeps a copy for each query where
            # it broadcasts them over a batch (one sequence: the keys themselves)
            copies = batch * queries if batch > 1 else 1
            words += batch * (queries * (heads * dim + heads) + keys * 2 + queries * keys * (heads + 2)) \
                + copies * keys * dim
        return elements, words

    def core(self, config, options):
        from ..nn.dsa import SparseLatentAttention
        latent = super().core(config, options)
        rotates = config.position is not None and config.position[0].rotates
        return Constructor(SparseLatentAttention, kwargs={**latent.kwargs, "topk": options.topk,
                                                          "index_heads": options.index_heads,
                                                          "index_dim": options.index_dim, "index_rotates": rotates,
                                                          "index_loss": options.index_loss})
