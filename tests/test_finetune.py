"""Fine-tuning: low-rank adapters through peft (only they train; checkpoints and exports hold the merged
weights; resuming is exact), activation checkpointing (the same gradients, less memory) and --compile."""

from __future__ import annotations

import json
import random
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

pytest.importorskip("peft")
T = pytest.importorskip("transformers")

import tfspec  # noqa: E402
from tfspec.run import checkpoint as ckpt  # noqa: E402
from tfspec.nn.moe import Correction  # noqa: E402
from tfspec.run.lora import LoraSettings, parse_settings  # noqa: E402
from tfspec.run.train import TrainConfig, resume, train  # noqa: E402
from numerics import FLOAT32, assert_close, close

NOUNS = "cat dog bird fox cow hen".split()
VERBS = "sees likes chases meets".split()


def _sentences(seed: int, count: int) -> str:
    """Sentences of a small grammar: "the cat sees the dog ." ... (a held-out text draws other sentences)."""
    rng = random.Random(seed)
    return " ".join(f"the {rng.choice(NOUNS)} {rng.choice(VERBS)} the {rng.choice(NOUNS)} ." for _ in range(count))


def _hf_gpt2(directory):
    """A tiny GPT-2 saved as Hugging Face does, with a word-level tokenizer over the grammar's words."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    words = ["[PAD]", "[UNK]", "the", ".", *NOUNS, *VERBS]
    tokenizer = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.add_special_tokens(["[PAD]", "[UNK]"])
    torch.manual_seed(0)
    model = T.GPT2LMHeadModel(T.GPT2Config(vocab_size=len(words), n_embd=32, n_layer=2, n_head=4, n_positions=64, bos_token_id=3, eos_token_id=3,
                                           pad_token_id=0))
    model.save_pretrained(directory)
    tokenizer.save(str(directory / "tokenizer.json"))
    return model.eval(), tokenizer


def _held_out_loss(model, ids: torch.Tensor) -> float:
    with torch.no_grad():
        logits = model(ids[None, :-1])
        logits = logits.logits if hasattr(logits, "logits") else logits
        return torch.nn.functional.cross_entropy(logits[0], ids[1:]).item()


def test_lora_settings_are_read_as_written():
    assert parse_settings("r=4,alpha=8,targets=q,v,out") == LoraSettings(r=4, alpha=8, targets=("q", "v", "out"))
    assert parse_settings("targets=up").r == 8
    for bad, message in (("r=0", "greater than or equal to 1"), ("rank=4", "no setting 'rank'"),
                         ("r=4,q", "expected NAME=VALUE"), ("r=4,r=5", "r is given twice"),
                         ("targets=", "'' is not the name of a linear map"), ("targets=q,v-1", "'v-1' is not")):
        with pytest.raises(ValueError, match=message):
            parse_settings(bad)


def test_lora_fine_tunes_an_imported_gpt2_on_a_text_it_never_saw(tmp_path, capsys):
    from tfspec.cli import main

    reference, tokenizer = _hf_gpt2(tmp_path / "hf")
    (tmp_path / "train.txt").write_text(_sentences(0, 400))
    (tmp_path / "held_out.txt").write_text(_sentences(1, 60))
    held_out = torch.tensor(tokenizer.encode(_sentences(2, 9)).ids)  # neither trained on nor evaluated during
    before = _held_out_loss(reference, held_out)

    assert main(["train", "--init", str(tmp_path / "hf"), "--data", str(tmp_path / "train.txt"), "--eval-data",
                 str(tmp_path / "held_out.txt"), "--seq-len", "32", "--steps", "60", "--batch", "8", "--lr", "3e-2",
                 "--warmup", "2", "--eval-every", "60", "--eval-size", "8", "--no-progress",
                 "--lora", "r=4,alpha=8,targets=q,v,up,down", "--out", str(tmp_path / "tuned")]) == 0
    out = capsys.readouterr().out
    adapters = 2 * 4 * (2 * (32 + 32) + 2 * (32 + 128))  # 2 layers × r × (in + out) of q, v, up and down
    total = sum(p.numel() for p in reference.parameters()) + adapters  # HF counts its tied head once, as we do
    assert f"LoRA r=4, alpha=8, on q, v, up, down: {adapters:,} trainable parameters of {total:,}" in out

    tuned = ckpt.load(tmp_path / "tuned")
    merged = tuned.model()
    assert _held_out_loss(merged, held_out) < before - 0.3

    # Only the adapters trained: what they do not touch is the initial weights, bit for bit (biases, norms,
    # embeddings, the attention's output); so are the keys' rows of the fused projection (q and v are adapted).
    initial = tfspec.from_pretrained(tmp_path / "hf").state_dict()
    weights = tuned.weights
    assert weights.keys() == initial.keys()
    changed = sorted(k for k in weights if not torch.equal(weights[k], initial[k]))
    assert changed == sorted(f"decoder.layers.{i}.{m}.weight" for i in range(2)
                             for m in ("self_attn.qkv", "ffn.up", "ffn.down"))
    for i in range(2):
        key = f"decoder.layers.{i}.self_attn.qkv.weight"
        q, k, v = weights[key].split(32)
        q0, k0, v0 = initial[key].split(32)
        assert torch.equal(k, k0) and not torch.equal(q, q0) and not torch.equal(v, v0)
        assert torch.linalg.matrix_rank(q - q0) <= 4  # a rank-4 update
    optimizer = torch.load(tuned.path / "state.pt", weights_only=True)["optimizer"]
    assert sum(len(group["params"]) for group in optimizer["param_groups"]) == 2 * 4 * 2  # A and B, 4 maps, 2 layers
    assert total == sum(p.numel() for p in merged.parameters()) + adapters

    # The export is the merged model, which transformers loads as any GPT-2.
    assert main(["export", str(tmp_path / "tuned"), "--to", "hf", "-o", str(tmp_path / "exported")]) == 0
    exported = T.GPT2LMHeadModel.from_pretrained(tmp_path / "exported").eval()
    with torch.no_grad():
        assert_close(exported(held_out[None]).logits, merged(held_out[None]), FLOAT32)


def test_the_merged_weights_compute_what_the_adapted_model_computes_and_resuming_is_exact(tmp_path):
    spec = "examples/llama2_7b.tfs"
    overrides = {"layers": 2, "d_model": 32, "heads": 4, "kv_heads": 2, "d_ff": 64, "vocab": 40}
    config = TrainConfig(task="reverse", steps=8, save_every=3, eval_every=100, eval_size=4, batch=4, max_len=6,
                         min_len=2, lr=3e-2, lora=LoraSettings(r=2, alpha=4, dropout=0.1, targets=("q", "k", "out",
                                                                                                      "down")))
    whole = train(spec, config, tmp_path / "whole", overrides=overrides, progress=False, log=lambda _: None)
    adapted = whole.model.eval()
    merged = ckpt.load(tmp_path / "whole").model()
    assert not any(".lora_" in name for name in merged.state_dict())
    tokens = torch.randint(0, 40, (3, 9))
    with torch.no_grad():
        assert_close(adapted(tokens), merged(tokens), FLOAT32)
        # ... and they are not the initial model (a test of the merge that an untrained adapter would pass)
        untrained = tfspec.compile(spec, overrides=overrides, seed=0).eval()
        assert not close(untrained(tokens), merged(tokens), 1e-3)

    train(spec, config, tmp_path / "split", overrides=overrides, progress=False, log=lambda _: None, stop_after=5)
    # as if stopped after step 5 before its checkpoint: resumes from step 3's adapters and frozen weights
    (tmp_path / "split" / "latest").write_text("step-0000003\n")
    second = resume(tmp_path / "split", progress=False, log=lambda _: None)
    assert second.losses == whole.losses[3:]  # exact float equality
    assert all(torch.equal(a, b) for a, b in zip(ckpt.load(tmp_path / "whole").weights.values(),
                                                 ckpt.load(tmp_path / "split").weights.values()))


def test_lora_refusals(tmp_path, capsys):
    from tfspec.cli import main

    common = ["train", "examples/gpt2_small.tfs", "--set", "layers=1", "--set", "d_model=16", "--set", "heads=2",
              "--steps", "1", "--max-len", "4", "--no-progress"]
    assert main([*common, "--lora", "targets=query", "--out", str(tmp_path / "a")]) == 1
    err = capsys.readouterr().err
    assert "targets=query: no linear map of this model is named so; its linear maps: down, out, qkv, up" in err
    assert not (tmp_path / "a" / "latest").exists()
    with pytest.raises(SystemExit):
        main([*common, "--lora", "r=x"])
    assert "--lora: r: Input should be a valid integer" in capsys.readouterr().err


# ---------------------------------------------------------------- activation checkpointing
CHECKPOINTED = """
embedding tokens { vocab 50; dim 32; position learned(64) }
defaults { residual pre; dropout 0.2; attn_dropout 0.1 }
decoder x 3 {
  attention self heads=4 mask=causal
  feedforward d_ff=64 kind=moe(experts=4, top=2, aux_loss=0.01) router=correction(0.01)
  final layernorm
}
head tied(tokens)
"""


def _gradients(checkpointing: bool):
    model = tfspec.compile(tfspec.parse(CHECKPOINTED), seed=0).train()
    model.checkpoint_activations(checkpointing)
    torch.manual_seed(1)  # the same dropout masks
    tokens = torch.randint(0, 50, (4, 24), generator=torch.Generator().manual_seed(2))
    loss = model(tokens).logsumexp(-1).mean() + sum(model.auxiliary_losses().values())
    loss.backward()
    biases = [m.bias.clone() for m in model.modules() if isinstance(m, Correction)]
    return {n: p.grad for n, p in model.named_parameters() if p.grad is not None}, biases


def test_activation_checkpointing_gives_the_same_gradients():
    plain, plain_biases = _gradients(False)
    checkpointed, biases = _gradients(True)
    assert plain.keys() == checkpointed.keys() and len(plain) > 20
    for name in plain:
        assert_close(plain[name], checkpointed[name], FLOAT32, msg=name)
    # the mixture's correction bias moved once, as without checkpointing (not again in the recomputation)
    assert all(torch.equal(a, b) for a, b in zip(plain_biases, biases)) and any(b.abs().sum() > 0 for b in biases)


MEASURE = textwrap.dedent("""
    import json, sys, torch, tfspec
    torch.set_num_threads(1)
    spec = tfspec.parse('''embedding tokens { vocab 64; dim 128; position learned(512) }
    decoder x 8 { residual pre; attention self heads=4 mask=causal; feedforward d_ff=512; final layernorm }
    head tied(tokens)''')
    model = tfspec.compile(spec, seed=0).train()
    model.checkpoint_activations(sys.argv[1] == "1")
    tokens = torch.randint(0, 64, (4, 256))
    model(tokens[:1, :8]).sum().backward()  # allocator warm
    def status(key):
        return int(next(l for l in open("/proc/self/status") if l.startswith(key)).split()[1])
    open("/proc/self/clear_refs", "w").write("5")
    before = status("VmRSS")
    model(tokens).logsumexp(-1).mean().backward()
    print(json.dumps(status("VmHWM") - before))
""")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="peak memory is read from /proc/self/status")
def test_activation_checkpointing_lowers_peak_memory():
    from concurrent.futures import ThreadPoolExecutor

    env = {"MALLOC_MMAP_THRESHOLD_": "65536", "MALLOC_TRIM_THRESHOLD_": "0", "PATH": "/usr/bin:/bin"}

    def peak(flag: str) -> int:  # each in a process of its own: its peak is its own
        done = subprocess.run([sys.executable, "-c", MEASURE, flag], capture_output=True, text=True, check=True,
                              env=env, cwd=str(Path(__file__).parents[1]))
        return json.loads(done.stdout)

    with ThreadPoolExecutor(2) as pool:
        peaks = list(pool.map(peak, ("0", "1")))
    assert peaks[1] < 0.5 * peaks[0], peaks  # kB: 8 layers' activations against about one layer's


# ---------------------------------------------------------------- torch.compile
def test_compile_trains_the_same_losses(tmp_path, monkeypatch):
    """The inductor backend takes ~20 s to compile even a tiny model on a CPU; aot_eager traces the same graphs
    (dynamo, autograd) and checks the wiring in a second."""
    import functools

    import torch._dynamo

    spec, overrides = "examples/gpt2_small.tfs", {"layers": 1, "d_model": 16, "heads": 2, "context": 32}
    config = TrainConfig(task="reverse", steps=4, save_every=100, eval_every=100, eval_size=4, batch=4, max_len=6,
                         min_len=6)
    eager = train(spec, config, None, overrides=overrides, progress=False, log=lambda _: None)
    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend="aot_eager"))
    torch._dynamo.reset()
    compiled = train(spec, config.model_copy(update={"compile": True}), tmp_path / "run", overrides=overrides,
                     progress=False, log=lambda _: None)
    assert compiled.losses == pytest.approx(eager.losses, rel=1e-5)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] >= 1  # it did run compiled
    assert "_orig_mod" not in "".join(ckpt.load(tmp_path / "run").weights)  # the checkpoint keeps the names
