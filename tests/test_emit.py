"""`tfspec emit`: one standalone file, torch only, that loads the compiled model's weights and computes its outputs."""

from __future__ import annotations

import ast
import importlib.util
import itertools
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import tfspec
from strategies import Generated, valid_specs
from tfspec.cli import main
from tfspec.backend.standalone import emit
from tfspec.inspect.verify import small_version
from tfspec.front.schema import Towers
from tfspec.ir.queries import default_length

EXAMPLES = Path(__file__).parent.parent / "examples"
_counter = itertools.count()
_directory = tempfile.TemporaryDirectory(prefix="tfspec-emit-")  # removed when the session ends


def load_emitted(source: str):
    """Import an emitted file as a fresh module."""
    path = Path(_directory.name) / f"emitted_{next(_counter)}.py"
    path.write_text(source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def inputs(model, generator: torch.Generator, lengths=(11, 7)) -> tuple[tuple, dict]:
    """Random ids (or an input kind's tensors: pictures, spectrograms) for each stack, and left-padded rows wherever
    the spec reads padding."""
    args, kwargs = [], {}
    for stack, length in zip(model.spec.stacks, lengths if len(model.spec.stacks) == 2 else lengths[:1]):
        embedding = model.embeddings[model.stack_embedding[stack.role]]
        if embedding.vocab is None:  # an input kind's
            args.append(torch.randn(2, *embedding.shape, generator=generator))
            continue
        args.append(torch.randint(0, embedding.vocab, (2, length), generator=generator))
    names = ("src", "tgt") if len(args) == 2 else ("",)
    for name, ids in zip(names, args):
        role = {"src": "encoder", "tgt": "decoder"}.get(name, model.spec.stacks[0].role)
        reads = getattr(model, role).masks_padding or (role == "encoder" and len(args) == 2
                                                       and model.decoder.memory_masks_padding)
        if reads:
            padding = torch.zeros(ids.shape, dtype=torch.bool)
            padding[1, :3] = True
            kwargs[f"{name}_padding_mask" if name else "padding_mask"] = padding
    return tuple(args), kwargs


def outputs(out) -> tuple:
    return out if isinstance(out, tuple) else (out,)


def assert_emitted_equals_compiled(spec, generator_seed: int = 1, lengths=(11, 7), **extra) -> None:
    compiled = tfspec.compile(spec, seed=0)
    standalone = load_emitted(emit(spec)).Model()
    standalone.load_state_dict(compiled.state_dict(), strict=True)
    args, kwargs = inputs(compiled, torch.Generator().manual_seed(generator_seed), lengths)
    kwargs.update(extra)
    for mode in ("eval", "train"):  # train: the same dropout draws, in the same order
        getattr(compiled, mode)(), getattr(standalone, mode)()
        torch.manual_seed(7)
        expected = outputs(compiled(*args, **kwargs))
        torch.manual_seed(7)
        got = outputs(standalone(*args, **kwargs))
        assert len(got) == len(expected)
        for a, b in zip(got, expected):
            assert torch.equal(a, b), f"{mode}: max |diff| {float((a - b).abs().max())}"


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.tfs")), ids=lambda p: p.stem)
def test_every_example_emits_a_file_that_loads_the_compiled_weights_and_computes_the_same(path):
    model = tfspec.load(path)
    for whole in [t.spec for t in model.towers] if isinstance(model, Towers) else [model]:  # (each tower's file)
        spec, _ = small_version(whole, width_per_head=8, max_vocab=64, max_d_ff=48)
        longest = default_length(spec.graph())  # (a text tower's names: 8 positions)
        assert_emitted_equals_compiled(spec, lengths=(min(11, longest), min(7, longest)))


def test_a_sliding_window_shorter_than_the_sequence_is_emitted_exactly():
    spec = tfspec.load(EXAMPLES / "mistral_7b.tfs", overrides={"layers": 2, "d_model": 32, "heads": 4,
                                                                "kv_heads": 2, "vocab": 50, "d_ff": 48, "window": 4})
    assert_emitted_equals_compiled(spec)


@pytest.mark.parametrize("text, extra", [
    ("embedding t { vocab 30; dim 16; position none }\n"
     "decoder x 2 { position alibi; attention self heads=4 mask=causal + padding; feedforward d_ff=32 }\nhead tied(t)",
     {}),
    ("embedding t { vocab 30; dim 16; position none }\n"
     "decoder x 2 { position rotary(fraction=0.5, interleaved=true); attention self heads=2 kv_heads=1 "
     "qk_norm=rmsnorm scale=0.3 mask=prefix + padding; feedforward d_ff=32 activation=geglu }\nhead linear",
     {"prefix_lengths": torch.tensor([4, 2])}),
    ("embedding t { vocab 30; dim 16; position learned(32); segments 2 }\n"
     "encoder x 1 { attention self heads=2 kind=additive mask=window(3) + padding; feedforward d_ff=16 }\n"
     "head tied(t) transform=gelu norm=layernorm\npooler tanh", {"token_types": torch.tensor([[0] * 6 + [1] * 5] * 2)}),
    ("embedding t { vocab 30; dim 16 }\ndecoder x 2 {\n  h = layernorm(x)\n"
     "  x = 0.5 * x + attention(h, heads=2, mask=causal) + feedforward(h, d_ff=32)\n}", {}),
    # a scaled sum: the emitted product keeps its parentheses ((x + a) * 0.5, not x + a * 0.5)
    ("embedding t { vocab 30; dim 16 }\ndecoder x 2 {\n  h = layernorm(x)\n"
     "  x = 0.5 * (x + attention(h, heads=2, mask=causal)) + feedforward(h, d_ff=32)\n}", {}),
])
def test_variants_and_run_time_inputs_are_emitted_exactly(text, extra):
    assert_emitted_equals_compiled(tfspec.parse(text), **extra)


@pytest.mark.parametrize("masks, extra", [
    ("window(3) + padding", {}),
    ("causal + window(5) + padding", {}),
    ("block(4) + padding", {}),
    ("causal + block(3) + document", {"document_ids": torch.arange(70).div(23, rounding_mode="floor")[None]}),
])
def test_attention_in_bands_over_a_long_sequence_is_emitted_exactly(masks, extra):
    text = ("embedding t { vocab 30; dim 16; position none }\n"
            f"decoder x 2 {{ position rotary; attention self heads=2 mask={masks}; feedforward d_ff=32 }}\n"
            "head tied(t)")
    assert_emitted_equals_compiled(tfspec.parse(text), lengths=(70,), **extra)


def test_bigbird_over_a_sparse_length_is_emitted_exactly_with_numpy_for_its_pattern():
    """70 positions in blocks of 4 are sparse (more than (5 + 2·2)·4): the file draws the random blocks with the
    numpy code the runtime uses, so it imports numpy (and only a file that needs it does: see below)."""
    spec = tfspec.parse("embedding t { vocab 30; dim 16; position learned(80) }\n"
                        "encoder x 2 { attention self heads=2 kind=bigbird(4, random=2) mask=padding; "
                        "feedforward d_ff=32 }")
    assert "\nimport numpy as np\n" in emit(spec)
    assert_emitted_equals_compiled(spec, lengths=(70,))


@settings(deadline=None, max_examples=25)
@given(valid_specs(max_layers=2))
def test_every_generated_spec_is_emitted_exactly(gen: Generated):
    assert_emitted_equals_compiled(tfspec.parse(gen.text))


def test_the_file_imports_torch_alone_and_runs_where_tfspec_cannot_be_imported(tmp_path):
    source = emit(tfspec.load(EXAMPLES / "llama2_7b.tfs",
                              overrides={"layers": 1, "d_model": 32, "heads": 4, "kv_heads": 2, "vocab": 50}))
    imported = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            imported |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add(node.module)
    assert imported <= {"__future__", "math", "torch", "torch.nn.functional"}, imported
    path = tmp_path / "llama.py"
    path.write_text(source, encoding="utf-8")
    script = ("import sys, runpy, torch; sys.modules['tfspec'] = None\n"  # importing tfspec now fails
              f"module = runpy.run_path({str(path)!r})\n"
              "model = module['Model']()\n"
              "print(tuple(model(torch.randint(0, 50, (2, 5))).shape))")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "(2, 5, 50)"


def test_the_file_is_readable_model_code():
    source = emit(EXAMPLES / "gpt2_small.tfs")
    assert "class DecoderLayer(nn.Module):" in source and "class Model(nn.Module):" in source
    # the layer's forward is the spec's wiring, one residual branch per line, with its shape
    assert ("x = x + self.self_attn_dropout(self.self_attn(self.self_attn_norm(x), ctx))"
            "  # (batch, seq_len, 768)") in source
    # the attention is the compiled model's own (one forward), its masks declared where it is built
    assert "MultiHeadAttention(geometry=Geometry(width=768, heads=12, kv_heads=12, head_dim=64), dropout=0.1, " \
           "masks=MaskSet(rules=[(causal, {}, ())], fused_causal=True))" in source
    assert "    def forward(self, x: Tensor, ctx: Context | None = None, cache: KVCache | None = None)" in source
    assert source.count("    def forward(self, x: Tensor, ctx: Context | None = None") == 1
    assert "nn.ModuleList(DecoderLayer() for _ in range(12))" in source
    assert "# The spec it was written from:" in source and "#   model gpt2_small" in source
    assert "Head(width=768, out=50257, bias=False, tied=True)" in source


def test_cli_writes_the_file_and_reports_bad_paths(tmp_path, capsys):
    out = tmp_path / "model.py"
    assert main(["emit", str(EXAMPLES / "reverse.tfs"), "--set", "layers=1", "-o", str(out)]) == 0
    assert "wrote" in capsys.readouterr().out
    assert "range(1)" in out.read_text() and "--set layers=1" in out.read_text()
    assert main(["emit", str(EXAMPLES / "reverse.tfs"), "-o", str(tmp_path / "missing" / "m.py")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["emit", str(EXAMPLES / "reverse.tfs"), "-o", str(tmp_path)]) == 2
    assert "is a directory" in capsys.readouterr().err
    bad = tmp_path / "bad.tfs"
    bad.write_text("embedding t { vocab 10; dim 8 }\nencoder x 1 { attention self heads=3 }\n")
    assert main(["emit", str(bad)]) == 1
    assert "bad.tfs:2" in capsys.readouterr().err
    assert not (tmp_path / "bad.py").exists()


def test_a_file_name_cannot_break_out_of_the_docstring(tmp_path):
    weird = tmp_path / 'a"""b\\c'
    weird.mkdir()
    path = weird / "m.tfs"
    path.write_text("model m\n# a comment with \x01 in it\nembedding t { vocab 10; dim 8 }\n"
                    "encoder x 1 { attention self heads=2 }\n")
    source = emit(path)
    module = ast.parse(source)
    assert str(path) in ast.get_docstring(module)
    load_emitted(source).Model()(torch.randint(0, 10, (1, 3)))


def test_two_runtime_classes_of_one_name_are_refused_not_shadowed():
    from tfspec.backend.standalone import _Writer

    class Head:  # a stand-in for a plug-in's runtime class that reuses a core class's name
        pass

    writer = _Writer(tfspec.load(EXAMPLES / "gpt2_small.tfs"), None)
    writer.file()
    with pytest.raises(ValueError, match="named Head"):
        writer.need(Head)


def towers_inputs(model, generator: torch.Generator, wide: bool = False) -> dict:
    """Each tower's input by its name: pictures or token ids (a connector's target holding each picture's image
    tokens after a token); the second row's last two positions padded where a tower reads padding. ``wide``:
    pictures twice as wide as the spec's where a tower reads pictures of any size."""
    given = {}
    for name, tower in model.towers.items():
        role = tower.spec.stacks[0].role
        embedding = tower.embeddings[tower.stack_embedding[role]]
        shape = getattr(embedding, "shape", ())
        if wide and tower.any_picture_size.get(role):
            shape = (*shape[:-1], 2 * shape[-1])
        given[name] = torch.randn(2, *shape, generator=generator) if embedding.vocab is None else \
            torch.randint(0, embedding.vocab, (2, min(9, tower.max_len[role] or 9)), generator=generator)
    for source, connector in model.connectors.items():
        count = model.features(source, given[source]).shape[1]
        ids = given[connector.target]
        ids[ids == connector.image_token] = 0
        ids = torch.cat((ids[:, :1], torch.full((2, count), connector.image_token), ids[:, 1:4]), dim=1)
        given[connector.target] = ids
    for name, tower in model.towers.items():
        if tower.spec.stacks[-1].role == "decoder" and tower.decoder.masks_padding or \
                tower.spec.stacks[0].role == "encoder" and tower.encoder.masks_padding:
            padding = torch.zeros(given[name].shape[:2], dtype=torch.bool)
            padding[1, -2:] = True
            given[f"{name}_padding_mask"] = padding
    return given


@pytest.mark.parametrize("path", [p for p in sorted(EXAMPLES.glob("*.tfs")) if "tower " in p.read_text()],
                         ids=lambda p: p.stem)
def test_every_model_of_towers_emits_one_file_that_loads_its_weights_and_computes_the_same(path):
    """The towers, their connector or contrastive head in one file: ``Model`` loads the compiled model's state dict
    (strict) and gives its outputs, bit for bit (a connector's pictures spliced among the text's tokens, M-RoPE's
    positions numbered as the compiled model numbers them; pictures twice as wide where a tower reads any size)."""
    spec, _ = small_version(tfspec.load(path), width_per_head=8, max_vocab=64, max_d_ff=48)
    compiled = tfspec.compile(spec, seed=0).eval()
    source = emit(spec)
    assert "class Model(nn.Module):" in source and "self.towers = nn.ModuleDict({" in source
    standalone = load_emitted(source).Model().eval()
    standalone.load_state_dict(compiled.state_dict(), strict=True)
    wide = any(any(t.any_picture_size.values()) for t in compiled.towers.values())
    for inputs in [towers_inputs(compiled, torch.Generator().manual_seed(1))] + \
            [towers_inputs(compiled, torch.Generator().manual_seed(2), wide=True)] * wide:
        with torch.no_grad():
            expected, got = compiled(**inputs), standalone(**inputs)
        expected = expected.logits if hasattr(expected, "logits") else expected
        got = got[0] if isinstance(got, tuple) else got
        assert torch.equal(got, expected), f"max |diff| {float((got - expected).abs().max())}"


def test_a_model_of_towers_exports_to_torch_as_its_emitted_file_and_weights(tmp_path):
    """``export --to torch`` of towers: ``model.py`` (emit's file) and ``model.safetensors``, which ``Model`` loads
    (strict) to compute the compiled outputs."""
    from safetensors.torch import load_file

    compiled = tfspec.compile(EXAMPLES / "vlm_digits.tfs", seed=0).eval()
    written = tfspec.export(compiled, tmp_path / "torch", to="torch")
    assert written.startswith("model.py (torch only) and model.safetensors")
    standalone = load_emitted((tmp_path / "torch" / "model.py").read_text()).Model().eval()
    standalone.load_state_dict(load_file(str(tmp_path / "torch" / "model.safetensors")), strict=True)
    given = towers_inputs(compiled, torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert torch.equal(standalone(**given), compiled(**given))
