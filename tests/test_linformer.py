"""Linformer (variants/linformer.py) against the paper's formula written out, with its sharing modes and limits."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

import tfspec
from tfspec.nn.linformer import LinformerAttention

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
    core = LinformerAttention(width=16, heads=4, kv_heads=kv_heads, head_dim=4, k=3, max_len=12,
                              shared_heads=shared_heads, shared_kv=shared_kv).double().eval()
    for p in (core.proj_k, core.proj_v):
        if p is not None:
            torch.nn.init.normal_(p, generator=g)
    q = torch.randn(2, 4, 9, 4, generator=g, dtype=torch.float64)
    k, v = (torch.randn(2, kv_heads, 9, 4, generator=g, dtype=torch.float64) for _ in range(2))
    padded = torch.arange(9)[None] < torch.tensor([[0], [4]])
    mask = torch.zeros(2, 1, 9, 9, dtype=torch.float64).masked_fill(padded[:, None, None], torch.finfo(torch.float64).min)
    F = core.proj_k if shared_kv else core.proj_v
    assert torch.allclose(core.mix(q, k, v, mask, False), naive_linformer(q, k, v, core.proj_k, F, padded), atol=1e-10)
    assert (core.proj_v is None) == shared_kv and (core.proj_k.dim() == 3) == (not shared_heads)


def test_outputs_at_real_positions_ignore_what_padding_holds():
    model = tfspec.compile(SPEC.format(options="8, max_len=64"), seed=0).eval()
    tokens = torch.randint(0, 40, (2, 20), generator=torch.Generator().manual_seed(0))
    padded = torch.arange(20)[None] < torch.tensor([[0], [6]])
    other = tokens.masked_fill(padded, 3)
    with torch.no_grad():
        a, b = model(tokens, padding_mask=padded), model(other, padding_mask=padded)
    assert torch.allclose(a[~padded], b[~padded], atol=1e-6)


def test_longer_inputs_and_masks_of_structure_are_refused_with_the_reason():
    model = tfspec.compile(SPEC.format(options="4, max_len=32"))
    with pytest.raises(ValueError, match="linformer attention's projections cover 32"):
        model(torch.randint(0, 40, (1, 40)))
    from tfspec.analysis import AnalysisError, analyse
    with pytest.raises(AnalysisError, match="linformer attention's projections cover 32"):
        analyse(model.spec, seq_len=40)
    with pytest.raises(tfspec.SpecError, match="its future"):
        tfspec.parse(SPEC.format(options="4, max_len=32").replace("encoder", "decoder").replace("mask=padding",
                                                                                               "mask=causal"))


def test_cost_is_linear_in_length_and_the_example_checks():
    from tfspec.analysis import analyse
    spec = tfspec.load(EXAMPLES / "linformer.tfs")
    costs = [analyse(spec, seq_len=n).rows for n in (1024, 4096)]
    attention = [next(r.cost.matmul for r in rows if r.node.endswith("self_attn")) for rows in costs]
    assert attention[1] == 4 * attention[0]  # every term is n·k·d or n·d²
    table = {c.layer: c for c in analyse(spec, seq_len=1024).complexity}
    assert any(c.per_layer == "O(n·k·d)" for c in table.values())
