"""DeepSeek Sparse Attention's runtime module (``tfspec.variants.dsa``): latent attention whose queries each see only
the keys a lightning indexer ranks highest."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .attention import KVCache
from .context import Context
from .latent import LatentAttention
from .rotary import RotaryPositions
from .steps import Side


class LightningIndexer(nn.Module):
    """DeepSeek-V3.2's lightning indexer: ``heads`` small query heads of ``dim`` features from the query latent
    (``q``), one key of ``dim`` features per position (``k``, LayerNorm-ed: ``k_norm``), their first ``rotary_dim``
    features rotated with the attention's frequencies (halves paired), and a weight per head and query from the
    input (``weights``). A key's index score for a query is Σ_h w_h · relu(q_h · k / √dim)."""

    def __init__(self, width: int, q_rank: int, heads: int, dim: int, rotary: RotaryPositions | None,
                 learns: bool = False) -> None:
        super().__init__()
        self.heads, self.dim = heads, dim
        self.learns = learns  # training differentiates its scores (for its own loss; its inputs are detached)
        self.q = nn.Linear(q_rank, heads * dim, bias=False)
        self.k = nn.Linear(width, dim, bias=False)
        self.k_norm = nn.LayerNorm(dim, eps=1e-6)
        self.weights = nn.Linear(width, heads, bias=False)
        self.rotary = None if rotary is None else RotaryPositions(rotary.rotary_dim, rotary.theta, False, rotary.scaling)
        if self.rotary is not None:  # tables of its own in every call, whatever layout the attention's have
            self.rotary.key += ":indexer"

    def differentiated(self):
        """Where its scores are differentiated: while training a model that trains it, else nowhere."""
        return torch.set_grad_enabled(self.learns and self.training and torch.is_grad_enabled())

    def forward(self, x: Tensor, q_latent: Tensor, ctx: Context) -> dict[str, Tensor]:
        """Per position: the queries ``(batch, heads, dim, n)``, their heads' weights ``(batch, heads, n)`` and
        the key ``(batch, dim, n)`` (which a KV cache keeps), positions last. Its inputs are detached: the
        selection is not differentiated, so nothing the attention computes trains the indexer, nor it them."""
        with self.differentiated():
            return self.project(x.detach(), q_latent.detach(), ctx)

    def project(self, x: Tensor, q_latent: Tensor, ctx: Context) -> dict[str, Tensor]:
        batch, length, _ = x.shape
        q = self.q(q_latent).view(batch, length, self.heads, self.dim).transpose(1, 2)
        k = self.k_norm(self.k(x))[:, None]
        if self.rotary is not None:
            tables = ctx.once(f"{self.rotary.key}:{x.dtype}", lambda: self.rotary.tables(ctx.positions, x.dtype))
            q, k = self.rotary.rotate(q, k, tables)
        weights = self.weights(x).float() * self.heads ** -0.5
        return {"index_queries": q.transpose(2, 3), "index_weights": weights.transpose(1, 2),
                "index_keys": k[:, 0].transpose(1, 2)}

    def select(self, queries: Side, keys: Side, mask: Tensor | None, topk: int) -> tuple[Tensor, Tensor]:
        """Bool ``(batch, 1, queries, keys)``: each query's ``topk`` keys by index score, among those the additive
        ``mask`` ``(batch or 1, 1, queries, keys)`` allows (all where there are fewer), and the index scores
        ``(batch, queries, keys)``, float32. Equal scores rank the earlier key first, so a query selects the same
        keys over a KV cache as over the whole sequence."""
        with self.differentiated():
            q = queries.extras["index_queries"].permute(0, 3, 1, 2)  # (batch, n, heads, dim)
            k = keys.extras["index_keys"]  # (batch, dim, keys)
            scores = F.relu(torch.matmul(q.float(), k.float().unsqueeze(1)) * self.dim ** -0.5)  # (.., heads, keys)
            index = torch.matmul(queries.extras["index_weights"].transpose(1, 2).unsqueeze(-2), scores).squeeze(-2)
            if mask is not None:  # the keys no head may see last (a score bias, ALiBi's, ranks none of them)
                with torch.no_grad():  # (added, so that backward keeps no condition)
                    floor = torch.finfo(index.dtype).min
                    hidden = torch.zeros_like(index).masked_fill_(mask.amax(dim=1) == torch.finfo(mask.dtype).min,
                                                                   floor)
                index = index + hidden
        with torch.no_grad():
            order = index.sort(dim=-1, descending=True, stable=True).indices[..., :topk]
            chosen = torch.zeros(index.shape, dtype=torch.bool, device=index.device).scatter(-1, order, True)
        return chosen[:, None], index

    def loss(self, q: Tensor, k: Tensor, mask: Tensor, index: Tensor, chosen: Tensor, scale: float,
             padding: Tensor | None) -> Tensor:
        """DeepSeek-V3.2's indexer objective: KL(p ‖ softmax(index scores)) over each query's selected keys, p the
        attention's distribution there summed over its heads and normalised (not differentiated), averaged over
        the real queries. ``q``, ``k``: the attention's ``(batch, heads, n, head_dim)``; ``mask``: its additive
        mask with the selection."""
        with torch.no_grad():
            scores = (q.float() @ k.float().transpose(-1, -2)) * scale + mask.float()
            target = torch.softmax(scores, dim=-1).mean(dim=1)  # (batch, n, keys): 0 where not selected
            # the keys not selected: far below any score, finite (so that their 0 · log q is 0)
            unselected = torch.where(chosen[:, 0], 0.0, -1e30)
        predicted = torch.log_softmax(index + unselected, dim=-1)
        divergence = (torch.xlogy(target, target) - target * predicted).sum(dim=-1)  # (batch, n)
        if padding is not None and padding.shape == divergence.shape:
            real = (~padding).float()
            return (divergence * real).sum() / real.sum().clamp(min=1.0)
        return divergence.mean()

    def extra_repr(self) -> str:
        return f"heads={self.heads}, dim={self.dim}"


class SparseLatentAttention(LatentAttention):
    """The core (torch only; ``tfspec emit`` copies it): ``LatentAttention`` whose queries each attend to the
    ``topk`` keys its ``indexer`` ranks highest among those its masks allow. A KV cache keeps each position's
    indexer key beside its latent and shared rotated key. A training call with ``index_loss`` records the
    indexer's objective, weighted by it, in ``added_losses`` (``CompiledModel.auxiliary_losses``)."""

    dropout_block = None  # the indexer selects among a query's whole row of keys

    def __init__(self, geometry, topk: int, index_heads: int, index_dim: int, index_rotates: bool = True,
                 index_loss: float = 1.0, **latent) -> None:
        super().__init__(geometry, **latent)
        width = geometry.width
        self.topk, self.index_loss = topk, index_loss
        self.indexer = LightningIndexer(width, self.q_rank, index_heads, index_dim,
                                        self.position if index_rotates else None, learns=index_loss > 0)
        self.added_losses: dict[str, Tensor] | None = None  # from its last training call: the indexer's loss

    def project_in_context(self, x: Tensor, ctx: Context, cache: KVCache | None):
        q_latent = self.q_latent_norm(self.q_down(x))
        q = self.split(self.q_up(q_latent), self.heads)
        q_pass, q_rot = q.split((self.head_dim - self.rope_dim, self.rope_dim), dim=-1)
        latent, k_rot = self.kv_down(x).split((self.kv_rank, self.rope_dim), dim=-1)
        latent, k_rot = self.kv_latent_norm(latent)[:, None], k_rot[:, None]  # (batch, 1, length, features)
        q_rot, k_rot, extras = self.encode(q_rot, k_rot, x, ctx, cache)
        index = self.indexer(x, q_latent, ctx)
        extras = {**extras, "index_keys": index.pop("index_keys")}
        positions, padding = ctx.positions, ctx.padding if self.masks.reads_padding else None
        key_extras = extras
        if cache is not None:  # the latent, the shared rotated key and the indexer's key
            latent, k_rot, positions, padding, key_extras = cache.append(latent, k_rot, positions, padding, extras)
        k, v = self.expand(latent, k_rot)
        return torch.cat((q_pass, q_rot), dim=-1), k, v, Side(ctx.positions, {**extras, **index}), \
            Side(positions, key_extras), padding

    def attend(self, q: Tensor, k: Tensor, v: Tensor, ctx: Context, queries: Side, keys: Side,
               padding: Tensor | None) -> Tensor:
        """The masks' additive mask (built once per call for every layer with the same masks), less the keys the
        indexer does not select, then ``mix``."""
        dtype = self.mask_dtype(q)
        mask = self.masks.additive(ctx, q.shape[2], k.shape[2], dtype, q.device, padding,
                                   lambda: self.score_terms(queries, keys), "+".join(s.key for s in self.steps()),
                                   keys.positions)
        chosen, index = self.indexer.select(queries, keys, mask, self.topk)
        # added, not selected with ``where``: a mask carrying trained score terms (KERPLE's) then keeps no condition
        # for backward; a key hidden twice is -inf, and each query keeps at least one key (the best it may see)
        dropped = torch.zeros(chosen.shape, dtype=dtype, device=q.device).masked_fill_(~chosen, torch.finfo(dtype).min)
        mask = dropped if mask is None else mask + dropped
        self.added_losses = None
        if self.training and self.index_loss and torch.is_grad_enabled():
            scale = self.scale if self.scale is not None else q.shape[-1] ** -0.5
            self.added_losses = {"dsa_index": self.index_loss * self.indexer.loss(q, k, mask, index, chosen, scale,
                                                                                  ctx.padding)}
        return self.mix_at(q, k, v, mask, queries, keys)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, topk={self.topk}"
