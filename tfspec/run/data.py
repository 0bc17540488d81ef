"""Training data with no downloads: synthetic sequence tasks, batches (MLM masking among them), and the
vocabularies that turn text into ids (bytes, characters, or a Hugging Face ``tokenizer.json``); a user's
text and sentence pairs are read by ``tfspec.run.corpus``.

Every batch is a pure function of ``(seed, stream, index)``, so a resumed run
sees exactly the batches an uninterrupted one would, and no data-loader state
needs saving. Held-out sequences are decided by a hash of the source: training
never draws one, evaluation draws only those.

Token ids: five specials, then the symbols (task letters, bytes or characters).

>>> vocab = Vocabulary.letters(4); vocab.encode("dab"), vocab.decode([8, 5, 6, EOS, 5])
([8, 5, 6], 'dab')
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from ..errors import DataError, RunError, shown
from ..files import read_json, read_regular
from ..front.schema import MAX_DIM
from ..variants.audio import TONE_CLASSES, tone_spectrograms  # noqa: F401 (the tones task, its kind's)
from ..variants.patches import DIGIT_CLASSES, DIGIT_GLYPHS, digit_picture_file, digit_pictures  # noqa: F401

SPECIALS = ("<pad>", "<bos>", "<eos>", "<sep>", "<mask>")
PAD, BOS, EOS, SEP, MASK = range(len(SPECIALS))
IGNORE = -100  # label of a position that has no loss (cross_entropy's ignore_index)
LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
HELD_OUT_ONE_IN = 10
TRAIN, EVAL = 0, 1  # random streams of generator_for


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

    # the ids that play a part in batches and decoding; a tokenizer names its own
    pad, start, eos, sep, mask = PAD, BOS, EOS, SEP, MASK
    ends_text = None  # a language model's text windows hold no end token: a continuation runs to its length

    def is_special(self, ids: Tensor) -> Tensor:
        return ids < len(SPECIALS)

    def random_ids(self, shape, generator: torch.Generator) -> Tensor:
        """Symbols drawn uniformly (BERT's 10% random replacements)."""
        return torch.randint(self.first_symbol, self.size, shape, generator=generator)

    def encode_input(self, text: str) -> list[int]:
        """The ids of a text given to a model (a prompt or a source); tfspec's vocabularies add nothing."""
        return self.encode(text)

    def needs(self) -> str:
        """What the ids are, for messages about the embedding's size."""
        return f"{len(SPECIALS)} specials + {self.size - len(SPECIALS)} {self.describe()}"

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

    def byte_lengths(self) -> Tensor:
        """The UTF-8 bytes each id stands for (0 for the specials): what bits per byte divide by."""
        lengths = torch.zeros(self.size, dtype=torch.long)
        lengths[len(SPECIALS):] = 1 if self.kind == "bytes" else torch.tensor([len(s.encode()) for s in self.symbols])
        return lengths

    def as_tokenizer(self):
        """A Hugging Face ``tokenizers.Tokenizer`` with these ids: one token per byte (as GPT-2 spells bytes) or
        per character, after the five specials, so a model trained here ships with a tokenizer others load.

        >>> Vocabulary("bytes").as_tokenizer().encode("hé").ids == Vocabulary("bytes").encode("hé")
        True
        """
        from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers

        each = pre_tokenizers.Split(Regex("[\\s\\S]"), "isolated")  # every character a word, newlines too
        if self.kind == "bytes":
            spelled = _byte_characters()
            tokens = {spelled[b]: len(SPECIALS) + b for b in range(256)}
            splitter = pre_tokenizers.Sequence([pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
                                                each])
            decoder = decoders.ByteLevel()
        else:
            tokens = {c: i for i, c in enumerate(self.symbols, len(SPECIALS))}
            splitter, decoder = each, decoders.Fuse()
        tokenizer = Tokenizer(models.WordLevel({**dict(zip(SPECIALS, range(len(SPECIALS)))), **tokens},
                                               unk_token=SPECIALS[PAD]))
        tokenizer.pre_tokenizer, tokenizer.decoder = splitter, decoder
        tokenizer.add_special_tokens([AddedToken(token, special=True) for token in SPECIALS])
        return tokenizer

    def tokenizer_json(self) -> bytes:
        return self.as_tokenizer().to_str(pretty=True).encode("utf-8")

    def files(self) -> dict[str, bytes]:
        """Files a checkpoint keeps for this vocabulary: none, checkpoint.json describes it."""
        return {}

    @classmethod
    def from_dict(cls, d: dict, directory: Path | None = None) -> "Vocabulary | TokenizerVocabulary":
        """The vocabulary a checkpoint names (``directory``: the checkpoint's, where a tokenizer file lies); an
        entry tfspec did not write is a ``ValueError`` saying what is wrong with it.

        >>> Vocabulary.from_dict({"kind": "florp"})
        Traceback (most recent call last):
        ...
        ValueError: vocabulary kind 'florp' is none of letters, bytes, chars, tokenizer
        """
        kind = d.get("kind") if isinstance(d, dict) else None
        if kind not in VOCABULARY_KINDS:
            raise ValueError(f"vocabulary kind {kind!r} is none of {', '.join(VOCABULARY_KINDS)}")
        if kind == "tokenizer":
            file, specials = d.get("file"), d.get("specials")
            if not isinstance(file, str) or not file or Path(file).name != file or file in (".", ".."):
                raise ValueError(f"the vocabulary's tokenizer file {file!r} is not a file name")
            if specials is not None and not (isinstance(specials, dict) and set(specials) <= set(ROLES) and all(
                    v is None or type(v) is int and v >= 0 for v in specials.values())):
                raise ValueError(f"the vocabulary's special ids {str(specials)[:100]} are not role: id pairs")
            return TokenizerVocabulary.load(Path(directory or ".") / file, specials=specials)
        symbols = d.get("symbols", "")
        if not isinstance(symbols, str) or kind != "bytes" and (not symbols or len(set(symbols)) != len(symbols)):
            raise ValueError(f"the vocabulary's symbols {str(symbols)[:60]!r} are not a string of distinct characters")
        return cls(kind, tuple(symbols))


VOCABULARY_KINDS = ("letters", "bytes", "chars", "tokenizer")


# what a special id is for: "start" begins a decoder's output; "first" and "last" are the tokens generation forces
# first and last (a model configuration's forced_bos_token_id and forced_eos_token_id: BART, mBART, Marian)
ROLES = ("pad", "start", "eos", "sep", "mask", "first", "last")
ROLE_SETTINGS = {"pad": "pad_token", "start": "bos_token", "eos": "eos_token", "sep": "sep_token",
                 "mask": "mask_token"}  # each token role's key in a tokenizer_config.json
_ROLE_NAMES = {  # the tokens that commonly play each role, when no configuration says
    "pad": ("<pad>", "[PAD]", "<|pad|>"), "start": ("<bos>", "<s>", "[CLS]", "<|startoftext|>", "<|begin_of_text|>"),
    "eos": ("<eos>", "</s>", "[SEP]", "<|endoftext|>", "<|end_of_text|>"), "sep": ("<sep>", "[SEP]"),
    "mask": ("<mask>", "[MASK]"), "first": (), "last": ()}


def _byte_characters() -> dict[int, str]:
    """GPT-2's printable spelling of each byte, the one ``tokenizers``' ByteLevel steps use."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    others = iter(range(256, 512))
    return {b: chr(b if b in printable else next(others)) for b in range(256)}


TOKENIZER_SETTINGS = ("tokenizer_config.json", "special_tokens_map.json")  # kept beside a tokenizer.json
TOKENIZER_BYTES = 256 << 20  # the largest tokenizer.json read (the largest published ones are ~35 MB)
SETTINGS_BYTES = 16 << 20  # the largest tokenizer_config.json, special_tokens_map.json, generation_config.json


def _setting(path: Path) -> bytes:
    try:
        return read_regular(path, SETTINGS_BYTES)
    except OSError as exc:
        raise DataError(f"{shown(path)}: {exc.strerror or exc}") from None


class TokenizerVocabulary:
    """A Hugging Face ``tokenizers`` tokenizer (a ``tokenizer.json``) as a vocabulary: its own ids, every id a
    possible output, and its special ids by role (``ROLES``; None where it has none).

    >>> vocab = TokenizerVocabulary.train_bpe(["abc abd abe " * 50], 270)  # 267: all the merges this text has
    >>> vocab.size, vocab.mask, vocab.decode(vocab.encode("abd abc"))
    (267, 4, 'abd abc')
    """

    kind = "tokenizer"

    def __init__(self, tokenizer, file: str = "tokenizer.json", specials: dict[str, int | None] | None = None,
                 data: bytes | None = None, settings: dict[str, bytes] | None = None):
        self.tokenizer, self.file = tokenizer, file
        self.data = data if data is not None else tokenizer.to_str(pretty=True).encode("utf-8")
        self.settings = settings or {}  # TOKENIZER_SETTINGS files found beside it, by name
        self.pad, self.start, self.eos, self.sep, self.mask, self.first, self.last = (
            (specials or {}).get(role) for role in ROLES)
        self.ends_text = self.eos  # a continuation stops at the end token, as transformers' generate does
        self.special_ids = sorted(i for i, token in tokenizer.get_added_tokens_decoder().items() if token.special)
        self._byte_lengths: Tensor | None = None

    @property
    def specials(self) -> dict[str, int | None]:
        return {role: getattr(self, role) for role in ROLES}

    @classmethod
    def load(cls, path: Path, config: dict | None = None, specials: dict | None = None) -> "TokenizerVocabulary":
        """Read ``path``; the special ids are ``specials`` (a checkpoint's), or found: from ``config`` (a model's
        ``config.json``: ``pad_token_id`` ...), then the ``tokenizer_config.json`` beside it, then the tokens'
        usual names."""
        from tokenizers import Tokenizer
        path = Path(path)
        try:
            if not path.exists():
                raise DataError(f"{shown(path)}: no such tokenizer file")
            data = read_regular(path, TOKENIZER_BYTES)  # a device, a FIFO or a 5 GB file is refused unread
            tokenizer = Tokenizer.from_str(data.decode("utf-8"))
        except DataError:
            raise
        except OSError as exc:
            raise DataError(f"{shown(path)}: {exc.strerror or exc}") from None
        except Exception as exc:  # tokenizers raises its own exception type for a foreign file
            raise DataError(f"{shown(path)}: not a readable tokenizer.json: {exc}") from None
        settings = {name: _setting(path.parent / name) for name in TOKENIZER_SETTINGS
                    if (path.parent / name).is_file()}
        if specials is None:
            specials = _find_specials(tokenizer, path.parent, config or {})
        return cls(tokenizer, path.name, specials, data, settings)

    @classmethod
    def train_bpe(cls, texts, size: int) -> "TokenizerVocabulary":
        """A byte-level BPE of ``size`` tokens (fewer when the text has fewer pairs to merge) learned from
        ``texts``; tfspec's five specials are its first ids, so batches read them where they always are."""
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
        smallest = len(SPECIALS) + 256
        if size > MAX_DIM:  # the trainer would allocate for all of them (bpe:1000000000 aborted the process)
            raise DataError(f"bpe:{size}: at most {MAX_DIM:,} tokens, the largest vocabulary a spec may embed")
        if size < smallest:
            raise DataError(f"bpe:{size}: a byte-level BPE needs at least {smallest} tokens "
                            f"({len(SPECIALS)} specials + 256 bytes)")
        tokenizer = Tokenizer(models.BPE())
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tokenizer.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=size, special_tokens=list(SPECIALS), show_progress=False,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
        tokenizer.train_from_iterator(texts, trainer)
        roles = dict(zip(ROLES, (PAD, BOS, EOS, SEP, MASK)))
        return cls(tokenizer, "tokenizer.json", roles)

    @property
    def size(self) -> int:
        return self.tokenizer.get_vocab_size(with_added_tokens=True)

    def is_special(self, ids: Tensor) -> Tensor:
        return torch.isin(ids, torch.tensor(self.special_ids, dtype=ids.dtype))

    def random_ids(self, shape, generator: torch.Generator) -> Tensor:
        return torch.randint(0, self.size, shape, generator=generator)  # as transformers' MLM collator does

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def encode_input(self, text: str) -> list[int]:
        """With the tokenizer's own special tokens (Llama's ``<s>``, T5's ``</s>``), as ``transformers`` does."""
        return self.tokenizer.encode(text).ids

    def decode(self, ids) -> str:
        return self.tokenizer.decode([int(i) for i in ids], skip_special_tokens=True)

    def output_ids(self, out: int, end: bool) -> Tensor:
        return torch.ones(out, dtype=torch.bool)

    def describe(self) -> str:
        return f"{self.file} ({self.size:,} tokens)"

    def needs(self) -> str:
        return f"the {self.size:,} tokens of {self.file}"

    def to_dict(self) -> dict:
        return {"kind": self.kind, "file": "tokenizer.json", "specials": self.specials}

    def byte_lengths(self) -> Tensor:
        """The UTF-8 bytes each id stands for (0 for special tokens): exact for a byte-level BPE (each character
        of a token is a byte) and byte-fallback tokens (``<0x0A>``); otherwise the bytes of the token decoded
        alone."""
        if self._byte_lengths is None:
            decoder = json.loads(self.data).get("decoder") or {}
            byte_level, specials = decoder.get("type") == "ByteLevel", set(self.special_ids)
            lengths = []
            for i in range(self.size):
                token = self.tokenizer.id_to_token(i)
                if i in specials or token is None:
                    lengths.append(0)
                elif byte_level:
                    lengths.append(len(token))
                elif re.fullmatch(r"<0x[0-9A-Fa-f]{2}>", token):
                    lengths.append(1)
                else:
                    lengths.append(len(self.tokenizer.decode([i], skip_special_tokens=False).encode("utf-8")))
            self._byte_lengths = torch.tensor(lengths)
        return self._byte_lengths

    def as_tokenizer(self):
        return self.tokenizer

    def tokenizer_json(self) -> bytes:
        """The file it was read from, byte for byte."""
        return self.data

    def files(self) -> dict[str, bytes]:
        """What a checkpoint keeps: the files it was read from (as ``tokenizer.json``, whatever its name was)."""
        return {"tokenizer.json": self.data, **self.settings}


def _find_specials(tokenizer, directory: Path, config: dict) -> dict[str, int | None]:
    """Each role's id: the model configuration's, else tokenizer_config.json's token, else a usual name's."""
    found: dict[str, int | None] = {role: None for role in ROLES}
    settings = {}
    try:
        settings = read_json(directory / "tokenizer_config.json", SETTINGS_BYTES)
    except (OSError, ValueError):
        pass  # no tokenizer_config.json: the names below decide
    special = {token.content: i for i, token in tokenizer.get_added_tokens_decoder().items() if token.special}
    for role in ROLE_SETTINGS:
        token = settings.get(ROLE_SETTINGS[role]) if isinstance(settings, dict) else None
        token = token.get("content") if isinstance(token, dict) else token
        if isinstance(token, str) and tokenizer.token_to_id(token) is not None:
            found[role] = tokenizer.token_to_id(token)
        else:
            found[role] = next((special[n] for n in _ROLE_NAMES[role] if n in special), None)
    start = "decoder_start_token_id" if isinstance(config.get("decoder_start_token_id"), int) else "bos_token_id"
    configured = {"pad": "pad_token_id", "start": start, "eos": "eos_token_id", "sep": "sep_token_id",
                  "first": "forced_bos_token_id", "last": "forced_eos_token_id"}
    try:  # what generation reads, which save_pretrained writes apart (it overrides config.json's)
        generation = read_json(directory / "generation_config.json", SETTINGS_BYTES)
        config = {**config, **{k: v for k, v in generation.items() if k in configured.values()}} \
            if isinstance(generation, dict) else config
    except (OSError, ValueError):
        pass  # none: config.json's ids decide
    size = tokenizer.get_vocab_size(with_added_tokens=True)
    for role, key in configured.items():  # ids past the tokenizer (GPT-2's 50256 in a small model) name nothing
        if isinstance(config.get(key), int) and 0 <= config[key] < size:
            found[role] = config[key]
    return found


def hugging_face_tokenizer(vocab) -> dict[str, bytes]:
    """``tokenizer.json`` and ``tokenizer_config.json`` for a Hugging Face model directory: ``transformers``'
    ``AutoTokenizer`` then reads ``vocab``'s ids and special tokens. A tokenizer's own settings files are kept."""
    tokenizer = vocab.as_tokenizer()
    files = {name: data for name, data in vocab.files().items() if name in TOKENIZER_SETTINGS}
    files["tokenizer.json"] = vocab.tokenizer_json()
    if "tokenizer_config.json" not in files:
        settings = {"tokenizer_class": "PreTrainedTokenizerFast"}
        settings.update({ROLE_SETTINGS[role]: tokenizer.id_to_token(getattr(vocab, role)) for role in ROLE_SETTINGS
                         if getattr(vocab, role) is not None})
        files["tokenizer_config.json"] = json.dumps(settings, indent=2).encode("utf-8")
    return files


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

    def rows(self, which: slice) -> "Batch":
        """The sequences ``which`` selects (a worker's share of a global batch); every input is batch-first."""
        return Batch({k: v[which] for k, v in self.inputs.items()}, self.labels[which])

    @property
    def tokens(self) -> int:
        """Positions with a loss: the batch's size in training tokens."""
        return int((self.labels != IGNORE).sum())


def seq2seq_batch(src: Tensor, tgt: Tensor, lengths: Tensor, padding: dict[str, bool],
                  tgt_lengths: Tensor | None = None, vocab: "Vocabulary | TokenizerVocabulary | None" = None) -> Batch:
    """Encoder-decoder: source -> start target, predicting target end; ``padding`` says which masks the model reads.

    ``lengths`` are the sources' (and the targets', unless ``tgt_lengths``); ``vocab`` names the start, end and
    padding ids (tfspec's specials by default)."""
    ids = vocab or Vocabulary("letters")
    tgt_lengths = lengths if tgt_lengths is None else tgt_lengths
    width, tgt_width = int(lengths.max()), int(tgt_lengths.max())
    src, tgt = src[:, :width], tgt[:, :tgt_width]
    filler = ids.pad if ids.pad is not None else 0  # under the padding mask and IGNORE: never read
    ended = torch.cat((tgt, torch.full((len(tgt), 1), filler)), dim=1).scatter(1, tgt_lengths[:, None], ids.eos)
    decoder_in = torch.cat((torch.full((len(tgt), 1), ids.start), tgt), dim=1)
    inputs = {"src": src, "tgt": decoder_in}
    if padding["src"]:
        inputs["src_padding_mask"] = torch.arange(width) >= lengths[:, None]
    if padding["tgt"]:
        inputs["tgt_padding_mask"] = torch.arange(tgt_width + 1) > tgt_lengths[:, None]
    return Batch(inputs, ended.masked_fill(torch.arange(tgt_width + 1) > tgt_lengths[:, None], IGNORE))


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


def mask_tokens(tokens: Tensor, generator: torch.Generator, vocab: "Vocabulary | TokenizerVocabulary",
                rate: float = 0.15) -> tuple[Tensor, Tensor]:
    """BERT's masking: each non-special token is chosen with probability ``rate``; a chosen one becomes the mask
    token (80%), a random token (10%) or stays (10%). Returns (inputs, labels), labels IGNORE where not chosen."""
    chosen = (torch.rand(tokens.shape, generator=generator) < rate) & ~vocab.is_special(tokens)
    action = torch.rand(tokens.shape, generator=generator)
    random_ids = vocab.random_ids(tokens.shape, generator)
    inputs = torch.where(chosen & (action < 0.8), vocab.mask, tokens)
    inputs = torch.where(chosen & (action >= 0.8) & (action < 0.9), random_ids, inputs)
    return inputs, tokens.masked_fill(~chosen, IGNORE)


def mlm_batch(tokens: Tensor, generator: torch.Generator, vocab, padding: bool) -> Batch:
    inputs, labels = mask_tokens(tokens, generator, vocab)
    model_inputs = {"tokens": inputs}
    if padding:
        model_inputs["padding_mask"] = (tokens == vocab.pad if vocab.pad is not None
                                        else torch.zeros_like(tokens, dtype=torch.bool))
    return Batch(model_inputs, labels)
