"""Training data with no downloads: synthetic sequence tasks, a user's text file, and MLM masking.

Every batch is a pure function of ``(seed, stream, index)``, so a resumed run
sees exactly the batches an uninterrupted one would, and no data-loader state
needs saving. Held-out sequences are decided by a hash of the source: training
never draws one, evaluation draws only those.

Token ids: five specials, then the symbols (task letters, bytes or characters).

>>> vocab = Vocabulary.letters(4); vocab.encode("dab"), vocab.decode([8, 5, 6, EOS, 5])
([8, 5, 6], 'dab')
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from .errors import RunError

SPECIALS = ("<pad>", "<bos>", "<eos>", "<sep>", "<mask>")
PAD, BOS, EOS, SEP, MASK = range(len(SPECIALS))
IGNORE = -100  # label of a position that has no loss (cross_entropy's ignore_index)
LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
HELD_OUT_ONE_IN = 10
TRAIN, EVAL = 0, 1  # random streams of generator_for


class DataError(RunError):
    """Data that cannot train this model (an empty file, lengths past the positions): exit 1."""


@dataclass(frozen=True)
class Vocabulary:
    """``kind`` "letters" (task symbols a-z, A-Z), "bytes" (all 256) or "chars" (a text's characters)."""

    kind: str
    symbols: tuple[str, ...] = ()

    @classmethod
    def letters(cls, n: int) -> "Vocabulary":
        if not 2 <= n <= len(LETTERS):
            raise DataError(f"--symbols must be between 2 and {len(LETTERS)}, got {n}")
        return cls("letters", tuple(LETTERS[:n]))

    @property
    def size(self) -> int:
        return len(SPECIALS) + (256 if self.kind == "bytes" else len(self.symbols))

    @property
    def first_symbol(self) -> int:
        return len(SPECIALS)

    def encode(self, text: str) -> list[int]:
        if self.kind == "bytes":
            return [len(SPECIALS) + b for b in text.encode("utf-8")]
        index = {s: i for i, s in enumerate(self.symbols, len(SPECIALS))}
        unknown = sorted({c for c in text if c not in index})
        if unknown:
            raise DataError(f"not in this model's vocabulary: {' '.join(map(repr, unknown))} "
                            f"(it knows {self.describe()})")
        return [index[c] for c in text]

    def output_ids(self, out: int, end: bool) -> Tensor:
        """Bool per output id (``out`` of them): the symbols, and the end token when ``end``."""
        allowed = torch.zeros(out, dtype=torch.bool)
        allowed[self.first_symbol: self.size] = True
        allowed[EOS] = end
        return allowed

    def decode(self, ids) -> str:
        """Text of ``ids`` up to the first end token; other specials are skipped."""
        out = []
        for i in ids:
            if i == EOS:
                break
            if i >= len(SPECIALS):
                out.append(i - len(SPECIALS))
        if self.kind == "bytes":
            return bytes(out).decode("utf-8", errors="replace")
        return "".join(self.symbols[i] if i < len(self.symbols) else "\ufffd" for i in out)

    def describe(self) -> str:
        if self.kind == "bytes":
            return "UTF-8 bytes"
        text = "".join(self.symbols)
        return repr(text) if len(text) <= 60 else f"{len(text)} characters"

    def to_dict(self) -> dict:
        return {"kind": self.kind, "symbols": "".join(self.symbols)}

    @classmethod
    def from_dict(cls, d: dict, directory: Path | None = None) -> "Vocabulary | TokenizerVocabulary":
        """The vocabulary a checkpoint names (``directory``: the checkpoint's, where a tokenizer file lies)."""
        if d["kind"] == "tokenizer":
            return TokenizerVocabulary.load(Path(directory or ".") / d["file"])
        return cls(d["kind"], tuple(d["symbols"]))


class TokenizerVocabulary:
    """A Hugging Face ``tokenizers`` tokenizer (a ``tokenizer.json``) as a vocabulary: its own ids, none of
    tfspec's specials, every id a possible output. Imported models generate with it."""

    kind = "tokenizer"

    def __init__(self, tokenizer, file: str = "tokenizer.json") -> None:
        self.tokenizer, self.file = tokenizer, file

    @classmethod
    def load(cls, path: Path) -> "TokenizerVocabulary":
        from tokenizers import Tokenizer
        try:
            return cls(Tokenizer.from_file(str(path)), Path(path).name)
        except Exception as exc:  # tokenizers raises its own exception type for a missing or foreign file
            raise DataError(f"{path}: not a readable tokenizer.json: {exc}") from None

    @property
    def size(self) -> int:
        return self.tokenizer.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def decode(self, ids) -> str:
        return self.tokenizer.decode([int(i) for i in ids], skip_special_tokens=True)

    def output_ids(self, out: int, end: bool) -> Tensor:
        return torch.ones(out, dtype=torch.bool)

    def describe(self) -> str:
        return f"{self.file} ({self.size:,} tokens)"

    def to_dict(self) -> dict:
        return {"kind": self.kind, "file": self.file}


def generator_for(seed: int, stream: int, index: int) -> torch.Generator:
    """A generator seeded by a fixed mix of its arguments (``stream``: TRAIN or EVAL)."""
    mixed = (seed * 0x9E3779B97F4A7C15 + stream * 0xBF58476D1CE4E5B9 + index * 0x94D049BB133111EB) % (1 << 63)
    return torch.Generator().manual_seed(mixed)


# ---------------------------------------------------------------- synthetic tasks
def _reverse(src: Tensor, lengths: Tensor) -> Tensor:
    positions = torch.arange(src.shape[1])
    index = (lengths[:, None] - 1 - positions).clamp(min=0)
    return torch.where(positions < lengths[:, None], src.gather(1, index), PAD)


def _sort(src: Tensor, lengths: Tensor) -> Tensor:
    big = torch.iinfo(src.dtype).max
    return torch.where(src == PAD, big, src).sort(dim=1).values.masked_fill_(
        torch.arange(src.shape[1]) >= lengths[:, None], PAD)


TASKS = {
    "copy": lambda src, lengths: src.clone(),
    "reverse": _reverse,
    "sort": _sort,
}


def held_out(src: Tensor) -> Tensor:
    """Bool per row: is this source reserved for evaluation? (a hash of its tokens, one in ten)"""
    h = torch.zeros(src.shape[0], dtype=torch.long)
    for column in src.T:
        h = (h * 1_000_003 + column + 1) % 2_147_483_647
    return h % HELD_OUT_ONE_IN == 0


@dataclass(frozen=True)
class TaskData:
    """Source/target pairs of a synthetic task with lengths uniform in [min_len, max_len]."""

    task: str
    vocab: Vocabulary
    min_len: int
    max_len: int

    def pairs(self, count: int, generator: torch.Generator, evaluation: bool) -> tuple[Tensor, Tensor, Tensor]:
        """(src, tgt, lengths): ``count`` rows padded with PAD to max_len, held-out rows iff ``evaluation``."""
        src = torch.full((count, self.max_len), PAD, dtype=torch.long)
        lengths = torch.zeros(count, dtype=torch.long)
        todo = torch.ones(count, dtype=torch.bool)
        for _ in range(1000):
            n = int(todo.sum())
            if n == 0:
                break
            new_lengths = torch.randint(self.min_len, self.max_len + 1, (n,), generator=generator)
            tokens = torch.randint(self.vocab.first_symbol, self.vocab.size, (n, self.max_len), generator=generator)
            tokens = tokens.masked_fill(torch.arange(self.max_len) >= new_lengths[:, None], PAD)
            src[todo], lengths[todo] = tokens, new_lengths
            todo = held_out(src) != evaluation
        else:
            raise DataError(f"could not draw {'held-out' if evaluation else 'training'} sequences of lengths "
                            f"{self.min_len}-{self.max_len} over {len(self.vocab.symbols)} symbols; "
                            "allow longer sequences or more symbols")
        return src, TASKS[self.task](src, lengths), lengths


# ---------------------------------------------------------------- batches per objective
@dataclass
class Batch:
    """Keyword arguments of the model's forward, and the labels (IGNORE where there is no loss)."""

    inputs: dict[str, Tensor]
    labels: Tensor

    def to(self, device) -> "Batch":
        return Batch({k: v.to(device) for k, v in self.inputs.items()}, self.labels.to(device))

    @property
    def tokens(self) -> int:
        """Positions with a loss: the batch's size in training tokens."""
        return int((self.labels != IGNORE).sum())


def seq2seq_batch(src: Tensor, tgt: Tensor, lengths: Tensor, padding: dict[str, bool]) -> Batch:
    """Encoder-decoder: source -> BOS target, predicting target EOS; ``padding`` says which masks the model reads."""
    width = int(lengths.max())
    src, tgt = src[:, :width], tgt[:, :width]
    ended = torch.cat((tgt, torch.full((len(tgt), 1), PAD)), dim=1).scatter(1, lengths[:, None], EOS)
    decoder_in = torch.cat((torch.full((len(tgt), 1), BOS), tgt), dim=1)
    inputs = {"src": src, "tgt": decoder_in}
    if padding["src"]:
        inputs["src_padding_mask"] = src == PAD
    if padding["tgt"]:
        inputs["tgt_padding_mask"] = torch.arange(width + 1) > lengths[:, None]
    return Batch(inputs, ended.masked_fill(ended == PAD, IGNORE))


def prompted_batch(src: Tensor, tgt: Tensor, lengths: Tensor) -> Batch:
    """Decoder-only: "source SEP target EOS" as one sequence; loss on the target and EOS only."""
    count, width = len(src), int(lengths.max())
    total = 2 * width + 2
    sequence = torch.full((count, total), PAD)
    positions = torch.arange(total)
    for row, n in enumerate(lengths.tolist()):
        sequence[row, : 2 * n + 2] = torch.cat((src[row, :n], torch.tensor([SEP]), tgt[row, :n], torch.tensor([EOS])))
    labels = sequence[:, 1:].clone()
    answer = positions[1:][None, :] > lengths[:, None]  # the label at input position i is token i + 1
    labels = labels.masked_fill(~answer | (labels == PAD), IGNORE)
    return Batch({"tokens": sequence[:, :-1]}, labels)


def mask_tokens(tokens: Tensor, generator: torch.Generator, vocab: Vocabulary, rate: float = 0.15
                ) -> tuple[Tensor, Tensor]:
    """BERT's masking: each symbol is chosen with probability ``rate``; a chosen one becomes MASK (80%),
    a random symbol (10%) or stays (10%). Returns (inputs, labels), labels IGNORE where not chosen."""
    symbol = tokens >= vocab.first_symbol
    chosen = (torch.rand(tokens.shape, generator=generator) < rate) & symbol
    action = torch.rand(tokens.shape, generator=generator)
    random_symbols = torch.randint(vocab.first_symbol, vocab.size, tokens.shape, generator=generator)
    inputs = torch.where(chosen & (action < 0.8), MASK, tokens)
    inputs = torch.where(chosen & (action >= 0.8) & (action < 0.9), random_symbols, inputs)
    return inputs, tokens.masked_fill(~chosen, IGNORE)


def mlm_batch(tokens: Tensor, generator: torch.Generator, vocab: Vocabulary, padding: bool) -> Batch:
    inputs, labels = mask_tokens(tokens, generator, vocab)
    model_inputs = {"tokens": inputs}
    if padding:
        model_inputs["padding_mask"] = tokens == PAD
    return Batch(model_inputs, labels)


# ---------------------------------------------------------------- text files
@dataclass(frozen=True)
class TextData:
    """Windows of a text file's tokens; the last tenth is held out for evaluation."""

    vocab: Vocabulary
    train_ids: Tensor
    eval_ids: Tensor

    @classmethod
    def read(cls, path: str | Path, tokens: str, window: int) -> "TextData":
        path = Path(path)
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            raise DataError(f"--text {path}: no such file") from None
        except OSError as exc:
            raise DataError(f"--text {path}: cannot read: {exc.strerror}") from None
        if not raw.strip():
            raise DataError(f"--text {path}: the file is empty; give a text to learn from")
        if tokens == "bytes":
            vocab = Vocabulary("bytes")
            ids = torch.tensor(list(raw), dtype=torch.long) + len(SPECIALS)
        else:
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise DataError(f"--text {path}: not UTF-8 at byte {exc.start}; use --tokens bytes") from None
            vocab = Vocabulary("chars", tuple(sorted(set(text))))
            ids = torch.tensor(vocab.encode(text), dtype=torch.long)
        split = len(ids) - max(len(ids) // 10, window + 1)
        if split < window + 1:
            raise DataError(f"--text {path}: {len(ids)} tokens is too short for windows of {window} "
                            f"(needs at least {2 * (window + 1)}); use a longer text or a smaller --seq-len")
        return cls(vocab, ids[:split], ids[split:])

    def windows(self, count: int, window: int, generator: torch.Generator, evaluation: bool) -> Tensor:
        """(count, window + 1) random slices of the training or held-out ids."""
        ids = self.eval_ids if evaluation else self.train_ids
        starts = torch.randint(0, len(ids) - window, (count,), generator=generator)
        return ids[starts[:, None] + torch.arange(window + 1)]
