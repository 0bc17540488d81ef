"""Connectors between towers (``connect vision -> text image_token=ID { steps }``): the language, its errors, and
the model against the formula written here: the source's vectors at a layer, less its class token, through the
steps, in place of the target's embeddings at its image tokens."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import tfspec
from tfspec import ir
from tfspec.registry import CONNECTOR_STEPS
from numerics import FLOAT32, assert_close

VLM = """model tiny_vlm

defaults {
  residual pre
  norm layernorm
}

tower vision {
  embedding image { input patches(image=8, patch=4, class_token=true); dim 16; position learned(5) }
  encoder x 3 { attention self heads=2; feedforward d_ff=32; final layernorm }
}

tower text {
  embedding tokens { vocab 40; dim 24; position learned(32) }
  decoder x 2 { attention self heads=2 mask=causal + padding; feedforward d_ff=48; final layernorm }
  head tied(tokens)
}

connect vision -> text image_token=39 layer=LAYER drop=DROP {
  linear 24
  activation gelu
  linear 24
}
"""


def vlm(layer: str = "-2", drop: str = "first") -> str:
    return VLM.replace("LAYER", layer).replace("DROP", drop)


def prompt(patches: int = 4):
    """Two rows of tokens, each with ``patches`` image tokens: the first after one token, the second after six."""
    ids = torch.randint(0, 38, (2, 12), generator=torch.Generator().manual_seed(3))
    ids[0, 1:1 + patches] = 39
    ids[1, 6:6 + patches] = 39
    return ids


@pytest.mark.parametrize("layer, drop", [("-2", "first"), ("-1", "none"), ("0", "first"), ("none", "first")])
def test_the_text_reads_the_pictures_vectors_where_its_image_tokens_stand(layer, drop):
    model = tfspec.compile(vlm(layer, drop).replace(" layer=none", ""), seed=0).eval()
    # four patches a picture, and its class token too where it is kept
    ids, pixels = prompt(4 if drop == "first" else 5), torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(4))
    vision, text, connector = model.towers["vision"], model.towers["text"], model.connectors["vision"]
    with torch.no_grad():
        ctx = vision.context("encoder", "tokens", pixels, {})
        x = vision.embed("encoder", "tokens", pixels, ctx)
        hidden = [x]  # Hugging Face's hidden_states: the embeddings, then each layer's output
        for layer_module in vision.encoder.layers:
            x = layer_module(x, ctx)
            hidden.append(x)
        chosen = vision.encoder.final_norm(hidden[-1]) if layer == "none" else hidden[int(layer)]
        if drop == "first":
            chosen = chosen[:, 1:]
        steps = connector.steps
        vectors = steps[2](F.gelu(steps[0](chosen)))
        tctx = text.context("decoder", "tokens", ids, {})
        table = text.embeddings["tokens"]
        embedded = table.tokens(ids)  # the pictures' vectors in place of the table's, then the positions added
        for row in range(2):
            embedded[row, ids[row] == 39] = vectors[row]
        y = embedded + table.positions(torch.arange(12))[None]
        for layer_module in text.decoder.layers:
            y = layer_module(y, tctx)
        expected = text.decoder.final_norm(y) @ text.embeddings["tokens"].tokens.weight.T
        assert_close(model(text=ids, vision=pixels), expected, FLOAT32)


def test_the_image_tokens_must_be_as_many_as_the_pictures_vectors():
    import re
    model = tfspec.compile(vlm("-1", "none"), seed=0).eval()
    message = "text holds 8 image tokens (39), but vision gives 2 examples of 5 vectors each: 10 in all"
    with pytest.raises(ValueError, match=re.escape(message)):
        model(text=prompt(4), vision=torch.randn(2, 3, 8, 8))


def test_a_picture_changes_only_what_comes_after_its_tokens():
    """Causality with pictures spliced in: a row's logits before its first image token do not depend on the
    picture; after it, they do."""
    model = tfspec.compile(vlm(), seed=0).eval()
    ids = prompt()
    a, b = (torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(s)) for s in (5, 6))
    with torch.no_grad():
        first, second = model(text=ids, vision=a), model(text=ids, vision=b)
    assert torch.equal(first[0, :1], second[0, :1]) and torch.equal(first[1, :6], second[1, :6])
    assert not torch.allclose(first[0, 1:], second[0, 1:]) and not torch.allclose(first[1, 6:], second[1, 6:])


def test_parameters_and_gradients_reach_the_connector():
    spec = tfspec.parse(vlm())
    model = tfspec.compile(spec, seed=0)
    assert spec.parameter_count() == sum(p.numel() for p in model.parameters())
    assert spec.parameter_count() - sum(t.spec.parameter_count() for t in spec.towers) == 16 * 24 + 24 + 24 * 24 + 24
    model(text=prompt(), vision=torch.randn(2, 3, 8, 8)).sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.connectors.parameters())
    weight = model.connectors["vision"].steps[0].weight
    assert 0.01 < float(weight.detach().std()) < 0.03 and torch.equal(model.connectors["vision"].steps[0].bias,
                                                             torch.zeros(24))  # (normal(0.02), zero biases)


@pytest.mark.parametrize("old, new, message", [
    ("image_token=39", "image_token=40", "image_token 40 is not among tower 'text''s 40 token ids"),
    ("layer=LAYER", "layer=-5", "tower 'vision' has 3 layers: layer is one of -4 to 3"),
    ("connect vision -> text", "connect vision -> txt", "unknown tower 'txt'"),
    ("connect vision -> text", "connect text -> vision", "tower 'text' reads token ids"),
    ("  linear 24\n}", "  linear 20\n}", "the connector gives vectors of width 20, but tower 'text''s embeddings are 24"),
    ("class_token=true", "class_token=false", "drop=first leaves out a class token"),
    ("activation gelu", "activation mish", "expected gelu or gelu_tanh"),
    ("activation gelu", "attention self heads=2", "unknown connector step 'attention'"),
])
def test_mistakes_are_located_errors(old, new, message):
    text = vlm().replace(old.replace("LAYER", "-2"), new) if "LAYER" in old else vlm().replace(old, new)
    if old == "class_token=true":
        text = text.replace("learned(5)", "learned(4)")
    with pytest.raises(tfspec.SpecError) as exc:
        tfspec.parse(text, file="vlm.tfs")
    assert message in str(exc.value), str(exc.value)
    assert all(d.span is not None for d in exc.value.diagnostics)


def test_formatting_keeps_the_connector():
    from tfspec.front.fmt import format_text
    formatted = format_text(vlm(), "vlm.tfs")
    assert "connect vision -> text image_token=39 layer=-2 drop=first {\n  linear 24\n  activation gelu\n" in formatted
    assert tfspec.parse(formatted) == tfspec.parse(vlm())


def test_check_diff_and_the_diagram_show_the_connector(tfspec_cli, tmp_path):
    from tfspec.inspect.diagram import to_graphviz
    first, second = tmp_path / "a.tfs", tmp_path / "b.tfs"
    first.write_text(vlm())
    second.write_text(vlm("-1", "first").replace("  activation gelu\n", "  activation silu\n"))
    checked = tfspec_cli("check", first)
    assert checked.returncode == 0 and "vision → text at token 39" in checked.stdout
    changes = tfspec_cli("diff", first, second).stdout
    assert "connect vision: reads layer -2 → layer -1" in changes
    assert "steps linear(24); activation(gelu); linear(24) → linear(24); activation(silu); linear(24)" in changes
    dot = to_graphviz(tfspec.parse(vlm())).source
    assert "Connector (linear(24) → activation(gelu) → linear(24))" in dot
    assert '"connector.vision" -> "text/decoder.embed"' in dot
    # it reads what it says: layer -2 of 3 is the second layer's output (its box's exit when the layers are drawn
    # once, that very layer's expanded), the stack's output after its final norm
    assert '"vision/encoder.ffn_add" -> "connector.vision"' in dot
    expanded = to_graphviz(tfspec.parse(vlm()), expand=True).source
    assert '"vision/encoder.ffn_add@1" -> "connector.vision"' in expanded
    assert '"vision/encoder.final_norm" -> "connector.vision"' in to_graphviz(
        tfspec.parse(vlm().replace(" layer=-2", ""))).source


@pytest.mark.parametrize("use_cache", [True, False])
def test_decoding_with_pictures_continues_what_the_whole_model_computes(use_cache):
    """Greedy decoding of prompts holding a picture's image tokens, cached or recomputed, picks at each step the
    token the whole model's logits pick over the sequence so far."""
    from tfspec.run.decoding import Continuation, Restricted, sample
    model = tfspec.compile(vlm(), seed=0).eval()
    ids, pixels = prompt()[:, :10], torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(4))
    allowed = torch.arange(40) != 39  # (a generated image token would be one more place for a picture)
    produced = sample(Restricted(Continuation.of(model, vision=pixels, use_cache=use_cache), allowed), ids, 5)
    sequence = ids
    for _ in range(5):  # the whole model over everything so far, its last logits' best token each time
        with torch.no_grad():
            best = model(text=sequence, vision=pixels)[:, -1].masked_fill(~allowed, -torch.inf).argmax(-1)
        sequence = torch.cat((sequence, best[:, None]), dim=1)
    assert produced == sequence[:, 10:].tolist()
    with pytest.raises(ValueError, match="each prompt row holds 4 image tokens \\(39\\), one per vector"):
        sample(Continuation.of(model, vision=pixels), ids[:, 2:], 1)


def test_a_small_vision_language_model_learns_to_name_the_digit_and_greedy_decoding_says_it(tfspec_cli, tmp_path):
    """``tfspec train`` of towers joined by a connector: the decoder learns to answer with the name of the digit
    after the picture's image tokens, and greedy decoding from a held-out picture writes it. (Exact resume is the
    trainer's, shown for a pair of towers in test_towers.py.)"""
    import json

    from tfspec.run import checkpoint
    from tfspec.run.data import EOS, SEP, digit_pictures
    from tfspec.run.decoding import Continuation, Restricted, sample
    run = tmp_path / "run"
    done = tfspec_cli("train", "examples/vlm_digits.tfs", "--steps", "150", "--batch", "32", "--lr", "2e-3",
                      "--warmup", "30", "--eval-every", "150", "--eval-size", "64", "--no-progress", "--out", run)
    assert done.returncode == 0, done.stderr
    assert "tower text answers with the digit's name after its 16 image tokens" in done.stdout
    assert "recipe (LLaVA-1.5 (Liu et al. 2023)" in done.stdout
    last = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()][-1]
    assert last["exact_match"] >= 0.3 and last["token_accuracy"] > 0.8, last
    saved = checkpoint.load(run)
    model, vocab = saved.model().eval(), saved.vocabulary()
    pixels, labels = digit_pictures(16, 16, 1, torch.Generator().manual_seed(11))
    prompt = torch.cat((torch.full((16, 16), 31), torch.full((16, 1), SEP)), dim=1)  # its image tokens, then SEP
    answers = sample(Restricted(Continuation.of(model, vision=pixels), torch.arange(32) != 31), prompt, 6, eos=EOS)
    names = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
    right = [vocab.decode(answer) == names[label] for answer, label in zip(answers, labels.tolist())]
    assert sum(right) >= 4, [vocab.decode(a) for a in answers]  # far above chance (a tenth)
    answered = tfspec_cli("generate", run, "--digit", "3", "--digit", "8", "--json")
    results = json.loads(answered.stdout)["results"]
    assert [r["digit"] for r in results] == [3, 8]
    assert all(r["correct"] == (r["answer"] == names[r["digit"]]) for r in results)
    refused = tfspec_cli("generate", run, "--input", "x")
    assert refused.returncode == 2 and "answers about pictures greedily" in refused.stderr
    # picture files (dark digits on white, three times the pictures' size): the answers about the pictures they read as
    from PIL import Image

    from tfspec.run.data import DIGIT_GLYPHS, digit_picture_file
    files = []
    for digit in (3, 8):
        paper = torch.full((48, 48), 255, dtype=torch.uint8)
        glyph = torch.tensor([[int(c) for c in row] for row in DIGIT_GLYPHS[digit]], dtype=torch.bool)
        paper[3:45, 9:39][glyph.repeat_interleave(6, 0).repeat_interleave(6, 1)] = 20
        files.append(tmp_path / f"{digit}.png")
        Image.fromarray(paper.numpy(), mode="L").save(files[-1])
    read = tfspec_cli("generate", run, "--image", files[0], "--image", files[1], "--json")
    results = json.loads(read.stdout)["results"]
    pixels = torch.stack([digit_picture_file(f, 16, 1) for f in files])
    expected = sample(Restricted(Continuation.of(model, vision=pixels), torch.arange(32) != 31), prompt[:2], 8, eos=EOS)
    assert results == [{"image": str(f), "answer": vocab.decode(a)} for f, a in zip(files, expected)]
    both = tfspec_cli("generate", run, "--image", files[0], "--digit", "3")
    assert both.returncode == 2 and "not both" in both.stderr
    missing = tfspec_cli("generate", run, "--image", tmp_path / "none.png")
    assert missing.returncode == 1 and "none.png: no such picture file" in missing.stderr, missing.stderr


def test_verify_checks_the_towers_and_that_pictures_reach_only_later_positions(tfspec_cli, tmp_path):
    from tfspec.inspect.verify import small_version, verify_towers
    path = tmp_path / "vlm.tfs"
    path.write_text(vlm())
    small, changes = small_version(tfspec.parse(vlm()))
    assert "image token 39 -> 31" in changes and small.connectors[0].steps[-1].options["out"] == \
        small.tower("text").embeddings[0].dim
    results = {r.name: r for r in verify_towers(tfspec.compile(small, seed=0), examples=2)}
    assert results["pictures reach only later positions"].status == "held"
    assert results["tower text: causality"].status == "held"
    bidirectional = vlm().replace("mask=causal + padding", "mask=padding")
    model = tfspec.compile(small_version(tfspec.parse(bidirectional))[0], seed=0)
    assert {r.name: r for r in verify_towers(model, examples=2)}["pictures reach only later positions"].status == \
        "not applicable"
    result = tfspec_cli("verify", path, "--examples", "2")
    assert result.returncode == 0 and "held     pictures reach only later positions" in result.stdout


def test_a_wrong_picture_is_refused_naming_its_argument():
    model = tfspec.compile(vlm(), seed=0).eval()
    with pytest.raises(ValueError, match="pixel_values"):
        model(text=prompt(), vision=torch.randn(2, 1, 8, 8))
    with pytest.raises(TypeError, match="missing the input of tower vision"):
        model(text=prompt())


SHUFFLED = VLM.replace("image=8, patch=4, class_token=true); dim 16; position learned(5)",
                       "image=16, patch=4); dim 16; position learned(16)").replace(
    "layer=LAYER drop=DROP {\n  linear 24\n  activation gelu\n", "{\n  pixel_shuffle 2\n")


def test_a_pixel_shuffle_makes_each_block_of_patches_one_wider_vector():
    """pixel_shuffle(2) over a 4 × 4 grid: four vectors, each block's patches (rows, then columns) side by side,
    written here patch by patch, then the linear map; the picture takes four image tokens."""
    spec = tfspec.parse(SHUFFLED)
    assert spec.connectors[0].vectors(16) == 4 and spec.connectors[0].widths(16) == [16, 64, 24]
    model = tfspec.compile(spec, seed=0).eval()
    pixels = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        grid = model.towers["vision"].run_stack("encoder", "pixel_values", pixels, None, {})  # (2, 16, 16)
        blocks = torch.stack([torch.cat([grid[:, (2 * i + a) * 4 + 2 * j + b] for a in range(2) for b in range(2)], -1)
                              for i in range(2) for j in range(2)], 1)
        expected = model.connectors["vision"].steps[1](blocks)
        assert_close(model.features("vision", pixels), expected, FLOAT32)
        ids = prompt(4)
        assert model(text=ids, vision=pixels).shape == (2, 12, 40)


@pytest.mark.parametrize("factor, side", [(2, 4), (2, 6), (3, 6), (4, 8)])
def test_both_pixel_shuffle_layouts_equal_hugging_face_s(factor, side):
    """Idefics3's ``pixel_shuffle`` and Mistral 3's patch merger (``unfold``, before its linear map) on a grid of
    vectors: ``pixel_shuffle(f)`` and ``pixel_shuffle(f, channel_major=true)``."""
    transformers = pytest.importorskip("transformers")
    from transformers.models.idefics3.modeling_idefics3 import Idefics3Connector
    from transformers.models.mistral3.modeling_mistral3 import Mistral3PatchMerger
    from tfspec.nn.pixel_shuffle import PixelShuffle

    width = 5
    x = torch.randn(2, side * side, width, generator=torch.Generator().manual_seed(side))
    assert torch.equal(PixelShuffle(factor)(x), Idefics3Connector.pixel_shuffle(None, x, factor))
    config = transformers.Mistral3Config(vision_config={"model_type": "pixtral", "hidden_size": width,
                                                        "patch_size": 2}, spatial_merge_size=factor)
    merger = Mistral3PatchMerger(config)
    with torch.no_grad():
        theirs = torch.stack([merger(one, [(2 * side, 2 * side)]) for one in x])
    ours = PixelShuffle(factor, channel_major=True)(x) @ merger.merging_layer.weight.detach().t()
    assert_close(ours, theirs, FLOAT32)


def test_a_pixel_shuffle_needs_a_square_grid_its_factor_divides():
    for change, message in (("pixel_shuffle 2", "pixel_shuffle(3) reads a square grid of patches whose side "
                                                "divides by 3; it would read 16 vectors (4 × 4)"),
                            ("{\n  pixel_shuffle 2", "pixel_shuffle(2) reads a square grid of patches whose side "
                                                     "divides by 2; it would read 17 vectors (no square)")):
        text = SHUFFLED.replace("pixel_shuffle 2", "pixel_shuffle 3") if change == "pixel_shuffle 2" else \
            SHUFFLED.replace("patch=4)", "patch=4, class_token=true)").replace("learned(16)", "learned(17)")
        with pytest.raises(tfspec.SpecError) as exc:
            tfspec.parse(text, file="vlm.tfs")
        assert message in str(exc.value) and "vlm.tfs:" in str(exc.value), str(exc.value)


@pytest.mark.parametrize("name, options", [(name, options) for name in CONNECTOR_STEPS.names()
                                           for options in CONNECTOR_STEPS[name].examples])
def test_every_connector_step_is_what_it_declares(name, options):
    """The registry contract of a connector's steps: the module's parameters are the declared ones (names and
    shapes), its output the declared width and length, its matrix FLOPs what the FLOP counter sees."""
    from torch.utils.flop_counter import FlopCounterMode

    from tfspec.front.schema import Choice

    variant, parsed = CONNECTOR_STEPS.of(Choice(name=name, options=options))
    width, length = 12, 36
    module = variant.module(width, parsed).build()
    assert {n: tuple(p.shape) for n, p in module.named_parameters()} == \
        {n: tuple(p.shape) for n, p in variant.params(width, parsed).items()}
    with FlopCounterMode(display=False) as counter:
        out = module(torch.randn(1, length, width))
    assert out.shape == (1, variant.length(length, parsed), variant.width(width, parsed))
    assert counter.get_total_flops() == variant.flops(width, length, parsed)[0]
    assert variant.problem(width, length, parsed) is None


def test_the_towers_summary_counts_each_pictures_connector(tfspec_cli):
    """The towers' FLOPs together are each tower's and, per picture, its connector's two linear maps: 2 · 16 patch
    vectors · (32·32 + 32·32) matrix FLOPs, and the activation's."""
    import json
    result = tfspec_cli("summary", "examples/vlm_digits.tfs", "--json")
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    towers = sum(t["total"]["flops"] for t in out["towers"].values())
    (connector,) = tfspec.load("examples/vlm_digits.tfs").graph().of(ir.Connector)
    assert [(step.length, step.width) for step in connector.steps] == [(16, 32)] * 3  # (its class token dropped)
    assert out["flops"] - towers == connector.flops() > 2 * 16 * (32 * 32 + 32 * 32)


def test_the_pictures_mask_lets_a_pictures_tokens_see_one_another_and_is_causal_elsewhere():
    """Gemma 3's mask, against the rule written here: query i sees key j when j <= i, or when both stand for one
    picture; a model of towers marks the pictures itself (what passing the marks by hand gives, not what no marks
    give), and decoding with a cache continues what the whole model computes."""
    from tfspec.run.decoding import Continuation, sample
    from tfspec.variants.pictures import pictures

    marks = torch.tensor([[0, 1, 1, 0, 2, 2, 2, 0]])
    allowed = pictures(torch.arange(8), torch.arange(8), marks)[0]
    expected = torch.tensor([[j <= i or (marks[0, i] == marks[0, j] > 0) for j in range(8)] for i in range(8)])
    assert torch.equal(allowed, expected) and torch.equal(pictures(torch.arange(8), torch.arange(8)),
                                                          torch.ones(8, 8, dtype=torch.bool).tril())
    model = tfspec.compile(vlm().replace("mask=causal + padding", "mask=pictures + padding"), seed=0).eval()
    ids, pixels = prompt(), torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(4))
    by_hand = torch.zeros_like(ids)
    by_hand[ids == 39] = 1
    with torch.no_grad():
        out = model(text=ids, vision=pixels)
        assert torch.equal(out, model(text=ids, vision=pixels, text_picture_ids=by_hand))
        unmarked = model(text=ids, vision=pixels, text_picture_ids=torch.zeros_like(ids))
    assert torch.equal(out[0, :1], unmarked[0, :1]) and not torch.allclose(out[0, 1:5], unmarked[0, 1:5])
    rows = ids[:, :10]
    cached = sample(Continuation.of(model, vision=pixels), rows, max_new=4)
    assert cached == sample(Continuation.of(model, vision=pixels, use_cache=False), rows, max_new=4)


def test_build_runs_a_vision_language_model_on_a_prompt_holding_each_pictures_tokens(tfspec_cli):
    import json
    result = tfspec_cli("build", "examples/vlm_digits.tfs", "--json")
    assert result.returncode == 0, result.stderr
    built = json.loads(result.stdout)
    # the prompt's first token, the picture's 16 image tokens, then the other 15 of --seq-len 16
    assert built["inputs"] == {"vision": [2, 1, 16, 16], "text": [2, 32]} and built["outputs"] == {"logits": [2, 32, 32]}
    assert built["parameters"] == 39_584 and built["finite"]
