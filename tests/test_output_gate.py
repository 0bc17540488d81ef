"""The output gate (``steps=output_gate``): Qwen3.5's gated attention, exact against Hugging Face's layer, and its
gate the formula σ(x W_g) ⊙ y before the output projection."""

from __future__ import annotations

import pytest
import torch

import tfspec
from tfspec.nn.context import Context
from numerics import FLOAT32, FLOAT64, assert_close

SPEC = """
embedding tokens {{ vocab 40; dim 16 }}
decoder x 1 {{
  residual pre
  norm gemma_rmsnorm(eps=1e-6)
  position rotary(theta=10000, fraction=0.25)
  attention self heads=4 kv_heads=2 head_dim=8 qk_norm=gemma_rmsnorm(eps=1e-6) mask=causal + padding bias=false out_bias=false steps={steps}
  feedforward d_ff=32 activation=swiglu bias=false
}}
head tied(tokens)
"""


def perturbed(model):
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(1 + 0.2 * torch.randn_like(p)).add_(0.1 * torch.randn_like(p))
    return model


def test_the_gate_is_its_formula():
    """The same attention with and without the gate: σ(x W_g + b) times the heads' joined outputs, projected."""
    torch.manual_seed(0)
    gated = perturbed(tfspec.compile(SPEC.format(steps="output_gate(bias=true)"), seed=0)).double().eval()
    plain = tfspec.compile(SPEC.format(steps="none"), seed=0).double().eval()
    plain.load_state_dict({k: v for k, v in gated.state_dict().items() if ".output_gate." not in k})
    attention, reference = gated.decoder.layers[0].self_attn, plain.decoder.layers[0].self_attn
    x = torch.randn(2, 7, 16, dtype=torch.float64)
    ctx = Context(torch.arange(7)[None])
    joined = []
    reference.out.register_forward_hook(lambda module, args, out: joined.append(args[0]))
    with torch.no_grad():
        reference(x, ctx)
        gate = torch.sigmoid(x @ attention.output_gate.proj.weight.T + attention.output_gate.proj.bias)
        assert_close(attention(x, ctx), (joined[0] * gate) @ attention.out.weight.T, FLOAT64)


def test_the_attention_computes_what_hugging_faces_qwen3_5_attention_computes():
    """Qwen3.5's full-attention layer: q and its gate from one projection (interleaved per head), qk-norms of
    (1 + w), a quarter of each head rotated, the output gated; its weights moved into ours."""
    T = pytest.importorskip("transformers")
    from transformers.models.qwen3_5.modeling_qwen3_5 import Qwen3_5Attention, Qwen3_5TextRotaryEmbedding
    config = T.Qwen3_5TextConfig(hidden_size=16, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                                 rms_norm_eps=1e-6, num_hidden_layers=1, layer_types=["full_attention"],
                                 rope_parameters={"rope_type": "default", "rope_theta": 10000.0,
                                                  "partial_rotary_factor": 0.25, "mrope_section": [1, 1, 0]})
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    theirs = perturbed(Qwen3_5Attention(config, 0)).eval()
    model = tfspec.compile(SPEC.format(steps="output_gate"), seed=0).eval()
    ours = model.decoder.layers[0].self_attn
    state = theirs.state_dict()
    q, gate = state["q_proj.weight"].reshape(4, 2, 8, 16).unbind(1)
    with torch.no_grad():
        ours.qkv.weight.copy_(torch.cat([q.reshape(32, 16), state["k_proj.weight"], state["v_proj.weight"]]))
        ours.output_gate.proj.weight.copy_(gate.reshape(32, 16))
        ours.q_norm.weight.copy_(state["q_norm.weight"])
        ours.k_norm.weight.copy_(state["k_norm.weight"])
        ours.out.weight.copy_(state["o_proj.weight"])
    x = torch.randn(2, 9, 16, generator=torch.Generator().manual_seed(1))
    positions = torch.arange(9)[None].expand(2, -1)
    causal = torch.full((9, 9), torch.finfo(torch.float32).min).triu(1)[None, None]
    with torch.no_grad():
        expected, _ = theirs(x, Qwen3_5TextRotaryEmbedding(config)(x, positions), causal)
        assert_close(ours(x, Context(positions[:1])), expected, FLOAT32)


def test_a_kind_whose_outputs_are_not_heads_wide_is_refused():
    text = SPEC.format(steps="output_gate").replace("kv_heads=2 head_dim=8", "head_dim=8 kind=latent(6, 4, v_dim=5)")
    with pytest.raises(tfspec.SpecError, match="sizes its values apart"):
        tfspec.parse(text)
