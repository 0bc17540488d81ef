"""Malformed specs as data: each tests/cases/*.tfs ends with the diagnostics it must produce.

    # expect: 3:3 unknown-keyword: unknown setting 'atention' in the decoder stack
    #   help: did you mean 'attention'?
"""

import re
from pathlib import Path

import pytest

import tfspec

CASES = sorted((Path(__file__).parent / "cases").glob("*.tfs"))
EXPECT = re.compile(r"^# expect: (\d+):(\d+) ([a-z-]+): (.*)$")
HELP = re.compile(r"^#   help: (.*)$")


def expectations(path: Path) -> list[tuple]:
    out = []
    for line in path.read_text().splitlines():
        if m := EXPECT.match(line):
            out.append([int(m[1]), int(m[2]), m[3], m[4], None])
        elif m := HELP.match(line):
            out[-1][4] = m[1]
    return [tuple(e) for e in out]


def test_there_are_at_least_thirty_cases():
    assert len(CASES) >= 30
    assert all(expectations(c) for c in CASES), "every case states what it expects"


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.stem)
def test_case(path):
    with pytest.raises(tfspec.SpecError) as info:
        tfspec.load(path)
    got = [(d.span.line, d.span.column, d.code, d.message, d.hint) for d in info.value.diagnostics]
    assert got == expectations(path)
    assert all(d.span.file == str(path) for d in info.value.diagnostics)


def test_rendered_error_has_source_line_and_caret():
    path = Path(__file__).parent / "cases" / "misspelled_sublayer.tfs"
    with pytest.raises(tfspec.SpecError) as info:
        tfspec.load(path)
    text = str(info.value)
    lines = text.splitlines()
    assert lines[0] == f"{path}:3:3: error: unknown setting 'atention' in the decoder stack  [unknown-keyword]"
    source = next(i for i, l in enumerate(lines) if l.strip().startswith("3 |"))
    assert lines[source].endswith("atention self heads=4 mask=causal")
    caret = lines[source + 1]
    # the caret sits under the first letter of the misspelled word and underlines all of it
    assert caret.index("^") == lines[source].index("atention")
    assert caret.count("~") == len("atention") - 1
    assert lines[-1].strip() == "= help: did you mean 'attention'?"


def test_first_error_fields():
    with pytest.raises(tfspec.SpecError) as info:
        tfspec.parse("embedding t { vocab 10; dim 8 }\ndecoder x 1 { attention self heads=3 }\n", file="m.tfs")
    err = info.value
    assert (err.file, err.line, err.column) == ("m.tfs", 2, 36)
    assert err.message == "d_model 8 is not divisible by heads=3"
    assert err.codes == ["shape"]
