"""`tfspec fmt`: canonical text that parses to the same spec, idempotent, comments kept."""

from pathlib import Path

from hypothesis import given

import tfspec
from strategies import Generated, valid_specs
from tfspec.cli import main
from tfspec.front.fmt import format_text

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@given(valid_specs())
def test_format_preserves_meaning_and_is_idempotent(gen: Generated):
    formatted = format_text(gen.text)
    assert tfspec.parse(formatted) == tfspec.parse(gen.text)
    assert format_text(formatted) == formatted


def test_examples_are_formatted_and_keep_their_comments():
    for path in EXAMPLES.glob("*.tfs"):
        text = path.read_text()
        formatted = format_text(text)
        assert tfspec.parse(formatted) == tfspec.parse(text)
        assert formatted.count("#") == text.count("#")


def test_layout_and_comments():
    text = ("embedding t {vocab 10;dim 8}  # tiny\n# lead\ndecoder x 2 { # hdr\n"
            "  attention self \\\n  heads=2 # on continuation\n  # inner\n}  # close\n# tail")
    assert format_text(text) == (
        "embedding t {  # tiny\n  vocab 10\n  dim 8\n}\n\n# lead\ndecoder x 2 {             # hdr\n"
        "  attention self heads=2  # on continuation\n  # inner\n}  # close\n# tail\n")


def test_numbers_keep_their_spelling():
    assert format_text("let a = 1e-6, b = 37_000, c = (1+2)*3") == "let a = 1e-6, b = 37_000, c = (1 + 2) * 3\n"


def test_fmt_cli_check_and_write(tmp_path, capsys):
    path = tmp_path / "m.tfs"
    path.write_text("embedding t {vocab 10;dim 8}\ndecoder x 1 {attention self heads=2}\n")
    assert main(["fmt", "--check", str(path)]) == 1
    assert main(["fmt", "--write", str(path)]) == 0
    assert main(["fmt", "--check", str(path)]) == 0
    assert path.read_text().startswith("embedding t {\n  vocab 10\n")
    bad = tmp_path / "bad.tfs"
    bad.write_text("decoder x {")
    assert main(["fmt", "--write", str(bad)]) == 1
    assert bad.read_text() == "decoder x {"  # never a partial rewrite


def test_every_shipped_example_is_formatted():
    from pathlib import Path

    from tfspec.front.fmt import format_text

    examples = sorted(Path(__file__).resolve().parents[1].glob("examples/*.tfs"))
    assert len(examples) > 20
    assert [str(p.name) for p in examples if format_text(p.read_text(), str(p)) != p.read_text()] == []


def test_trailing_comments_of_consecutive_lines_share_a_column():
    from tfspec.front.fmt import format_text

    text = ("defaults {\n  residual pre # wiring\n  dropout 0.1    # P_drop\n  bias false\n  norm rmsnorm # alone\n}\n"
            "embedding t { vocab 10; dim 8 }\ndecoder x 1 { attention self heads=2 }\n")
    formatted = format_text(text)
    assert formatted.splitlines()[1:5] == ["  residual pre  # wiring", "  dropout 0.1   # P_drop", "  bias false",
                                           "  norm rmsnorm  # alone"]
    assert format_text(formatted) == formatted
