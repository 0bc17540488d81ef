"""Multi-head latent attention (``kind=latent``): a naive formula written here, the cache that keeps the latent,
what the analysis reports of it, its refusals, and DeepSeek-V3's example trained from the command line.
Equality with Hugging Face's DeepSeek-V2 and -V3 is in ``test_import.py``."""

from __future__ import annotations

import json

import pytest
import torch

import tfspec
from tfspec.inspect.analysis import analyse
from numerics import assert_close

SPEC = """embedding tokens {{ vocab 40; dim 24; position none }}
decoder x 2 {{ residual pre; position rotary(theta=100, interleaved=true)
  attention self heads=3 head_dim=10 kind=latent(8, 4{options}) mask=causal + padding
  feedforward d_ff=16 }}
head linear(40)"""


def perturbed(model):
    with torch.no_grad():
        g = torch.Generator().manual_seed(3)
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.5)
    return model


def naive(attention, x, positions):
    """The latent attention of one sequence ``x`` (length, width), position by position, from its weights."""
    heads, head_dim, rope, v_dim, rank = attention.heads, attention.head_dim, 4, attention.value_dim, 8
    rms = lambda t, w: t / torch.sqrt(t.pow(2).mean(-1, keepdim=True) + 1e-6) * w  # noqa: E731
    if attention.q_rank:  # (the projections are nn.Linear maps, biased where the spec says)
        q = attention.q_up(rms(attention.q_down(x), attention.q_latent_norm.weight))
    else:
        q = attention.q(x)
    down = attention.kv_down(x)
    latent, shared = rms(down[:, :rank], attention.kv_latent_norm.weight), down[:, rank:]
    up = (latent @ attention.kv_up.weight.T).view(len(x), heads, -1)

    def rotate(t, p):  # neighbours (2i, 2i+1) turned by p / 100^(2i/rope)
        angles = p / 100 ** (torch.arange(0, rope, 2) / rope)
        even, odd = t[..., 0::2], t[..., 1::2]
        return torch.stack((even * angles.cos() - odd * angles.sin(), even * angles.sin() + odd * angles.cos()),
                           -1).flatten(-2)

    out = torch.zeros(len(x), heads * v_dim)
    for h in range(heads):
        for i in range(len(x)):
            query = q[i].view(heads, head_dim)[h]
            query = torch.cat((query[:head_dim - rope], rotate(query[head_dim - rope:], positions[i])))
            scores = torch.stack([torch.cat((up[j, h, :head_dim - rope], rotate(shared[j], positions[j]))) @ query
                                  for j in range(i + 1)]) / head_dim ** 0.5
            weights = scores.softmax(0)
            out[i, h * v_dim:(h + 1) * v_dim] = sum(w * up[j, h, head_dim - rope:] for j, w in enumerate(weights))
    return attention.out(out)


@pytest.mark.parametrize("options", ["", ", q_rank=6, v_dim=5"])
def test_latent_attention_is_the_formula(options):
    """Queries (directly or through their bottleneck), keys and values expanded from the normed latent, one rotated
    key shared by every head, the rotary part of each head's query and key only."""
    model = perturbed(tfspec.compile(SPEC.format(options=options), seed=0)).eval()
    attention = model.decoder.layers[0].self_attn
    x = torch.randn(1, 7, 24, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert_close(attention(x)[0], naive(attention, x[0], torch.arange(7.0)), 1e-4)


def test_the_cache_keeps_the_latent_and_decodes_as_recomputation():
    from tfspec.run.decoding import Continuation
    model = perturbed(tfspec.compile(SPEC.format(options=", q_rank=6"), seed=0)).eval()
    tokens = torch.randint(0, 40, (2, 9), generator=torch.Generator().manual_seed(2))
    padding = torch.zeros(2, 9, dtype=torch.bool)
    padding[1, :3] = True  # a left-padded prompt
    with torch.no_grad():
        cached = Continuation(model, use_cache=True, prompt_padding_mask=padding[:, :5])
        full = Continuation(model, use_cache=False, prompt_padding_mask=padding[:, :5])
        pairs = [(cached.feed(tokens[:, :5]), full.feed(tokens[:, :5]))]
        pairs += [(cached.feed(tokens[:, i:i + 1]), full.feed(tokens[:, i:i + 1])) for i in range(5, 9)]
    for a, b in pairs:
        assert_close(a, b, 1e-4)
    for layer in cached.cache:
        slot = layer["self_attn"]
        # the latent (kv_rank 8) and the rotated shared key (rope_dim 4), one "head": not 3 heads' keys and values
        assert slot.k.shape[:2] == (2, 1) and slot.k.shape[-1] == 8 and slot.v.shape[-1] == 4 and len(slot) == 9
    analysed = analyse(model.spec, seq_len=9, batch=2)
    assert analysed.kv_cache_bytes == 2 * 2 * 9 * (8 + 4) * 4  # layers, batch, tokens, latent + shared key, fp32
    assert analysed.kv_cache_multi_head_bytes == 2 * 2 * 9 * 3 * (10 + 6) * 4  # each head's key (10), value (6)


@pytest.mark.parametrize("attention, message", [
    ("attention self heads=3 kv_heads=1 head_dim=10 kind=latent(8, 4)", "kv_heads=1 has no meaning"),
    ("attention self heads=3 head_dim=4 kind=latent(8, 4)", "rope_dim=4 leaves none of head_dim=4"),
    ("attention self heads=3 head_dim=10 kind=latent(8, 4) qk_norm=rmsnorm", "normalises its compressed latents"),
])
def test_what_latent_attention_cannot_take_is_a_located_error(attention, message):
    text = f"embedding t {{ vocab 40; dim 24 }}\ndecoder x 1 {{ {attention} mask=causal; feedforward d_ff=8 }}"
    with pytest.raises(tfspec.SpecError) as info:
        tfspec.parse(text)
    assert message in info.value.message and info.value.line == 2


def test_latent_cross_attention_is_refused():
    text = ("embedding t { vocab 40; dim 24 }\nencoder x 1 { attention self heads=3; feedforward d_ff=8 }\n"
            "decoder x 1 { attention self heads=3 mask=causal; attention cross heads=3 head_dim=10 "
            "kind=latent(8, 4); feedforward d_ff=8 }")
    with pytest.raises(tfspec.SpecError, match="cross-attention reads them from the memory"):
        tfspec.parse(text)


def test_deepseek_v3_trains_from_the_command_line_and_summary_shows_its_cache(tmp_path, capsys):
    """The DeepSeek-V3 example at test size: three dense layers, then a mixture; latent attention with YaRN."""
    from tfspec.cli import main
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("latent attention keeps a small cache of each token. " * 40)
    sizes = {"layers": 4, "d_model": 32, "heads": 2, "kv_rank": 8, "q_rank": 8, "nope_dim": 4, "rope_dim": 4,
             "v_dim": 4, "d_ff": 8, "dense_d_ff": 16, "experts": 4, "top": 2, "groups": 2, "top_groups": 1,
             "vocab": 300}
    settings = [a for k, v in sizes.items() for a in ("--set", f"{k}={v}")]
    assert main(["train", "examples/deepseek_v3.tfs", *settings, "--data", str(corpus), "--seq-len", "16",
                 "--steps", "4", "--batch", "4", "--eval-every", "4", "--eval-size", "4", "--log-every", "1",
                 "--out", str(tmp_path / "run"), "--no-progress"]) == 0
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in rows if "loss" in r and "lr" in r]
    assert len(losses) == 4 and all(torch.isfinite(torch.tensor(losses)))
    capsys.readouterr()
    assert main(["summary", "examples/deepseek_v3.tfs", "--seq-len", "4096"]) == 0
    out = capsys.readouterr().out
    # 61 layers of a 512 latent and a 64-wide rotated key, in float32
    assert f"KV cache after 4096 tokens: {61 * 576 * 4 * 4096 / 2 ** 20:.2f} MiB" in out
    assert "multi-head attention of the same heads would keep" in out and "(71.1×)" in out
