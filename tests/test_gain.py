"""gain(init, scalar, trained): x · g in a norm's place -- LayerScale's diagonal per channel, or Gemma 4's
``layer_scalar``, one value held with the weights and never trained."""

import pytest
import torch

import tfspec
from tfspec.inspect.analysis import analyse
from tfspec.inspect.measure import measure
from tfspec.run.recipe import Recipe
from tfspec.run.trainer import _optimizer
from numerics import assert_close

WIRED = ("embedding tokens {{ vocab 40; dim 16; position none }}\n"
         "decoder x 2 {{\n position rotary\n x = x + {branch}\n"
         " x = x + feedforward(rmsnorm(x), d_ff=32)\n{stream} final rmsnorm\n}}\nhead tied(tokens)")
ATTENTION = "attention(rmsnorm(x), heads=2, mask=causal)"


def spec(branch: str | None = "init=0.1", stream: str | None = "init=1.5, scalar=true, trained=false"):
    """Two layers whose attention's output is scaled by ``gain(branch options)``, and the stream after each layer
    by ``gain(stream options)`` (None: no gain there)."""
    return tfspec.parse(WIRED.format(
        branch=ATTENTION if branch is None else f"gain({ATTENTION}{', ' + branch if branch else ''})",
        stream="" if stream is None else f" x = gain(x{', ' + stream if stream else ''})\n"))


def test_a_layer_scales_its_branch_per_channel_and_its_stream_by_one_scalar():
    model = tfspec.compile(spec(), seed=0).eval()
    layer = model.decoder.layers[0]
    branch, stream = (m for m in layer.modules() if type(m).__name__ == "Gain")
    assert branch.weight.shape == (16,) and branch.weight.requires_grad and torch.all(branch.weight == 0.1)
    assert stream.weight.shape == (1,) and not stream.weight.requires_grad and stream.weight.item() == 1.5
    with torch.no_grad():
        branch.weight.copy_(torch.linspace(-1, 1, 16))
        stream.weight.fill_(0.7)
    x = torch.randn(2, 5, 16)
    assert (layer.gain, layer.gain_1) == (branch, stream)
    h = x + torch.linspace(-1, 1, 16) * layer.self_attn(layer.norm(x))
    expected = 0.7 * (h + layer.ffn(layer.norm_1(h)))
    assert_close(layer(x), expected, 0)


def test_a_frozen_gain_keeps_its_value_through_training_and_a_trained_one_moves():
    model = tfspec.compile(spec(), seed=0)
    frozen = [m.weight for m in model.modules() if type(m).__name__ == "Gain" and m.weight.shape == (1,)]
    trained = [m.weight for m in model.modules() if type(m).__name__ == "Gain" and m.weight.shape == (16,)]
    before = [w.clone() for w in frozen + trained]
    tokens = torch.randint(0, 40, (4, 9))
    optimizer = _optimizer(model, Recipe("adamw", (0.9, 0.99), 1e-8, 0.1, "cosine", 1e-2, 0, 0.0, None, "test"))
    for _ in range(3):  # (weight decay too would move a gain the optimizer held)
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(tokens).flatten(0, 1), tokens.flatten()).backward()
        optimizer.step()
    assert all(torch.equal(w, b) for w, b in zip(frozen, before))
    assert all(not torch.equal(w, b) for w, b in zip(trained, before[len(frozen):]))


@pytest.mark.parametrize("branch, stream", [("", "scalar=true, trained=false"), ("trained=false", "scalar=true")])
def test_memory_is_what_autograd_keeps(branch, stream):
    """A trained gain keeps its input for its own gradient; a frozen one keeps nothing."""
    s = spec(branch, stream)
    assert analyse(s, seq_len=7, batch=2).total.memory == measure(s, {"decoder": 7}, batch=2).saved_bytes


def test_check_counts_a_frozen_gain_and_the_label_says_what_it_is():
    s = spec("", "scalar=true, trained=false")
    plain = spec(None, None)
    assert s.parameter_count() == plain.parameter_count() + 2 * (16 + 1)
    labels = [n.label for n in s.graph().ordered() if "gain" in n.label]
    assert labels == ["Norm (gain(init=1.0, scalar=false, trained=true))",
                      "Norm (gain(init=1.0, scalar=true, trained=false))"]


def test_a_bad_gain_is_located():
    with pytest.raises(tfspec.SpecError) as info:
        spec("scalar=2")
    assert "true or false" in info.value.message and info.value.line == 4
