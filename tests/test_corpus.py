"""Corpora: files, directories, JSONL, aligned pairs and prepared token files read as the docs say, with the
same tokens whichever way they come, streamed in bounded memory, and packed documents kept apart when the spec
asks for it."""

from __future__ import annotations

import re

import json
import os
import tracemalloc

import numpy as np
import pytest
import torch

import tfspec.run.corpus as corpus
from tfspec.run.corpus import PairData, Prepared, Source, TextData, encode_documents, positions_in_documents, prepare
from tfspec.run.data import EOS, SPECIALS, DataError, Vocabulary
from tfspec.run.train import Objective, TrainConfig, train
from tfspec import compile as compile_spec
from numerics import FLOAT32, assert_close

BYTES = Vocabulary("bytes")


def quiet(*_):
    pass


def ids(text: str) -> list[int]:
    return [b + len(SPECIALS) for b in text.encode("utf-8")]


@pytest.fixture
def tree(tmp_path):
    """A directory of texts: two at the top, one deeper, one that the default glob leaves out."""
    root = tmp_path / "corpus"
    (root / "deeper").mkdir(parents=True)
    (root / "b.txt").write_text("bee")
    (root / "a.txt").write_text("ay")
    (root / "deeper" / "c.txt").write_text("sea")
    (root / "notes.md").write_text("left out")
    return root


def test_a_directory_is_its_matching_files_in_sorted_order_with_the_end_token_between(tree):
    tokens = encode_documents(Source((str(tree),)), BYTES)
    assert tokens.ids.tolist() == ids("ay") + [EOS] + ids("bee") + [EOS] + ids("sea")
    assert tokens.starts.tolist() == [0, 3, 7]
    everything = encode_documents(Source((str(tree),), glob="*"), BYTES)
    assert len(everything.starts) == 4  # notes.md too
    with pytest.raises(DataError, match=r"no file under it matches --glob '\*.rst'"):
        encode_documents(Source((str(tree),), glob="*.rst"), BYTES)
    for pattern in ("", "/etc/*", "../*", "deeper/../../*"):  # nothing outside the directory is read
        with pytest.raises(DataError, match="a pattern of file names under"):
            encode_documents(Source((str(tree),), glob=pattern), BYTES)


def test_jsonl_is_one_document_per_line_under_the_field(tmp_path):
    path = tmp_path / "shard.jsonl"
    path.write_text(json.dumps({"text": "one", "id": 1}) + "\n\n" + json.dumps({"text": "two"}) + "\n"
                    + json.dumps({"text": ""}) + "\n")
    assert encode_documents(Source((str(path),)), BYTES).ids.tolist() == ids("one") + [EOS] + ids("two")
    path.write_text(json.dumps({"body": "x"}) + "\n")
    with pytest.raises(DataError, match=r"shard.jsonl:1: no string field 'text' \(it has: body\); name the field"):
        encode_documents(Source((str(path),)), BYTES)
    assert encode_documents(Source((str(path),), field="body"), BYTES).ids.tolist() == ids("x")
    path.write_text(json.dumps({"text": "fine"}) + "\n{broken\n")
    with pytest.raises(DataError, match=r"shard.jsonl:2: not a JSON line"):
        encode_documents(Source((str(path),)), BYTES)


@pytest.mark.parametrize("vocab", [BYTES, Vocabulary("chars", tuple("abcé\n"))])
def test_a_file_read_in_pieces_gives_the_tokens_of_the_whole(tmp_path, monkeypatch, vocab):
    """Pieces end after a newline where there is one, and a character cut by a block is completed by the next."""
    text = "abc\n" * 5 + "é" * 11 + "\nab" + "é" * 7
    path = tmp_path / "t.txt"
    path.write_text(text, encoding="utf-8")
    whole = encode_documents(Source((str(path),)), vocab).ids.tolist()
    monkeypatch.setattr(corpus, "PIECE_BYTES", 5)
    pieces = list(Source((str(path),)).pieces(binary=vocab.kind == "bytes"))
    assert len(pieces) > 5 and [begins for begins, _ in pieces] == [True] + [False] * (len(pieces) - 1)
    assert encode_documents(Source((str(path),)), vocab).ids.tolist() == whole == vocab.encode(text)


def test_a_file_that_is_not_utf8_is_named_with_the_byte(tmp_path):
    path = tmp_path / "t.txt"
    path.write_bytes(b"fine\n" * 3 + b"\xff")
    with pytest.raises(DataError, match=r"t.txt: not UTF-8 at byte 15; use --tokenizer bytes"):
        encode_documents(Source((str(path),)), Vocabulary("chars", tuple("fine\n")))
    assert encode_documents(Source((str(path),)), BYTES).ids.tolist()[-1] == 0xFF + len(SPECIALS)


def test_aligned_files_and_jsonl_give_the_pairs_a_tsv_gives(tmp_path):
    pairs = [(f"source {i}", f"target {i}") for i in range(20)]
    (tmp_path / "p.tsv").write_text("".join(f"{s}\t{t}\n" for s, t in pairs))
    (tmp_path / "p.src").write_text("".join(f"{s}\n" for s, _ in pairs))
    (tmp_path / "p.tgt").write_text("".join(f"{t}\n" for _, t in pairs))
    (tmp_path / "p.jsonl").write_text("".join(json.dumps({"en": s, "de": t}) + "\n" for s, t in pairs))
    read = [PairData.read(source, "chars", 20) for source in (
        Source((str(tmp_path / "p.tsv"),)), Source((str(tmp_path / "p.src"), str(tmp_path / "p.tgt"))),
        Source((str(tmp_path / "p.jsonl"),), field="en,de"))]
    assert read[0].train_pairs == read[1].train_pairs == read[2].train_pairs
    assert read[0].eval_pairs == read[1].eval_pairs == read[2].eval_pairs and len(read[0].eval_pairs) == 2
    (tmp_path / "p.tgt").write_text("".join(f"{t}\n" for _, t in pairs[:-1]))
    with pytest.raises(DataError, match=r"p.src has more lines than the other file \(19\)"):
        PairData.read(Source((str(tmp_path / "p.src"), str(tmp_path / "p.tgt"))), "chars", 20)
    (tmp_path / "p.tgt").write_text("a\n\nc\n")
    with pytest.raises(DataError, match=r"p.tgt:2: an empty sentence whose pair is not empty"):
        PairData.read(Source((str(tmp_path / "p.src"), str(tmp_path / "p.tgt"))), "chars", 20)
    with pytest.raises(DataError, match=r"need two fields: --field SOURCE,TARGET"):
        PairData.read(Source((str(tmp_path / "p.jsonl"),), field="en"), "chars", 20)


def test_eval_data_is_the_held_out_set(tmp_path):
    (tmp_path / "train.txt").write_text("abcd" * 50)
    (tmp_path / "eval.txt").write_text("dcba" * 10)
    data = TextData.read(Source((str(tmp_path / "train.txt"),)), None, 8,
                         eval_source=Source((str(tmp_path / "eval.txt"),), option="--eval-data"))
    assert len(data.train) == 200 and data.held_out.ids.tolist() == ids("dcba" * 10)
    split = TextData.read(Source((str(tmp_path / "train.txt"),)), None, 8)
    assert (len(split.train), len(split.held_out)) == (180, 20)  # the last tenth, the same every time
    with pytest.raises(DataError, match=r"--eval-data .*eval.txt: 40 tokens is too short for windows of 64"):
        TextData.read(Source((str(tmp_path / "train.txt"),)), None, 64,
                      eval_source=Source((str(tmp_path / "eval.txt"),), option="--eval-data"))


# ---------------------------------------------------------------- prepared token files
@pytest.mark.parametrize("tokenizer", [None, "chars", "bpe:300"])
def test_prepared_tokens_are_the_tokens_read_directly(tree, tmp_path, tokenizer):
    source = Source((str(tree),))
    prepared = prepare(source, tokenizer, tmp_path / "prepared", log=quiet)
    assert isinstance(prepared.tokens.ids, np.memmap) and prepared.tokens.ids.dtype == np.uint16
    direct = TextData.read(source, tokenizer, 2)
    via = TextData.read(Source((str(tmp_path / "prepared"),)), None, 2)
    assert np.array_equal(np.asarray(via.train.ids), np.asarray(direct.train.ids))
    assert via.train.starts.tolist() == direct.train.starts.tolist() and via.documents == 3
    generator = lambda: torch.Generator().manual_seed(3)  # noqa: E731
    assert torch.equal(via.windows(4, 2, generator(), False)[0], direct.windows(4, 2, generator(), False)[0])


def test_preparing_again_reuses_what_is_up_to_date_and_redoes_what_changed(tree, tmp_path):
    lines = []
    out = tmp_path / "prepared"
    prepare(Source((str(tree),)), None, out, log=lines.append)
    made = (out / "tokens.bin").stat().st_mtime_ns
    prepare(Source((str(tree),)), None, out, log=lines.append)
    assert "up to date" in lines[-1] and (out / "tokens.bin").stat().st_mtime_ns == made
    (tree / "a.txt").write_text("ay, and more")
    again = prepare(Source((str(tree),)), None, out, log=lines.append)
    assert "up to date" not in lines[-1] and again.tokens.ids[: 12].tolist() == ids("ay, and more")
    with pytest.raises(DataError, match="inside .*corpus, which it reads; prepare into a directory outside"):
        prepare(Source((str(tree),), glob="*"), None, tree / "prepared", log=quiet)
    assert not (tree / "prepared").exists()
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "keep.txt").write_text("precious")
    with pytest.raises(DataError, match="exists and is not a prepared directory"):
        prepare(Source((str(tree),)), None, tmp_path / "mine", log=quiet)
    assert (tmp_path / "mine" / "keep.txt").read_text() == "precious"


def test_a_vocabulary_over_65536_ids_is_stored_as_uint32(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers

    words = {f"w{i}": i for i in range(70_000)}
    tokenizer = Tokenizer(models.WordLevel({**words, "[UNK]": 70_000}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "t.txt").write_text("w1 w69999 w2")
    prepared = prepare(Source((str(tmp_path / "t.txt"),)), str(tmp_path / "tokenizer.json"), tmp_path / "p", log=quiet)
    assert prepared.tokens.ids.dtype == np.uint32 and prepared.tokens.ids.tolist() == [1, 69_999, 2]


@pytest.mark.parametrize("damage, message", [
    (lambda p: (p / "tokens.bin").write_bytes((p / "tokens.bin").read_bytes()[:-2]), "tokens.bin: .* bytes, but"),
    (lambda p: (p / "starts.bin").unlink(), "starts.bin: missing"),
    (lambda p: (p / "prepared.json").write_text("{"), "not a prepared directory"),
    (lambda p: (p / "starts.bin").write_bytes(np.array([0, 9, 4], dtype=np.int64).tobytes()), "out of order"),
])
def test_a_damaged_prepared_directory_is_named(tree, tmp_path, damage, message):
    prepare(Source((str(tree),)), None, tmp_path / "p", log=quiet)
    damage(tmp_path / "p")
    with pytest.raises(DataError, match=message):
        Prepared.open(tmp_path / "p")


@pytest.mark.parametrize("bad", [65535, 261, 280])  # past any embedding; the byte tokenizer's first id past it
def test_prepared_ids_outside_the_tokenizer_are_named_before_training(tree, tmp_path, capsys, bad):
    """An id the model cannot embed was a traceback; one it embeds but the tokenizer lacks trained silently and
    failed at evaluation. Both are refused when the directory opens, at the first bad offset."""
    prepare(Source((str(tree),)), None, tmp_path / "p", log=quiet)
    ids = np.fromfile(tmp_path / "p" / "tokens.bin", dtype=np.uint16)
    ids[7] = bad
    ids[9] = bad
    ids.tofile(tmp_path / "p" / "tokens.bin")
    message = f"tokens.bin: id {bad} at token 7 (byte 14) is outside its vocabulary of 261 ids"
    with pytest.raises(DataError, match=re.escape(message)):
        Prepared.open(tmp_path / "p")
    from tfspec.cli import main
    assert main(["train", "examples/gpt2_small.tfs", "--set", "layers=1", "--set", "d_model=32", "--set", "heads=2",
                 "--set", "vocab=300", "--data", str(tmp_path / "p"), "--seq-len", "8", "--steps", "1",
                 "--no-progress", "--out", str(tmp_path / "run")]) == 1
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and not (tmp_path / "run").exists(), err


def test_preparing_streams_in_bounded_memory(tmp_path, monkeypatch):
    """A 24 MB file prepared in 1 MiB pieces: Python never holds more than a few pieces' worth (a corpus larger than
    memory prepares, then trains from the memory map)."""
    monkeypatch.setattr(corpus, "PIECE_BYTES", 1 << 20)
    path = tmp_path / "big.txt"
    with open(path, "w") as handle:
        for i in range(24):
            handle.write(("line of text %d\n" % i) * 65536)
    size = path.stat().st_size
    tracemalloc.start()
    prepared = prepare(Source((str(path),)), None, tmp_path / "p", log=quiet)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert len(prepared.tokens) == size and peak < 8 << 20, f"peak {peak / 2 ** 20:.1f} MiB for {size / 2 ** 20:.1f} MiB"


# ---------------------------------------------------------------- packed documents
DOCUMENT_SPEC = """model packed
embedding tokens { vocab 300; dim 32; position learned(64) }
decoder x 1 {
  attention self heads=2 mask=causal + document
  feedforward d_ff=64
}
head tied(tokens)
"""


def test_positions_restart_in_each_document():
    documents = torch.tensor([[0, 0, 0, 1, 1, 2], [0, 1, 1, 1, 1, 1]])
    assert positions_in_documents(documents).tolist() == [[0, 1, 2, 0, 1, 0], [0, 0, 1, 2, 3, 4]]


def test_a_packed_row_computes_what_each_document_computes_alone(tmp_path):
    """With a spec that masks documents, the trainer passes document ids and restarting positions: the logits
    of a document packed after others equal those of the document in a row of its own."""
    for i, text in enumerate(["first document here", "a second one", "and a third, longer document"]):
        (tmp_path / f"{i}.txt").write_text(text * 3)
    config = TrainConfig(data=[str(tmp_path)], seq_len=48, batch=4, eval_size=4, steps=1)
    model = compile_spec(DOCUMENT_SPEC, seed=0).eval()
    objective = Objective(model, config)
    assert "each attends within itself (document_ids), positions restarting at 0" in objective.notes[0]
    batch = objective.batch(0, 0)
    documents = batch.inputs["document_ids"]
    row = int(torch.nonzero(documents.amax(dim=1) > 0)[0])  # a row where a document begins inside
    first = int(torch.nonzero(documents[row] == 1)[0])
    packed = model(**{k: v[row: row + 1] for k, v in batch.inputs.items()})
    alone = model(batch.inputs["tokens"][row: row + 1, first:][:, : int((documents[row] == 1).sum())])
    assert_close(packed[0, first: first + alone.shape[1]], alone[0], FLOAT32)
    assert batch.inputs["position_ids"][row, first] == 0


def test_without_a_document_mask_the_note_says_attention_crosses_documents(tree):
    config = TrainConfig(data=[str(tree)], seq_len=2, batch=2, eval_size=2, steps=1)
    model = compile_spec(DOCUMENT_SPEC.replace(" + document", ""), seed=0)
    objective = Objective(model, config)
    assert objective.notes == ["3 documents are packed into rows with the end token between them; attention "
                               "crosses their boundaries, as in GPT-2 and nanoGPT (a mask that keeps each to "
                               "itself: document)"]
    assert set(objective.batch(0, 0).inputs) == {"tokens"}


# ---------------------------------------------------------------- training from each
def test_training_on_a_prepared_directory_equals_training_on_its_files(tree, tmp_path):
    prepare(Source((str(tree),)), None, tmp_path / "p", log=quiet)
    losses = []
    for data in (str(tree), str(tmp_path / "p")):
        config = TrainConfig(data=[data], seq_len=3, batch=4, eval_size=4, steps=3, eval_every=3)
        run = train(DOCUMENT_SPEC, config, None, progress=False, log=quiet)
        losses.append(run.losses + [run.evaluations[-1]["eval_loss"]])
    assert losses[0] == losses[1]


def test_the_command_line_prepares_and_trains(tree, tmp_path, capsys):
    from tfspec.cli import main

    out = tmp_path / "p"
    assert main(["prepare", str(tree), "-o", str(out), "--tokenizer", "chars"]) == 0
    assert "3 documents" in capsys.readouterr().out
    assert main(["prepare", str(tree), "-o", str(out), "--tokenizer", "chars"]) == 0
    assert "up to date" in capsys.readouterr().out
    assert main(["train", "examples/gpt2_small.tfs", "--set", "layers=1", "--set", "d_model=16", "--set", "heads=2",
                 "--set", "vocab=20", "--set", "context=8", "--data", str(out), "--seq-len", "2", "--steps", "1",
                 "--batch", "2", "--eval-size", "2", "--no-progress", "--out", str(tmp_path / "run")]) == 0
    assert "3 documents are packed into rows" in capsys.readouterr().out
    assert main(["train", "examples/gpt2_small.tfs", "--data", str(out), "--tokenizer", "bytes"]) == 1
    assert "prepared with --tokenizer chars; drop --tokenizer" in capsys.readouterr().err
    assert main(["prepare", str(tree), "-o", str(tree / "a.txt")]) == 2
    assert main(["prepare", str(tmp_path / "missing"), "-o", str(tmp_path / "q")]) == 1
    assert "no such file or directory" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "q")


def test_the_papers_model_learns_to_translate_the_shipped_sentence_pairs(tmp_path):
    """examples/vaswani_base.tfs, made small, on tests/data/en-fr.tsv (4,000 generated English-French pairs
    with agreement, adjective order and negation): held-out loss falls from ~4.8 to about 1 in 120 steps."""
    config = TrainConfig(data=["tests/data/en-fr.tsv"], tokenizer="chars", seq_len=64, steps=120, batch=32,
                         lr=0.01, warmup=30, eval_every=120, eval_size=64)
    small = {"layers": 2, "d_model": 64, "heads": 4, "d_ff": 128, "vocab": 64}
    run = train("examples/vaswani_base.tfs", config, None, overrides=small, progress=False, log=quiet)
    pairs = run.objective.pairs
    assert (len(pairs.train_pairs), len(pairs.eval_pairs), pairs.skipped) == (3600, 400, 0)
    assert run.losses[0] > 3.5 and run.evaluations[-1]["eval_loss"] < 1.4, run.evaluations
    assert run.evaluations[-1]["token_accuracy"] > 0.6


def test_bert_as_shipped_trains_as_a_masked_language_model(tmp_path, capsys):
    """bert_base.tfs has a pooler and no head: the refusal points at bert_base_mlm.tfs, which trains."""
    from tfspec.cli import main

    (tmp_path / "t.txt").write_text("masked language modelling learns from both sides. " * 20)
    small = ["--set", "layers=1", "--set", "d_model=32", "--set", "heads=2", "--set", "max_len=32"]
    common = [*small, "--data", str(tmp_path / "t.txt"), "--seq-len", "16", "--steps", "2", "--batch", "4",
              "--eval-size", "4", "--no-progress"]
    assert main(["train", "examples/bert_base.tfs", *common, "--out", str(tmp_path / "a")]) == 1
    assert "examples/bert_base_mlm.tfs is BERT-base with its masked-language-modelling head" in capsys.readouterr().err
    assert main(["train", "examples/bert_base_mlm.tfs", *common, "--out", str(tmp_path / "b")]) == 0
    out = capsys.readouterr().out
    assert "bert_base_mlm (encoder-only" in out and "BERT (Devlin et al. 2018), A.2" in out
