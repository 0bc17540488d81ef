"""The qk-norm steps at run time (``tfspec.variants.full_qk_norm``, ``tfspec.variants.rotated_qk_norm``): norms of
the queries and keys elsewhere than each head's projection, where ``qk_norm=`` acts. Torch only, so ``tfspec emit``
copies them."""

from __future__ import annotations

from torch import Tensor, nn

from .steps import AttentionStep


class QKNorms(AttentionStep):
    """A norm of queries, ``q``, and one of keys, ``k`` (None in an attention reading another layer's keys,
    normed where they were made)."""

    def __init__(self, q: nn.Module, k: nn.Module | None = None) -> None:
        super().__init__()
        self.q, self.k = q, k


class FullQKNorm(QKNorms):
    """All heads' queries, and all key heads' keys, normed at once before they are split into heads (OLMo 2's
    ``q_norm`` and ``k_norm``)."""

    def projected_queries(self, q: Tensor) -> Tensor:
        return self.q(q)

    def projected_keys(self, k: Tensor) -> Tensor:
        return self.k(k)


class RotatedQKNorm(QKNorms):
    """Each head's queries and keys normed once the position scheme has rotated them, before a KV cache keeps the
    keys (Hunyuan's ``query_layernorm``, Llama 4's and NanoChat's weightless norms)."""

    def fresh_queries(self, q: Tensor, ctx) -> Tensor:
        return self.q(q)

    def fresh_keys(self, k: Tensor, ctx) -> Tensor:
        return self.k(k)
