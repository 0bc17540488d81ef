"""Mixture-of-experts feed-forward (``kind=moe(...)``): each option equal to the definition written here, one
position at a time; Mixtral's and Qwen2-MoE's blocks equal Hugging Face's at equal weights; cost and memory
equal what the FLOP counter and autograd see for a real, skewed routing; the auxiliary losses equal Hugging
Face's and reach the trainer's log."""

import json

import pytest
import torch

import tfspec
from tfspec.inspect.analysis import analyse
from tfspec.inspect.measure import measure
from numerics import FLOAT32, assert_close, close

SPEC = """embedding tokens {{ vocab 40; dim 16; position none }}
decoder x 2 {{ residual pre; bias {bias}; attention self heads=2 mask=causal
  feedforward d_ff=12 activation={activation} kind=moe({options}) router={router} }}
head linear(40)"""
# (the mixture's options, its router's parts)
OPTIONS = [("4, 2", "softmax"), ("4, 2", "renormalize"), ("3, 1, router_bias=true", "sigmoid + scale(2.5)"),
           ("4, 3, shared=8, shared_gate=true", "renormalize"), ("4, 2, shared=6", "softmax")]


def perturbed(module, seed: int = 0):
    with torch.no_grad():
        g = torch.Generator().manual_seed(seed)
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.4)
    return module


def naive(moe, x, activation, router):
    """The definition: score every expert, keep the top ones, weight and sum their networks' outputs."""
    out = torch.zeros_like(x)
    for t in range(x.shape[0]):
        logits = moe.router(x[t])
        scores = logits.softmax(-1) if "sigmoid" not in router else logits.sigmoid()
        weights, chosen = scores.topk(moe.choice.top)
        if "renormalize" in router:
            weights = weights / weights.sum()
        weights = weights * (2.5 if "scale(2.5)" in router else 1.0)
        for w, e in zip(weights, chosen):
            e = int(e)
            bias = (lambda b: None if b is None else b[e])
            h = torch.nn.functional.linear(x[t], moe.experts.up[e], bias(moe.experts.up_bias))
            h = activation(h)
            out[t] += w * torch.nn.functional.linear(h, moe.experts.down[e], bias(moe.experts.down_bias))
        if moe.shared is not None:
            shared = moe.shared(x[t])
            out[t] += shared * torch.sigmoid(moe.shared_gate(x[t])) if moe.shared_gate is not None else shared
    return out


@pytest.mark.parametrize("options, router", OPTIONS)
@pytest.mark.parametrize("activation, bias", [("swiglu", "false"), ("gelu", "true")])
def test_each_option_computes_its_definition(options, router, activation, bias):
    model = tfspec.compile(SPEC.format(options=options, router=router, activation=activation, bias=bias),
                           seed=0).eval()
    moe = perturbed(model.decoder.layers[0].ffn)
    x = torch.randn(2, 9, 16, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        got = moe(x)
        expected = naive(moe, x.reshape(-1, 16), moe.experts.activation, router).view_as(x)
    assert_close(got, expected, FLOAT32)


@pytest.mark.parametrize("options, router", OPTIONS[2:] + [
    ("4, 2, z_loss=0.1, aux_loss=0.01", "softmax"),
    # routers of several parts: DeepSeek-V3's, PhiMoE's, Gemma 4's
    ("8, 3, shared=8", "sigmoid + correction(0.001) + groups(4, 2) + renormalize + scale(2.5)"),
    ("4, 2, aux_loss=0.01", "sparsemixer(0.2) + jitter(0.01)"),
    ("4, 2, experts_norm=rmsnorm, norm_eps=1e-5", "normed_input(1e-5) + renormalize + expert_scale")])
def test_cost_and_memory_are_measured_for_a_real_and_a_skewed_routing(options, router):
    # feed-forward sublayers alone: on the CPU (a real routing) the counter sees every product they compute
    text = SPEC.format(options=options, router=router, activation="swiglu", bias="true")
    spec = tfspec.parse(text.replace("attention self heads=2 mask=causal", "act_dropout 0.1"))
    for batch in (1, 2):
        analysed = analyse(spec, seq_len=7, batch=batch)
        measured = measure(spec, {"decoder": 7}, batch=batch, device="cpu")
        assert (measured.flops, measured.saved_bytes) == (analysed.total.matmul, analysed.total.memory)
    model = tfspec.compile(spec, seed=0)
    with torch.no_grad():  # every position to expert 0 first: FLOPs do not depend on the routing
        model.decoder.layers[0].ffn.router.weight.zero_()
        if model.decoder.layers[0].ffn.router.bias is not None:
            model.decoder.layers[0].ffn.router.bias.copy_(torch.arange(3.0, 0, -1)[:3])
    from torch.utils.flop_counter import FlopCounterMode
    ids = torch.randint(0, 40, (1, 7))
    with FlopCounterMode(display=False) as skewed:
        model(ids)
    with FlopCounterMode(display=False) as plain:
        tfspec.compile(spec, seed=1)(ids)
    assert skewed.get_total_flops() == plain.get_total_flops()


def test_summary_and_check_count_active_against_total_parameters():
    spec = tfspec.parse(SPEC.format(options="4, 2, shared=6", router="softmax", activation="swiglu", bias="false"))
    expert = 2 * 12 * 16 + 16 * 12  # a SwiGLU expert's up (gate and value) and down
    router, shared = 4 * 16, 2 * 6 * 16 + 16 * 6  # read by every position, like the chosen experts
    analysed = analyse(spec, seq_len=4)
    assert {r.node: r for r in analysed.rows}["decoder.ffn"].cost.params == 2 * (router + 4 * expert + shared)
    assert analysed.active_params == spec.parameter_count() - 2 * 2 * expert  # in each layer, 2 of 4 unused
    from tfspec.inspect.summary import summary_line
    assert f"{spec.parameter_count():,} parameters ({spec.parameter_count() - 4 * expert:,} active)" in \
        summary_line("x.tfs", spec)


def test_auxiliary_losses_equal_hugging_faces_and_are_logged_by_the_trainer(tmp_path, capsys):
    pytest.importorskip("transformers")
    from transformers.models.mixtral.modeling_mixtral import load_balancing_loss_func
    text = SPEC.format(options="4, 2, aux_loss=0.5, z_loss=0.1", router="renormalize", activation="swiglu",
                       bias="false")
    model = perturbed(tfspec.compile(text, seed=0)).train()
    ids = torch.randint(0, 40, (3, 8), generator=torch.Generator().manual_seed(2))
    logits = []
    hooks = [layer.ffn.router.register_forward_hook(lambda m, i, o: logits.append(o)) for layer in model.decoder.layers]
    model(ids)
    for h in hooks:
        h.remove()
    losses = model.auxiliary_losses()
    expected = load_balancing_loss_func(tuple(logits), 4, 2)
    assert_close(losses["moe_balance"], 0.5 * expected, FLOAT32)
    z = torch.stack([torch.logsumexp(g, -1).square().mean() for g in logits]).mean()
    assert_close(losses["moe_z"], 0.1 * z, FLOAT32)
    assert model.eval()(ids) is not None and model.auxiliary_losses() == {}  # evaluation adds nothing

    # a padded batch: the padded positions' choices count for neither, as Hugging Face's attention mask says
    model = perturbed(tfspec.compile(text.replace("mask=causal", "mask=causal + padding"), seed=0)).train()
    padding = torch.zeros(3, 8, dtype=torch.bool)
    padding[1, 5:], padding[2, 2:] = True, True
    logits.clear()
    hooks = [layer.ffn.router.register_forward_hook(lambda m, i, o: logits.append(o)) for layer in model.decoder.layers]
    model(ids, padding_mask=padding)
    for h in hooks:
        h.remove()
    expected = load_balancing_loss_func(tuple(logits), 4, 2, attention_mask=(~padding).long())
    assert_close(model.auxiliary_losses()["moe_balance"], 0.5 * expected, FLOAT32)
    assert not close(expected, load_balancing_loss_func(tuple(logits), 4, 2), 1e-4)

    # from the command line: the Mixtral example at test size, its load-balancing loss switched on
    from tfspec.cli import main
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("a mixture routes each token to its experts. " * 40)
    sizes = {"layers": 1, "d_model": 32, "heads": 4, "kv_heads": 2, "d_ff": 16, "vocab": 300, "aux_loss": 0.02}
    assert main(["train", "examples/mixtral_8x7b.tfs", *[a for k, v in sizes.items() for a in ("--set", f"{k}={v}")],
                 "--data", str(corpus), "--seq-len", "16", "--steps", "3", "--batch", "4", "--eval-every", "3",
                 "--eval-size", "4", "--log-every", "1", "--out", str(tmp_path / "run"), "--no-progress"]) == 0
    assert "moe_balance" in capsys.readouterr().out  # the trainer's log line
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "loss" in r and "lr" in r]
    assert len(steps) == 3 and all(r["moe_balance"] > 0 for r in steps)


# ---------------------------------------------------------------- against Hugging Face's blocks
T = pytest.importorskip("transformers")


def copy_experts(moe, reference):
    with torch.no_grad():
        moe.router.weight.copy_(reference.gate.weight)
        moe.experts.up.copy_(reference.experts.gate_up_proj)
        moe.experts.down.copy_(reference.experts.down_proj)


def test_mixtral_and_qwen2_moe_blocks_equal_hugging_faces():
    from transformers.models.mixtral.modeling_mixtral import MixtralSparseMoeBlock
    from transformers.models.qwen2_moe.modeling_qwen2_moe import Qwen2MoeSparseMoeBlock
    x = torch.randn(3, 9, 16, generator=torch.Generator().manual_seed(3))
    mixtral = perturbed(MixtralSparseMoeBlock(T.MixtralConfig(hidden_size=16, intermediate_size=12,
                                                              num_local_experts=4, num_experts_per_tok=2))).eval()
    moe = tfspec.compile(SPEC.format(options="4, 2", router="renormalize", activation="swiglu", bias="false"),
                         seed=0).decoder.layers[0].ffn.eval()
    copy_experts(moe, mixtral)
    with torch.no_grad():
        assert_close(moe(x), mixtral(x), FLOAT32)
    config = T.Qwen2MoeConfig(hidden_size=16, moe_intermediate_size=12, num_experts=4, num_experts_per_tok=3,
                              shared_expert_intermediate_size=8, norm_topk_prob=False)
    qwen = perturbed(Qwen2MoeSparseMoeBlock(config)).eval()
    moe = tfspec.compile(SPEC.format(options="4, 3, shared=8, shared_gate=true", router="softmax",
                                     activation="swiglu", bias="false"), seed=0).decoder.layers[0].ffn.eval()
    copy_experts(moe, qwen)
    with torch.no_grad():
        shared = qwen.shared_expert
        moe.shared.up.weight.copy_(torch.cat([shared.gate_proj.weight, shared.up_proj.weight]))
        moe.shared.down.weight.copy_(shared.down_proj.weight)
        moe.shared_gate.weight.copy_(qwen.shared_expert_gate.weight)
        assert_close(moe(x), qwen(x), FLOAT32)


def test_verify_checks_that_each_position_is_routed_alone():
    from tfspec.inspect.verify import feedforward_locality, verify
    spec = tfspec.parse(SPEC.format(options="4, 2, shared=6", router="softmax", activation="swiglu", bias="false"))
    model = tfspec.compile(spec, seed=0)
    locality = next(r for r in verify(model, examples=6) if r.name == "feedforward locality")
    assert locality.status == "held"

    class Capacity(torch.nn.Module):  # a mixture that drops what does not fit: positions compete for experts
        def __init__(self, moe):
            super().__init__()
            self.moe = moe

        def forward(self, x):
            y = self.moe(x)
            kept = y.norm(dim=-1, keepdim=True) >= y.norm(dim=-1).flatten().median()
            return y * kept

    model.decoder.layers[0].ffn = Capacity(model.decoder.layers[0].ffn)
    from tfspec.inspect.verify import Subject
    # a replaced position flips another's place against the median only now and then: 20 cases find it for every
    # seed tried (12 of 12), 12 cases for 10 of 12
    result = feedforward_locality(Subject(model.eval(), 20, 0, 12))
    assert result.status == "violated" and "does not map each position by itself" in result.detail


def test_deepseek_v3_routing_equals_hugging_faces_block():
    """Sigmoid scores, a correction bias that steers the choice but not the weights, group-limited routing (the 2
    of 4 groups whose two best scores sum highest), renormalised weights times the routed scale, a shared expert."""
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import DeepseekV3MoE
    config = T.DeepseekV3Config(hidden_size=16, moe_intermediate_size=12, n_routed_experts=8, num_experts_per_tok=3,
                                n_group=4, topk_group=2, routed_scaling_factor=2.5, norm_topk_prob=True,
                                n_shared_experts=1)
    reference = perturbed(DeepseekV3MoE(config)).eval()
    with torch.no_grad():  # a bias large enough to change which experts are chosen
        reference.gate.e_score_correction_bias.copy_(torch.linspace(-0.3, 0.3, 8))
    text = SPEC.format(options="8, 3, shared=12", activation="swiglu", bias="false",
                       router="sigmoid + correction + groups(4, 2) + renormalize + scale(2.5)")
    moe = tfspec.compile(text, seed=0).decoder.layers[0].ffn.eval()
    copy_experts(moe, reference)
    with torch.no_grad():
        moe.choice.correction.bias.copy_(reference.gate.e_score_correction_bias)
        shared = reference.shared_experts
        moe.shared.up.weight.copy_(torch.cat([shared.gate_proj.weight, shared.up_proj.weight]))
        moe.shared.down.weight.copy_(shared.down_proj.weight)
        x = torch.randn(3, 9, 16, generator=torch.Generator().manual_seed(4))
        assert_close(moe(x), reference(x), FLOAT32)
        uncorrected = moe.choice.correction.bias.clone()
        moe.choice.correction.bias.zero_()
        assert not close(moe(x), reference(x), 1e-3)  # the bias did change the choice
        moe.choice.correction.bias.copy_(uncorrected)
    assert not moe.choice.correction.bias.requires_grad  # adjusted outside gradient descent, as DeepSeek does


def test_deepseek_v2_group_limited_routing_equals_hugging_faces_block():
    """A softmax router choosing among the 2 of 4 groups whose best score is highest (``groups(4, 2, by=max)``), the
    weights scaled, not renormalised; ranking groups by their two best scores instead chooses otherwise."""
    from transformers.models.deepseek_v2.modeling_deepseek_v2 import DeepseekV2Moe
    config = T.DeepseekV2Config(hidden_size=16, moe_intermediate_size=12, n_routed_experts=8, num_experts_per_tok=3,
                                n_group=4, topk_group=2, topk_method="group_limited_greedy",
                                routed_scaling_factor=1.5, n_shared_experts=1, num_attention_heads=2)
    reference = perturbed(DeepseekV2Moe(config)).eval()
    text = SPEC.format(options="8, 3, shared=12", router="groups(4, 2, by=max) + scale(1.5)", activation="swiglu",
                       bias="false")
    moe = tfspec.compile(text, seed=0).decoder.layers[0].ffn.eval()
    copy_experts(moe, reference)
    with torch.no_grad():
        shared = reference.shared_experts
        moe.shared.up.weight.copy_(torch.cat([shared.gate_proj.weight, shared.up_proj.weight]))
        moe.shared.down.weight.copy_(shared.down_proj.weight)
        x = torch.randn(3, 9, 16, generator=torch.Generator().manual_seed(4))
        assert_close(moe(x), reference(x), FLOAT32)
        moe.choice.groups.by = "top2"
        assert not close(moe(x), reference(x), 1e-3)


def test_the_correction_bias_moves_towards_balance_in_training_only():
    """DeepSeek-V3's balancing without a loss: after a training call each expert's bias moves by the rate towards
    the mean load (up where it was chosen less often, down where more); evaluation leaves it; repeated, the load
    evens out."""
    text = SPEC.format(options="4, 1", router="sigmoid + correction(0.05)", activation="swiglu", bias="false")
    moe = perturbed(tfspec.compile(text, seed=0).decoder.layers[0].ffn)
    x = torch.randn(64, 16, generator=torch.Generator().manual_seed(5))

    def loads():
        with torch.no_grad():
            chosen = moe.choice.eval()(moe.router(x))[1]  # (a call in eval leaves the bias where it is)
            moe.choice.train(moe.training)
        return torch.bincount(chosen.flatten(), minlength=4).float()

    before, bias = loads(), moe.choice.correction.bias.clone()
    moe.eval()(x)
    assert torch.equal(moe.choice.correction.bias, bias)
    moe.train()(x)
    assert_close(moe.choice.correction.bias - bias, 0.05 * torch.sign(before.mean() - before), FLOAT32)
    for _ in range(40):
        moe(x)
    assert loads().std() < before.std() / 2, (before, loads())


def test_the_sparse_mixer_equals_phimoes_block_in_eval_and_in_training_with_its_gradients():
    """Phi-3.5-MoE's routing (GRIN's sparse mixer): in eval its two choices and weights; in training, from the same
    seed, its Gumbel-sampled choices, its Heun-estimated router gradient and the experts' gradients; and its
    load-balancing loss, which counts the experts the probabilities rank first."""
    from transformers.models.phimoe.modeling_phimoe import PhimoeSparseMoeBlock, load_balancing_loss_func
    config = T.PhimoeConfig(hidden_size=16, intermediate_size=12, num_local_experts=5, num_experts_per_tok=2,
                            router_jitter_noise=0.4, input_jitter_noise=0.0)
    reference = perturbed(PhimoeSparseMoeBlock(config))
    moe = tfspec.compile(SPEC.format(options="5, 2, aux_loss=1.0", router="sparsemixer(0.4)", activation="swiglu",
                                     bias="false"), seed=0).decoder.layers[0].ffn
    with torch.no_grad():
        moe.router.weight.copy_(reference.router.weight)
        moe.experts.up.copy_(reference.experts.gate_up_proj)
        moe.experts.down.copy_(reference.experts.down_proj)
    x = torch.randn(3, 9, 16, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        assert_close(moe.eval()(x), reference.eval()(x), FLOAT32)
    for seed in range(3):
        results = []
        for block in (moe.train(), reference.train()):
            block.zero_grad()
            inputs = x.clone().requires_grad_()
            torch.manual_seed(seed)
            out = block(inputs)
            (out * torch.linspace(-1, 1, out.numel()).view(out.shape)).sum().backward()
            results.append((out, inputs.grad, block.router.weight.grad))
        for ours, theirs in zip(*results):
            assert_close(ours, theirs, FLOAT32, msg=seed)
    from tfspec.nn.moe import auxiliary_losses
    logits = reference.router(x.reshape(-1, 16))[0]
    assert_close(auxiliary_losses([moe])["moe_balance"], load_balancing_loss_func((logits,), 5, 2), FLOAT32)


def test_the_sparse_mixer_samples_in_training_and_chooses_the_best_in_eval():
    from tfspec.nn.moe import sparse_mix
    logits = torch.tensor([[2.0, 1.9, 1.8, -3.0]])
    weights, chosen = sparse_mix(logits, eps=0.1, training=False)
    assert chosen.tolist() == [[0, 1]]
    # the first weight: the softmax among the experts within 2·eps of the best (0, 1, 2 of the four)
    assert_close(weights[0, 0], logits[0, :3].softmax(-1)[0], FLOAT32)
    torch.manual_seed(0)
    drawn = {tuple(sparse_mix(logits, eps=0.1, training=True)[1][0].tolist()) for _ in range(200)}
    assert len(drawn) > 1 and all(3 not in pair and pair[0] != pair[1] for pair in drawn)


def test_mixtures_of_different_shapes_each_add_their_balance_loss():
    """A schedule may mix mixtures of other sizes: each shape's loss is Hugging Face's over its mixtures, and the
    shapes are averaged by their number (one shape: exactly Hugging Face's)."""
    from transformers.models.mixtral.modeling_mixtral import load_balancing_loss_func
    model = perturbed(tfspec.compile("""embedding tokens { vocab 40; dim 16; position none }
decoder x 3 { residual pre; attention self heads=2 mask=causal
  feedforward d_ff=12 activation=swiglu bias=false kind=moe(4, 2, aux_loss=0.5)
  layers 2 { ffn d_ff=12 kind=moe(3, 1, aux_loss=0.5) } }
head linear(40)""", seed=0)).train()
    logits = []
    hooks = [layer.ffn.router.register_forward_hook(lambda m, i, o: logits.append(o)) for layer in model.decoder.layers]
    model(torch.randint(0, 40, (2, 7), generator=torch.Generator().manual_seed(4)))
    for h in hooks:
        h.remove()
    four = load_balancing_loss_func(tuple(logits[:2]), 4, 2)
    three = load_balancing_loss_func((logits[2],), 3, 1)
    assert_close(model.auxiliary_losses()["moe_balance"], 0.5 * (2 * four + three) / 3, FLOAT32)


def test_a_router_is_parts_acting_in_their_order_and_its_mistakes_are_located():
    """``router=`` parts weigh in their order whatever the order written (renormalise, then scale); a section that
    changes the kind gives the router anew; a router of a dense network, two scorings, a part given twice and a
    sparse mixer beside a renormalisation are errors at the part."""
    def model(router: str):
        return perturbed(tfspec.compile(SPEC.format(options="4, 2", router=router, activation="swiglu",
                                                    bias="false"), seed=0).decoder.layers[0].ffn.eval())
    x = torch.randn(2, 5, 16, generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        scaled_last = model("renormalize + scale(2.5)")(x)
        assert torch.equal(model("scale(2.5) + renormalize")(x), scaled_last)
        assert not close(model("renormalize")(x), scaled_last, 1e-3)
    layers = tfspec.compile(SPEC.format(options="4, 2", router="sigmoid", activation="swiglu", bias="false").replace(
        "router=sigmoid }", "router=sigmoid\n  layers 1 { ffn d_ff=12 kind=dense } }"), seed=0).decoder.layers
    assert layers[0].ffn.choice.part_names == ("sigmoid",) and not hasattr(layers[1].ffn, "choice")
    for text, message, hint in [("kind=dense router=sigmoid", "a dense feed-forward has no router", "drop router="),
                                ("kind=moe(4, 2) router=softmax + sigmoid", "softmax and sigmoid both score", None),
                                ("kind=moe(4, 2) router=renormalize + renormalize", "given twice", None),
                                ("kind=moe(4, 2) router=sparsemixer + renormalize", "and no renormalize", None)]:
        with pytest.raises(tfspec.SpecError) as info:
            tfspec.parse("embedding tokens { vocab 40; dim 16 }\ndecoder x 1 { attention self heads=2 mask=causal\n"
                         f"  feedforward d_ff=12 {text} }}")
        assert message in info.value.message and info.value.line == 3 and info.value.column > 30, info.value
        assert hint is None or hint in str(info.value)
