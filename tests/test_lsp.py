"""`tfspec lsp` driven as an editor drives it: JSON-RPC over the server's stdin and stdout.

One server process serves every test of the module (starting it costs an import of tfspec); each test opens
documents of its own. The answers' contents are checked against the checker itself: a diagnostic's range is
the caret `tfspec check` prints, a hover's parameter count is the IR's.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
from pathlib import Path

import pytest

pytest.importorskip("pygls")

import tfspec  # noqa: E402
from tfspec.lsp import language as L  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
BROKEN = """let d_model = 64
embedding tokens { vocab 100; dim d_model }
decoder x 2 {
  atention self heads=4 mask=causal
  feedforward d_ff=4 * d_model
}
head tied(tokens)
"""
GOOD = BROKEN.replace("atention", "attention")


class Client:
    """A language client: requests with ids, notifications, and the server's notifications collected."""

    def __init__(self):
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.process = subprocess.Popen([sys.executable, "-m", "tfspec", "lsp"], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=ROOT)
        self.messages: queue.Queue = queue.Queue()
        self.next_id = 0
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        stream = self.process.stdout
        while True:
            headers = {}
            while True:
                line = stream.readline()
                if not line:
                    return
                if line in (b"\r\n", b"\n"):
                    break
                key, _, value = line.decode().partition(":")
                headers[key.strip().lower()] = value.strip()
            self.messages.put(json.loads(stream.read(int(headers["content-length"]))))

    def send(self, message: dict) -> None:
        body = json.dumps({"jsonrpc": "2.0", **message}).encode()
        self.process.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        self.process.stdin.flush()

    def notify(self, method: str, params: dict) -> None:
        self.send({"method": method, "params": params})

    def request(self, method: str, params: dict, timeout: float = 30):
        self.next_id += 1
        self.send({"id": self.next_id, "method": method, "params": params})
        reply = self.wait(lambda m: m.get("id") == self.next_id and "method" not in m, timeout)
        if "error" in reply:
            raise RuntimeError(reply["error"]["message"])
        return reply["result"]

    def wait(self, match, timeout: float = 30) -> dict:
        """The next message ``match`` accepts (others are dropped)."""
        while True:
            try:
                message = self.messages.get(timeout=timeout)
            except queue.Empty:
                raise AssertionError(f"no answer within {timeout} s; stderr: "
                                     f"{self.process.stderr.read1(4000).decode(errors='replace') if self.process.poll() is not None else ''}") from None
            if match(message):
                return message

    def diagnostics(self, uri: str, timeout: float = 30) -> list[dict]:
        return self.wait(lambda m: m.get("method") == "textDocument/publishDiagnostics"
                         and m["params"]["uri"] == uri, timeout)["params"]["diagnostics"]

    def open(self, uri: str, text: str) -> list[dict]:
        self.notify("textDocument/didOpen", {"textDocument": {"uri": uri, "languageId": "tfspec", "version": 1,
                                                              "text": text}})
        return self.diagnostics(uri)


@pytest.fixture(scope="module")
def client():
    c = Client()
    init = c.request("initialize", {"processId": None, "rootUri": ROOT.as_uri(), "capabilities": {"textDocument": {"rename": {"prepareSupport": True}}}},
                     timeout=120)
    c.capabilities = init["capabilities"]
    c.notify("initialized", {})
    yield c
    c.request("shutdown", None)
    c.notify("exit", None)
    c.process.wait(timeout=10)
    c.process.stdout.close()
    c.process.stdin.close()
    c.process.stderr.close()


def _at(text: str, needle: str, delta: int = 0) -> dict:
    line = next(i for i, l in enumerate(text.split("\n")) if needle in l)
    return {"line": line, "character": text.split("\n")[line].index(needle) + delta}


def test_initialize_announces_every_feature(client):
    caps = client.capabilities
    for feature in ("hoverProvider", "completionProvider", "definitionProvider", "renameProvider",
                    "documentSymbolProvider", "documentFormattingProvider", "textDocumentSync"):
        assert caps.get(feature), feature
    assert caps["renameProvider"].get("prepareProvider") is True


def test_a_broken_spec_gets_the_checker_diagnostic_at_its_caret(client, tmp_path):
    path = tmp_path / "broken.tfs"
    uri = path.as_uri()
    (diagnostic,) = client.open(uri, BROKEN)
    with pytest.raises(tfspec.SpecError) as exc:
        tfspec.parse(BROKEN, file=str(path))
    expected = exc.value.first
    assert diagnostic["code"] == expected.code == "unknown-keyword"
    assert diagnostic["source"] == "tfspec" and diagnostic["severity"] == 1
    assert diagnostic["message"].startswith(expected.message)
    assert "help: did you mean 'attention'?" in diagnostic["message"]
    span = expected.span
    assert diagnostic["range"] == {"start": {"line": span.line - 1, "character": span.column - 1},
                                   "end": {"line": span.end_line - 1, "character": span.end_column - 1}}
    assert diagnostic["range"]["start"] == _at(BROKEN, "atention")

    # The fix, typed: the diagnostic goes once the (debounced) check has run.
    client.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": 2},
                                             "contentChanges": [{"text": GOOD}]})
    assert client.diagnostics(uri) == []


def test_columns_are_utf16_units_after_wide_characters(client, tmp_path):
    text = "# 𝔸𝔹 wide letters\nlet d = 64  # 𝔸\nembedding t { vocab 10; dim d; 𝔸 }\n"
    (diagnostic, *_) = client.open((tmp_path / "wide.tfs").as_uri(), text)
    with pytest.raises(tfspec.SpecError) as exc:
        tfspec.parse(text)
    span = exc.value.first.span
    line = text.split("\n")[span.line - 1]
    units = len(line[:span.column - 1].encode("utf-16-le")) // 2
    assert diagnostic["range"]["start"] == {"line": span.line - 1, "character": units}


def test_a_problem_in_an_included_file_is_published_for_that_file(client, tmp_path):
    (tmp_path / "sizes.tfs").write_text("let d_model = 64, heads = 4 +\n")
    main = tmp_path / "main.tfs"
    text = 'include "sizes.tfs"\n' + GOOD.replace("let d_model = 64\n", "").replace("heads=4", "heads=heads")
    client.notify("textDocument/didOpen", {"textDocument": {"uri": main.as_uri(), "languageId": "tfspec",
                                                            "version": 1, "text": text}})
    found = client.wait(lambda m: m.get("method") == "textDocument/publishDiagnostics"
                        and m["params"]["uri"] == (tmp_path / "sizes.tfs").resolve().as_uri())
    (diagnostic,) = found["params"]["diagnostics"]
    assert diagnostic["code"] == "syntax" and diagnostic["range"]["start"] == {"line": 0, "character": 29}


def test_hover_tells_what_a_word_is(client, tmp_path):
    uri = (tmp_path / "hover.tfs").as_uri()
    text = GOOD.replace("mask=causal", "mask=causal position=rotary(theta=500000)")
    assert client.open(uri, text) == []

    def hover(needle, delta=0):
        found = client.request("textDocument/hover", {"textDocument": {"uri": uri}, "position": _at(text, needle, delta)})
        return found["contents"]["value"] if found else None

    attention = 2 * (4 * 64 * 64 + 4 * 64)  # q, k, v and out with biases, in 2 layers
    layer = attention // 2 + (64 * 256 + 256 + 256 * 64 + 64) + 2 * 2 * 64  # + feed-forward, two layernorms
    whole = tfspec.parse(text).parameter_count()  # the embedding (tied to the head) and the layers
    assert f"{whole:,} parameters in the decoder, its embedding included ({2 * layer:,} in its 2 layers, " \
           f"{layer:,} a layer)" in hover("decoder")
    assert f"{attention:,} parameters in 2 layers, {attention // 2:,} in each" in hover("attention")
    assert "rotary position embedding" in hover("rotary") and "`theta` = 10000" in hover("rotary")
    assert "the base of the angles" in hover("theta")
    assert "let d_model = 64" in hover("d_ff=4 * d_model", 9) and "= **64**" in hover("d_ff=4 * d_model", 9)
    assert "the number of query heads" in hover("heads=")
    assert "position i attends to positions j <= i" in hover("causal")
    assert "vocab 100, dim 64" in hover("tied(tokens)", 6)
    assert hover("{ vocab", 0) is None  # a brace is nothing


def test_completion_offers_what_fits_where_the_cursor_is(client, tmp_path):
    uri = (tmp_path / "complete.tfs").as_uri()
    client.open(uri, GOOD)

    def labels(text, needle, delta=None):
        client.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": 9},
                                                 "contentChanges": [{"text": text}]})
        position = _at(text, needle, len(needle) if delta is None else delta) if isinstance(needle, str) else needle
        found = client.request("textDocument/completion", {"textDocument": {"uri": uri}, "position": position})
        return {item["label"]: item for item in found["items"]}

    def first(found: dict, count: int) -> set:  # those starting with the word typed so far come first
        return set(list(found)[:count])

    top = labels(GOOD + "de\n", {"line": GOOD.count("\n"), "character": 2})
    assert first(top, 2) == {"decoder", "defaults"} and {"model", "embedding", "head"} <= set(top)
    assert top["decoder"]["textEdit"]["range"] == {"start": {"line": GOOD.count("\n"), "character": 0},
                                                    "end": {"line": GOOD.count("\n"), "character": 2}}
    options = labels(GOOD.replace("mask=causal", "mask=causal position=rotary(th"), "rotary(th")
    assert first(options, 1) == {"theta="} and options["theta="]["detail"] == "default: 10000"
    variants = labels(GOOD.replace("mask=causal", "mask=causal + "), "causal + ")
    assert {"padding", "window", "causal"} <= set(variants)
    assert "rotary" not in variants  # a position scheme is no mask
    arguments = labels(GOOD.replace("heads=4", "heads=4 kv"), "heads=4 kv")
    assert first(arguments, 1) == {"kv_heads="} and "kv_heads=" in arguments and "heads=" not in arguments  # given
    settings = labels(GOOD.replace("  feedforward", "  act\n  feedforward"), "  act")
    assert first(settings, 2) == {"activation", "act_dropout"}
    names = labels(GOOD.replace("4 * d_model", "4 * d_"), "4 * d_")
    assert first(names, 1) == {"d_model"} and names["d_model"]["detail"] == "= 64"
    norms = labels(GOOD.replace("{ vocab 100; dim d_model }", "{ vocab 100; dim d_model; norm rms }"), "norm rms")
    assert first(norms, 1) == {"rmsnorm"} and "layernorm" in norms
    # inside a mistyped word: the place's candidates, each replacing the whole word (the editor filters fuzzily)
    text = GOOD.replace("mask=causal", "mask=casual")
    inside = labels(text, "mask=cas")
    line = _at(text, "casual")["line"]
    assert "causal" in inside and inside["causal"]["textEdit"] == {
        "range": {"start": _at(text, "casual"), "end": _at(text, "casual", len("casual"))}, "newText": "causal"}
    assert "rotary" not in inside and line == _at(text, "mask=cas")["line"]


def test_definition_and_rename_of_a_let(client, tmp_path):
    uri = (tmp_path / "rename.tfs").as_uri()
    client.open(uri, GOOD)
    use = _at(GOOD, "4 * d_model", 4)
    found = client.request("textDocument/definition", {"textDocument": {"uri": uri}, "position": use})
    assert found["uri"] == uri and found["range"]["start"] == {"line": 0, "character": 4}
    ready = client.request("textDocument/prepareRename", {"textDocument": {"uri": uri}, "position": use})
    assert ready["start"] == use
    edit = client.request("textDocument/rename", {"textDocument": {"uri": uri}, "position": use, "newName": "width"})
    renamed = _apply(GOOD, edit["changes"][uri])
    assert renamed == GOOD.replace("d_model", "width")
    assert tfspec.parse(renamed).parameter_count() == tfspec.parse(GOOD).parameter_count()
    with pytest.raises(RuntimeError, match="not a `let` name"):
        client.request("textDocument/rename", {"textDocument": {"uri": uri}, "position": _at(GOOD, "causal"),
                                               "newName": "x"})


def test_definition_of_an_include_opens_the_file(client, tmp_path):
    (tmp_path / "sizes.tfs").write_text("let d_model = 64\n")
    text = 'include "sizes.tfs"\n' + GOOD.replace("let d_model = 64\n", "")
    uri = (tmp_path / "includes.tfs").as_uri()
    assert client.open(uri, text) == []
    found = client.request("textDocument/definition", {"textDocument": {"uri": uri}, "position": _at(text, "sizes")})
    assert found["uri"] == (tmp_path / "sizes.tfs").resolve().as_uri()
    use = client.request("textDocument/definition", {"textDocument": {"uri": uri},
                                                     "position": _at(text, "4 * d_model", 4)})
    assert use["uri"] == found["uri"] and use["range"]["start"] == {"line": 0, "character": 4}


def test_formatting_is_tfspec_fmt(client, tmp_path):
    from tfspec.front.fmt import format_text

    messy = "let d_model=64\nembedding tokens {vocab 100;dim d_model}\ndecoder x 2 {attention self heads=4 mask=causal\n" \
            "feedforward d_ff=4*d_model}\nhead tied(tokens)\n"
    uri = (tmp_path / "messy.tfs").as_uri()
    client.open(uri, messy)
    edits = client.request("textDocument/formatting", {"textDocument": {"uri": uri},
                                                       "options": {"tabSize": 2, "insertSpaces": True}})
    assert _apply(messy, edits) == format_text(messy)
    client.notify("textDocument/didChange", {"textDocument": {"uri": uri, "version": 2},
                                             "contentChanges": [{"text": format_text(messy)}]})
    assert client.request("textDocument/formatting", {"textDocument": {"uri": uri},
                                                      "options": {"tabSize": 2, "insertSpaces": True}}) == []


def test_document_symbols_outline_the_model(client, tmp_path):
    uri = (tmp_path / "outline.tfs").as_uri()
    client.open(uri, GOOD)
    found = client.request("textDocument/documentSymbol", {"textDocument": {"uri": uri}})
    assert [s["name"] for s in found] == ["d_model", "tokens", "decoder", "head"]
    decoder = found[2]
    assert decoder["detail"] == "x 2" and [c["name"] for c in decoder["children"]] == ["attention", "feedforward"]


def test_document_symbols_outline_a_model_of_towers(client, tmp_path):
    uri = (tmp_path / "pair.tfs").as_uri()
    client.open(uri, open("examples/clip_digits.tfs").read())
    found = client.request("textDocument/documentSymbol", {"textDocument": {"uri": uri}})
    assert [s["name"] for s in found] == ["clip_digits", "width", "proj", "defaults", "text", "vision", "contrastive"]
    text, vision = found[4], found[5]
    assert [c["name"] for c in text["children"]] == ["tokens", "encoder", "head"]
    assert [c["name"] for c in vision["children"]] == ["image", "encoder", "head"]
    assert found[6]["detail"] == "text vision loss=softmax"
    doc = L.Document.check(open("examples/clip_digits.tfs").read(), "pair.tfs")
    line = next(i for i, text in enumerate(doc.text.split("\n")) if "pool=token(2)" in text)
    pooled = L.hover(doc, line, doc.line(line).index("token(2)") + 1)
    assert pooled is not None and "first position holding token id" in pooled[0]
    image = next(i for i, text in enumerate(doc.text.split("\n")) if "embedding image" in text)
    assert "input patches(16, 4, channels=1" in L.hover(doc, image, doc.line(image).index("image") + 1)[0]
    encoder = next(i for i, text in enumerate(doc.text.split("\n")) if "encoder x 2" in text)
    assert "26,624 parameters in the encoder, its embedding included (25,408 in its 2 layers" in L.hover(doc, encoder, doc.line(encoder).index("encoder") + 1)[0]


def _apply(text: str, edits: list[dict]) -> str:
    lines = text.split("\n")
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line) + 1)

    def offset(p):
        return offsets[p["line"]] + p["character"]

    for edit in sorted(edits, key=lambda e: offset(e["range"]["start"]), reverse=True):
        text = text[:offset(edit["range"]["start"])] + edit["newText"] + text[offset(edit["range"]["end"]):]
    return text


# ---------------------------------------------------------------- the same answers without the protocol
def test_every_word_resolve_reads_has_a_sentence():
    from tfspec.front import resolve as R, words

    missing = [(words.BLOCK, w) for w in R.STACK_SETTINGS | R.DEFAULTS_SETTINGS if not words.doc(words.BLOCK, w)]
    missing += [(words.EMBEDDING, w) for w in R.EMBEDDING_SETTINGS if not words.doc(words.EMBEDDING, w)]
    for kind in R.SUBLAYERS:
        missing += [(kind, p.name) for p in R.sublayer_params(kind, R.BUILTIN_DEFAULTS, True) if not words.doc(kind, p.name)]
    missing += [(words.HEAD, p.name) for p in R.head_params("linear") if not words.doc(words.HEAD, p.name)]
    assert missing == []


def test_context_survives_text_that_does_not_parse():
    text = "decoder x 2 {\n  attention self heads=4 mask=causal + \n"
    doc = L.Document.check(text)
    assert doc.module is None and doc.problems  # it does not parse ...
    labels = [c.label for c in L.completions(doc, 1, len("  attention self heads=4 mask=causal + "))]
    assert "padding" in labels  # ... and still completes
    argument = L.context_at(text, len(text) - 1)
    assert argument.block == "stack" and argument.keyword == "attention" and argument.argument() == "mask"
    after_value = L.context_at("decoder x 1 { attention self heads=4 ", 37)
    assert after_value.argument() is None  # `heads=4` is done: a new argument starts


def test_server_with_pygls_missing_says_how_to_install(monkeypatch, capsys):
    import builtins

    from tfspec.cli import main

    real = builtins.__import__

    def refuse(name, *args, **kwargs):
        if name.endswith("lsp.server") or name == "pygls" or name.startswith("pygls."):
            raise ModuleNotFoundError("No module named 'pygls'", name="pygls")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", refuse)
    monkeypatch.delitem(sys.modules, "tfspec.lsp.server", raising=False)
    assert main(["lsp"]) == 2
    assert "pip install 'tfspec[lsp]'" in capsys.readouterr().err


# ---------------------------------------------------------------- colours
def test_the_shipped_textmate_grammar_is_written_from_the_language():
    from tfspec.lsp import grammar

    shipped = ROOT / "editors" / "vscode" / "syntaxes" / "tfspec.tmLanguage.json"
    assert shipped.read_text(encoding="utf-8") == grammar.text(), \
        "run: python -m tfspec.lsp.grammar > editors/vscode/syntaxes/tfspec.tmLanguage.json"
    package = json.loads((ROOT / "editors" / "vscode" / "package.json").read_text())
    assert package["contributes"]["grammars"][0]["scopeName"] == json.loads(shipped.read_text())["scopeName"]
    assert package["contributes"]["configuration"]["properties"]["tfspec.command"]["default"] == ["tfspec", "lsp"]


def test_the_grammar_colours_each_kind_of_word():
    from tfspec.lsp.grammar import highlight

    source = (ROOT / "examples" / "llama2_7b.tfs").read_text()
    lines = source.split("\n")
    scopes = {(lines[n][s:e], scope.split(".")[0] + "." + scope.split(".")[1]) for n, s, e, scope in highlight(source)}
    for word, scope in [("decoder", "keyword.control"), ("let", "keyword.control"), ("attention", "entity.name"),
                        ("rotary", "support.function"), ("swiglu", "support.function"), ("theta", "variable.parameter"),
                        ("10000", "constant.numeric"), ("1e-5", "constant.numeric"), ("self", "constant.language"),
                        ("position", "support.type"), ("tokens", "entity.name"), ("d_ff", "variable.other")]:
        assert (word, scope) in scopes, (word, scope)
    comments = [lines[n][s:e] for n, s, e, scope in highlight(source) if scope.startswith("comment")]
    assert comments[0] == lines[0] and all(c.startswith("#") for c in comments)
    assert not any(scope.startswith("support.function") and lines[n][s:e] == "rotary"
                   for n, s, e, scope in highlight(source) if lines[n].lstrip().startswith("#"))


@pytest.mark.parametrize("position", [{"line": -1, "character": 0}, {"line": 0, "character": 2 ** 31},
                                      {"line": 2 ** 31, "character": 0}])
def test_a_position_outside_the_protocol_is_answered_with_invalid_params(client, tmp_path, position):
    uri = (tmp_path / "positions.tfs").as_uri()
    client.open(uri, GOOD)
    for method in ("textDocument/hover", "textDocument/completion", "textDocument/definition"):
        client.next_id += 1
        client.send({"id": client.next_id, "method": method, "params": {"textDocument": {"uri": uri},
                                                                         "position": position}})
        reply = client.wait(lambda m: m.get("id") == client.next_id and "method" not in m)
        assert reply["error"]["code"] == -32602 and method in reply["error"]["message"], reply
    assert client.request("textDocument/hover", {"textDocument": {"uri": uri}, "position": {"line": 10 ** 6,
                                                                                            "character": 10 ** 6}}) \
        is None  # inside the protocol's range, past the text: nothing there
    assert client.process.poll() is None


def _campaign():
    """benchmarks/fuzz_hostile.py, the standing campaign, whose framing of messages these tests share."""
    import importlib.util

    found = importlib.util.spec_from_file_location("fuzz_hostile", ROOT / "benchmarks" / "fuzz_hostile.py")
    module = importlib.util.module_from_spec(found)
    found.loader.exec_module(module)
    return module


def frame(message: dict) -> bytes:
    return _campaign().frame({"jsonrpc": "2.0", **message})


def replies(stdout: bytes) -> list[dict]:
    return _campaign().replies(stdout)


def _session(*messages: bytes, timeout: float = 60) -> subprocess.CompletedProcess:
    """A server process fed ``messages`` (framed bytes) and then the end of its input."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "tfspec", "lsp"], input=b"".join(messages), capture_output=True,
                          env=env, cwd=ROOT, timeout=timeout)


INITIALIZE = {"id": 1, "method": "initialize", "params": {"processId": None, "rootUri": None, "capabilities": {}}}


def test_a_request_after_shutdown_is_an_invalid_request_and_exit_then_is_0():
    done = _session(frame(INITIALIZE), frame({"method": "initialized", "params": {}}),
                    frame({"id": 2, "method": "shutdown"}),
                    frame({"id": 3, "method": "textDocument/hover", "params": {
                        "textDocument": {"uri": "file:///x.tfs"}, "position": {"line": 0, "character": 0}}}),
                    frame({"method": "exit"}))
    answers = {r["id"]: r for r in replies(done.stdout) if "id" in r}
    assert answers[2]["result"] is None and answers[3]["error"]["code"] == -32600, answers
    assert done.returncode == 0, done.stderr


def test_exit_without_shutdown_is_status_1():
    done = _session(frame(INITIALIZE), frame({"method": "exit"}))
    assert done.returncode == 1, done.stderr


def test_a_content_length_past_the_bound_ends_the_session_in_one_line():
    done = _session(frame(INITIALIZE), b"Content-Length: 1000000000000000000\r\n\r\n{}", timeout=60)
    assert done.returncode == 1
    lines = done.stderr.decode().strip().splitlines()
    assert lines[-1] == ("tfspec lsp: error: a message of 1,000,000,000,000,000,000 bytes (its Content-Length), more "
                         "than the 67,108,864 a message may have; the session ends"), done.stderr
    assert b"Traceback" not in done.stderr


def test_a_message_nested_past_the_bound_is_a_parse_error_and_the_server_goes_on():
    """A body of 100,000 nested arrays was a RecursionError that ended the server; it is JSON-RPC's parse error,
    answered, and the session continues to a clean shutdown."""
    deep = b"[" * 100_000 + b"]" * 100_000
    done = _session(frame(INITIALIZE), b"Content-Length: %d\r\n\r\n" % len(deep) + deep,
                    frame({"id": 2, "method": "shutdown"}), frame({"method": "exit"}))
    answers = replies(done.stdout)
    parse_errors = [r for r in answers if r.get("error", {}).get("code") == -32700]
    assert len(parse_errors) == 1 and "nested 100000 deep" in parse_errors[0]["error"]["message"], answers
    assert any(r.get("id") == 2 and "result" in r for r in answers) and done.returncode == 0, done.stderr
    assert b"Traceback" not in done.stderr
