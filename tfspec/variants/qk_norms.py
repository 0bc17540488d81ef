"""Queries and keys RMS-normed elsewhere than ``qk_norm=`` norms them (each head's, once projected, as Qwen3):

- ``full_qk_norm``: all heads' queries, and all key heads' keys, at once before they are split into heads, one
  weight per feature of the whole projection (OLMo 2, OLMoE, OLMo 3);
- ``rotated_qk_norm``: each head's queries and keys once the position scheme has rotated them, before a KV cache
  keeps the keys (Hunyuan's; Llama 4's and NanoChat's without a weight).

    decoder x 16 { attention self heads=16 mask=causal + padding steps=full_qk_norm(1e-6); ... }

An attention norms its queries and keys once: with ``qk_norm=`` or one of these. One reading another layer's keys
(``kv_from``) norms its queries alone, the keys normed where they were made.
"""

from pydantic import BaseModel, ConfigDict, Field

from ..registry import (ATTENTION_STEPS, NORMS, AttentionStepKind, Constructor, Problem, qk_norm_saved)


class QKNormStep(AttentionStepKind):
    """What both share: RMSNorms of ``eps`` with a weight or none, one for queries (``q``) and one for keys
    (``k``), each over ``widths`` features; ``rows`` of them per sequence."""

    positional = ("eps",)
    queries_only = True  # (a reader of another layer's keys norms its queries alone)
    norms_queries_and_keys = True
    rotated = False  # it norms the queries and keys once the positions have rotated them
    examples = ({}, {"eps": 1e-3, "weight": False})

    class Options(BaseModel):
        model_config = ConfigDict(extra="forbid", frozen=True)
        eps: float = Field(1e-6, gt=0, lt=1)
        weight: bool = True  # a trained scale per feature (false: x / rms(x) alone, Llama 4's "L2 norm")

    def widths(self, shape) -> dict[str, int]:
        raise NotImplementedError

    def sides(self, shape, batch: int, queries: int, keys: int) -> tuple[tuple[int, int], ...]:
        """((width, rows normed)) of a batch of sequences: the queries', then the keys' (none in a reader)."""
        raise NotImplementedError

    def normed(self, shape) -> dict[str, int]:
        """The widths of the norms it holds: the queries', and the keys' unless it reads another layer's."""
        widths = self.widths(shape)
        return {"q": widths["q"]} if shape.reads_keys else widths

    @staticmethod
    def norm(options):
        rmsnorm = NORMS["rmsnorm"]
        return rmsnorm, rmsnorm.Options(eps=options.eps, weight=options.weight)

    def params(self, shape, options):
        norm, norm_options = self.norm(options)
        return {f"{side}.{k}": p for side, width in self.normed(shape).items()
                for k, p in norm.params(width, norm_options).items()}

    def module(self, shape, options, source):
        from ..nn import qk_norm
        norm, norm_options = self.norm(options)
        norms = [norm.module(width, norm_options) for width in self.normed(shape).values()]
        return Constructor(getattr(qk_norm, self.runtime), tuple(norms))

    def flops(self, shape, options, queries, keys):
        return 0, NORMS["rmsnorm"].flops_per_element * sum(width * rows for width, rows in
                                                           self.sides(shape, 1, queries, keys))

    def saved(self, shape, options, batch, queries, keys, run):
        norm, norm_options = self.norm(options)
        return qk_norm_saved(norm, norm_options, self.sides(shape, batch, queries, keys), shape, batch, queries, keys,
                             run, rotated=self.rotated)


@ATTENTION_STEPS.register
class FullQKNorm(QKNormStep):
    name = "full_qk_norm"
    title = "full-width qk-norm"
    runtime = "FullQKNorm"
    doc = ("full_qk_norm(eps=1e-6, weight=true): all heads' queries, and all key heads' keys, RMS-normed at once "
           "before the split into heads (OLMo 2)")

    def widths(self, shape):
        return {"q": shape.q_width, "k": shape.kv_width}

    def sides(self, shape, batch, queries, keys):
        return ((shape.q_width, batch * queries),) + (() if shape.reads_keys else ((shape.kv_width, batch * keys),))


@ATTENTION_STEPS.register
class RotatedQKNorm(QKNormStep):
    name = "rotated_qk_norm"
    title = "qk-norm after positions"
    runtime = "RotatedQKNorm"
    rotated = True
    doc = ("rotated_qk_norm(eps=1e-6, weight=true): each head's queries and keys RMS-normed once the position "
           "scheme has rotated them (Hunyuan; Llama 4 and NanoChat without a weight)")

    def widths(self, shape):
        return {"q": shape.head_dim, "k": shape.head_dim}

    def sides(self, shape, batch, queries, keys):
        return ((shape.head_dim, batch * (queries * shape.heads + (0 if shape.reads_keys else keys * shape.kv_heads))),)

    def check(self, options, shape, kind):
        if shape.cross:
            return [Problem("rotated_qk_norm norms the queries and keys the positions have rotated: a "
                            "cross-attention's memory is not rotated", "norm them with qk_norm= instead")]
        return []
