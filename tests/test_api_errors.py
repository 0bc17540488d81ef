"""The Python API names a wrong argument in a ValueError (TypeError for the wrong kind of value), never a raw
torch error, an AssertionError or silent garbage (Hardening II's reproducers)."""

from __future__ import annotations

import math

import pytest
import torch

import tfspec
from tfspec.run.decoding import Continuation, beam_search, sample

ENCDEC = """model tiny
embedding tokens { vocab 20; dim 16; position sinusoidal }
encoder x 1 { attention self heads=2 mask=padding; feedforward d_ff=16 }
decoder x 1 { attention self heads=2 mask=causal; attention cross heads=2; feedforward d_ff=16 }
head tied(tokens)
"""
DECODER = """model lm
embedding tokens { vocab 20; dim 16; position learned(32) }
decoder x 1 { attention self heads=2 mask=causal; feedforward d_ff=16 }
head tied(tokens)
"""


@pytest.mark.parametrize("arguments, error, message", [
    ({"dtype": "float8"}, ValueError, "dtype 'float8' is not one a model's weights can have"),
    ({"dtype": torch.int64}, ValueError, "dtype torch.int64 is not one a model's weights can have"),
    ({"dtype": 16}, TypeError, "dtype must be a torch.dtype or its name, not int"),
    ({"device": "bogus"}, ValueError, "device 'bogus' is not a device name"),
    ({"seed": 2 ** 70}, ValueError, "seed must be a whole number from 0 to 2**63 - 1"),
    ({"seed": -1}, ValueError, "seed must be a whole number"),
    ({"seed": 1.5}, ValueError, "seed must be a whole number"),
])
def test_compile_names_a_bad_argument(arguments, error, message):
    with pytest.raises(error, match=message.replace("*", r"\*")):
        tfspec.compile(DECODER, **arguments)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_compile_on_cuda_without_cuda_says_so():
    with pytest.raises(ValueError, match="this torch sees no CUDA device"):
        tfspec.compile(DECODER, device="cuda")


def test_compile_takes_dtype_names():
    assert next(tfspec.compile(DECODER, dtype="bfloat16", seed=0).parameters()).dtype == torch.bfloat16


@pytest.fixture(scope="module")
def encdec():
    return tfspec.compile(ENCDEC, seed=0).eval()


@pytest.mark.parametrize("damage, message", [
    (lambda m: m.double(), "memory is torch.float64 but the model computes in torch.float32"),
    (lambda m: m.masked_fill(torch.zeros_like(m, dtype=torch.bool).index_fill(1, torch.tensor([1]), True),
                             math.nan), "memory holds inf or NaN values"),
    (lambda m: m * math.inf, "memory holds inf or NaN values"),
])
def test_decode_refuses_memory_it_cannot_use(encdec, damage, message):
    src, tgt = torch.randint(0, 20, (2, 5)), torch.randint(0, 20, (2, 4))
    memory = encdec.encode(src)
    assert torch.isfinite(encdec.decode(tgt, memory)).all()
    with pytest.raises(ValueError, match=message):
        encdec.decode(tgt, damage(memory))


def test_extend_refuses_a_negative_offset():
    model = tfspec.compile(DECODER, seed=0).eval()
    with pytest.raises(ValueError, match="offset must be a whole number >= 0"):
        model.extend(torch.tensor([[1, 2]]), [{}], offset=-1)


@pytest.mark.parametrize("arguments, message", [
    ({"temperature": math.nan}, "temperature must be a finite number >= 0"),
    ({"temperature": -1.0}, "temperature must be a finite number >= 0"),
    ({"temperature": 1.0, "top_p": 0}, r"top_p must be a probability in \(0, 1\], got 0"),
    ({"temperature": 1.0, "top_p": 1.5}, "top_p must be a probability"),
    ({"temperature": 1.0, "top_k": 0}, "top_k must be a whole number >= 1"),
    ({"max_new": -1}, "max_new must be a whole number >= 0, got -1"),
    ({"max_new": 2.5}, "max_new must be a whole number"),
])
def test_sample_names_a_bad_argument(arguments, message):
    model = tfspec.compile(DECODER, seed=0).eval()
    with pytest.raises(ValueError, match=message):
        sample(Continuation(model), torch.tensor([[1, 2]]), **{"max_new": 3, **arguments})


@pytest.mark.parametrize("arguments, message", [({"beam": 0}, "beam must be a whole number >= 1"),
                                                ({"alpha": math.inf}, "alpha must be a finite number >= 0")])
def test_beam_search_names_a_bad_argument(arguments, message):
    model = tfspec.compile(DECODER, seed=0).eval()
    with pytest.raises(ValueError, match=message):
        beam_search(Continuation(model), torch.tensor([[1, 2]]), 3, eos=0, **arguments)


def test_a_temperature_too_small_for_floats_samples_the_argmax():
    model = tfspec.compile(DECODER, seed=0).eval()
    start = torch.tensor([[1, 2, 3]])
    tiny = sample(Continuation(model), start, 6, temperature=1e-300, generator=torch.Generator().manual_seed(0))
    assert tiny == sample(Continuation(model), start, 6)  # greedy
