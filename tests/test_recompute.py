"""A feed-forward keeps its activation's input alone for backward (``tfspec.nn.recompute.linear_of_activation``):
the activation's output is computed again where backward needs it. The gradients are those of plain autograd, bit
for bit (float32 and bfloat16 autocast, second derivatives, LoRA, checkpointed layers, experts), and the output is
freed exactly where the activation keeps only its input."""

from __future__ import annotations

import gc
import weakref

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import tfspec
from tfspec.nn.feedforward import FeedForward, Gated
from tfspec.nn.recompute import checkpointed, linear_of_activation
from numerics import FLOAT32, close

ACTIVATIONS = {"gelu": nn.GELU, "gelu_tanh": lambda: nn.GELU(approximate="tanh"), "silu": nn.SiLU,
               "relu": nn.ReLU, "swiglu": lambda: Gated(nn.SiLU())}
KEEPS_ITS_INPUT_ONLY = {"gelu", "gelu_tanh", "silu"}  # ReLU keeps its output; a gated unit its gate too


def network(name: str, dropout: float = 0.0, seed: int = 0) -> FeedForward:
    torch.manual_seed(seed)
    up = 32 if name == "swiglu" else 16
    ffn = FeedForward(8, 16, ACTIVATIONS[name](), up, True, dropout)
    for p in ffn.parameters():  # away from any initial value
        nn.init.normal_(p, std=0.5)
    return ffn.train()


def plain(ffn: FeedForward, x: torch.Tensor) -> torch.Tensor:
    """The same network, as autograd keeps it without recomputation."""
    return ffn.down(ffn.dropout(ffn.activation(ffn.up(x))))


def gradients(function, ffn, x, autocast: bool = False) -> list[torch.Tensor]:
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        y = function(ffn, x)
    weight = torch.randn(y.shape, generator=torch.Generator().manual_seed(3))
    return list(torch.autograd.grad((y.float() * weight).sum(), (x, *ffn.parameters())))


def output_kept(ffn, x) -> bool:
    """Is the activation's output still alive once the forward pass is done (that is: kept for backward)?"""
    outputs = []
    handle = ffn.activation.register_forward_hook(lambda module, args, out: outputs.append(weakref.ref(out)))
    y = ffn(x)
    handle.remove()
    # the young generations, where this forward's objects are (a full collection, of the whole suite's heap, took
    # seconds)
    gc.collect(1)
    kept = outputs[0]() is not None
    y.sum().backward()  # and backward still runs
    return kept


@pytest.mark.parametrize("name", list(ACTIVATIONS))
@pytest.mark.parametrize("autocast", [False, True])
def test_gradients_are_plain_autograds_bit_for_bit(name, autocast):
    ffn = network(name)
    x = torch.randn(3, 5, 8, requires_grad=True, generator=torch.Generator().manual_seed(1))
    for got, expected in zip(gradients(type(ffn).__call__, ffn, x, autocast), gradients(plain, ffn, x, autocast)):
        assert torch.equal(got, expected)


@pytest.mark.parametrize("name", list(ACTIVATIONS))
def test_the_output_is_freed_where_the_activation_keeps_only_its_input(name):
    x = torch.randn(4, 8, requires_grad=True)
    assert output_kept(network(name), x) == (name not in KEEPS_ITS_INPUT_ONLY)
    assert output_kept(network(name), x.detach()) is (name not in KEEPS_ITS_INPUT_ONLY)  # parameters need it too
    with torch.no_grad():  # nothing to keep at all
        assert network(name)(x).shape == (4, 8)


def test_with_dropout_between_the_two_the_dropped_values_are_kept_as_before():
    ffn = network("gelu", dropout=0.3)
    x = torch.randn(4, 8, requires_grad=True)
    torch.manual_seed(5)
    got = gradients(type(ffn).__call__, ffn, x)
    torch.manual_seed(5)
    assert all(torch.equal(a, b) for a, b in zip(got, gradients(plain, ffn, x)))
    assert output_kept(ffn, x) is False  # it is dropout's input, and dropout keeps only its mask
    assert output_kept(ffn.eval(), x) is False  # evaluation: no dropout, the recomputation again


def test_a_second_derivative_flows_through_the_recomputation():
    ffn = network("gelu")
    x = torch.randn(4, 8, requires_grad=True, generator=torch.Generator().manual_seed(2))

    def penalty(function):  # a gradient penalty: differentiates the input gradient again
        (grad_x,) = torch.autograd.grad(function(ffn, x).pow(2).sum(), x, create_graph=True)
        return torch.autograd.grad(grad_x.pow(2).sum(), list(ffn.parameters()))

    for got, expected in zip(penalty(type(ffn).__call__), penalty(plain)):
        assert close(got, expected, FLOAT32) and got.abs().sum() > 0


def test_hooks_already_in_place_still_receive_what_is_kept():
    """Activation checkpointing and ``save_on_cpu`` decide what backward keeps: inside them the recomputation
    hands them the activation's input, and the gradients stay exact."""
    ffn = network("gelu")
    x = torch.randn(4, 8, requires_grad=True, generator=torch.Generator().manual_seed(4))
    expected = gradients(plain, ffn, x)
    assert all(torch.equal(a, b) for a, b in zip(gradients(lambda f, t: checkpointed(f, t), ffn, x), expected))
    received = []

    def pack(t):
        received.append(t.shape)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = ffn(x)
    assert (4, 16) in received  # the activation's input (GELU's and the recomputation's): the outer hooks saw it
    with torch.autograd.graph.save_on_cpu():
        got = gradients(type(ffn).__call__, ffn, x)
    assert all(torch.equal(a, b) for a, b in zip(got, expected))
    assert y.shape == (4, 8)


def test_lora_on_the_down_projection_gets_the_recomputed_activation_too():
    peft = pytest.importorskip("peft")
    model = tfspec.compile("embedding t { vocab 20; dim 8 }\n"
                           "decoder x 1 { attention self heads=2 mask=causal; feedforward d_ff=16 activation=gelu }\n"
                           "head tied(t)", seed=0).train()
    lora = peft.get_peft_model(model, peft.LoraConfig(r=2, target_modules=["down"], init_lora_weights=False))
    ffn = lora.base_model.model.decoder.layers[0].ffn
    x = torch.randn(2, 3, 8, requires_grad=True, generator=torch.Generator().manual_seed(6))
    trained = [p for p in ffn.parameters() if p.requires_grad]
    assert len(trained) == 2  # LoRA's two matrices; the base weights frozen
    got = torch.autograd.grad(ffn(x).pow(2).sum(), [x, *trained])
    expected = torch.autograd.grad(plain(ffn, x).pow(2).sum(), [x, *trained])
    assert all(torch.equal(a, b) for a, b in zip(got, expected))
    assert output_kept(ffn, x) is False


def test_experts_keep_their_activations_input_alone_too():
    model = tfspec.compile("embedding t { vocab 20; dim 8 }\ndecoder x 1 { attention self heads=2 mask=causal; "
                           "feedforward d_ff=16 kind=moe(4, top=2) activation=gelu }\nhead tied(t)", seed=0).train()
    experts = model.decoder.layers[0].ffn.experts
    outputs = []
    handle = experts.activation.register_forward_hook(lambda m, a, out: outputs.append(weakref.ref(out)))
    tokens = torch.randint(0, 20, (2, 6), generator=torch.Generator().manual_seed(7))
    loss = model(tokens).pow(2).mean()
    handle.remove()
    gc.collect(1)
    assert outputs and all(ref() is None for ref in outputs)
    got = torch.autograd.grad(loss, list(experts.parameters()))

    def no_recomputation(linear, activation, h):
        return linear(activation(h))

    import tfspec.nn.moe as moe
    original, moe.linear_of_activation = moe.linear_of_activation, no_recomputation
    try:
        expected = torch.autograd.grad(model(tokens).pow(2).mean(), list(experts.parameters()))
    finally:
        moe.linear_of_activation = original
    assert all(torch.equal(a, b) for a, b in zip(got, expected))


def test_the_function_alone_takes_any_linear_map():
    h = torch.randn(5, 6, requires_grad=True)
    weight = torch.randn(3, 6, requires_grad=True)
    y = linear_of_activation(lambda a: F.linear(a, weight), F.silu, h)
    (gh, gw) = torch.autograd.grad(y.sum(), (h, weight))
    (eh, ew) = torch.autograd.grad(F.linear(F.silu(h), weight).sum(), (h, weight))
    assert torch.equal(gh, eh) and torch.equal(gw, ew)


@pytest.mark.parametrize("body", [
    "position t5; attention self heads=4 mask=causal + padding",  # a learned bias the stack owns, built once a call
    "position kerple; attention self heads=4 mask=causal + padding",  # a learned bias per layer
    "attention self heads=4 kind=forgetting mask=causal + padding",  # score terms from the content
    "attention self heads=4 mask=causal + padding steps=value_residual(0.5)",  # the first layer's values
    "mixer shortconv(3); attention self heads=4 mask=causal",
    "weight_sets 1; position t5; attention self heads=4 mask=causal + padding",  # one module runs every layer
])
def test_activation_checkpointing_gives_the_gradients_of_keeping_everything(body):
    """A layer run again in backward builds what it built the first time (the call's memo knows which layer
    built a mask with a learned bias), so it keeps what that run kept: equal gradients, not a checkpoint error."""
    model = tfspec.compile("embedding tokens { vocab 50; dim 32 }\n"
                           f"decoder x 3 {{ residual pre; {body}; feedforward d_ff=64 }}\nhead linear(50)",
                           seed=0).train()
    tokens = torch.randint(0, 50, (2, 9), generator=torch.Generator().manual_seed(0))

    def gradients(checkpointing: bool) -> dict:
        model.checkpoint_activations(checkpointing)
        model.zero_grad(set_to_none=True)
        model(tokens).pow(2).mean().backward()
        return {name: p.grad.clone() for name, p in model.named_parameters()}

    kept, remade = gradients(False), gradients(True)
    assert kept.keys() == remade.keys()
    for name in kept:
        assert torch.equal(kept[name], remade[name]), name
