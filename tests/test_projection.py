"""A projected embedding (``embedding tokens { dim 8; project 16 }``, ALBERT's and ELECTRA-small's factorised
embedding): a linear map from the table's width into a wider stack, and a tied head whose transform maps back
into the table's width. Parameters, FLOPs and activation memory equal what the compiled model has and does."""

import pytest
import torch

import tfspec
from tfspec.inspect.analysis import analyse
from tfspec.inspect.measure import measure
from numerics import FLOAT32, assert_close

SPEC = """embedding tokens {{ vocab 50; dim 8; project 16; position learned(20); norm layernorm; segments 2 }}
{role} x 2 {{ attention self heads=2 mask={mask}; feedforward d_ff=32 }}
head tied(tokens) transform=gelu norm=layernorm bias=true"""


def test_the_embeddings_are_projected_and_the_head_maps_back():
    model = tfspec.compile(SPEC.format(role="encoder", mask="padding"), seed=0).eval()
    shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    assert shapes["embeddings.tokens.project.weight"] == (16, 8) and shapes["head.transform.weight"] == (8, 16)
    tokens = torch.randint(0, 50, (2, 7))
    with torch.no_grad():
        table = model.embeddings["tokens"]
        expected_in = table.project(table.norm(table.tokens(tokens) + table.positions(torch.arange(7)[None])
                                               + table.segments.weight[0]))
        hidden = model.encoder(expected_in, model.context("encoder", "tokens", tokens, {}))
        head = model.head
        expected = head.transform_norm(head.transform_activation(head.transform(hidden))) @ table.tokens.weight.T
        assert_close(model(tokens), expected + head.bias, FLOAT32)


@pytest.mark.parametrize("role, mask", [("encoder", "padding"), ("decoder", "causal")])
def test_cost_and_memory_equal_the_measured_ones(role, mask):
    spec = tfspec.parse(SPEC.format(role=role, mask=mask))
    assert spec.parameter_count() == sum(p.numel() for p in tfspec.compile(spec, device="meta").parameters())
    for batch in (1, 2):
        a = analyse(spec, seq_len=7, batch=batch)
        m = measure(spec, a.lengths, batch=batch)
        assert m.flops == a.total.matmul and m.saved_bytes == a.total.memory


def test_emit_label_and_refusals():
    text = SPEC.format(role="decoder", mask="causal")
    model = tfspec.compile(text, seed=0).eval()
    from tfspec.backend.standalone import emit
    namespace: dict = {}
    exec(compile(emit(text), "emitted", "exec"), namespace)  # the emitted file, as `tfspec emit` writes it
    standalone = namespace["Model"]().eval()
    standalone.load_state_dict(model.state_dict())
    tokens = torch.randint(0, 50, (2, 6))
    with torch.no_grad():
        assert torch.equal(standalone(tokens), model(tokens))
    assert tfspec.parse(text).graph().node("decoder.embed_project").label == "Linear (8 → 16)"
    with pytest.raises(tfspec.SpecError) as info:
        tfspec.parse(text.replace(" transform=gelu norm=layernorm", ""))
    assert "head is tied to embedding 'tokens' of dim 8, but the last stack's width is 16" in info.value.message
    with pytest.raises(tfspec.SpecError):
        tfspec.parse(text.replace("project 16", "project 0"))


def test_a_stack_whose_embedding_is_not_d_model_wide_is_a_located_warning(tmp_path, capsys):
    text = "let d_model = 64\nembedding tokens { vocab 50; dim 16 }\n" \
           "encoder x 1 { attention self heads=2; feedforward d_ff=4 * d_model }"
    with pytest.warns(tfspec.SpecWarning) as caught:
        tfspec.parse(text)
    shown = str(caught[0].message)
    assert "<spec>:2:34: warning: embedding 'tokens' has dim 16, so the encoder stack runs 16 wide, not d_model = 64" \
        in shown and "^~" in shown and "add `project d_model`" in shown
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # what it advises warns no more
        tfspec.parse(text.replace("dim 16", "dim 16; project d_model"))
        tfspec.parse(text.replace("dim 16", "dim d_model"))
    from tfspec.cli import main
    path = tmp_path / "narrow.tfs"
    path.write_text(text)
    assert main(["check", str(path)]) == 0  # a warning, not an error: printed as the compiler prints one
    err = capsys.readouterr().err
    assert f"{path}:2:34: warning: embedding 'tokens' has dim 16" in err and "UserWarning" not in err
