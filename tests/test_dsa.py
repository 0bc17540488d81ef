"""DeepSeek Sparse Attention (``kind=dsa``): its lightning indexer and selection against the definition written here
in float64, its own training objective, and cached and compiled decoding. DeepSeek-V3.2 itself is exact against
Hugging Face in ``test_import`` (its CONFIGS)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

import tfspec
from tfspec.nn.context import Context
from tfspec.run.decoding import Continuation
from numerics import FLOAT32, assert_close

SPEC = """
embedding tokens {{ vocab 40; dim 16; position none }}
decoder x 2 {{
  position rotary(interleaved=true)
  attention self heads=2 head_dim=8 mask=causal + padding \\
      kind=dsa(6, 4, topk={topk}, index_heads=3, index_dim=6, q_rank=5{more})
  feedforward d_ff=32
}}
head linear(40)
"""


def model_of(topk: int = 4, more: str = "", seed: int = 0):
    model = tfspec.compile(SPEC.format(topk=topk, more=more), seed=0)
    with torch.no_grad():  # far from the initialisation: scores of every size, few near ties
        for p in model.parameters():
            p.normal_(0.0, 0.5, generator=torch.Generator().manual_seed(seed + p.numel()))
    return model


def rotate_halves(x: torch.Tensor, positions: torch.Tensor, rotated: int, theta: float = 10000.0) -> torch.Tensor:
    """The first ``rotated`` features of ``x`` (..., n, d) turned by their positions, halves paired."""
    inv = 1.0 / theta ** (torch.arange(0, rotated, 2, dtype=torch.float64) / rotated)
    angles = positions.double()[:, None] * inv
    cos, sin = torch.cat((angles.cos(),) * 2, -1), torch.cat((angles.sin(),) * 2, -1)
    head, rest = x[..., :rotated], x[..., rotated:]
    first, second = head.chunk(2, dim=-1)
    return torch.cat((head * cos + torch.cat((-second, first), -1) * sin, rest), dim=-1)


def naive_selection(attention, x: torch.Tensor, allowed: torch.Tensor, topk: int) -> torch.Tensor:
    """Bool (batch, queries, keys): each query's topk allowed keys by Σ_h w_h · relu(q_h · k / √d), in float64."""
    indexer = attention.indexer
    x = x.double()
    batch, n, _ = x.shape
    latent = attention.q_latent_norm.double()(attention.q_down.double()(x))
    q = (latent @ indexer.q.weight.double().T).view(batch, n, indexer.heads, indexer.dim).transpose(1, 2)
    k = F.layer_norm(x @ indexer.k.weight.double().T, (indexer.dim,), indexer.k_norm.weight.double(),
                     indexer.k_norm.bias.double(), 1e-6)
    positions = torch.arange(n)
    q, k = rotate_halves(q, positions, attention.rope_dim), rotate_halves(k, positions, attention.rope_dim)
    w = (x @ indexer.weights.weight.double().T) / math.sqrt(indexer.heads)  # (batch, n, heads)
    scores = torch.relu(q @ k[:, None].transpose(-1, -2) / math.sqrt(indexer.dim))  # (batch, heads, n, n)
    index = (w.transpose(1, 2)[..., None] * scores).sum(dim=1).masked_fill(~allowed, float("-inf"))
    chosen = torch.zeros_like(allowed)
    for b in range(batch):
        for i in range(n):
            kept = [j for j in index[b, i].argsort(descending=True, stable=True).tolist() if allowed[b, i, j]]
            chosen[b, i, kept[:topk]] = True
    return chosen


def test_each_query_attends_to_the_topk_keys_the_indexer_ranks_highest():
    model = model_of(topk=4).double().eval()
    attention = model.decoder.layers[0].self_attn
    x = torch.randn(2, 11, 16, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    i = torch.arange(11)
    allowed = (i[None, :] <= i[:, None])[None].expand(2, -1, -1).clone()
    chosen = naive_selection(attention, x, allowed, 4)
    assert (chosen.sum(-1) == torch.clamp(i + 1, max=4)).all()  # as many as there are, up to topk
    # the output: plain latent attention over the chosen keys
    seen = []
    plain = attention.mix

    def recorded(q, k, v, mask, is_causal):
        seen.append(mask)
        return plain(q, k, v, mask, is_causal)

    attention.mix = recorded
    with torch.no_grad():
        ours = attention(x)
    del attention.mix
    assert torch.equal(seen[0][:, 0] == 0, chosen)
    selected = torch.where(chosen[:, None], 0.0, float("-inf"))
    with torch.no_grad():  # latent attention's queries, keys and values, softmax over the chosen keys alone
        q, k, v, *_ = attention.project_in_context(x, Context(torch.arange(11)[None]), None)
        weights = torch.softmax(q @ k.transpose(-1, -2) * attention.head_dim ** -0.5 + selected, dim=-1)
        expected = attention.out((weights @ v).transpose(1, 2).reshape(2, 11, -1))
    assert_close(ours, expected, 1e-9)


def test_with_topk_as_large_as_the_sequence_it_is_latent_attention():
    sparse = model_of(topk=64).eval()
    dense = tfspec.compile(SPEC.format(topk=64, more="").replace(
        "kind=dsa(6, 4, topk=64, index_heads=3, index_dim=6, q_rank=5)", "kind=latent(6, 4, q_rank=5)"), seed=0).eval()
    dense.load_state_dict({k: v for k, v in sparse.state_dict().items() if ".indexer." not in k})
    tokens = torch.randint(0, 40, (2, 13), generator=torch.Generator().manual_seed(2))
    padding = torch.zeros(2, 13, dtype=torch.bool)
    padding[1, :4] = True
    with torch.no_grad():
        assert_close(sparse(tokens, padding), dense(tokens, padding), FLOAT32)
        small = model_of(topk=2).eval()
        small.load_state_dict(sparse.state_dict())
        assert (small(tokens, padding) - sparse(tokens, padding)).abs().max() > 1e-3  # the selection matters


def test_the_indexer_learns_from_its_own_objective_alone():
    """The indexer's loss is KL(p ‖ softmax(index scores)) over the selected keys (p: the attention's distribution
    summed over heads, normalised), and it trains the indexer only: the language-modelling gradients of every other
    parameter are those of a model without it, and the indexer gets none from them."""
    model = model_of(topk=3).train()
    tokens = torch.randint(0, 40, (2, 9), generator=torch.Generator().manual_seed(3))
    logits = model(tokens)
    losses = model.auxiliary_losses()
    assert set(losses) == {"dsa_index"} and losses["dsa_index"] > 0
    lm = F.cross_entropy(logits[:, :-1].reshape(-1, 40), tokens[:, 1:].reshape(-1))
    lm.backward(retain_graph=True)
    from_lm = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    assert not any(".indexer." in n for n in from_lm)
    model.zero_grad()
    (lm + losses["dsa_index"]).backward()
    for n, p in model.named_parameters():
        if ".indexer." in n:
            assert p.grad is not None and p.grad.abs().sum() > 0, n
        else:
            assert_close(p.grad, from_lm[n], FLOAT32, msg=n)
    # the objective, written out for one layer's first query rows
    attention = model.decoder.layers[1].self_attn
    kept = {}
    plain = attention.indexer.loss

    def spy(q, k, mask, index, chosen, scale, padding):
        kept.update(q=q, k=k, mask=mask, index=index, chosen=chosen, scale=scale)
        return plain(q, k, mask, index, chosen, scale, padding)

    attention.indexer.loss = spy
    model(tokens)
    del attention.indexer.loss
    q, k, mask, index, chosen, scale = (kept[n] for n in ("q", "k", "mask", "index", "chosen", "scale"))
    p = torch.softmax((q.double() @ k.double().transpose(-1, -2)) * scale + mask.double(), -1).mean(1)
    chosen = chosen[:, 0]
    expected = []
    for b in range(2):
        for i in range(9):
            sel = chosen[b, i]
            log_q = torch.log_softmax(index[b, i][sel].double(), -1)
            target = p[b, i][sel]
            expected.append((target * (target.clamp(min=1e-300).log() - log_q)).sum())
    assert_close(attention.added_losses["dsa_index"], torch.stack(expected).mean(), 1e-5)


def test_cached_and_compiled_decoding_select_what_recomputation_selects(no_recompiles):
    """A KV cache keeps each key's indexer key: eager and compiled decoding of a left-padded prompt give the
    logits of recomputing the whole sequence, once the queries see more keys than they select."""
    model = model_of(topk=3).eval()
    prompt = torch.randint(0, 40, (2, 5), generator=torch.Generator().manual_seed(4))
    padding = torch.zeros(2, 5, dtype=torch.bool)
    padding[1, :2] = True
    new = torch.randint(0, 40, (2, 8), generator=torch.Generator().manual_seed(5))

    def decoded(**options) -> list[torch.Tensor]:
        steps = Continuation(model, prompt_padding_mask=padding, **options)
        with torch.no_grad():
            return [steps.feed(prompt)] + [steps.feed(new[:, t:t + 1]) for t in range(new.shape[1])]

    recomputed, eager = decoded(use_cache=False), decoded()
    compiled = decoded(compile="eager", max_len=13)
    for t, (a, b, c) in enumerate(zip(eager, compiled, recomputed)):
        assert_close(a, c, FLOAT32, msg=t)
        assert_close(b, c, FLOAT32, msg=t)
    assert no_recompiles["stats"]["unique_graphs"] == 1
