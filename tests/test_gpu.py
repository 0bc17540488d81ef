"""The GPU tier (``make test-gpu``): the reference equalities, masking, cached decoding, mixed-precision training
and checkpoints on CUDA. Every test here is marked ``gpu`` and skipped where CUDA is not available, so
``make test`` stays green on CPU machines; ``TFSPEC_GPU_DEVICE=cpu`` runs the tier's logic on the CPU (a dry
run of the tests themselves, not a proof about any GPU).

Tolerances. float32: ≤ 1e-4 absolute against the reference in float32, TF32 off (CUDA kernels sum in other
orders than the CPU's; 1e-4 is far above that and far below any real difference). bfloat16: our model in
bf16 must be no further from the reference's float32 output than twice the distance of the reference itself
run in bf16, plus 1% of the output's scale: bf16 keeps 8 bits of mantissa, so the reference's own bf16 error
is the yardstick, and two implementations that round at different places may each land up to that far away.
"""

from __future__ import annotations

import math
import os

import pytest
import torch

import tfspec
from tfspec.run.decoding import Continuation
from tfspec.run.train import TrainConfig, resume, train

pytestmark = pytest.mark.gpu
DEVICE = os.environ.get("TFSPEC_GPU_DEVICE", "cuda")
T = pytest.importorskip("transformers")
T.logging.set_verbosity_error()

from test_import import CONFIGS, outputs, saved  # noqa: E402 - the CPU tier's cases, reused on the GPU
from numerics import assert_close


@pytest.fixture(autouse=True)
def exact_float32():
    """float32 means float32: no TF32 in matrix products or convolutions while a test runs."""
    if DEVICE != "cuda":
        yield
        return
    matmul, cudnn = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = matmul, cudnn


def on(device: str, dtype: torch.dtype, *models):
    return [m.to(device=device, dtype=dtype).eval() for m in models]


# ---------------------------------------------------------------- references on CUDA, fp32 and bf16

@pytest.mark.parametrize("cls", list(CONFIGS))
def test_every_hugging_face_family_is_equal_on_cuda_in_float32_and_close_in_bfloat16(tmp_path, cls):
    directory, reference = saved(tmp_path, cls)
    model = tfspec.from_pretrained(directory)
    ours, theirs = on(DEVICE, torch.float32, model, reference)
    got, expected, real = outputs(ours, theirs, cls, DEVICE, pooler_tolerance=1e-4)
    assert_close(got[real], expected[real], 1e-4)
    truth = expected[real].float()
    ours16, theirs16 = on(DEVICE, torch.bfloat16, model, reference)
    got16, expected16, _ = outputs(ours16, theirs16, cls, DEVICE, pooler_tolerance=None)
    own_error = (expected16[real].float() - truth).abs().max().item()
    error = (got16[real].float() - truth).abs().max().item()
    assert error <= 2 * own_error + 0.01 * truth.abs().max().item(), (error, own_error)


@pytest.mark.parametrize("norm_first", [False, True])
def test_torch_nn_transformer_is_equal_on_cuda(norm_first):
    from test_references import torch_transformer_spec
    from tfspec.interop.torch_transformer import from_torch_transformer

    torch.manual_seed(0)
    reference = torch.nn.Transformer(d_model=32, nhead=4, num_encoder_layers=2, num_decoder_layers=3,
                                     dim_feedforward=48, batch_first=True, norm_first=norm_first)
    model = tfspec.compile(torch_transformer_spec("pre" if norm_first else "post"))
    from_torch_transformer(model, reference)
    ours, theirs = on(DEVICE, torch.float32, model, reference)
    src, tgt = torch.randint(0, 23, (3, 9), device=DEVICE), torch.randint(0, 23, (3, 6), device=DEVICE)
    src_pad = torch.zeros(3, 9, dtype=torch.bool, device=DEVICE)
    src_pad[1, 6:] = src_pad[2, 2:] = True
    embed = ours.embeddings.tokens.tokens.weight
    with torch.no_grad():
        got = ours(src, tgt, src_pad)
        expected = theirs(embed[src], embed[tgt], tgt_mask=theirs.generate_square_subsequent_mask(6, device=DEVICE),
                          src_key_padding_mask=src_pad, memory_key_padding_mask=src_pad, tgt_is_causal=True)
    assert_close(got, expected, 1e-4)


# ---------------------------------------------------------------- masking, decoding
GPT = {"layers": 2, "d_model": 64, "heads": 4, "context": 64, "vocab": 300}


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_fully_masked_rows_stay_finite_in_half_precision(dtype):
    """A padded position whose every key is masked (causal + padding at the start of a left-padded row, a
    memory that is all padding) must not turn into NaN in bf16 or fp16, nor poison the rows that are real."""
    model = tfspec.compile("examples/reverse.tfs", seed=0).to(device=DEVICE, dtype=dtype).eval()
    src = torch.randint(5, 30, (2, 9), device=DEVICE)
    tgt = torch.randint(5, 30, (2, 6), device=DEVICE)
    src_padding = torch.zeros(2, 9, dtype=torch.bool, device=DEVICE)
    src_padding[1] = True  # the second source is all padding: its cross-attention has no key at all
    tgt_padding = torch.zeros(2, 6, dtype=torch.bool, device=DEVICE)
    tgt_padding[0, :3] = True  # left padding: the first queries see no unmasked key
    with torch.no_grad():
        out = model(src, tgt, src_padding_mask=src_padding, tgt_padding_mask=tgt_padding)
    assert torch.isfinite(out).all()


def test_cached_decoding_gives_the_logits_of_recomputation_on_cuda():
    model = tfspec.compile("examples/gpt2_small.tfs", overrides=GPT, seed=0).to(DEVICE).eval()
    tokens = torch.randint(0, 300, (3, 20), device=DEVICE)
    with torch.no_grad():
        full = model(tokens)
        steps = Continuation(model, use_cache=True)
        cached = [steps.feed(tokens[:, :8])]  # the prompt, then a token at a time
        cached += [steps.feed(tokens[:, i: i + 1]) for i in range(8, 20)]
    assert_close(torch.stack(cached, 1), full[:, 7:], 1e-4)


def test_compiled_greedy_decoding_steps_never_wait_for_the_gpu():
    """After the prompt, a compiled greedy step (feed a token, take the argmax) asks the device for nothing, so the
    host launches the next step's kernels while the GPU runs this one's: CUDA's sync debug mode raises at any call
    that would wait (a tensor made from a host number, a value read back). (Eager steps read each new token's id
    back, to refuse one outside the vocabulary with a clear error; a compiled step on a GPU does not.)"""
    model = tfspec.compile("examples/gpt2_small.tfs", overrides=GPT, seed=0).to(DEVICE).eval()
    tokens = torch.randint(0, 300, (2, 8), device=DEVICE)
    steps = Continuation(model, use_cache=True, compile=True, max_len=16)
    with torch.no_grad():
        token = steps.feed(tokens).argmax(-1, keepdim=True)
        token = steps.feed(token).argmax(-1, keepdim=True)  # (the compiled step compiles here)
        strict = torch.cuda.set_sync_debug_mode if DEVICE == "cuda" else lambda mode: None
        strict("error")
        try:
            for _ in range(4):
                token = steps.feed(token).argmax(-1, keepdim=True)
        finally:
            strict("default")
    assert steps.length == 13


# ---------------------------------------------------------------- training and checkpoints
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_training_under_autocast_tracks_float32(dtype):
    """bf16 autocast, and fp16 with its gradient scaler: finite losses that fall as float32's do, the last ten
    steps' mean within 5% of float32's."""
    def losses(dtype: str) -> list[float]:
        config = TrainConfig(task="copy", steps=60, batch=32, max_len=8, lr=3e-3, warmup=10, eval_every=60,
                             eval_size=32, device=DEVICE, dtype=dtype)
        run = train("examples/reverse.tfs", config, None, progress=False, log=lambda line: None)
        assert all(math.isfinite(loss) for loss in run.losses)
        return run.losses

    half, full = losses(dtype), losses("float32")
    last, first = sum(half[-10:]) / 10, sum(half[:10]) / 10
    assert last < 0.8 * first
    assert abs(last - sum(full[-10:]) / 10) <= 0.05 * last


@pytest.mark.parametrize("first, then", [(DEVICE, "cpu"), ("cpu", DEVICE)])
def test_a_checkpoint_moves_between_cuda_and_cpu(tmp_path, first, then):
    """Three steps on one device, three more on the other from the checkpoint: within rounding of six steps
    on the first (the devices sum in other orders)."""
    config = TrainConfig(task="copy", steps=6, batch=8, max_len=8, eval_every=100, eval_size=8, device=first)
    whole = train("examples/reverse.tfs", config, None, overrides={"layers": 1}, progress=False,
                  log=lambda line: None)
    train("examples/reverse.tfs", config, tmp_path / "run", overrides={"layers": 1}, progress=False,
          log=lambda line: None, stop_after=3)
    continued = resume(tmp_path / "run", device=then, progress=False, log=lambda line: None)
    assert continued.step == 6 and next(continued.model.parameters()).device.type == torch.device(then).type
    assert continued.losses == pytest.approx(whole.losses[3:], rel=1e-3)


def test_new_attention_steps_and_a_mixer_decode_on_cuda_as_they_recompute():
    """Forgetting attention (its float32 score terms beside bfloat16 activations), differential attention, value
    residual learning and a short convolution's state: on the device, cached decoding gives the logits of
    recomputing, and bfloat16 stays near float32."""
    text = ("embedding tokens { vocab 50; dim 32 }\n"
            "decoder x 3 { residual pre; norm rmsnorm; position rotary; mixer shortconv(3)\n"
            "  attention self heads=4 kv_heads=2 kind=forgetting mask=causal + padding steps=value_residual(0.5)\n"
            "  attention self heads=4 kv_heads=2 kind=differential mask=causal + padding\n"
            "  feedforward d_ff=64 activation=squared_relu; final rmsnorm }\nhead linear(50)")
    model = tfspec.compile(text, seed=0, device=DEVICE).eval()
    tokens = torch.randint(0, 50, (2, 12), generator=torch.Generator().manual_seed(0)).to(DEVICE)
    with torch.no_grad():
        cached, full = Continuation(model), Continuation(model, use_cache=False)
        pairs = [(cached.feed(tokens[:, :5]), full.feed(tokens[:, :5]))]
        pairs += [(cached.feed(tokens[:, i:i + 1]), full.feed(tokens[:, i:i + 1])) for i in range(5, 12)]
        for a, b in pairs:
            assert_close(a, b, 1e-4)
        exact = model(tokens).float()
        low = model.to(torch.bfloat16)(tokens).float()
    assert (low - exact).abs().max() <= 0.05 * exact.abs().max()
