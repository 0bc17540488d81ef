"""Grammar and parser units: AST shapes, spans, separators, keywords as names, arithmetic."""

import pytest

from tfspec.errors import SpecError
from tfspec.front.expr import evaluate
from tfspec.front.syntax import (Assignment, BinOp, Call, EmbeddingDecl, HeadDecl, Let, ModelDecl, Name, Number, Setting,
                           StackDecl, expr_to_text, parse_module)


def items(text):
    return parse_module(text, "t.tfs").items


def test_items_and_spans():
    m = items("model demo  # a comment\nlet d = 64\nembedding tok { vocab 10; dim d }\nencoder x 2 {\n  attention self heads=4\n}\nhead tied(tok)\n")
    assert [type(i) for i in m] == [ModelDecl, Let, EmbeddingDecl, StackDecl, HeadDecl]
    stack = m[3]
    assert stack.role == "encoder" and (stack.role_span.line, stack.role_span.column) == (4, 1)
    (stmt,) = stack.body
    assert isinstance(stmt, Setting) and stmt.name == "attention"
    assert [(a.name, expr_to_text(a.value)) for a in stmt.args] == [(None, "self"), ("heads", "4")]
    assert (stmt.args[1].span.line, stmt.args[1].span.column, stmt.args[1].span.end_column) == (5, 18, 25)


def test_semicolons_newlines_and_blank_lines_are_equivalent():
    a = items("embedding t { vocab 10; dim 8 }")[0]
    b = items("\n\nembedding t {\n\n  vocab 10\n\n  dim 8\n}\n\n")[0]
    assert [s.name for s in a.body] == [s.name for s in b.body] == ["vocab", "dim"]


def test_times_sign_and_line_continuation():
    (s,) = items("decoder × 3 {\n attention self \\\n   heads=2\n}")
    assert isinstance(s.repeat, Number) and s.repeat.value == 3
    assert [a.name for a in s.body[0].args] == [None, "heads"]


def test_keywords_are_plain_names_inside_bodies():
    # `embedding`, `head`, `model` are top-level keywords but ordinary words inside a body
    (s,) = items("decoder x 1 { embedding tgt; head 3; model 2 }")
    assert [st.name for st in s.body] == ["embedding", "head", "model"]


def test_wiring_assignments():
    (s,) = items("decoder x 1 {\n h = norm(x)\n x = x + attention(h, heads=2) + feedforward(h, d_ff=8)\n}")
    first, second = s.body
    assert isinstance(first, Assignment) and first.target == "h" and isinstance(first.value, Call)
    assert isinstance(second.value, BinOp) and second.value.op == "+"
    assert expr_to_text(second.value) == "x + attention(h, heads=2) + feedforward(h, d_ff=8)"


@pytest.mark.parametrize("text, value", [
    ("1 + 2 * 3", 7), ("(1 + 2) * 3", 9), ("2 ** 3 ** 2", 512), ("-2 ** 2", -4), ("7 // 2", 3), ("7 / 2", 3.5),
    ("7 % 4", 3), ("sqrt(16)", 4.0), ("max(1, 5, 3)", 5), ("37_000", 37000), ("1e-6", 1e-6), (".5", 0.5),
    ("d * 4", 256), ("log2(1024)", 10.0), ("min(d, 8) - 1", 7), ("ceil(7 / 2)", 4),
])
def test_arithmetic(text, value):
    (let,) = items(f"let v = {text}")
    assert evaluate(let.bindings[0].value, {"d": 64}) == value


def test_expression_printing_round_trips():
    for text in ["a - (b - c)", "a - b - c", "(a + b) * c", "a ** b ** c", "(a ** b) ** c", "-a * b", "f(a, k=2)"]:
        (let,) = items(f"let v = {text}")
        printed = expr_to_text(let.bindings[0].value)
        assert printed == text
        (again,) = items(f"let v = {printed}")
        assert again.bindings[0].value.__class__ is let.bindings[0].value.__class__


@pytest.mark.parametrize("text, message", [
    ("let = 3", "unexpected '='"),
    ("embedding { vocab 3 }", "unexpected '{'"),
    ("let a = 3 +", "unexpected end of file"),
    ("decoder x 2 {\n", "'{' is never closed"),
    ("encodr x 2 { }", "unknown statement 'encodr'"),
    ("let a = 1e999999", "number '1e999999' is too large"),
    ("let a = 3 3", "unexpected number '3'"),
])
def test_syntax_errors(text, message):
    with pytest.raises(SpecError) as info:
        parse_module(text, "t.tfs")
    assert info.value.message == message
    assert info.value.file == "t.tfs"


def test_include_splices_definitions(tmp_path):
    (tmp_path / "common.tfs").write_text("let d_model = 32\nembedding tokens { vocab 10; dim d_model }\n")
    main = tmp_path / "main.tfs"
    main.write_text('include "common.tfs"\ndecoder x 1 { attention self heads=4 }\n')
    import tfspec
    spec = tfspec.load(main)
    assert spec.embeddings[0].dim == 32 and spec.params["d_model"] == 32


def test_include_cycle_is_an_error(tmp_path):
    (tmp_path / "a.tfs").write_text('include "b.tfs"\n')
    (tmp_path / "b.tfs").write_text('include "a.tfs"\n')
    import tfspec
    with pytest.raises(SpecError) as info:
        tfspec.load(tmp_path / "a.tfs")
    assert "include cycle" in info.value.message


def test_errors_inside_included_file_point_there(tmp_path):
    (tmp_path / "common.tfs").write_text("let d_model = 32\nembedding tokens { vocab 10; dimm d_model }\n")
    main = tmp_path / "main.tfs"
    main.write_text('include "common.tfs"\ndecoder x 1 { attention self heads=4 }\n')
    import tfspec
    with pytest.raises(SpecError) as info:
        tfspec.load(main)
    assert info.value.file.endswith("common.tfs") and info.value.line == 2
    assert "dimm d_model" in str(info.value)  # the source line of the included file is shown
