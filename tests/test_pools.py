"""Pools: each one vector of a sequence as its formula, written here, says; refused where it cannot find its place."""

from __future__ import annotations

import pytest
import torch

import tfspec
from numerics import FLOAT32, assert_close

SPEC = """embedding tokens {{ vocab 12; dim 8; position learned(16) }}
encoder x 1 {{ attention self heads=2 mask=padding; feedforward d_ff=16 }}
head linear(5) pool={pool}"""

IDS = torch.tensor([[4, 11, 3, 9, 3, 0], [3, 2, 2, 7, 1, 1], [5, 6, 8, 10, 2, 2]])


def pooled_formula(pool: str, hidden: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """The vector each pool reads, one sequence at a time."""
    rows = []
    for h, seq in zip(hidden, ids.tolist()):
        if pool == "first":
            rows.append(h[0])
        elif pool == "last":
            rows.append(h[-1])
        elif pool == "mean":
            rows.append(h.mean(0))
        elif pool == "token(3)":  # the first 3, or the first position where there is none
            rows.append(h[seq.index(3)] if 3 in seq else h[0])
        elif pool == "highest_id":
            rows.append(h[seq.index(max(seq))])
    return torch.stack(rows)


@pytest.mark.parametrize("pool", ["first", "last", "mean", "token(3)", "highest_id"])
def test_a_pooled_head_projects_the_vector_its_pool_reads(pool):
    model = tfspec.compile(SPEC.format(pool=pool), seed=0).eval()
    with torch.no_grad():
        hidden = model.encoder(model.embed("encoder", "tokens", IDS, model.context("encoder", "tokens", IDS, {})),
                               model.context("encoder", "tokens", IDS, {}))
        expected = pooled_formula(pool, hidden, IDS) @ model.head.weight.T + model.head.bias
        assert_close(model(IDS), expected, FLOAT32)


def test_pools_that_read_positions_differ_where_the_sequences_say_so():
    outs = {p: tfspec.compile(SPEC.format(pool=p), seed=0).eval()(IDS) for p in ("token(3)", "highest_id", "first")}
    assert not torch.allclose(outs["token(3)"][0], outs["first"][0])  # its first 3 is at position 2
    assert torch.equal(outs["token(3)"][1], outs["first"][1])  # ... and at position 0 here
    assert not torch.allclose(outs["highest_id"][0], outs["token(3)"][0])


def test_a_pool_among_token_ids_is_refused_over_pictures():
    text = ("embedding image { input patches(image=8, patch=4); dim 8 }\n"
            "encoder x 1 { attention self heads=2; feedforward d_ff=16 }\nhead linear(5) pool=token(3)")
    with pytest.raises(tfspec.SpecError) as exc:
        tfspec.parse(text)
    message = str(exc.value)
    assert "pool=token finds its position among token ids" in message and "pictures" in message
    assert ":3:" in message  # at the head's line


def test_an_unknown_pool_is_a_located_error_with_a_suggestion():
    with pytest.raises(tfspec.SpecError) as exc:
        tfspec.parse(SPEC.format(pool="frist"))
    assert "unknown pool 'frist'" in str(exc.value) and "first" in str(exc.value)


def test_a_decoder_whose_head_pools_is_refused_by_generation():
    from tfspec.run.decoding import Continuation
    model = tfspec.compile("embedding tokens { vocab 12; dim 8 }\n"
                           "decoder x 1 { attention self heads=2 mask=causal; feedforward d_ff=16 }\n"
                           "head linear(5) pool=last", seed=0)
    with pytest.raises(ValueError, match="its head pools each sequence into one vector"):
        Continuation(model)


def test_an_attention_pool_is_its_formula_and_siglips_head():
    """SigLIP's multi-head attention pooling head, with every weight perturbed, against ours with its weights;
    and the formula written out: the probe's query over the keys, the heads joined and projected, then the MLP."""
    import transformers as T
    from transformers.models.siglip.modeling_siglip import SiglipMultiheadAttentionPoolingHead
    torch.manual_seed(0)
    config = T.SiglipVisionConfig(hidden_size=16, num_attention_heads=4, intermediate_size=24, layer_norm_eps=1e-6)
    reference = SiglipMultiheadAttentionPoolingHead(config).eval()
    with torch.no_grad():
        for p in reference.parameters():
            p.mul_(1 + 0.2 * torch.randn_like(p)).add_(0.05 * torch.randn_like(p))
    text = ("embedding tokens { vocab 12; dim 16 }\nencoder x 1 { attention self heads=2; feedforward d_ff=16 }\n"
            "head pool=attention(4, d_ff=24)")
    model = tfspec.compile(text, seed=0).eval()
    pool = model.head.pool
    w, b = reference.attention.in_proj_weight, reference.attention.in_proj_bias
    with torch.no_grad():
        pool.probe.copy_(reference.probe.view(-1))
        pool.q.weight.copy_(w[:16]), pool.q.bias.copy_(b[:16]), pool.kv.weight.copy_(w[16:]), pool.kv.bias.copy_(b[16:])
        pool.out.load_state_dict(reference.attention.out_proj.state_dict())
        pool.norm.load_state_dict(reference.layernorm.state_dict())
        pool.up.load_state_dict(reference.mlp.fc1.state_dict()), pool.down.load_state_dict(reference.mlp.fc2.state_dict())
        x = torch.randn(3, 7, 16, generator=torch.Generator().manual_seed(1))
        assert_close(pool(x), reference(x), FLOAT32)
        q = (pool.q(pool.probe)).view(4, 4)  # (head, dim)
        keys, values = pool.kv(x).split(16, dim=-1)
        rows = []
        for seq_keys, seq_values in zip(keys.view(3, 7, 4, 4), values.view(3, 7, 4, 4)):
            heads = [torch.softmax(seq_keys[:, h] @ q[h] / 2, dim=0) @ seq_values[:, h] for h in range(4)]
            p = pool.out(torch.cat(heads))
            rows.append(p + pool.down(torch.nn.functional.gelu(pool.up(pool.norm(p)), approximate="tanh")))
        assert_close(pool(x), torch.stack(rows), FLOAT32)
    assert model(torch.randint(0, 12, (3, 7))).shape == (3, 16)  # the pooled vectors, projected by nothing


def test_a_head_of_a_pool_alone_takes_no_projection_arguments_and_its_heads_divide_the_width():
    base = "embedding tokens { vocab 12; dim 16 }\nencoder x 1 { attention self heads=2; feedforward d_ff=16 }\n"
    with pytest.raises(tfspec.SpecError, match="a head without a projection has no argument 'bias'"):
        tfspec.parse(base + "head pool=mean bias=true")
    with pytest.raises(tfspec.SpecError, match="the pool's 3 heads do not divide the width 16") as exc:
        tfspec.parse(base + "head pool=attention(3, d_ff=8)")
    assert "try attention(2, ...)" in str(exc.value) and ":3:" in str(exc.value)
    spec = tfspec.parse(base + "head pool=mean")
    assert spec.head.out == 16 and not spec.head.projects
    model = tfspec.compile(spec, seed=0).eval()
    assert "head.weight" not in model.state_dict()


def test_the_attention_pools_activations_are_the_registrys_of_one_input():
    import typing
    from tfspec.registry import ACTIVATIONS
    from tfspec.variants.attention_pool import ONE_INPUT
    plain = {n for n in ACTIVATIONS if ACTIVATIONS[n].up_features(1) == 1
             and not ACTIVATIONS[n].params(1, ACTIVATIONS[n].options({}))}
    assert set(typing.get_args(ONE_INPUT)) == plain


@pytest.mark.parametrize("pool", ["first", "mean", "token(3)", "attention(2, d_ff=24, activation=relu)",
                                  "attention(4, d_ff=12)"])
def test_the_cost_of_a_head_of_a_pool_alone_is_what_the_flop_counter_and_autograd_see(pool):
    from tfspec.inspect.analysis import analyse
    from tfspec.inspect.measure import measure
    spec = tfspec.parse("embedding tokens { vocab 12; dim 16; position learned(20) }\n"
                        "encoder x 1 { attention self heads=2 mask=padding; feedforward d_ff=16 }\n"
                        f"head pool={pool}")
    for length in (5, 12):
        analysed, measured = analyse(spec, seq_len=length, batch=2), measure(spec, {"encoder": length}, batch=2)
        assert (measured.flops, measured.saved_bytes) == (analysed.total.matmul, analysed.total.memory), length
