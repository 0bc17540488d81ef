"""Multi-token prediction (``mtp D``): equal to Hugging Face's ``MtpModel`` on a DeepSeek-V3 checkpoint, its loss
the paper's formula, training-only, counted apart, read and written with Hugging Face checkpoints, emitted, and
refused where it cannot run."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F

import tfspec
from tfspec.errors import SpecError
from tfspec.ir.queries import active_parameters, count_parameters, training_only_parameters
from tfspec.run.train import read_metrics
from numerics import FLOAT32, assert_close

SPEC = """
embedding tokens { vocab 40; dim 16 }
decoder x 3 {
  residual pre
  norm rmsnorm
  position rotary
  attention self heads=2 mask=causal + padding
  feedforward d_ff=24 activation=swiglu
  final rmsnorm
  layers 0 { ffn d_ff=32 }
}
head tied(tokens)
mtp 2 weight=0.5
"""


def perturbed(model):
    """Every weight away from its initialisation (a norm weight of exactly 1 hides mistakes)."""
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(1 + 0.2 * torch.randn_like(p)).add_(0.02 * torch.randn_like(p))
    return model


def rms(x, weight, eps=1e-6):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def test_the_modules_and_their_loss_are_the_papers_formula():
    """h_k = norm(layer_k(proj([rms(E(t_{i+k})); rms(h_{k-1})]))), p_k = head(h_k), loss λ/D Σ_k mean CE(p_k,
    t_{i+k+1}), labels shifted by k; in float64, written out here (the layer itself is a compiled decoder layer)."""
    torch.manual_seed(0)
    model = perturbed(tfspec.compile(SPEC, seed=0)).double().train()
    ids = torch.randint(0, 40, (2, 11))
    labels = torch.randint(0, 40, (2, 11))
    labels[0, 3] = labels[1, :4] = -100  # unlabelled positions, as a task's prompt is
    model(ids, labels=labels)
    table, head = model.embeddings["tokens"].tokens.weight, model.embeddings["tokens"].tokens.weight
    hidden = model.run_stack("decoder", "tokens", ids, None, {})
    ctx = model.context("decoder", "tokens", ids, {}, None)
    expected = 0.0
    for k, module in enumerate(model.mtp, start=1):
        ahead = table[F.pad(ids[:, k:], (0, k))]
        joined = torch.cat([rms(ahead, module.enorm.weight), rms(hidden, module.hnorm.weight)], -1)
        hidden = rms(module.layer(joined @ module.proj.weight.T, ctx), module.norm.weight)
        logits = hidden @ head.T
        targets = F.pad(labels[:, k:], (0, k), value=-100)
        expected += F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=-100)
    loss = model.auxiliary_losses()["mtp"]
    assert_close(loss, 0.5 / 2 * expected, FLOAT32)
    # without labels: the next tokens of the ids, none past the end or at padding
    padding = torch.zeros(2, 11, dtype=torch.bool)
    padding[1, 8:] = True
    model(ids, padding_mask=padding)
    natural = ids.roll(-1, 1)
    natural[:, -1] = -100
    natural[1, 7:] = -100
    model(ids, padding_mask=padding, labels=natural)
    with_labels = model.auxiliary_losses()["mtp"]
    model(ids, padding_mask=padding)
    assert torch.equal(model.auxiliary_losses()["mtp"], with_labels)


def test_inference_does_not_run_them_and_training_trains_the_model_through_them():
    model = tfspec.compile(SPEC, seed=0)
    plain = tfspec.compile(SPEC.replace("mtp 2 weight=0.5", ""), seed=0)
    plain.load_state_dict({k: v for k, v in model.state_dict().items() if not k.startswith("mtp.")})
    ids = torch.randint(0, 40, (2, 9))
    model.eval()
    with torch.no_grad():
        assert torch.equal(model(ids), plain.eval()(ids))
    assert model.auxiliary_losses() == {}
    model.train()
    model(ids)
    loss = model.auxiliary_losses()["mtp"]
    loss.backward()
    # the modules' loss reaches the decoder's own weights (DeepSeek-V3 trains the model with it), and every module's
    assert model.decoder.layers[0].self_attn.qkv.weight.grad.abs().sum() > 0
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for n, p in model.mtp.named_parameters()
               if not n.endswith("bias")), [n for n, p in model.mtp.named_parameters() if p.grad is None]
    with torch.no_grad():  # no gradients: nothing to train
        model(ids)
    assert model.auxiliary_losses() == {}
    assert len(model.predict_ahead(ids)) == 2 and model.predict_ahead(ids)[1].shape == (2, 9, 40)
    model.drop_multi_token_prediction()
    assert not any(k.startswith("mtp.") for k in model.state_dict())
    model(ids)
    assert model.auxiliary_losses() == {}
    with pytest.raises(TypeError, match="no multi-token prediction"):
        model.predict_ahead(ids)


def test_bad_labels_are_a_clear_error():
    model = tfspec.compile(SPEC, seed=0).train()
    with pytest.raises(ValueError, match=r"labels must be token ids \(int64\) of the shape of tokens \(2, 5\)"):
        model(torch.zeros(2, 5, dtype=torch.long), labels=torch.zeros(2, 4, dtype=torch.long))


def test_they_are_counted_apart_as_training_only(tfspec_cli, tmp_path):
    spec = tfspec.parse(SPEC)
    g = spec.graph()
    model = tfspec.compile(spec, seed=0)
    held = sum(p.numel() for n, p in model.named_parameters() if n.startswith("mtp."))
    assert training_only_parameters(g) == held and count_parameters(g) == sum(p.numel() for p in model.parameters())
    assert active_parameters(g) == count_parameters(g) - held
    # per module: two norms, the projection of both joined, a layer of the decoder's last kind (d_ff 24), a norm
    layer = sum(p.numel() for p in model.decoder.layers[2].parameters())
    assert held == 2 * (3 * 16 + 2 * 16 * 16 + layer)
    path = tmp_path / "m.tfs"
    path.write_text(SPEC)
    line = tfspec_cli("check", path).stdout
    assert f"{count_parameters(g) - held:,} parameters + {held:,} for multi-token prediction" in line


@pytest.mark.parametrize("text, message", [
    ("embedding tokens { vocab 40; dim 16 }\nencoder x 2 { attention self heads=2; feedforward d_ff=8 }\n"
     "head tied(tokens)\nmtp 1", "decoder-only model's next tokens; this model has no decoder"),
    ("embedding tokens { vocab 40; dim 16 }\ndecoder x 2 { attention self heads=2 mask=causal; feedforward d_ff=8 }\n"
     "mtp 1", "needs a head over the tokens"),
    ("embedding tokens { vocab 40; dim 16 }\ndecoder x 2 { attention self heads=2 mask=causal; feedforward d_ff=8 }\n"
     "head linear(3)\nmtp 1", "the head has 3 outputs"),
    ("embedding tokens { vocab 40; dim 16 }\ndecoder x 2 { attention self heads=2 mask=causal; feedforward d_ff=8 }\n"
     "head tied(tokens)\nmtp 1 layer=2", "layer 2 is not one of the decoder's 2 layers"),
    ("embedding tokens { vocab 40; dim 16 }\ndecoder x 2 { attention self heads=2 mask=causal; feedforward d_ff=8 }\n"
     "head tied(tokens)\nmtp 0", "depth"),
    ("embedding tokens { vocab 40; dim 16 }\ndecoder x 3 { attention self heads=2 mask=causal; feedforward d_ff=8\n"
     "  layers 2 { self_attn kv_from=1 } }\nhead tied(tokens)\nmtp 1", "reads the keys and values an earlier layer"),
    ("embedding tokens { vocab 40; dim 16 }\ndecoder x 2 { attention self heads=2 mask=causal position=t5;"
     " feedforward d_ff=8 }\nhead tied(tokens)\nmtp 1", "share modules it owns"),
    ("embedding tokens { vocab 40; dim 16 }\ndecoder x 2 { attention self heads=2 mask=causal; feedforward d_ff=8 }\n"
     "head tied(tokens)\nmtp 1\nmtp 2", "a model has one multi-token prediction"),
])
def test_what_cannot_run_is_a_located_error(text, message):
    with pytest.raises(SpecError) as caught:
        tfspec.parse(text)
    assert message in str(caught.value)
    assert all(d.span is not None for d in caught.value.diagnostics)


def test_the_emitted_file_trains_them_as_the_compiled_model_does(tmp_path):
    source = tfspec.emit(SPEC)
    namespace: dict = {}
    exec(compile(source, "emitted.py", "exec"), namespace)  # the emitted file (our own output), not spec text
    model = perturbed(tfspec.compile(SPEC, seed=0)).train()
    emitted = namespace["Model"]()
    emitted.load_state_dict(model.state_dict(), strict=True)
    emitted.train()
    ids = torch.randint(0, 40, (2, 10))
    model(ids)
    emitted(ids)
    assert_close(emitted.mtp.added_losses["mtp"], model.auxiliary_losses()["mtp"], FLOAT32)


def test_a_run_trains_with_them_and_logs_their_loss(tfspec_cli, tmp_path):
    spec, text = tmp_path / "m.tfs", tmp_path / "corpus.txt"
    spec.write_text(SPEC.replace("vocab 40", "vocab 300"))
    text.write_text("to be or not to be, that is the question. " * 20)
    run = tfspec_cli("train", spec, "--data", text, "--seq-len", "16", "--steps", "4", "--batch", "4",
                     "--eval-every", "4", "--eval-size", "4", "--out", tmp_path / "run", "--no-progress")
    assert run.returncode == 0, run.stderr
    steps, _ = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert all(s["mtp"] > 0 for s in steps)


def test_the_diagram_and_diff_say_what_they_are():
    from tfspec.inspect.diagram import to_graphviz
    from tfspec.inspect.diff import diff
    dot = to_graphviz(tfspec.parse(SPEC)).source
    assert "Multi-Token Prediction (2 tokens further" in dot and "training only" in dot
    changes = diff(tfspec.parse(SPEC), tfspec.parse(SPEC.replace("mtp 2 weight=0.5", "mtp 1"))).changes
    assert {(c.what, c.before, c.after) for c in changes} == {("modules", "2", "1"), ("loss weight", "0.5", "0.3")}


# ---------------------------------------------------------------- Hugging Face checkpoints
T = pytest.importorskip("transformers")
DEEPSEEK_V3 = dict(vocab_size=90, hidden_size=16, num_hidden_layers=61, num_attention_heads=2, intermediate_size=20,
                   moe_intermediate_size=8, n_routed_experts=4, num_experts_per_tok=2, n_group=2, topk_group=1,
                   first_k_dense_replace=1, kv_lora_rank=8, q_lora_rank=6, qk_rope_head_dim=4, qk_nope_head_dim=4,
                   v_head_dim=4, n_shared_experts=1, routed_scaling_factor=2.5, num_nextn_predict_layers=1,
                   max_position_embeddings=64)


def test_a_deepseek_v3_checkpoints_mtp_module_computes_what_hugging_faces_mtp_model_computes(tmp_path):
    """DeepSeek-V3's 61 layers (its checkpoints keep the module as layer 61, where Hugging Face's ``MtpModel``
    reads it), tiny: our export writes the module there, ``MtpModel.from_pretrained`` reads it, and its logits
    equal ours; importing the export gives back every tensor bit for bit."""
    from transformers.modeling_layers import MtpModel
    from tfspec.interop.families import export_pretrained
    config = T.DeepseekV3Config(**DEEPSEEK_V3, architectures=["DeepseekV3ForCausalLM"])
    config._attn_implementation, config._experts_implementation = "eager", "eager"
    torch.manual_seed(0)
    reference = perturbed(T.DeepseekV3ForCausalLM(config).eval())
    reference.save_pretrained(tmp_path / "hf")  # (Hugging Face saves no module: it initialises, and says so)
    with pytest.warns(UserWarning, match=r"holds no multi-token prediction weights \(model\.layers\.61\.\*\)"):
        model = tfspec.from_pretrained(tmp_path / "hf")
    assert model.spec.mtp.depth == 1 and model.spec.mtp.layer == 60
    perturbed(model.mtp)
    export_pretrained(model, tmp_path / "out")
    main = T.DeepseekV3ForCausalLM.from_pretrained(tmp_path / "out", attn_implementation="eager").eval()
    drafts = MtpModel.from_pretrained(main).eval()
    ids = torch.randint(3, 90, (2, 12), generator=torch.Generator().manual_seed(1))
    n = ids.shape[1] - 1
    with torch.no_grad():
        hidden = main.model(ids).last_hidden_state[:, :n]
        positions = torch.arange(n)[None].expand(2, -1)
        theirs = drafts._project_to_logits(drafts.forward_layer(0, hidden, positions, None, input_ids=ids[:, 1:]))
        ours = model.predict_ahead(ids)[0][:, :n]
    assert_close(ours, theirs, FLOAT32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the module's weights are there now
        back = tfspec.from_pretrained(tmp_path / "out")
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), back.state_dict().values()))


def test_a_checkpoints_module_that_does_not_share_the_token_table_is_refused(tmp_path):
    """tfspec shares the token table and head with the modules, as the paper does; a checkpoint whose copies
    differ is not that model."""
    from safetensors.torch import load_file, save_file
    from tfspec.interop.families import export_pretrained
    from tfspec.interop.mapping import InteropError
    config = dict(model_type="deepseek_v3", **{**DEEPSEEK_V3, "num_hidden_layers": 2})
    model = tfspec.compile(tfspec.import_config(config), seed=0)
    export_pretrained(model, tmp_path / "out")
    path = tmp_path / "out" / "model.safetensors"
    tensors = load_file(str(path))
    assert torch.equal(tensors["model.layers.2.embed_tokens.weight"], tensors["model.embed_tokens.weight"])
    tensors["model.layers.2.embed_tokens.weight"] = tensors["model.layers.2.embed_tokens.weight"] + 1
    save_file(tensors, str(path), metadata={"format": "pt"})
    with pytest.raises(InteropError, match="model.layers.2.embed_tokens.weight"):
        tfspec.from_pretrained(tmp_path / "out")


@pytest.mark.parametrize("source", [SPEC, "examples/deepseek_v3.tfs", "examples/deepseek_v32.tfs"])
def test_their_training_flops_are_what_the_flop_counter_counts(source):
    """A training forward runs the modules beside the model: FlopCounterMode counts the model's matrix products
    (``total``) and theirs (``training_only``), at full size on the meta device."""
    from torch.utils.flop_counter import FlopCounterMode
    from tfspec.inspect.analysis import analyse
    spec = tfspec.load(source) if source.endswith(".tfs") else tfspec.parse(source)
    a = analyse(spec, seq_len=64, batch=2)
    model = tfspec.compile(spec, device="meta").train()
    with FlopCounterMode(display=False) as counter:
        model(torch.zeros(2, 64, dtype=torch.long, device="meta"))
    assert a.training_only.matmul > 0
    assert counter.get_total_flops() == a.total.matmul + a.training_only.matmul
    assert a.training()["flops_forward_backward"] == 3 * (a.total.flops + a.training_only.flops)


def test_a_task_run_with_them_resumes_exactly_and_tunes_with_lora(tmp_path):
    """The reverse task labels only the answer: the modules' labels are the trainer's, shifted. An interrupted run
    resumes to the uninterrupted one's losses (their dropout draws included); LoRA adapts the modules' layers too."""
    from tfspec.run.lora import parse_settings
    from tfspec.run.train import TrainConfig, resume, train
    spec = SPEC.replace("residual pre", "residual pre\n  dropout 0.1").replace("vocab 40", "vocab 16")
    config = dict(task="reverse", steps=6, save_every=3, eval_every=3, symbols=6, min_len=2, max_len=6, batch=8,
                  eval_size=8)
    whole = train(spec, TrainConfig(**config), tmp_path / "a", progress=False, log=lambda *_: None)
    train(spec, TrainConfig(**config), tmp_path / "b", progress=False, log=lambda *_: None, stop_after=2)
    rest = resume(tmp_path / "b", progress=False, log=lambda *_: None)
    assert whole.losses[2:] == rest.losses
    steps, _ = read_metrics(tmp_path / "a" / "metrics.jsonl")
    assert all(s["mtp"] > 0 for s in steps)
    tuned = train(spec, TrainConfig(**config, lora=parse_settings("r=2,targets=qkv")), tmp_path / "lora",
                  progress=False, log=lambda *_: None)
    adapters = dict(tuned.model.mtp.named_parameters())
    assert adapters["1.layer.self_attn.qkv.lora_B.default.weight"].abs().sum() > 0  # (zero at first): trained
