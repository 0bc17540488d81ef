"""Hostile input to the front end: every one a located ``SpecError`` (or a valid spec), never another exception,
a hang, or an error that quotes a file it should not have read.

The families are those of issue "Hardening": nesting, arithmetic, includes, diagnostics at scale and line
positions; then ``benchmarks/fuzz.py``'s generator (mutated examples and adversarial texts), driven by
Hypothesis. ``python benchmarks/fuzz.py --n 100000`` is the long campaign.
"""

from __future__ import annotations

import importlib.util
import os
import random
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import tfspec
from tfspec.errors import MAX_SHOWN, SpecError
from tfspec.front.syntax import MAX_DEPTH, MAX_INCLUDE_BYTES

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("fuzz", ROOT / "benchmarks" / "fuzz.py")
fuzz = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fuzz)


def refused(text: str, file: str = "<spec>") -> SpecError:
    with pytest.raises(SpecError) as info:
        tfspec.parse(text, file=file)
    str(info.value)  # renders
    return info.value


NESTINGS = {
    "unary minus": lambda d: "-" * d + "1",
    "parentheses": lambda d: "(" * d + "1" + ")" * d,
    "a + chain": lambda d: " + ".join(["1"] * d),
    "a ** chain": lambda d: " ** ".join(["1"] * d),
    "nested calls": lambda d: "min(" * d + "1" + ")" * d,
    "nested wiring calls": lambda d: "layernorm(" * d + "x" + ")" * d,
}


@pytest.mark.parametrize("shape", NESTINGS)
def test_deep_nesting_is_refused_where_it_starts(shape):
    text = f"embedding t {{ vocab 10; dim 8 }}\nlet a = 1\nlet b = {NESTINGS[shape](3000)}\n"  # within the tokens
    error = refused(text)
    assert error.codes == ["syntax"] and f"nested too deeply (more than {MAX_DEPTH} levels)" in error.message
    assert error.line == 3


@pytest.mark.parametrize("shape, depth", [("unary minus", 40), ("a + chain", 40), ("nested calls", 40),
                                          ("parentheses", MAX_DEPTH)])  # parentheses add no level to the tree
def test_reasonable_nesting_still_evaluates(shape, depth):
    spec = tfspec.parse(f"let a = {NESTINGS[shape](depth)}\nembedding t {{ vocab 10 + a; dim 8 }}\n"
                        "decoder x 1 { feedforward d_ff=8 }")
    assert spec.embeddings[0].vocab == 10 + {"unary minus": 1, "a + chain": 40}.get(shape, 1)


def test_brackets_too_deep_are_found_before_parsing():
    """One scan finds the first bracket past the limit, even in text the parser would stop at first (unclosed),
    and brackets inside strings and comments do not count."""
    opening = "let a = 1\n# " + "(" * 5000 + "\nlet s = \"" + "{" * 300 + "\"\nlet b = " + "f(" * 5000
    error = refused(opening)
    assert error.codes == ["syntax"] and "nested too deeply" in error.message
    assert (error.line, error.column) == (4, len("let b = ") + 2 * (MAX_DEPTH + 1))  # the 201st "("
    closed = "let a = 1\n# " + "(" * 5000 + "\nembedding t { vocab 10; dim 8 }\ndecoder x 1 { feedforward d_ff=8 }\n"
    assert tfspec.parse(closed).embeddings[0].vocab == 10


@pytest.mark.parametrize("expression, message", [
    ("0.5 ** -2000", "number is too large"),
    ("2 ** 10**400", "number is too large"),
    ("9 ** 9 ** 9", "number is too large"),
    ("sqrt(" + "9" * 400 + ")", "number is too large"),
    ("9" * 400, "number is too large"),
    ("1e300 * 1e300", "number is too large"),
    ("10**18 * 10**18", "number is too large"),
    ("1e18 // 1e-18", "number is too large"),
    ("(10**18) / 1e-300", "number is too large"),
    ("floor(1e300)", "number is too large"),
    ("(-8) ** 0.5", "a negative number to a fractional power"),
    ("floor((-1) ** (1 / 3))", "a negative number to a fractional power"),
    ("min((-2) ** 0.5, 1)", "a negative number to a fractional power"),
    ("1e400", "too large"),
    ("5 % 0", "division by zero"),
    ("0 ** -1", "division by zero"),
])
def test_arithmetic_errors_are_located(expression, message):
    start = time.perf_counter()
    error = refused(f"let a = {expression}\nembedding t {{ vocab 10; dim 8 }}\ndecoder x 1 {{ feedforward d_ff=8 }}")
    assert error.line == 1 and error.column >= 9 and message in error.message, str(error)
    assert error.codes == ["arithmetic"] or error.codes == ["syntax"] and expression == "1e400"
    assert time.perf_counter() - start < 5  # nothing computes 9 ** 387420489 (a hang guard, not a speed target)


@pytest.mark.parametrize("where", ["dropout {v}", "feedforward d_ff={v}", "attention self heads={v}"])
def test_a_complex_value_never_reaches_a_setting(where):
    text = f"embedding t {{ vocab 10; dim 8 }}\ndecoder x 1 {{ {where.format(v='(-8) ** 0.5 + 1')} }}\n"
    error = refused(text)
    assert [(d.code, d.span.line) for d in error.diagnostics if d.code != "structure"] == [("arithmetic", 2)]


@pytest.fixture()
def spec_dir(tmp_path):
    return fuzz.include_directory(tmp_path)


@pytest.mark.parametrize("target, message", [
    ("/etc/passwd", "an absolute path"),
    ("/dev/zero", "an absolute path"),
    ("../secret.tfs", "outside the spec's directory tree"),
    ("sub/../../secret.tfs", "outside the spec's directory tree"),
    ("escape_link.tfs", "outside the spec's directory tree"),
    ("zero_link.tfs", "outside the spec's directory tree"),
    ("sub", "a directory"),
    ("fifo", "not a regular file"),
    ("device_link.tfs", "not a regular file"),
    ("big.tfs", f"an included spec may have at most {MAX_INCLUDE_BYTES:,}"),
    ("binary.tfs", "not UTF-8 text"),
    ("a\\x00b.tfs", "cannot read included file"),  # the escape as text: a plain name, missing
    ("self.tfs", "include cycle"),
    ("nested.tfs", "include cycle"),
    ("", "not a file name"),
])
def test_the_include_policy(spec_dir, target, message):
    """Includes are regular UTF-8 files of at most 1 MiB under the including spec's directory; nothing else is
    opened, so no error quotes a file outside it."""
    os.symlink(spec_dir.parent / "secret.tfs", spec_dir / "escape_link.tfs")
    os.symlink("/dev/zero", spec_dir / "zero_link.tfs")
    os.mkfifo(spec_dir / "sub" / "pipe")
    os.symlink(spec_dir / "sub" / "pipe", spec_dir / "device_link.tfs")
    error = refused(f'include "{target}"\nembedding t {{ vocab 10; dim 8 }}\n', str(spec_dir / "main.tfs"))
    assert error.line == 1 and error.codes[0] in ("io", "value", "structure")
    assert message in error.message, error.message
    assert "root:" not in str(error) and "secret = 1" not in str(error)


def test_includes_fanned_out_have_one_budget(spec_dir):
    """A file named many times, or many files each under the 1 MiB cap, cannot add up past the spec's budget."""
    from tfspec.front.syntax import MAX_INCLUDED_BYTES, MAX_INCLUDES

    (spec_dir / "empty.tfs").write_text("# nothing\n")
    error = refused('include "empty.tfs"\n' * (MAX_INCLUDES + 1), str(spec_dir / "main.tfs"))
    assert error.line == MAX_INCLUDES + 1 and f"more than {MAX_INCLUDES} includes" in error.message
    (spec_dir / "wide.tfs").write_text('include "empty.tfs"\n' * 60)  # each level counts: 1 + 60 + 1 + 60 > 100
    error = refused('include "wide.tfs"\ninclude "wide.tfs"\n', str(spec_dir / "main.tfs"))
    assert f"more than {MAX_INCLUDES} includes" in error.message
    piece = MAX_INCLUDE_BYTES - 1000
    (spec_dir / "piece.tfs").write_text("#" * (piece - 1) + "\n")
    error = refused('include "piece.tfs"\n' * 12, str(spec_dir / "main.tfs"))
    assert error.line == MAX_INCLUDED_BYTES // piece + 1 and f"at most {MAX_INCLUDED_BYTES:,} bytes in all" in error.message


@pytest.mark.parametrize("shape", [";" * 10 ** 6, "\n".join(f"let x{k} = {k}" for k in range(200_000)),
                                   "let a = " + " + ".join(["1"] * 500_000)],
                         ids=["a million semicolons", "200,000 lets", "a million-token line"])
def test_a_spec_past_the_token_budget_is_refused_where_the_budget_ends(shape):
    """Lark spends ~10 µs a token and the later stages more: past ``MAX_TOKENS`` a spec is refused by one
    bounded scan, located at the first token over (these took 10 to 110 s of CPU)."""
    from tfspec.front.syntax import MAX_TOKENS, _TOKEN

    start = time.process_time()
    error = refused(shape)
    assert time.process_time() - start < 5  # a hang guard; benchmarks/fuzz.py --cost measures the budget itself
    assert error.codes == ["too-long"] and f"more than {MAX_TOKENS:,} tokens" in error.message
    first_over = list(_TOKEN.finditer(shape))[MAX_TOKENS].start()
    assert (error.line, error.column) == (shape.count("\n", 0, first_over) + 1,
                                          first_over - shape.rfind("\n", 0, first_over))


def test_included_tokens_count_toward_the_spec_s_budget(spec_dir):
    from tfspec.front.syntax import MAX_TOKENS

    half = MAX_TOKENS // 2 + 10
    (spec_dir / "half.tfs").write_text(";" * half + "\n")
    reverse = (ROOT / "examples" / "reverse.tfs").read_text()
    tfspec.parse('include "half.tfs"\n' + reverse, file=str(spec_dir / "one.tfs"))  # one half: fine
    error = refused('include "half.tfs"\ninclude "half.tfs"\n', str(spec_dir / "main.tfs"))
    assert error.codes == ["too-long"] and error.file.endswith("half.tfs")


def test_every_example_is_far_under_the_token_budget():
    from tfspec.front.syntax import MAX_TOKENS, _TOKEN

    assert max(len(_TOKEN.findall(p.read_text())) for p in fuzz.EXAMPLES) * 40 < MAX_TOKENS


@pytest.mark.parametrize("character", ["\x00", "\ud800"])
def test_an_include_path_that_is_no_file_name_is_refused(spec_dir, character):
    error = refused(f'include "a{character}b.tfs"\n', str(spec_dir / "main.tfs"))
    assert error.codes == ["value"] and "not a file name" in error.message


def test_an_include_inside_the_tree_still_works(spec_dir):
    (spec_dir / "sub" / "common.tfs").write_text("let d_model = 16\n")
    spec = tfspec.parse('include "sub/common.tfs"\nembedding t { vocab 10; dim d_model }\n'
                        "decoder x 1 { feedforward d_ff=8 }", file=str(spec_dir / "main.tfs"))
    assert spec.embeddings[0].dim == 16


def test_thousands_of_errors_on_one_line_print_a_bounded_report():
    text = "embedding t { " + "; ".join(f"atention{k} self" for k in range(3000)) + " }"  # within the token budget
    error = refused(text)
    rendered = str(error)
    assert len(error.diagnostics) > 3000 - 1 and f"errors ({MAX_SHOWN} shown)" in rendered
    assert rendered.count(": error: ") == MAX_SHOWN
    assert max(len(line) for line in rendered.splitlines()) < 130  # each excerpt clipped around its caret
    assert len(rendered) < 40_000


def test_a_long_line_is_clipped_around_the_caret():
    text = "let a = " + " + ".join(["1"] * 60) + " + nope + " + " + ".join(["1"] * 60)
    error = refused(text + "\nembedding t { vocab 10; dim 8 }\ndecoder x 1 { feedforward d_ff=8 }")
    lines = str(error).splitlines()
    assert lines[0].startswith("<spec>:1:249: error: unknown parameter 'nope'")
    source, caret = lines[2], lines[3]
    assert "nope" in source and source.startswith("    1 | …") and source.endswith("…")
    assert source[caret.index("^"):caret.index("^") + 4] == "nope"


def test_a_thousand_misspelled_names_are_reported_without_a_long_search():
    text = "let " + ", ".join(f"name{k} = {k}" for k in range(1000)) + "\n" + "\n".join(
        f"let b{k} = nmae{k}" for k in range(1000))
    start = time.perf_counter()
    error = refused(text)
    assert time.perf_counter() - start < 10  # a hang guard: one full close-match search per error took minutes
    assert "did you mean 'name0'?" in str(error)  # the first errors, those shown, get suggestions
    last = error.diagnostics[-1].hint  # past the search budget: the names, listed up to 30
    assert last.startswith("defined parameters: name0, name1") and last.endswith("(and 970 more)")


@pytest.mark.parametrize("separator", ["\f", "\u2028", "\u2029", "\x85", "\r", "\v", "\x1c"])
def test_line_numbers_agree_with_the_parser_whatever_the_comment_holds(separator):
    text = f"# a comment{separator}with a separator\nembedding t {{ vocab 10; dim 8 }}\ndecoder x 1 {{ atention self }}\n"
    error = refused(text)
    assert (error.line, error.column) == (3, 15)
    lines = str(error).splitlines()
    assert lines[2] == "    3 | decoder x 1 { atention self }" and lines[3].index("^") == lines[2].index("atention")


def test_a_control_character_in_the_excerpt_keeps_the_caret_aligned():
    error = refused("let a = 1\f+ nope\nembedding t { vocab 10; dim 8 }\ndecoder x 1 { feedforward d_ff=8 }")
    lines = str(error).splitlines()
    assert lines[2] == "    1 | let a = 1?+ nope" and lines[3].index("^") == lines[2].index("nope")


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 2 ** 32 - 1))
@example(seed=20929)  # (a connector from a tower left with no stack: once an IndexError)
def test_fuzzed_specs_end_in_a_spec_error_or_a_spec(tmp_path_factory, seed):
    """benchmarks/fuzz.py's generator: a handful of inputs per example, each a SpecError or a valid spec."""
    directory = fuzz.include_directory(tmp_path_factory.getbasetemp() / "fuzz")
    stream = fuzz.inputs(random.Random(seed), directory)
    for _ in range(5):
        assert fuzz.check(next(stream), str(directory / "fuzz.tfs")) in ("spec_error", "ok")


def test_the_cli_campaign_tells_a_traceback_an_abort_and_a_hang_from_an_answer(tmp_path, monkeypatch):
    """benchmarks/fuzz_cli.py's verdicts, on a refusal and on the failures it counts (a forked child each)."""
    import signal as signals

    import tfspec.cli

    _cli = importlib.util.spec_from_file_location("fuzz_cli", ROOT / "benchmarks" / "fuzz_cli.py")
    fuzz_cli = importlib.util.module_from_spec(_cli)
    _cli.loader.exec_module(fuzz_cli)
    assert fuzz_cli.run_child(["check", str(ROOT / "examples" / "reverse.tfs")], tmp_path, 20)[:2] == ("ok", 0)
    outcome, status, err = fuzz_cli.run_child(["check", "a\x00b"], tmp_path, 20)
    assert (outcome, status) == ("ok", 2) and "holds a NUL byte" in err

    def broken(argv):
        raise KeyError("a bug")
    monkeypatch.setattr(tfspec.cli, "main", broken)
    outcome, _, err = fuzz_cli.run_child(["check"], tmp_path, 20)
    assert outcome == "traceback" and "KeyError: 'a bug'" in err

    def spinning(argv):
        while True:
            pass
    monkeypatch.setattr(tfspec.cli, "main", spinning)
    assert fuzz_cli.run_child(["check"], tmp_path, 1)[0] == "hang"

    monkeypatch.setattr(tfspec.cli, "main", lambda argv: os.kill(os.getpid(), signals.SIGABRT))
    assert fuzz_cli.run_child(["check"], tmp_path, 20)[0] == "abort"


def test_the_standing_campaign_of_untrusted_inputs_runs_clean(capsys):
    """benchmarks/fuzz_hostile.py, a slice of it (names and the language server's protocol; the whole campaign is
    ``python benchmarks/fuzz_hostile.py``): its harness runs, and what it draws is answered as it must be."""
    found = importlib.util.spec_from_file_location("fuzz_hostile", ROOT / "benchmarks" / "fuzz_hostile.py")
    campaign = importlib.util.module_from_spec(found)
    found.loader.exec_module(campaign)
    assert campaign.main(["--n", "2", "--lsp", "4", "--only", "names", "--only", "lsp", "--seed", "3"]) == 0
    out = capsys.readouterr().out
    assert "names: cases 2, ok 2" in out and "language server: cases 4, ok 4" in out, out
    assert campaign.raw_controls("ok\n\tfine") == [] and campaign.raw_controls("a\x1b[2Jb") == ["'\\x1b'"]
