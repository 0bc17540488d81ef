"""Models of several towers (``tower NAME { ... }``) joined by a contrastive head: the language, its errors, the
compiled model and its head against formulas written here, and the commands that read towers."""

from __future__ import annotations

import json
import math

import pytest
import torch
import torch.nn.functional as F

import tfspec
from tfspec.front.fmt import format_text
from tfspec.front.schema import Spec, Towers
from numerics import FLOAT32, assert_close

TOWERS = """model pair
let d = 16, text_d = 12, vocab = 40, proj = 8

defaults {
  residual pre
  norm layernorm(eps=1e-5)
}

tower text {
  defaults { norm rmsnorm }
  embedding tokens { vocab vocab; dim text_d; position learned(16) }
  encoder x 2 {
    attention self heads=2 mask=causal + padding
    feedforward d_ff=4 * text_d activation=quick_gelu
    final rmsnorm
  }
  head linear(proj) bias=false pool=token(39)
}

tower vision {
  embedding image {
    input patches(image=8, patch=4, channels=3, class_token=true, bias=false)
    dim d
    position learned(5)
    norm layernorm
  }
  encoder x 1 {
    attention self heads=2
    feedforward d_ff=4 * d activation=quick_gelu
    final layernorm
  }
  head linear(proj) bias=false pool=first
}

contrastive text vision loss={loss}{bias}
"""


def towers_text(loss: str = "softmax", bias: float | None = None) -> str:
    return TOWERS.replace("{loss}", loss).replace("{bias}", "" if bias is None else f" bias={bias}")


def batch(count: int = 3):
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 39, (count, 7), generator=g)
    ids[torch.arange(count), torch.tensor([6, 3, 4, 2, 5][:count])] = 39  # each text's end
    padding = torch.zeros(count, 7, dtype=torch.bool)
    padding[-1, 5:] = True
    return ids, padding, torch.randn(count, 3, 8, 8, generator=g)


def test_towers_are_models_of_their_own_under_the_files_lets_and_defaults():
    towers = tfspec.parse(towers_text())
    assert isinstance(towers, Towers) and [t.name for t in towers.towers] == ["text", "vision"]
    text, vision = towers.tower("text"), towers.tower("vision")
    assert isinstance(text, Spec) and text.name == "text" and text.kind == "encoder-only"
    # the file's defaults (pre-norm), then the tower's own (rmsnorm in the text tower alone)
    assert text.encoder.block.sublayers[0].residual == "pre" and vision.encoder.block.sublayers[0].residual == "pre"
    assert text.encoder.block.sublayers[0].norm.name == "rmsnorm"
    assert vision.encoder.block.sublayers[0].norm.name == "layernorm"
    assert towers.contrastive.towers == ("text", "vision") and towers.contrastive.scale == 2.6592
    model = tfspec.compile(towers, seed=0)
    assert towers.parameter_count() == sum(p.numel() for p in model.parameters()) \
        == text.parameter_count() + vision.parameter_count() + 1  # and the contrastive head's scale


def test_each_tower_computes_what_it_computes_compiled_alone():
    towers = tfspec.parse(towers_text())
    model = tfspec.compile(towers, seed=0).eval()
    ids, padding, pixels = batch()
    for name, given in (("text", dict(padding_mask=padding)), ("vision", {})):
        alone = tfspec.compile(towers.tower(name), seed=1).eval()
        alone.load_state_dict(model.towers[name].state_dict())
        source = ids if name == "text" else pixels
        with torch.no_grad():
            assert torch.equal(model.tower(name, input=source, **given), alone(source, **given))


@pytest.mark.parametrize("loss, bias", [("softmax", None), ("sigmoid", -10.0)])
def test_the_contrastive_head_is_its_formula(loss, bias):
    model = tfspec.compile(towers_text(loss, bias), seed=0).eval()
    with torch.no_grad():
        model.contrastive.scale.fill_(1.7)
        if bias is not None:
            model.contrastive.bias.fill_(-1.25)
    ids, padding, pixels = batch()
    out = model(text=ids, text_padding_mask=padding, vision=pixels)
    with torch.no_grad():
        texts = model.tower("text", input=ids, padding_mask=padding)
        pictures = model.tower("vision", input=pixels)
    cosines = torch.tensor([[float(F.cosine_similarity(t, p, dim=0)) for p in pictures] for t in texts])
    expected = math.exp(1.7) * cosines + (0.0 if bias is None else -1.25)
    assert_close(out.logits, expected, FLOAT32)
    assert_close(out.first.norm(dim=-1), torch.ones(3), FLOAT32)
    n = len(expected)
    if loss == "softmax":  # CLIP's: the cross-entropy of each row and of each column, the diagonal true
        rows = -sum(expected[i].log_softmax(0)[i] for i in range(n)) / n
        columns = -sum(expected[:, j].log_softmax(0)[j] for j in range(n)) / n
        wanted = (rows + columns) / 2
    else:  # SigLIP's: each pair's logistic loss, +1 on the diagonal, summed over a row, averaged over rows
        wanted = -sum(math.log(1 / (1 + math.exp(-(1 if i == j else -1) * float(expected[i, j]))))
                      for i in range(n) for j in range(n)) / n
    assert_close(model.loss(out).detach(), torch.tensor(float(wanted)), FLOAT32)


def test_the_loss_trains_both_towers_and_the_scale():
    model = tfspec.compile(towers_text("sigmoid", -10.0), seed=0)
    ids, padding, pixels = batch()
    model.loss(model(text=ids, text_padding_mask=padding, vision=pixels)).backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_seeds_reproduce_and_the_towers_draw_apart():
    a, b = (tfspec.compile(towers_text(), seed=3).state_dict() for _ in range(2))
    assert all(torch.equal(a[k], b[k]) for k in a)
    c = tfspec.compile(towers_text(), seed=4).state_dict()
    assert not torch.equal(a["towers.text.head.weight"], c["towers.text.head.weight"])


def test_inputs_are_named_by_their_tower():
    model = tfspec.compile(towers_text(), seed=0)
    ids, padding, pixels = batch()
    with pytest.raises(TypeError, match="'pixels' is no tower's input: this model's towers are text, vision"):
        model(text=ids, pixels=pixels)
    with pytest.raises(TypeError, match="missing the input of tower vision"):
        model(text=ids, text_padding_mask=padding)
    with pytest.raises(ValueError, match="pixel_values"):  # the tower's own check, naming its argument
        model(text=ids, vision=pixels[:, :1])
    with pytest.raises(ValueError, match="give both towers one batch"):
        model.loss(model(text=ids, vision=pixels[:2]))


@pytest.mark.parametrize("old, new, message, line", [
    ("contrastive text vision", "contrastive txt vision", "unknown tower 'txt'", 35),
    ("bias=false pool=token(39)", "bias=false", "tower 'text' makes no vector", 35),
    ("tower vision {", "tower text {", "tower 'text' is declared twice", 20),
    ("linear(proj) bias=false pool=token(39)", "linear(9) bias=false pool=token(39)",
     "the contrastive head compares vectors of one width", 35),
    ("model pair", "model pair\nhead linear(3)", "a model of towers holds its embeddings", 2),
    ("loss=softmax", "loss=hinge", "expected softmax or sigmoid, got 'hinge'", 35),
])
def test_mistakes_are_located_errors(old, new, message, line):
    with pytest.raises(tfspec.SpecError) as exc:
        tfspec.parse(towers_text().replace(old, new), file="pair.tfs")
    shown = str(exc.value)
    assert message in shown, shown
    assert any(d.span is not None and d.span.line == line for d in exc.value.diagnostics), shown
    if message.startswith("unknown tower"):
        assert "did you mean 'text'" in shown


def test_every_towers_problems_are_reported_together():
    # as in a model of one: every problem of reading the towers, or (all read) every one of checking them
    read = towers_text().replace("activation=quick_gelu", "activation=quick_glu", 1).replace("final layernorm",
                                                                                             "final layernrom")
    with pytest.raises(tfspec.SpecError) as exc:
        tfspec.parse(read)
    shown = str(exc.value)
    assert "quick_glu" in shown and "layernrom" in shown  # the text tower's and the vision tower's
    assert {d.span.line for d in exc.value.diagnostics} == {14, 30}
    checked = towers_text().replace("heads=2 mask=causal", "heads=5 mask=causal").replace(
        "attention self heads=2\n", "attention self heads=3\n")
    with pytest.raises(tfspec.SpecError) as exc:
        tfspec.parse(checked)
    assert [str(d.message) for d in exc.value.diagnostics] == ["d_model 12 is not divisible by heads=5",
                                                               "d_model 16 is not divisible by heads=3"]


def test_one_tower_or_a_contrastive_head_without_towers_are_refused():
    one = towers_text().split("tower vision")[0]
    with pytest.raises(tfspec.SpecError, match="a model of towers has two or more; this has 1"):
        tfspec.parse(one)
    with pytest.raises(tfspec.SpecError, match="a contrastive head joins two towers; this model has none"):
        tfspec.parse("embedding tokens { vocab 10; dim 8 }\nencoder x 1 { attention self heads=2 }\n"
                     "contrastive a b")


def test_formatting_keeps_the_towers_and_is_stable():
    text = towers_text("sigmoid", -10.0)
    formatted = format_text(text, "pair.tfs")
    assert format_text(formatted, "pair.tfs") == formatted
    assert "tower text {\n  defaults {\n    norm rmsnorm\n  }\n\n  embedding tokens {" in formatted
    assert tfspec.parse(formatted) == tfspec.parse(text)


def test_check_diff_and_emit_read_towers(tfspec_cli, tmp_path):
    first, second = tmp_path / "pair.tfs", tmp_path / "pair2.tfs"
    first.write_text(towers_text())
    second.write_text(towers_text("sigmoid", -10.0).replace("encoder x 1", "encoder x 2"))
    result = tfspec_cli("check", str(first))
    assert result.returncode == 0 and "pair: 2 towers: tower text (encoder-only, 2 layers, d_model 12" in result.stdout
    assert "contrastive (softmax)" in result.stdout
    assert f"{tfspec.parse(towers_text()).parameter_count():,} parameters" in result.stdout
    checked = json.loads(tfspec_cli("check", "--json", str(first)).stdout)[0]
    assert checked["kind"] == "towers" and set(checked["towers"]) == {"text", "vision"}
    assert checked["parameters"] == sum(t["parameters"] for t in checked["towers"].values()) + 1
    result = tfspec_cli("diff", str(first), str(second))
    out = result.stdout
    assert result.returncode == 0 and "tower vision: encoder: layers 1 → 2" in out
    assert "contrastive: loss softmax → sigmoid" in out and "contrastive: bias none → learned" in out
    assert "contrastive: init log scale 2.6592 → log scale 2.6592, bias -10" in out
    assert "seq_len text 16, vision 5" in out
    result = tfspec_cli("emit", str(first), "-o", tmp_path / "pair.py")
    assert result.returncode == 0, result.stderr
    assert "wrote" in result.stdout and "class TextModel(nn.Module):" in (tmp_path / "pair.py").read_text()


def test_mask_draws_every_towers_attention_and_build_runs_the_towers_once(tfspec_cli, tmp_path):
    """``mask``: each tower's attentions, named with their tower, the tower of tokens at --seq-len and the one of
    pictures at its own length; ``build``: the module tree, the parameters (compiler and analysis agreeing) and one
    forward pass giving the contrastive logits and each tower's vectors."""
    path = tmp_path / "pair.tfs"
    path.write_text(towers_text())
    result = tfspec_cli("mask", str(path), "-o", tmp_path / "mask.png", "--seq-len", "6", "--json")
    assert result.returncode == 0, result.stderr
    drawn = {p["sublayer"]: (p["queries"], p["pairs_seen"]) for p in json.loads(result.stdout)["patterns"]}
    assert drawn == {"text.encoder.self_attn": (6, 21), "vision.encoder.self_attn": (5, 25)}  # (causal; all seen)
    assert (tmp_path / "mask.png").stat().st_size > 0
    result = tfspec_cli("build", str(path), "--seq-len", "6", "--json")
    assert result.returncode == 0, result.stderr
    built = json.loads(result.stdout)
    assert built["parameters"] == tfspec.parse(towers_text()).parameter_count() and built["finite"]
    assert built["outputs"] == {"logits": [2, 2], "first": [2, 8], "second": [2, 8]}  # (each head: linear(proj))


def test_summary_costs_each_tower_at_its_length_and_the_towers_together(tfspec_cli, tmp_path):
    from tfspec.inspect.analysis import analyse
    path = tmp_path / "pair.tfs"
    path.write_text(towers_text())
    result = tfspec_cli("summary", path, "--seq-len", "12", "--batch", "2", "--json")
    data = json.loads(result.stdout)
    towers = tfspec.parse(towers_text())
    text, vision = (analyse(towers.tower(n), seq_len=length, batch=2) for n, length in (("text", 12),
                                                                                         ("vision", None)))
    assert data["towers"]["text"]["lengths"] == {"encoder": 12} and data["towers"]["vision"]["lengths"] == {"encoder": 5}
    assert data["flops"] == text.total.flops + vision.total.flops
    assert data["parameters"] == towers.parameter_count()
    shown = tfspec_cli("summary", path).stdout
    assert shown.startswith("tower text\n") and "\ntower vision\n" in shown
    assert f"pair: the towers together, {towers.parameter_count():,} parameters (1 in what joins them)" in shown


def test_a_small_clip_learns_to_match_pictures_with_their_digits_names_and_resumes_exactly(tfspec_cli, tmp_path):
    """``tfspec train`` of two towers: generated pictures paired with their digits' names; the held-out accuracy
    of choosing each picture's name among the ten climbs far above chance (a tenth), and a run stopped and
    resumed ends with the weights and figures of one that was not."""
    from tfspec.run import checkpoint
    common = ["--batch", "32", "--lr", "1e-3", "--warmup", "10", "--eval-every", "75", "--eval-size", "128",
              "--no-progress"]
    whole, parts = tmp_path / "whole", tmp_path / "parts"
    done = tfspec_cli("train", "examples/clip_digits.tfs", "--steps", "150", *common, "--out", whole)
    assert done.returncode == 0, done.stderr
    assert "on the generated digits and their names" in done.stdout
    assert "each paired with its class's name (zero, one, two, ...) for the contrastive head (softmax)" in done.stdout
    assert "recipe (CLIP (Radford et al. 2021)" in done.stdout and "pictures and names/s" in done.stdout
    evaluations = [json.loads(line) for line in (whole / "metrics.jsonl").read_text().splitlines()
                   if "accuracy" in line]
    assert evaluations[-1]["accuracy"] >= 0.3 and evaluations[-1]["accuracy"] > evaluations[0]["accuracy"] - 0.05
    from tfspec.run.config import TrainConfig
    from tfspec.run.train import train
    config = TrainConfig(steps=150, batch=32, lr=1e-3, warmup=10, eval_every=75, eval_size=128)
    train("examples/clip_digits.tfs", config, parts, progress=False, log=lambda line: None, stop_after=80)
    assert tfspec_cli("train", "--resume", parts, "--no-progress").returncode == 0
    a, b = (checkpoint.load(run).weights for run in (whole, parts))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert [json.loads(line) for line in (parts / "metrics.jsonl").read_text().splitlines()][-1] == \
        [json.loads(line) for line in (whole / "metrics.jsonl").read_text().splitlines()][-1]


def test_training_towers_refuses_what_does_not_pair(tfspec_cli, tmp_path):
    spec = tmp_path / "pair.tfs"
    spec.write_text(open("examples/clip_digits.tfs").read().replace("pool=token(2)", "pool=token(7)"))
    refused = tfspec_cli("train", spec, "--steps", "1", "--no-progress", "--out", tmp_path / "a")
    assert refused.returncode == 1 and "pools at token(id=7): a name's end token is 2" in refused.stderr
    spec.write_text(open("examples/clip_digits.tfs").read().replace("vocab 31", "vocab 20"))
    refused = tfspec_cli("train", spec, "--steps", "1", "--no-progress", "--out", tmp_path / "b")
    assert refused.returncode == 1 and "tower 'text' reads 31 ids" in refused.stderr
    refused = tfspec_cli("train", "examples/clip_digits.tfs", "--task", "copy", "--out", tmp_path / "c")
    assert refused.returncode == 2 and "--task describes token sequences" in refused.stderr
    assert not (tmp_path / "a").exists() or not any((tmp_path / "a").iterdir())


def test_verify_checks_each_tower_and_that_pairs_follow_their_examples(tfspec_cli):
    from tfspec.inspect.verify import small_version, verify_towers
    small, changes = small_version(tfspec.load("examples/siglip_base_patch16_224.tfs"))
    assert "tower vision: width 768 -> 48" in changes and "tower text: head outputs 768 -> 32" in changes
    # the compared vectors at one width: the vision tower's pool alone fixes it, the text tower's head follows
    assert small.tower("text").head.out == small.tower("vision").head.out == 48
    model = tfspec.compile(small, seed=0)
    results = {r.name: r for r in verify_towers(model, examples=3)}
    assert results["pairs follow their examples"].status == "held"
    assert results["tower text: padding invariance"].status == "held"  # over the stack's positions: it pools
    assert results["tower vision: finite gradients"].status == "held"
    assert not [r for r in results.values() if r.status == "violated"]
    # a head that mixes the batch breaks it, and the property says so
    model.contrastive.forward = lambda a, b: type(model.contrastive).forward(model.contrastive, a.flip(0), b)
    broken = {r.name: r for r in verify_towers(model, examples=2)}
    assert broken["pairs follow their examples"].status == "violated"
    result = tfspec_cli("verify", "examples/clip_digits.tfs", "--examples", "3")
    assert result.returncode == 0 and "held     pairs follow their examples" in result.stdout


def test_report_gives_each_tower_a_page(tfspec_cli, tmp_path):
    out = tmp_path / "pair.html"
    result = tfspec_cli("report", "examples/clip_digits.tfs", "-o", out, "--no-verify")
    assert result.returncode == 0 and "clip_digits.text, clip_digits.vision" in result.stdout
    page = out.read_text()
    assert "<h2>clip_digits.text</h2>" in page and "<h2>clip_digits.vision</h2>" in page
