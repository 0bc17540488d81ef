"""Linformer (variants/linformer.py) against the paper's formula written out, with its sharing modes and limits."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

import tfspec
from tfspec.nn.attention import Geometry
from tfspec.nn.linformer import LinformerAttention
from numerics import FLOAT32, FLOAT64, assert_close

EXAMPLES = Path(__file__).parent.parent / "examples"
SPEC = """
embedding t {{ vocab 40; dim 16; position learned(64) }}
encoder x 2 {{ attention self heads=2 kind=linformer({options}) mask=padding; feedforward d_ff=32 }}
head linear(40)
"""


def naive_linformer(q, k, v, E, F, padded):
    """head_i = softmax(q_i (E_i K_i)^T / sqrt(d)) (F_i V_i), with padded rows of K and V zeroed, one head at a time."""
    batch, heads, n, d = q.shape
    groups = heads // k.shape[1]
    out = torch.empty_like(q)
    for b in range(batch):
        for h in range(heads):
            g = h // groups
            e = E[g] if E.dim() == 3 else E
            f = F[g] if F.dim() == 3 else F
            keep = (~padded[b]).to(q.dtype)[:, None]
            keys, values = e[:, :n] @ (k[b, g] * keep), f[:, :n] @ (v[b, g] * keep)
            out[b, h] = torch.softmax(q[b, h] @ keys.T / math.sqrt(d), dim=-1) @ values
    return out


@pytest.mark.parametrize("shared_heads, shared_kv, kv_heads", [(True, False, 4), (False, False, 4), (True, True, 4),
                                                                (False, True, 2), (True, False, 1)])
def test_attention_is_the_papers_formula_in_every_sharing_mode(shared_heads, shared_kv, kv_heads):
    g = torch.Generator().manual_seed(kv_heads)
    core = LinformerAttention(Geometry(width=16, heads=4, kv_heads=kv_heads, head_dim=4), k=3, max_len=12,
                              shared_heads=shared_heads, shared_kv=shared_kv).double().eval()
    for p in (core.proj_k, core.proj_v):
        if p is not None:
            torch.nn.init.normal_(p, generator=g)
    q = torch.randn(2, 4, 9, 4, generator=g, dtype=torch.float64)
    k, v = (torch.randn(2, kv_heads, 9, 4, generator=g, dtype=torch.float64) for _ in range(2))
    padded = torch.arange(9)[None] < torch.tensor([[0], [4]])
    mask = torch.zeros(2, 1, 9, 9, dtype=torch.float64).masked_fill(padded[:, None, None], torch.finfo(torch.float64).min)
    F = core.proj_k if shared_kv else core.proj_v
    assert_close(core.mix(q, k, v, mask, False), naive_linformer(q, k, v, core.proj_k, F, padded), FLOAT64)
    assert (core.proj_v is None) == shared_kv and (core.proj_k.dim() == 3) == (not shared_heads)


def test_outputs_at_real_positions_ignore_what_padding_holds():
    model = tfspec.compile(SPEC.format(options="8, max_len=64"), seed=0).eval()
    tokens = torch.randint(0, 40, (2, 20), generator=torch.Generator().manual_seed(0))
    padded = torch.arange(20)[None] < torch.tensor([[0], [6]])
    other = tokens.masked_fill(padded, 3)
    with torch.no_grad():
        a, b = model(tokens, padding_mask=padded), model(other, padding_mask=padded)
    assert_close(a[~padded], b[~padded], FLOAT32)


def test_longer_inputs_and_masks_of_structure_are_refused_with_the_reason():
    model = tfspec.compile(SPEC.format(options="4, max_len=32"))
    with pytest.raises(ValueError, match="linformer attention's projections cover 32"):
        model(torch.randint(0, 40, (1, 40)))
    from tfspec.inspect.analysis import AnalysisError, analyse
    with pytest.raises(AnalysisError, match="linformer attention's projections cover 32"):
        analyse(model.spec, seq_len=40)
    with pytest.raises(tfspec.SpecError, match="its future"):
        tfspec.parse(SPEC.format(options="4, max_len=32").replace("encoder", "decoder").replace("mask=padding",
                                                                                               "mask=causal"))


def test_cost_is_linear_in_length_and_the_example_checks():
    from tfspec.inspect.analysis import analyse
    spec = tfspec.load(EXAMPLES / "linformer.tfs")
    costs = [analyse(spec, seq_len=n).rows for n in (1024, 4096)]
    attention = [next(r.cost.matmul for r in rows if r.node.endswith("self_attn")) for rows in costs]
    assert attention[1] == 4 * attention[0]  # every term is n·k·d or n·d²
    table = {c.layer: c for c in analyse(spec, seq_len=1024).complexity}
    assert any(c.per_layer == "O(n·k·d)" for c in table.values())


def test_layerwise_sharing_gives_the_stack_one_projection_that_every_layer_uses():
    """Section 4's layer-wise sharing: one E (= F, key-value sharing) for the whole stack. The model equals a
    forward written layer by layer with that one matrix, owns it once, and sums every layer's gradient in it."""
    options = "4, max_len=64, shared_kv=true, shared_layers=true"
    spec = tfspec.parse(SPEC.format(options=options).replace("x 2", "x 3"))
    model = tfspec.compile(spec, seed=0).double().eval()
    E = model.encoder.shared.self_attn.proj_k
    assert [k for k in model.state_dict() if "proj" in k] == ["encoder.shared.self_attn.proj_k"]
    own = tfspec.parse(SPEC.format(options="4, max_len=64, shared_kv=true").replace("x 2", "x 3"))
    assert spec.parameter_count() == own.parameter_count() - 2 * 4 * 64  # two of three layers' E gone
    assert spec.parameter_count() == sum(p.numel() for p in model.parameters())

    tokens = torch.randint(0, 40, (2, 10), generator=torch.Generator().manual_seed(1))
    padding = torch.arange(10)[None] >= torch.tensor([[10], [7]])
    x = model.embeddings.t(tokens, torch.arange(10)[None], None)
    for layer in model.encoder.layers:
        attention = layer.self_attn
        q, k, v = attention.project(x)
        y = naive_linformer(q, k, v, E, E, padding).transpose(1, 2).reshape(2, 10, 16)
        x = layer.self_attn_norm(x + attention.out(y))
        x = layer.ffn_norm(x + layer.ffn(x))
    expected = model.head(x)
    assert_close(model(tokens, padding_mask=padding), expected, FLOAT64)

    # every layer's gradient adds up in E: equal to the sum over three separate copies, one per layer
    def loss():
        return model(tokens, padding_mask=padding).square().mean()

    loss().backward()
    copies = []
    for layer in model.encoder.layers:
        separate = type(model.encoder.shared.self_attn)(4, 64, 2, True, True).double()
        separate.proj_k.data.copy_(E.detach())
        layer.self_attn.share(separate)
        copies.append(separate.proj_k)
    loss().backward()
    assert all(c.grad.abs().sum() > 0 for c in copies)
    assert_close(E.grad, sum(c.grad for c in copies), FLOAT64)


def test_layerwise_sharing_survives_moves_copies_and_checkpoints(tmp_path):
    import copy

    from safetensors.torch import load_file, save_file

    spec = tfspec.parse(SPEC.format(options="4, max_len=64, shared_layers=true"))
    model = tfspec.compile(spec, seed=0)
    for moved in (model.double(), copy.deepcopy(model)):
        owner = moved.encoder.shared.self_attn
        assert all(layer.self_attn.projections() == (owner.proj_k, owner.proj_v) for layer in moved.encoder.layers)
        assert owner.proj_k.dtype == torch.float64
    save_file(model.state_dict(), str(tmp_path / "w.safetensors"))  # shared tensors would be refused here
    fresh = tfspec.compile(spec, seed=1).double()
    fresh.load_state_dict(load_file(str(tmp_path / "w.safetensors")))
    tokens = torch.randint(0, 40, (1, 12))
    assert torch.equal(fresh.eval()(tokens), model.eval()(tokens))
    loose = LinformerAttention(Geometry(width=16, heads=2, kv_heads=2, head_dim=8), k=4, max_len=64, shared_heads=True,
                               shared_kv=False, shared_layers=True)
    with pytest.raises(RuntimeError, match="shares its stack's projections"):
        loose.mix(*(torch.randn(1, 2, 5, 8) for _ in range(3)), None, False)
