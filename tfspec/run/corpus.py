"""Stage 7a, corpora: the documents and sentence pairs a run learns from, and the token files they are
prepared into once.

``--data`` names where the text comes from:

- a text file: one document, read in pieces of about 4 MiB that end after a newline;
- a JSONL file (``*.jsonl``): one document per line, the string under ``--field`` (default ``text``);
- a directory: every file under it whose name matches ``--glob`` (default ``*.txt``), recursively, in sorted
  order, each read as above;
- a prepared directory (``tfspec prepare DATA -o DIR``): token ids in a memory-mapped ``tokens.bin`` (uint16,
  or uint32 when the vocabulary has more than 65,536 ids), read a window at a time, never whole, so a corpus
  larger than memory trains;
- for an encoder-decoder, sentence pairs: ``source<TAB>target`` lines, two aligned files of one sentence per
  line (``--data train.en train.de``), or JSONL with ``--field source,target``.

Documents are laid end to end with the vocabulary's end token between them (bytes, characters and a BPE learned
here have one; a tokenizer.json has one when it names it). The held-out set is ``--eval-data`` when given,
otherwise the end of the tokens (of the pairs): a tenth, and at least one window, the same on every run.

>>> import tempfile; folder = Path(tempfile.mkdtemp())
>>> _ = (folder / "a.txt").write_text("one"); _ = (folder / "b.txt").write_text("two")
>>> tokens = encode_documents(Source((str(folder),)), Vocabulary("bytes"))
>>> len(tokens), tokens.starts.tolist()  # "one" <eos> "two"
(7, [0, 4])
"""

from __future__ import annotations

import codecs
import hashlib
import itertools
import json
import os
import shutil
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator

import numpy as np
import torch
from torch import Tensor

from .data import SPECIALS, DataError, TokenizerVocabulary, Vocabulary
from ..errors import listing, shown
from ..files import loads_json, moved_error, naming, open_regular, read_json, read_regular

PIECE_BYTES = 4 << 20  # a text file is read, and tokenised, this much at a time
DEFAULT_GLOB = "*.txt"
PREPARED = "prepared.json"
FORMAT = "tfspec-tokens/1"


# ---------------------------------------------------------------- where text comes from
@dataclass(frozen=True)
class Source:
    """What ``--data`` (or ``--eval-data``) names: one path, or two aligned files of sentence pairs; ``glob``
    picks a directory's files, ``field`` a JSONL record's string (``source,target`` for pairs)."""

    paths: tuple[str, ...]
    glob: str = DEFAULT_GLOB
    field: str = "text"
    option: str = "--data"  # the option that named it, for messages

    def where(self) -> str:
        return f"{self.option} {' '.join(self.paths)}"

    def is_prepared(self) -> bool:
        return len(self.paths) == 1 and (Path(self.paths[0]) / PREPARED).is_file()

    def files(self) -> list[Path]:
        """The files read, in order: the file, or a directory's files that match ``glob``."""
        found = []
        for name in self.paths:
            path = Path(name)
            info = _stat(path, self.option)
            if stat.S_ISDIR(info.st_mode):
                if len(self.paths) > 1:
                    raise DataError(f"{self.option} {name}: a directory; aligned sentence pairs are two files")
                if not self.glob or Path(self.glob).is_absolute() or ".." in Path(self.glob).parts:
                    raise DataError(f"--glob '{self.glob}': a pattern of file names under {name}, such as "
                                    "'*.txt' (not empty, absolute, nor reaching out with ..)")
                try:
                    matched = sorted(p for p in path.rglob(self.glob) if p.is_file())
                except (ValueError, NotImplementedError) as exc:
                    raise DataError(f"--glob '{self.glob}': {exc}") from None
                if not matched:
                    raise DataError(f"{self.option} {name}: no file under it matches --glob '{self.glob}'")
                found.extend(matched)
            elif not stat.S_ISREG(info.st_mode):
                raise DataError(f"{self.option} {name}: not a regular file (a device, a FIFO or a socket)")
            else:
                found.append(path)
        return found

    def pieces(self, binary: bool = False) -> Iterator[tuple[bool, str | bytes]]:
        """The text in order, as ``(starts a document, piece)``; ``binary``: pieces as bytes (of UTF-8 text)."""
        for path in self.files():
            if path.suffix == ".jsonl":
                for _, (text,) in _jsonl_strings(path, (self.field,), self.option):
                    if text:  # an empty record is no document
                        yield True, text.encode("utf-8") if binary else text
            else:
                yield from _file_pieces(path, binary, self.option)

    def pairs(self) -> Iterator[tuple[str, str, str]]:
        """Sentence pairs ``(source, target, where)``: a TSV, two aligned files, or JSONL's two fields."""
        if len(self.paths) == 2:
            yield from _aligned_pairs(*(Path(p) for p in self.paths), self.option)
            return
        fields = tuple(f.strip() for f in self.field.split(","))
        for path in self.files():
            if path.suffix == ".jsonl":
                if len(fields) != 2:
                    raise DataError(f"{self.option} {shown(path)}: sentence pairs in JSONL need two fields: "
                                    "--field SOURCE,TARGET")
                for number, (source, target) in _jsonl_strings(path, fields, self.option):
                    yield source, target, f"{path}:{number}"
                continue
            for number, line in enumerate(_lines(path, self.option), 1):
                if not line.strip():
                    continue
                source, tab, target = line.partition("\t")
                if not tab or "\t" in target or not source.strip() or not target.strip():
                    raise DataError(f"{self.option} {shown(path)}:{number}: an encoder-decoder learns from lines of "
                                    "'source<TAB>target' (one tab, both sides non-empty), or two aligned files")
                yield source, target, f"{path}:{number}"

    def fingerprint(self) -> list[dict]:
        """What decides the prepared tokens: each file's path, size and modification time."""
        return [{"path": str(p.resolve()), "bytes": p.stat().st_size, "mtime_ns": p.stat().st_mtime_ns}
                for p in self.files()]


def _stat(path: Path, option: str) -> os.stat_result:
    try:
        return path.stat()
    except FileNotFoundError:
        raise DataError(f"{option} {shown(path)}: no such file or directory") from None
    except OSError as exc:
        raise DataError(f"{option} {shown(path)}: cannot read: {exc.strerror}") from None


def _open(path: Path, option: str):
    _stat(path, option)  # a missing file named as such
    try:
        return open_regular(path)  # a FIFO put in place after the stat is still refused, not waited on
    except OSError as exc:
        raise DataError(f"{option} {shown(path)}: cannot read: {exc.strerror}") from None


def _file_pieces(path: Path, binary: bool, option: str) -> Iterator[tuple[bool, str | bytes]]:
    """A text file in pieces of about ``PIECE_BYTES``, each ending after a newline where the file has one
    (a tokenizer then never sees a line cut in two); ``binary``: the bytes as they are."""
    with _open(path, option) as handle:
        decoder = codecs.getincrementaldecoder("utf-8")()  # a character cut by a block is completed by the next
        carry, offset, first = "", 0, True
        while True:
            block = handle.read(PIECE_BYTES)
            if binary:
                if not block:
                    return
                yield first, block
                first = False
                continue
            try:
                text = carry + decoder.decode(block, final=not block)
            except UnicodeDecodeError as exc:
                raise DataError(f"{option} {shown(path)}: not UTF-8 at byte {offset + exc.start}; "
                                "use --tokenizer bytes") from None
            offset += len(block)
            cut = (text.rfind("\n") + 1 or len(text)) if block else len(text)
            piece, carry = text[:cut], text[cut:]
            if piece:
                yield first, piece
                first = False
            if not block:
                return


def _lines(path: Path, option: str) -> Iterator[str]:
    with _open(path, option) as handle:
        for number, raw in enumerate(handle, 1):
            try:
                yield raw.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError:
                raise DataError(f"{option} {shown(path)}:{number}: not UTF-8 text") from None


def _jsonl_strings(path: Path, fields: tuple[str, ...], option: str) -> Iterator[tuple[int, tuple[str, ...]]]:
    """``(line number, the strings under fields)`` of each non-blank line of a JSONL file."""
    for number, line in enumerate(_lines(path, option), 1):
        if not line.strip():
            continue
        try:
            record = loads_json(line)
        except ValueError as exc:
            raise DataError(f"{option} {shown(path)}:{number}: not a JSON line: {exc}") from None
        values = tuple(record.get(f) if isinstance(record, dict) else None for f in fields)
        missing = [f for f, v in zip(fields, values) if not isinstance(v, str)]
        if missing:
            keys = listing(sorted(record)) if isinstance(record, dict) else type(record).__name__
            raise DataError(f"{option} {shown(path)}:{number}: no string field '{missing[0]}' (it has: {keys}); "
                            "name the field with --field")
        yield number, values


def _aligned_pairs(source: Path, target: Path, option: str) -> Iterator[tuple[str, str, str]]:
    number = 0
    for number, (s, t) in enumerate(itertools.zip_longest(_lines(source, option), _lines(target, option)), 1):
        if s is None or t is None:
            longer = source if t is None else target
            raise DataError(f"{option}: {longer} has more lines than the other file ({number - 1}); aligned files "
                            "pair line n with line n")
        if not s.strip() and not t.strip():
            continue
        if not s.strip() or not t.strip():
            empty = source if not s.strip() else target
            raise DataError(f"{option} {empty}:{number}: an empty sentence whose pair is not empty; "
                            "aligned files pair line n with line n")
        yield s, t, f"{source}:{number}"


# ---------------------------------------------------------------- tokens
class Tokens:
    """Token ids of documents laid end to end (``ids``: 1-D, in memory or memory-mapped) and the index where
    each document starts (``starts``: ascending, the first 0)."""

    def __init__(self, ids: np.ndarray, starts: np.ndarray):
        self.ids, self.starts = ids, starts

    def __len__(self) -> int:
        return len(self.ids)

    def split(self, at: int) -> tuple["Tokens", "Tokens"]:
        """The tokens before ``at`` and from ``at`` on (a document cut in two is one in each part)."""
        inside = self.starts[self.starts < at]
        after = self.starts[self.starts > at] - at
        return Tokens(self.ids[:at], inside), Tokens(self.ids[at:], np.concatenate(([0], after)).astype(np.int64))

    def windows(self, count: int, window: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        """``count`` random slices of ``window + 1`` ids, and the document each id belongs to (numbered from 0
        within its row), both ``(count, window + 1)``."""
        starts = torch.randint(0, len(self.ids) - window, (count,), generator=generator).tolist()
        rows = torch.from_numpy(np.stack([np.asarray(self.ids[s: s + window + 1], dtype=np.int64) for s in starts]))
        offsets = torch.tensor(starts)[:, None] + torch.arange(window + 1)
        document = torch.searchsorted(torch.from_numpy(np.asarray(self.starts, dtype=np.int64)), offsets, right=True)
        return rows, document - document[:, :1]


def positions_in_documents(documents: Tensor) -> Tensor:
    """Each token's position within its document (from 0 where a document begins inside the row).

    >>> positions_in_documents(torch.tensor([[0, 0, 1, 1, 1, 2]])).tolist()
    [[0, 1, 0, 1, 2, 0]]
    """
    index = torch.arange(documents.shape[1]).expand_as(documents)
    begins = torch.ones_like(documents, dtype=torch.bool)
    begins[:, 1:] = documents[:, 1:] != documents[:, :-1]
    first = torch.where(begins, index, torch.zeros_like(index)).cummax(dim=1).values
    return index - first


def encode_documents(source: Source, vocab) -> Tokens:
    """``source``'s documents as token ids in memory, the end token between documents."""
    ids, starts, length = [], [], 0
    for begins, encoded in _laid_out(source, vocab):
        if begins:
            starts.append(length)
        ids.append(encoded)
        length += len(encoded)
    if not length:
        raise DataError(f"{source.where()}: the text is empty; give a text to learn from")
    return Tokens(np.concatenate(ids), np.array(starts, dtype=np.int64))


def _laid_out(source: Source, vocab) -> Iterator[tuple[bool, np.ndarray]]:
    """The source's ids a piece at a time, as ``(begins a document, ids)``, the end token closing every
    document that another follows."""
    first = True
    for begins, piece in source.pieces(binary=vocab.kind == "bytes"):
        if begins and not first and vocab.eos is not None:
            yield False, np.array([vocab.eos], dtype=np.int64)
        first = False
        yield begins, _encode(vocab, piece)


def _encode(vocab, piece: str | bytes) -> np.ndarray:
    if isinstance(piece, bytes):  # bytes: the ids are the bytes after the specials, no tokenizer needed
        encoded = np.frombuffer(piece, dtype=np.uint8).astype(np.uint16)
        encoded += len(SPECIALS)
        return encoded
    return np.array(vocab.encode(piece), dtype=np.int64)


def vocabulary(choice: str | None, every: Callable[[], Iterable[str]], training: Callable[[], Iterable[str]]):
    """The vocabulary ``--tokenizer`` names: ``bytes`` (also None), ``chars`` (every character ``every()``
    yields), ``bpe:N`` (a byte-level BPE learned from what ``training()`` yields) or the path of a
    ``tokenizer.json``. The texts are asked for only when the choice reads them."""
    if choice in (None, "bytes"):
        return Vocabulary("bytes")
    if choice == "chars":
        characters: set[str] = set()
        for text in every():
            characters.update(text)
        return Vocabulary("chars", tuple(sorted(characters)))
    if choice.startswith("bpe:"):
        if not choice[4:].isdigit():
            raise DataError(f"--tokenizer {choice}: bpe:N takes the number of tokens, e.g. bpe:1000")
        return TokenizerVocabulary.train_bpe(training(), int(choice[4:]))
    return TokenizerVocabulary.load(Path(choice))


def text_vocabulary(choice: str | None, source: Source, held_out: float = 0.1):
    """``vocabulary`` of a source's text: a BPE learns from the text before its held-out last tenth
    (``held_out``: 0 when the held-out text comes from elsewhere)."""
    budget = lambda: sum(p.stat().st_size for p in source.files()) * (1 - held_out)  # noqa: E731
    return vocabulary(choice, lambda: (piece for _, piece in source.pieces()),
                      lambda: _text_until(source, budget()))


def _text_until(source: Source, budget: float) -> Iterator[str]:
    """The source's text up to ``budget`` bytes, in pieces of about a thousand lines (what a BPE learns from)."""
    for _, piece in source.pieces():
        size = len(piece.encode("utf-8"))
        if size > budget:
            piece = piece.encode("utf-8")[: int(budget)].decode("utf-8", errors="ignore")
        lines = piece.splitlines(keepends=True)
        for i in range(0, len(lines), 1000):
            yield "".join(lines[i: i + 1000])
        budget -= size
        if budget <= 0:
            return


def same_vocabulary(a, b) -> bool:
    """Whether two vocabularies give every text the same ids."""
    if a.kind != b.kind:
        return False
    if a.kind == "tokenizer":
        return a.data == b.data and a.specials == b.specials
    return a == b


# ---------------------------------------------------------------- prepared token files
@dataclass(frozen=True)
class Prepared:
    """A prepared directory: ``tokens.bin`` (the ids, ``dtype``), ``starts.bin`` (int64, where each document
    starts), the vocabulary, and ``prepared.json`` saying what they were made from."""

    path: Path
    meta: dict
    vocab: object
    tokens: Tokens

    @classmethod
    def open(cls, path: str | Path, option: str = "--data") -> "Prepared":
        """Memory-map a prepared directory; a missing, truncated or foreign file is a DataError naming it."""
        path = Path(path)
        try:
            meta = read_json(path / PREPARED)
            if not isinstance(meta, dict) or meta.get("format") != FORMAT:
                raise ValueError(f"not a {FORMAT} file")
            dtype, count, documents = np.dtype(meta["dtype"]), int(meta["tokens"]), int(meta["documents"])
            if dtype not in (np.uint16, np.uint32) or count < 1 or documents < 1:
                raise ValueError("its dtype or counts are not valid")
            vocab = Vocabulary.from_dict(meta["vocab"], path)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise DataError(f"{option} {shown(path)}: not a prepared directory ({PREPARED}: {exc}); "
                            "make one with tfspec prepare") from None
        for name, size in (("tokens.bin", count * dtype.itemsize), ("starts.bin", documents * 8)):
            actual = (path / name).stat().st_size if (path / name).is_file() else None
            if actual != size:
                raise DataError(f"{option} {shown(path / name)}: "
                                f"{'missing' if actual is None else f'{actual:,} bytes'}, "
                                f"but {PREPARED} says {size:,}; prepare it again")
        ids = np.memmap(path / "tokens.bin", dtype=dtype, mode="r", shape=(count,))
        _check_ids(ids, vocab, f"{option} {shown(path / 'tokens.bin')}")
        starts = np.fromfile(path / "starts.bin", dtype=np.int64)
        if len(starts) != documents or starts[0] != 0 or np.any(np.diff(starts) < 0) or starts[-1] > count:
            raise DataError(f"{option} {shown(path / 'starts.bin')}: document starts out of order; prepare it again")
        return cls(path, meta, vocab, Tokens(ids, starts))


def _check_ids(ids: np.ndarray, vocab, where: str, piece: int = 1 << 24) -> None:
    """Every id is one of ``vocab``'s (and so one the model embeds: training checks the vocabulary fits the
    embedding), or a ``DataError`` names the first offset that is not: one pass over the mapped file."""
    if int(ids.max()) < vocab.size:
        return
    for begin in range(0, len(ids), piece):
        bad = np.flatnonzero(ids[begin: begin + piece] >= vocab.size)
        if len(bad):
            offset = begin + int(bad[0])
            raise DataError(f"{shown(where)}: id {int(ids[offset])} at token {offset:,} (byte "
                            f"{offset * ids.itemsize:,}) is "
                            f"outside its vocabulary of {vocab.size:,} ids ({vocab.describe()}); the file is damaged "
                            "or was prepared with another tokenizer: prepare it again")


def prepare(source: Source, tokenizer: str | None, out: str | Path,
            log: Callable[[str], None] = print) -> Prepared:
    """Tokenise ``source`` once into ``out`` (see ``Prepared``), streaming: no more than a piece of text and its
    ids are held at a time. When ``out`` already holds the same files prepared with the same tokenizer it is
    reused; a directory that is not a prepared one is never replaced.

    >>> import tempfile; folder = Path(tempfile.mkdtemp()); _ = (folder / "a.txt").write_text("hello")
    >>> prepare(Source((str(folder / "a.txt"),)), None, folder / "p", log=lambda _: None).tokens.ids.tolist()
    [109, 106, 113, 113, 116]
    """
    out = Path(out)
    for name in source.paths:  # its own output among the files it reads would feed on itself
        folder = Path(name).resolve()
        if folder.is_dir() and (out.resolve() == folder or folder in out.resolve().parents):
            raise DataError(f"-o {shown(out)}: inside {name}, which it reads; prepare into a directory outside the "
                            "data")
    made_from = {"sources": source.fingerprint(), "glob": source.glob, "field": source.field,
                 "tokenizer": tokenizer or "bytes", "tokenizer_digest": _digest(tokenizer)}
    if out.exists():
        if not (out / PREPARED).is_file():
            raise DataError(f"-o {shown(out)}: exists and is not a prepared directory; name a new one")
        try:
            existing = Prepared.open(out, "-o")
        except DataError:
            existing = None  # damaged: made again below
        if existing is not None and existing.meta.get("made_from") == made_from:
            log(f"{shown(out)}: up to date ({existing.meta['tokens']:,} tokens of {existing.meta['documents']:,} "
                "documents); reusing it")
            return existing
    vocab = text_vocabulary(tokenizer, source, held_out=0.1)
    dtype = np.uint16 if vocab.size <= 1 << 16 else np.uint32
    out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}."))
    try:
        count, starts = 0, []
        with naming(work / "tokens.bin"), open(work / "tokens.bin", "wb") as tokens:
            for begins, encoded in _laid_out(source, vocab):
                if begins:
                    starts.append(count)
                tokens.write(encoded.astype(dtype, copy=False).tobytes())  # tofile's C stdio would hide a full disk
                count += len(encoded)
        if not count:
            raise DataError(f"{source.where()}: the text is empty; give a text to learn from")
        with naming(work / "starts.bin"):
            np.array(starts, dtype=np.int64).tofile(work / "starts.bin")
        meta = {"format": FORMAT, "dtype": np.dtype(dtype).name, "tokens": count, "documents": len(starts),
                "vocab": vocab.to_dict(), "made_from": made_from}
        for name, data in {**vocab.files(), PREPARED: (json.dumps(meta, indent=2) + "\n").encode()}.items():
            with naming(work / name):
                (work / name).write_bytes(data)
        old = out.parent / f".{out.name}.old" if out.exists() else None
        if old is not None:  # a prepared directory made from other files: set aside, then replaced whole
            shutil.rmtree(old, ignore_errors=True)
            os.replace(out, old)
        os.replace(work, out)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException as exc:
        shutil.rmtree(work, ignore_errors=True)
        error = moved_error(exc, work, out)  # a full disk names the file it was writing, not the temporary one
        if error is None:
            raise
        raise error from None
    prepared = Prepared.open(out)
    log(f"{shown(out)}: {count:,} tokens of {len(starts):,} documents, {vocab.describe()}, {np.dtype(dtype).name}")
    return prepared


def _digest(tokenizer: str | None) -> str | None:
    """A tokenizer file's SHA-256 (an edited tokenizer.json prepares the tokens again)."""
    if tokenizer is None or tokenizer in ("bytes", "chars") or tokenizer.startswith("bpe:"):
        return None
    try:  # a regular file only: /dev/zero never ends, a FIFO blocks
        return hashlib.sha256(read_regular(tokenizer)).hexdigest()
    except OSError:
        return None  # TokenizerVocabulary.load says why


# ---------------------------------------------------------------- what a run reads
def tokens_of(source: Source, tokenizer: str | None, vocab=None, held_out: float = 0.1) -> tuple[object, Tokens]:
    """(vocabulary, tokens) of ``source``: a prepared directory's own, memory-mapped, or text encoded with
    ``vocab`` (else the one ``tokenizer`` names, see ``text_vocabulary``)."""
    if not source.is_prepared():
        vocab = vocab or text_vocabulary(tokenizer, source, held_out)
        return vocab, encode_documents(source, vocab)
    prepared = Prepared.open(source.paths[0], source.option)
    made_with = prepared.meta.get("made_from", {}).get("tokenizer")
    if tokenizer is not None and tokenizer != made_with:
        raise DataError(f"{source.where()}: prepared with --tokenizer {made_with}; drop --tokenizer, or prepare "
                        "the data again")
    if vocab is not None and not same_vocabulary(vocab, prepared.vocab):
        raise DataError(f"{source.where()}: prepared with {prepared.vocab.describe()}, but this run reads "
                        f"{vocab.describe()}; prepare it with the run's tokenizer")
    return prepared.vocab, prepared.tokens


@dataclass(frozen=True)
class TextData:
    """A language model's (or MLM's) tokens: training and held-out parts."""

    vocab: object
    train: Tokens
    held_out: Tokens
    documents: int

    @classmethod
    def read(cls, source: Source, tokenizer: str | None, window: int, vocab=None,
             eval_source: Source | None = None) -> "TextData":
        """``vocab``: the one to use (a resumed or fine-tuned run's); otherwise ``tokenizer`` names it (a BPE
        learns from the training part only), or a prepared directory's own."""
        vocab, tokens = tokens_of(source, tokenizer, vocab, held_out=0.0 if eval_source else 0.1)
        if eval_source is None:
            split = len(tokens) - max(len(tokens) // 10, window + 1)
            if split < window + 1:
                raise DataError(f"{source.where()}: {len(tokens)} tokens is too short for windows of {window} "
                                f"(needs at least {2 * (window + 1)}); use a longer text or a smaller --seq-len")
            return cls(vocab, *tokens.split(split), len(tokens.starts))
        held_out = tokens_of(eval_source, None, vocab)[1]
        for part, where in ((tokens, source.where()), (held_out, eval_source.where())):
            if len(part) < window + 1:
                raise DataError(f"{shown(where)}: {len(part)} tokens is too short for windows of {window}; "
                                "use a longer text or a smaller --seq-len")
        return cls(vocab, tokens, held_out, len(tokens.starts))

    def windows(self, count: int, window: int, generator: torch.Generator, evaluation: bool) -> tuple[Tensor, Tensor]:
        """(count, window + 1) random slices of the training or held-out ids, and their documents."""
        return (self.held_out if evaluation else self.train).windows(count, window, generator)


@dataclass(frozen=True)
class PairData:
    """Sentence pairs for an encoder-decoder; without ``--eval-data`` the last tenth is held out.

    Sources are encoded as a model's inputs are (a tokenizer adds its own specials, T5's ``</s>``); targets get
    the vocabulary's start and end ids in the batch. A pair whose source, or target with its start, is longer
    than ``longest`` tokens is left out (``skipped`` counts them)."""

    vocab: object
    train_pairs: tuple[tuple[tuple[int, ...], tuple[int, ...]], ...]
    eval_pairs: tuple[tuple[tuple[int, ...], tuple[int, ...]], ...]
    skipped: int

    @classmethod
    def read(cls, source: Source, tokenizer: str | None, longest: int, vocab=None,
             eval_source: Source | None = None) -> "PairData":
        pairs = [(s, t) for s, t, _ in source.pairs()]
        held = [(s, t) for s, t, _ in eval_source.pairs()] if eval_source is not None else None
        if held is None:
            if len(pairs) < 2:
                raise DataError(f"{source.where()}: {len(pairs)} sentence pair; give at least 2 (a tenth is held out)")
            cut = len(pairs) - max(len(pairs) // 10, 1)
            pairs, held = pairs[:cut], pairs[cut:]
        if not pairs or not held:
            raise DataError(f"{(source if not pairs else eval_source).where()}: no sentence pairs")
        if vocab is None:
            vocab = _pair_vocabulary(tokenizer, pairs, held)
        def encoded(part):  # those that fit: the decoder reads the start token and the target
            both = [(tuple(vocab.encode_input(s)), tuple(vocab.encode(t))) for s, t in part]
            return [(s, t) for s, t in both if len(s) <= longest and len(t) + 1 <= longest]

        train, held_out = encoded(pairs), encoded(held)
        if not train or not held_out:
            raise DataError(f"{source.where()}: no {'training' if not train else 'held-out'} pair fits in {longest} "
                            "tokens a side; raise --seq-len (and the spec's positions if they are learned)")
        return cls(vocab, tuple(train), tuple(held_out), len(pairs) + len(held) - len(train) - len(held_out))

    def batch(self, count: int, generator: torch.Generator, evaluation: bool) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """(src, tgt, src lengths, tgt lengths) of ``count`` random pairs, padded with the pad id (or 0)."""
        pairs = self.eval_pairs if evaluation else self.train_pairs
        chosen = [pairs[i] for i in torch.randint(0, len(pairs), (count,), generator=generator).tolist()]
        filler = self.vocab.pad if self.vocab.pad is not None else 0
        src_lengths = torch.tensor([len(s) for s, _ in chosen])
        tgt_lengths = torch.tensor([len(t) for _, t in chosen])
        src = torch.full((count, int(src_lengths.max())), filler)
        tgt = torch.full((count, max(int(tgt_lengths.max()), 1)), filler)
        for row, (s, t) in enumerate(chosen):
            src[row, : len(s)] = torch.tensor(s)
            tgt[row, : len(t)] = torch.tensor(t, dtype=torch.long)
        return src, tgt, src_lengths, tgt_lengths


def _pair_vocabulary(choice: str | None, train: list[tuple[str, str]], held: list[tuple[str, str]]):
    """``vocabulary`` of sentence pairs: characters of both sides of all pairs; a BPE learns from the training
    pairs only."""
    def training():
        lines = "\n".join(s + "\n" + t for s, t in train).splitlines(keepends=True)
        return ["".join(lines[i: i + 1000]) for i in range(0, len(lines), 1000)]

    return vocabulary(choice, lambda: (s + "\t" + t + "\n" for s, t in train + held), training)
