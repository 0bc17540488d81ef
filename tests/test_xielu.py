"""xIELU (activation=xielu): the formula written out, Hugging Face's module, where it may stand."""

from __future__ import annotations

import math

import pytest
import torch

import tfspec
from tfspec.nn.xielu import XIELU
from numerics import FLOAT32, assert_close

SPEC = """model m
embedding tokens {{ vocab 20; dim 16; position none }}
decoder x 1 {{ position rotary; attention self heads=2 mask=causal; feedforward d_ff=32 activation={act} {kind} }}
{head}"""


def test_xielu_is_its_formula():
    torch.manual_seed(0)
    module = XIELU(beta=0.25, eps=-1e-4).double()
    with torch.no_grad():
        module.alpha_p.fill_(0.3), module.alpha_n.fill_(-0.2)
    x = torch.linspace(-6, 6, 97, dtype=torch.float64)
    alpha_p, alpha_n = math.log1p(math.exp(0.3)), 0.25 + math.log1p(math.exp(-0.2))
    expected = torch.tensor([alpha_p * v * v + 0.25 * v if v > 0 else (math.expm1(min(v, -1e-4)) - v) * alpha_n
                             + 0.25 * v for v in x.tolist()], dtype=torch.float64)
    assert_close(module(x), expected, FLOAT32)


def test_xielu_computes_what_hugging_faces_does_and_starts_where_the_paper_starts_it():
    from transformers.activations import XIELUActivation
    reference = XIELUActivation(dtype=torch.float32)
    model = tfspec.compile(SPEC.format(act="xielu", kind="", head=""), seed=0)
    ours = model.decoder.layers[0].ffn.activation
    assert_close(ours.alpha_p, reference.alpha_p, FLOAT32)  # (theirs computed in float32, ours in float64)
    assert_close(ours.alpha_n, reference.alpha_n, FLOAT32)
    with torch.no_grad():  # trained values, away from where they start
        for p in (ours.alpha_p, ours.alpha_n):
            p.mul_(1.7).add_(0.1)
        reference.alpha_p.copy_(ours.alpha_p), reference.alpha_n.copy_(ours.alpha_n)
    x = torch.randn(4, 33) * 3
    assert_close(ours(x), reference(x), FLOAT32)


@pytest.mark.parametrize("kind, head, message", [
    ("kind=moe(4, 2)", "", "a moe feed-forward does not hold"),
    ("", "head tied(tokens) transform=xielu", "the head's transform does not hold"),
])
def test_a_trained_activation_is_refused_where_nothing_holds_its_parameters(kind, head, message):
    with pytest.raises(tfspec.SpecError) as info:
        tfspec.parse(SPEC.format(act="xielu" if not head else "gelu", kind=kind, head=head))
    assert message in info.value.message and "trains parameters of its own" in info.value.message
