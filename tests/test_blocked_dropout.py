"""Attention with dropout while training on the CPU runs in blocks of queries (``attend_in_blocks``).

Equal to the dense math path given the same dropout mask (``dropout_keep`` supplies it), with the same
gradients, for every mask, score bias and row-wise kind; and, with masks drawn, a correct keep rate and scale,
and a backward that replays the forward's draws.
"""

from __future__ import annotations

import pytest
import torch

import tfspec
from tfspec.nn.attention import Geometry, MultiHeadAttention, dropout_keep_mask
from tfspec.nn.masking import MaskSet
from tfspec.variants.masks import causal as causal_rule, window as window_rule
from numerics import FLOAT32, assert_close, close

P = 0.25


def spec(body: str, *, position: str = "", embedding_position: str = "learned(64)", kind: str = "decoder",
         attention: str = "attention self heads=4 mask=causal") -> str:
    return f"""
model blocked
defaults {{ residual pre; norm layernorm; dropout 0; attn_dropout {P} }}
embedding tokens {{ vocab 40; dim 32; position {embedding_position} }}
{kind} x 2 {{
  {position}
  {attention} {body}
  feedforward d_ff=48
  final layernorm
}}
head tied(tokens)
"""


CASES = {  # name -> (spec text, extra inputs given the tokens (batch, length))
    "causal": (spec(""), {}),
    "causal, grouped heads": (spec("kv_heads=2"), {}),
    "causal + padding": (spec("", attention="attention self heads=4 mask=causal + padding"), "padding"),
    "padding alone (encoder)": (spec("", kind="encoder", attention="attention self heads=4 mask=padding"),
                                "padding"),
    "no mask (encoder)": (spec("", kind="encoder", attention="attention self heads=4"), {}),
    "window, not in bands": (spec("", attention="attention self heads=4 mask=causal + window(30)"), {}),
    "sink": (spec("", attention="attention self heads=4 mask=sink(2, 5)"), {}),
    "prefix": (spec("", kind="encoder", attention="attention self heads=4 mask=prefix"), "prefix"),
    "document": (spec("", attention="attention self heads=4 mask=causal + document"), "document"),
    "alibi": (spec("", position="position alibi", embedding_position="none"), {}),
    "t5 (a learned bias the stack owns)": (spec("", position="position t5", embedding_position="none"), {}),
    "kerple (a learned bias per layer)": (spec("", position="position kerple", embedding_position="none"), {}),
    "shaw (enters the values)": (spec("", position="position shaw(4)", embedding_position="none"), {}),
    "rotary": (spec("", position="position rotary", embedding_position="none"), {}),
    "softcap": (spec("kind=softcap(5)"), {}),
    "sinks": (spec("kind=sinks"), {}),
    "sigmoid": (spec("kind=sigmoid(37)"), {}),
    "topk": (spec("kind=topk(6)"), {}),
    "additive": (spec("kind=additive"), {}),
}


def inputs(extra, tokens: torch.Tensor) -> dict:
    batch, length = tokens.shape
    if extra == "padding":
        return dict(padding_mask=torch.arange(length)[None] >= torch.tensor([[length], [length - 9]]))
    if extra == "prefix":
        return dict(prefix_lengths=torch.tensor([5, 19]))
    if extra == "document":
        return dict(document_ids=(torch.arange(length)[None] >= torch.tensor([[11], [23]])).long())
    return {}


def attentions(model) -> list[MultiHeadAttention]:
    return [m for m in model.modules() if isinstance(m, MultiHeadAttention)]


def keep_masks(model, batch: int, length: int, keys: int | None = None) -> None:
    """Give every attention a fixed keep mask of its own, read in parts as ``drop`` asks for them."""
    generator = torch.Generator().manual_seed(7)
    for attention in attentions(model):
        full = torch.rand(batch, attention.heads, length, keys or length, generator=generator) >= P

        def keep(shape, rows, keys, full=full):
            part = full[:, :, rows, keys]  # (top-k attention drops its k chosen weights: the first k columns)
            return part if part.shape[-1] == shape[-1] else full[:, :, rows, :shape[-1]]
        attention.dropout_keep = keep


def run(model, tokens, extra, block: int | None):
    for attention in attentions(model):
        attention.dropout_block = block
    model.zero_grad(set_to_none=True)
    logits = model(tokens, **inputs(extra, tokens))
    (logits.sin() * torch.linspace(-1, 1, logits.shape[-1])).sum().backward()
    return logits.detach(), {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("case", list(CASES))
def test_blocked_equals_dense_given_the_same_dropout_mask(case):
    text, extra = CASES[case]
    torch.manual_seed(0)
    model = tfspec.compile(text).train()
    with torch.no_grad():  # every weight away from its initialisation (a norm weight of exactly 1 hides mistakes)
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    tokens = torch.randint(0, 40, (2, 37))
    keep_masks(model, 2, 37)
    dense, dense_grads = run(model, tokens, extra, None)
    blocked, blocked_grads = run(model, tokens, extra, 8)
    assert_close(blocked, dense, FLOAT32)
    assert dense_grads.keys() == blocked_grads.keys()
    for name, grad in dense_grads.items():
        assert_close(blocked_grads[name], grad, 1e-4, msg=name)
    # and the mask matters: another keep mask gives another output
    for attention in attentions(model):
        attention.dropout_keep = lambda shape, rows, keys: torch.ones(shape, dtype=torch.bool)
    assert not close(run(model, tokens, extra, 8)[0], dense, 1e-4)


def test_cross_attention_in_blocks_equals_dense():
    text = f"""
model blocked_seq2seq
defaults {{ residual post; norm layernorm; dropout 0; attn_dropout {P} }}
embedding tokens {{ vocab 40; dim 32; position sinusoidal }}
encoder x 1 {{ attention self heads=4 mask=padding; feedforward d_ff=48 }}
decoder x 2 {{ attention self heads=4 mask=causal; attention cross heads=4 mask=padding; feedforward d_ff=48 }}
head tied(tokens)
"""
    torch.manual_seed(0)
    model = tfspec.compile(text).train()
    src, tgt = torch.randint(0, 40, (2, 29)), torch.randint(0, 40, (2, 35))
    padding = torch.arange(29)[None] >= torch.tensor([[29], [17]])
    generator = torch.Generator().manual_seed(1)
    for attention in attentions(model):
        keys = 29 if attention.cross or attention in attentions(model.encoder) else 35
        queries = 29 if attention in attentions(model.encoder) else 35
        full = torch.rand(2, 4, queries, keys, generator=generator) >= P
        attention.dropout_keep = lambda shape, rows, keys, full=full: full[:, :, rows, keys]

    def run(block):
        for attention in attentions(model):
            attention.dropout_block = block
        model.zero_grad(set_to_none=True)
        logits = model(src, tgt, src_padding_mask=padding)
        logits.square().mean().backward()
        return logits.detach(), [p.grad.clone() for p in model.parameters()]

    (dense, dense_grads), (blocked, blocked_grads) = run(None), run(6)
    assert_close(blocked, dense, FLOAT32)
    for grad, expected in zip(blocked_grads, dense_grads):
        assert_close(grad, expected, 1e-4)


def test_blocked_equals_the_formula():
    """One causal attention by hand: softmax(q k^T / sqrt(d) + causal) ∘ keep / (1 - p) v."""
    torch.manual_seed(0)
    attention = MultiHeadAttention(Geometry(16, 2, 2, 8), dropout=P, masks=MaskSet([(causal_rule, {}, ())], fused_causal=True)
                                   ).train()
    attention.dropout_block = 4
    x = torch.randn(3, 21, 16, requires_grad=True)
    keep = torch.rand(3, 2, 21, 21) >= P
    attention.dropout_keep = lambda shape, rows, keys: keep[:, :, rows, keys]
    y = attention(x)
    q, k, v = (t.view(3, 21, 2, 8).transpose(1, 2) for t in attention.qkv(x).split(16, dim=-1))
    scores = q @ k.transpose(-1, -2) / 8 ** 0.5
    scores = scores.masked_fill(~torch.ones(21, 21, dtype=torch.bool).tril(), float("-inf"))
    mixed = (scores.softmax(-1) * keep / (1 - P)) @ v
    expected = attention.out(mixed.transpose(1, 2).reshape(3, 21, 16))
    assert_close(y, expected, FLOAT32)
    grad = torch.autograd.grad(y.square().sum(), x)[0]
    assert_close(grad, torch.autograd.grad(expected.square().sum(), x)[0], FLOAT32)


def one_hot_attention(length: int, rules: list, band=None) -> MultiHeadAttention:
    """One head whose weights are uniform over the keys it sees and whose values are one-hot, so its output
    row i is keep_ij / ((1 - p) · seen_i) at key j: the dropout mask, read off the output."""
    masks = MaskSet([(r, o, ()) for r, o in rules], fused_causal=rules == [causal_rule], band=band)
    attention = MultiHeadAttention(Geometry(length, 1, 1, length, bias=False, out_bias=False), dropout=P, masks=masks).train()
    attention.dropout_block = 16
    with torch.no_grad():
        attention.qkv.weight.zero_()
        attention.qkv.weight[2 * length:] = torch.eye(length)
        attention.out.weight.copy_(torch.eye(length))
    return attention


LENGTH = 96
PATTERNS = {  # name -> (mask rules, band, the keys each query sees)
    "no mask, in blocks": ([], None, torch.ones(LENGTH, LENGTH, dtype=torch.bool)),
    "causal, in blocks": ([(causal_rule, {})], None, torch.ones(LENGTH, LENGTH, dtype=torch.bool).tril()),
    "window, in bands": ([(window_rule, {"k": 5})], (4, 4),
                         (torch.arange(LENGTH)[:, None] - torch.arange(LENGTH)[None]).abs() < 5),
}


@pytest.mark.parametrize("pattern", list(PATTERNS))
def test_drawn_masks_keep_at_the_rate_and_scale_and_backward_replays_them(pattern):
    rules, band, allowed = PATTERNS[pattern]
    attention = one_hot_attention(LENGTH, rules, band)
    x = torch.eye(LENGTH)[None].repeat(2, 1, 1).requires_grad_()
    torch.manual_seed(3)
    y = attention(x)
    scaled = y.detach() * (1 - P) * allowed.sum(-1, keepdim=True)  # the keep mask: 0 or 1
    assert_close(scaled, scaled.round(), 1e-4)
    keep = scaled.round().bool()
    assert not (keep & ~allowed).any()  # never a key the mask hides
    rate = keep.float().sum() / (2 * allowed.sum())
    assert abs(rate - (1 - P)) < 4 * (P * (1 - P) / (2 * allowed.sum())) ** 0.5, rate
    # blocks draw masks of their own: no block repeats another's
    assert not torch.equal(keep[0, :16], keep[0, 16:32])
    # backward recomputes each block: it must apply the same mask as forward. y = A x (x the identity's rows
    # feeding values), so d(sum(g · y))/dx through the values is A^T g, with A read off the output above
    g = torch.randn_like(y)
    (grad,) = torch.autograd.grad((y * g).sum(), x)
    assert_close(grad, y.detach().transpose(1, 2) @ g, FLOAT32)


def test_blocks_keep_what_grows_with_n_times_the_block():
    """What autograd keeps for a training forward with dropout: the dense path keeps the n² probabilities and
    dropout masks; in blocks, only the inputs of each block and its output."""
    def kept(block: int | None, length: int) -> int:
        torch.manual_seed(0)
        model = tfspec.compile(spec("", embedding_position=f"learned({length})")).train()
        for attention in attentions(model):
            attention.dropout_block = block
        storages: dict = {}
        parameters = {p.untyped_storage()._cdata for p in model.parameters()}

        def pack(t):
            storage = t.untyped_storage()
            if storage._cdata not in parameters:
                storages[storage._cdata] = storage.nbytes()
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            model(torch.randint(0, 40, (1, length)))
        return sum(storages.values())

    dense, blocked = kept(None, 512), kept(32, 512)
    attention_dense = 2 * 4 * 512 * 512 * 4  # 2 layers, 4 heads: at least the float probabilities
    assert dense > attention_dense
    assert blocked < dense / 8, (blocked, dense)


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_keep_masks_keep_at_the_rate_in_every_lane_and_scale_to_the_mean(p):
    """Four 16-bit lanes come from each 64-bit draw: each lane must keep at 1 - p (a lane of fewer random bits
    would not), and the scale makes the kept mean the input's."""
    torch.manual_seed(0)
    keep, scale = dropout_keep_mask((1 << 20,), p)
    dropped = round(p * 65536)
    assert scale == 65536 / (65536 - dropped) and abs(dropped / 65536 - p) <= 1 / 65536
    spread = 4 * (p * (1 - p) / (1 << 18)) ** 0.5  # four standard deviations of one lane's rate
    for lane in range(4):
        assert abs(keep[lane::4].float().mean() - (1 - p)) < spread, lane
    assert abs(keep.float().mean() * scale - 1) < 4 * spread
    assert not torch.equal(keep, dropout_keep_mask((1 << 20,), p)[0])  # drawn anew each call


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_a_keep_mask_in_the_weights_dtype_keeps_what_the_bool_one_does(dtype):
    """Attention multiplies by a mask in its weights' dtype, written by the comparison itself: the same draws
    must keep the same elements as a bool mask, with ones and zeros only."""
    torch.manual_seed(1)
    keep, scale = dropout_keep_mask((3, 5, 77), 0.3)
    torch.manual_seed(1)
    numbers, same_scale = dropout_keep_mask((3, 5, 77), 0.3, dtype=dtype)
    assert numbers.dtype == dtype and same_scale == scale
    assert torch.equal(numbers, keep.to(dtype)) and 0 < keep.float().mean() < 1


@pytest.mark.parametrize("width, heads, rows", [(64, 4, 64), (32, 8, 16), (768, 12, 256), (4096, 32, 256)])
def test_a_block_holds_four_head_widths_of_queries(width, heads, rows):
    """What a block holds for its backward (heads × rows × keys) stays within what a layer keeps without dropout
    (about its width × keys): 4 · head_dim queries a block, 16 at least, 256 at most."""
    model = tfspec.compile(f"embedding tokens {{ vocab 40; dim {width} }}\n"
                           f"decoder x 1 {{ attn_dropout 0.1; attention self heads={heads} mask=causal; "
                           "feedforward d_ff=8 }", device="meta")
    assert model.decoder.layers[0].self_attn.dropout_block == rows
