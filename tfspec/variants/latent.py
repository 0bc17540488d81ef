"""Multi-head latent attention (MLA; DeepSeek-V2, 2024): keys and values from a compressed latent per position.

Each position is projected down to a latent of ``kv_rank`` features (RMS-normed) and one ``rope_dim``-wide key
that every head shares and the position scheme rotates; the latent is projected up to each head's key part
without positions (``head_dim - rope_dim``) and its value (``v_dim``, by default as wide). A head's query is
``[unrotated; rotated]`` like its key, from the stream directly or, with ``q_rank``, through a low-rank
bottleneck of its own (down, RMS norm, up). ``head_dim`` is a query's (and key's) width, and the default
softmax scale 1/sqrt(head_dim); DeepSeek's YaRN factor enters as the attention's ``scale=``.

A KV cache keeps what the projection down made, ``kv_rank + rope_dim`` numbers per position and layer, where
multi-head attention keeps ``heads · (head_dim + v_dim)``; the heads' keys and values are expanded from it at
each step. The norms are DeepSeek's (RMS, ``eps``); ``bias`` puts biases on the projections down and
``out_bias`` on the output, as DeepSeek's ``attention_bias`` does.

    decoder x 61 { position rotary(theta=10000, interleaved=true)
                   attention self heads=128 head_dim=192 kind=latent(512, 64, q_rank=1536, v_dim=128) mask=causal }
"""

from pydantic import BaseModel, ConfigDict, Field

from ..registry import (ATTENTION_KINDS, NORMS, AttentionKind, AttentionShape, Constructor, Param, Problem,
                        linear_params)


@ATTENTION_KINDS.register
class Latent(AttentionKind):
    name = "latent"
    title = "Latent"
    positional = ("kv_rank", "rope_dim")
    scores_by_dot_product = True
    doc = ("latent(kv_rank, rope_dim): multi-head latent attention; keys and values expanded from a compressed "
           "latent per position, which is what a KV cache keeps, and a shared rotated key")
    examples = ({"kv_rank": 6, "rope_dim": 2},
                {"kv_rank": 5, "rope_dim": 2, "q_rank": 6, "v_dim": 5, "eps": 1e-5})

    class Options(BaseModel):
        model_config = ConfigDict(extra="forbid", frozen=True)
        kv_rank: int = Field(gt=0, le=1 << 20)  # the latent's features per position
        rope_dim: int = Field(ge=0, le=1 << 16)  # of each head's query and key, the shared part positions rotate
        q_rank: int = Field(0, ge=0, le=1 << 20)  # queries through a bottleneck this wide; 0: projected directly
        v_dim: int | None = Field(None, gt=0, le=1 << 16)  # each head's value width; None: head_dim - rope_dim
        eps: float = Field(1e-6, gt=0, lt=1)  # of the latents' RMS norms

    def value_dim(self, shape, options):
        return options.v_dim if options.v_dim is not None else shape.head_dim - options.rope_dim

    def position_shape(self, shape, options):
        return AttentionShape(width=shape.width, heads=shape.heads, kv_heads=1, head_dim=options.rope_dim,
                              memory_width=shape.memory_width, cross=shape.cross, bias=shape.bias,
                              out_bias=shape.out_bias, causal=shape.causal)

    def shrunk(self, options, head_dim, width):
        rope = min(options.rope_dim, max(2, head_dim // 2 // 2 * 2))  # even, leaving the latent part of each head
        return options.model_copy(update={
            "rope_dim": rope, "kv_rank": min(options.kv_rank, width), "q_rank": min(options.q_rank, width),
            "v_dim": None if options.v_dim is None else min(options.v_dim, head_dim)})

    def qk_norm_problem(self, options):
        return Problem("latent attention normalises its compressed latents itself; a qk-norm of each head's "
                       "queries and keys does not apply", "remove qk_norm=, or use kind=dot")

    def check(self, options, shape):
        problems = []
        if shape.bias and not shape.key_bias:
            problems.append(Problem("latent attention projects its keys from a latent of its own, which key_bias "
                                    "does not describe", "drop key_bias=false"))
        if shape.cross:
            problems.append(Problem("latent attention compresses a sequence's own keys and values; cross-attention "
                                    "reads them from the memory", "use kind=dot on the cross-attention"))
        if shape.kv_heads != shape.heads:
            problems.append(Problem(f"latent attention expands keys and values for each of its {shape.heads} heads "
                                    f"from the latent, so kv_heads={shape.kv_heads} has no meaning",
                                    "remove kv_heads="))
        if options.rope_dim >= shape.head_dim:
            problems.append(Problem(f"rope_dim={options.rope_dim} leaves none of head_dim={shape.head_dim} to the "
                                    "latent's keys", "give head_dim= the unrotated and the rotated parts' sum"))
        return problems

    def params(self, shape, options):
        heads, width, head_dim, rope = shape.heads, shape.width, shape.head_dim, options.rope_dim
        queries = dict(query_rows=heads * head_dim, head_dim=head_dim)
        if options.q_rank:
            q = {**linear_params("q_down", options.q_rank, width, shape.bias),
                 "q_latent_norm.weight": Param((options.q_rank,), "norm_weight"),
                 **linear_params("q_up", heads * head_dim, options.q_rank, False, **queries)}
        else:
            q = linear_params("q", heads * head_dim, width, False, **queries)
        v_dim = self.value_dim(shape, options)
        return {**q, **linear_params("kv_down", options.kv_rank + rope, width, shape.bias),
                "kv_latent_norm.weight": Param((options.kv_rank,), "norm_weight"),
                **linear_params("kv_up", heads * (head_dim - rope + v_dim), options.kv_rank, False),
                **linear_params("out", width, heads * v_dim, shape.out_bias, residual=True)}

    def projection_flops(self, shape, options, queries, keys):
        heads, width, head_dim, rope = shape.heads, shape.width, shape.head_dim, options.rope_dim
        v_dim, norm = self.value_dim(shape, options), NORMS["rmsnorm"].flops_per_element
        q_rank, kv_rank = options.q_rank, options.kv_rank
        q = 2 * queries * (width * q_rank + q_rank * heads * head_dim) if q_rank else \
            2 * queries * width * heads * head_dim
        matmul = q + 2 * keys * width * (kv_rank + rope) + 2 * keys * kv_rank * heads * (head_dim - rope + v_dim) \
            + 2 * queries * heads * v_dim * width
        elementwise = norm * (queries * q_rank + keys * kv_rank)
        if shape.bias:
            elementwise += queries * q_rank + keys * (kv_rank + rope)
        if shape.out_bias:
            elementwise += queries * width
        return matmul, elementwise

    def projection_saved(self, shape, options, batch, queries, keys):
        # each RMS norm keeps its input (the latent: a view of the projection down, which it keeps whole) and the
        # normalised input, and 1/rms; the projection up keeps its output
        norm = NORMS["rmsnorm"]
        kept, words = norm.saved(options.kv_rank)
        elements = keys * (kept + options.rope_dim + options.kv_rank)
        words *= keys
        if options.q_rank:
            kept, q_words = norm.saved(options.q_rank)
            elements, words = elements + queries * (kept + options.q_rank), words + queries * q_words
        return batch * elements, batch * words

    def cache_elements(self, shape, options):
        return options.kv_rank + options.rope_dim

    def core_flops(self, shape, options, queries, keys, pairs):
        # QK^T and weights @ V (values of their own width); scaling and a 5-step softmax per score
        return 2 * shape.heads * pairs * (shape.head_dim + self.value_dim(shape, options)), 6 * shape.heads * pairs

    def recomputed_saved(self, shape, options, batch, length, remade):
        # q and k (concatenations: made anew whatever rotates them), the values (a view of the projection up,
        # which the recomputed bands keep whole) and the output
        heads, head_dim, v_dim = shape.heads, shape.head_dim, self.value_dim(shape, options)
        return batch * length * heads * (2 * head_dim + (head_dim - options.rope_dim + v_dim) + v_dim)

    def core_saved(self, shape, options, batch, queries, keys, dropout, fused):
        # q and k (scaled, on the math path), the values and the output; values are a view of the projection up,
        # which a kernel keeps whole where it takes them without a copy (one sequence, one head or one key, whose
        # heads' rows then lie evenly apart)
        heads, head_dim, v_dim = shape.heads, shape.head_dim, self.value_dim(shape, options)
        whole = fused or batch == 1 or heads == 1 or keys == 1
        values = keys * (head_dim - options.rope_dim + v_dim) if whole else keys * v_dim
        vectors = batch * heads * ((queries + keys) * head_dim + values + queries * v_dim)
        if fused:  # and a log-sum-exp per row
            return vectors, batch * heads * queries
        return vectors + batch * heads * queries * keys * (3 if dropout else 1), 0

    projects_values = False  # values are expanded from the cached latent, after the cache

    def core(self, config, options):
        from ..nn.attention import core_arguments
        from ..nn.latent import LatentAttention
        shape, rmsnorm = config.shape, NORMS["rmsnorm"]
        arguments = {k: v for k, v in core_arguments(config).items()
                     if k != "qk_norm"}
        norm = rmsnorm.options({"eps": options.eps})
        return Constructor(LatentAttention, kwargs={
            **arguments, "rope_dim": options.rope_dim, "value_dim": self.value_dim(shape, options),
            "kv_rank": options.kv_rank, "kv_latent_norm": rmsnorm.module(options.kv_rank, norm),
            "q_rank": options.q_rank,
            "q_latent_norm": rmsnorm.module(options.q_rank, norm) if options.q_rank else None})
