"""Tokenizers: ``train --tokenizer bytes|chars|bpe:N|PATH``, saved in every checkpoint, used by generate and
export; sentence pairs for encoder-decoders; ``train --init`` refusals. Hugging Face's ``tokenizers`` and
``transformers`` are the references: an exported model's tokenizer must give the ids tfspec trained with.
"""

from __future__ import annotations

import json

import pytest
import torch

import tfspec
import tfspec.run.checkpoint as ckpt
from tfspec.run.corpus import PairData, Source, TextData
from tfspec.run.data import (EOS, IGNORE, MASK, SPECIALS, DataError, TokenizerVocabulary, Vocabulary, mask_tokens,
                         seq2seq_batch)
from tfspec.run.train import TrainConfig, resume, train
from numerics import assert_close

T = pytest.importorskip("transformers")
T.logging.set_verbosity_error()

TEXT = ("A spec says what a model is: sublayers, residual wiring, norms, masks and positions. "
        "The compiler turns it into a module; the trainer teaches it; héllo wörld. ") * 40
GPT = {"layers": 1, "d_model": 32, "heads": 2, "context": 32}
GPT_SPEC = "examples/gpt2_small.tfs"


def quiet(*_):
    pass


class Result:
    """What a command did: ``returncode``, ``stdout``, ``stderr`` (as subprocess gives them)."""

    def __init__(self, returncode: int, stdout: str, stderr: str):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


@pytest.fixture
def cli(capsys):
    """The CLI in this process: a chain of commands without a Python start-up each (an uncaught exception
    fails the test, as a traceback would)."""
    from tfspec.cli import main

    def run(*args) -> Result:
        code = main([str(a) for a in args])
        out, err = capsys.readouterr()
        return Result(code, out, err)
    return run


def sets(values: dict) -> list[str]:
    return [a for k, v in values.items() for a in ("--set", f"{k}={v}")]


@pytest.fixture
def text(tmp_path):
    path = tmp_path / "text.txt"
    path.write_text(TEXT, encoding="utf-8")
    return path


def word_tokenizer(path, specials=("[PAD]", "[UNK]", "[MASK]")):
    """A word-level tokenizer.json over TEXT's words, the specials first."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    words = sorted(set(TEXT.replace(".", " ").replace(",", " ").replace(":", " ").replace(";", " ").split()))
    vocab = {w: i for i, w in enumerate([*specials, *words, ".", ",", ":", ";"])}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.add_special_tokens(list(specials))
    tokenizer.save(str(path))
    return tokenizer


# ---------------------------------------------------------------- vocabularies
def test_a_learned_bpe_has_the_specials_first_and_round_trips_text():
    vocab = TokenizerVocabulary.train_bpe([TEXT], 300)
    assert vocab.size == 300
    assert [vocab.tokenizer.id_to_token(i) for i in range(len(SPECIALS))] == list(SPECIALS)
    assert (vocab.pad, vocab.start, vocab.eos, vocab.mask) == (0, 1, 2, MASK)
    assert vocab.decode(vocab.encode(TEXT[:200])) == TEXT[:200]
    assert len(vocab.encode(TEXT)) < 0.7 * len(TEXT.encode())  # 39 merges: fewer tokens than bytes
    again = TokenizerVocabulary.train_bpe([TEXT], 300)  # the same text gives the same tokenizer
    assert again.tokenizer_json() == vocab.tokenizer_json()


@pytest.mark.parametrize("kind", ["bytes", "chars"])
def test_tfspec_vocabularies_become_tokenizers_with_the_same_ids(kind):
    vocab = Vocabulary("bytes") if kind == "bytes" else Vocabulary("chars", tuple(sorted(set(TEXT + "\n"))))
    sample = TEXT[:120] + "\n" + TEXT[-40:]
    tokenizer = vocab.as_tokenizer()
    assert tokenizer.encode(sample).ids == vocab.encode(sample)
    assert tokenizer.decode(vocab.encode(sample)) == sample
    hf = T.PreTrainedTokenizerFast(tokenizer_object=tokenizer)
    assert hf(sample).input_ids == vocab.encode(sample)


def test_special_ids_come_from_the_config_then_tokenizer_config_then_names(tmp_path):
    word_tokenizer(tmp_path / "tokenizer.json", specials=("<pad>", "</s>", "[UNK]", "[MASK]", "<special>"))
    vocab = TokenizerVocabulary.load(tmp_path / "tokenizer.json")
    assert (vocab.pad, vocab.eos, vocab.mask, vocab.start) == (0, 1, 3, None)  # by their usual names
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"mask_token": "<special>", "eos_token": "[UNK]"}))
    vocab = TokenizerVocabulary.load(tmp_path / "tokenizer.json")
    assert (vocab.mask, vocab.eos) == (4, 2)
    vocab = TokenizerVocabulary.load(tmp_path / "tokenizer.json", {"eos_token_id": 0, "decoder_start_token_id": 1,
                                                                  "pad_token_id": 50256})
    assert (vocab.eos, vocab.start, vocab.pad) == (0, 1, 0)  # 50256 is past the tokenizer: not an id


def test_masking_with_a_tokenizer_never_masks_its_special_tokens():
    vocab = TokenizerVocabulary.train_bpe([TEXT], 300)
    tokens = torch.tensor([vocab.encode(TEXT[:400])])
    tokens[0, ::7] = 1  # specials scattered through the text
    inputs, labels = mask_tokens(tokens, torch.Generator().manual_seed(0), vocab, rate=0.5)
    chosen = labels != IGNORE
    assert chosen.sum() > 20 and not chosen[tokens == 1].any()
    assert (inputs[chosen] == vocab.mask).float().mean() > 0.6
    assert torch.equal(inputs[~chosen], tokens[~chosen])


# ---------------------------------------------------------------- training with a tokenizer
def test_bpe_training_saves_the_tokenizer_in_every_checkpoint_and_resumes_with_it(tmp_path, text):
    config = TrainConfig(data=[str(text)], tokenizer="bpe:300", seq_len=16, steps=6, batch=4, eval_size=4,
                         eval_every=3, save_every=3, lr=3e-3, warmup=1)
    whole = train(GPT_SPEC, config, tmp_path / "whole", overrides={**GPT, "vocab": 300}, progress=False, log=quiet)
    first = train(GPT_SPEC, config, tmp_path / "run", overrides={**GPT, "vocab": 300}, stop_after=3,
                  progress=False, log=quiet)
    tokenizer = (first.checkpoint / "tokenizer.json").read_bytes()
    assert ckpt.load(first.checkpoint).meta["vocab"]["kind"] == "tokenizer"
    second = resume(tmp_path / "run", progress=False, log=quiet)
    assert (second.checkpoint / "tokenizer.json").read_bytes() == tokenizer
    assert first.losses + second.losses == whole.losses  # the resumed run reads the same ids
    assert second.objective.vocab.size == 300


def test_a_run_directory_reads_as_its_spec_with_its_overrides(tmp_path, text, tfspec_cli):
    import tfspec
    config = TrainConfig(data=[str(text)], seq_len=16, steps=1, batch=2, eval_size=2)
    run = train(GPT_SPEC, config, tmp_path / "run", overrides={**GPT, "vocab": 261}, progress=False, log=quiet)
    spec = tfspec.load(tmp_path / "run")
    assert spec == ckpt.load(tmp_path / "run").spec() == tfspec.load(run.checkpoint)
    assert spec.parameter_count() == sum(p.numel() for p in run.model.parameters())
    assert tfspec.load(tmp_path / "run", overrides={"layers": 2}).parameter_count() > spec.parameter_count()
    summary = tfspec_cli("summary", str(tmp_path / "run"), "--seq-len", "16")
    assert summary.returncode == 0 and f"{spec.parameter_count():,}" in summary.stdout
    empty = tfspec_cli("summary", str(tmp_path))
    assert empty.returncode == 1 and "is a directory, not a spec file nor a tfspec run" in empty.stderr


def test_a_tokenizer_file_gives_the_training_ids(tmp_path, text):
    tokenizer = word_tokenizer(tmp_path / "tokenizer.json")
    data = TextData.read(Source((str(text),)), str(tmp_path / "tokenizer.json"), 16)
    assert data.train.ids.tolist() == tokenizer.encode(TEXT).ids[: len(data.train)]
    assert data.vocab.size == tokenizer.get_vocab_size()


def test_a_tokenizer_of_any_name_is_kept_as_the_checkpoints_tokenizer_json(tmp_path, text):
    word_tokenizer(tmp_path / "spec.tfs")  # a name a checkpoint uses for something else
    (tmp_path / "tokenizer_config.json").write_text('{"mask_token": "[MASK]"}')
    config = TrainConfig(data=[str(text)], tokenizer=str(tmp_path / "spec.tfs"), seq_len=16, steps=1, batch=2,
                         eval_size=2)
    run = train(GPT_SPEC, config, tmp_path / "run", overrides={**GPT, "vocab": 100}, progress=False, log=quiet)
    assert (run.checkpoint / "tokenizer.json").read_bytes() == (tmp_path / "spec.tfs").read_bytes()
    assert (run.checkpoint / "tokenizer_config.json").read_text() == '{"mask_token": "[MASK]"}'
    assert ckpt.load(run.checkpoint).spec().name == "gpt2_small"  # the spec is still the spec


def test_generate_and_export_use_the_trained_tokenizer(tmp_path, text, cli):
    run = tmp_path / "run"
    trained = cli("train", GPT_SPEC, *sets({**GPT, "vocab": 300}), "--data", str(text), "--tokenizer",
                         "bpe:300", "--seq-len", "16", "--steps", "30", "--batch", "8", "--eval-size", "8",
                         "--lr", "3e-3", "--no-progress", "--out", str(run))
    assert trained.returncode == 0, trained.stderr
    generated = cli("generate", str(run), "--input", "The compiler", "--max-new", "8")
    assert generated.returncode == 0, generated.stderr
    exported = cli("export", str(run), "--to", "hf", "-o", str(tmp_path / "hf"))
    assert exported.returncode == 0, exported.stderr
    assert "tokenizer.json" in exported.stdout
    hf_tokenizer = T.AutoTokenizer.from_pretrained(tmp_path / "hf")
    model = T.AutoModelForCausalLM.from_pretrained(tmp_path / "hf").eval()
    ids = hf_tokenizer("The compiler", return_tensors="pt").input_ids
    assert ids[0].tolist() == TokenizerVocabulary.load(run / "checkpoints" / "step-0000030" / "tokenizer.json"
                                                       ).encode("The compiler")
    with torch.no_grad():
        out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=8, do_sample=False)
    continuation = hf_tokenizer.decode(out[0, ids.shape[1]:], skip_special_tokens=True)
    assert generated.stdout.splitlines()[-1] == "The compiler" + continuation


def test_a_byte_level_run_exports_a_tokenizer_transformers_reads(tmp_path, text):
    from tfspec.cli import main
    config = TrainConfig(data=[str(text)], seq_len=16, steps=2, batch=4, eval_size=4, eval_every=2)
    train(GPT_SPEC, config, tmp_path / "run", overrides={**GPT, "vocab": 261}, progress=False, log=quiet)
    assert main(["export", str(tmp_path / "run"), "--to", "hf", "-o", str(tmp_path / "hf")]) == 0
    hf_tokenizer = T.AutoTokenizer.from_pretrained(tmp_path / "hf")
    assert hf_tokenizer("héllo wörld").input_ids == Vocabulary("bytes").encode("héllo wörld")
    assert hf_tokenizer.pad_token == "<pad>" and hf_tokenizer.eos_token == "<eos>"
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["eos_token_id"] == EOS


# ---------------------------------------------------------------- sentence pairs
def test_pairs_are_read_encoded_and_held_out(tmp_path):
    path = tmp_path / "pairs.tsv"
    lines = [f"{'ab' * (i % 5 + 1)}\t{'ba' * (i % 3 + 1)}" for i in range(40)] + ["x" * 50 + "\ty"]
    path.write_text("\n".join(lines) + "\n\n")
    data = PairData.read(Source((str(path),)), "chars", 12)
    assert data.skipped == 1  # the pair with 50 source characters
    assert len(data.train_pairs) == 37 and len(data.eval_pairs) == 3  # the last tenth of 41, less the long one
    assert data.train_pairs[0] == (tuple(data.vocab.encode("ab")), tuple(data.vocab.encode("ba")))
    src, tgt, src_lengths, tgt_lengths = data.batch(8, torch.Generator().manual_seed(0), evaluation=False)
    batch = seq2seq_batch(src, tgt, src_lengths, {"src": True, "tgt": True}, tgt_lengths, data.vocab)
    row, n = 0, int(tgt_lengths[0])
    assert batch.inputs["tgt"][row, 0] == data.vocab.start
    assert batch.labels[row, :n].tolist() == tgt[row, :n].tolist() and batch.labels[row, n] == data.vocab.eos
    assert (batch.labels[row, n + 1:] == IGNORE).all()
    assert batch.inputs["src_padding_mask"][row].tolist() == [i >= src_lengths[row] for i in range(src.shape[1])]


@pytest.mark.parametrize("content, message", [
    ("one line without a tab\n" * 3, "pairs.tsv:1: an encoder-decoder learns from lines of 'source<TAB>target'"),
    ("a\tb\tc\n" * 3, "pairs.tsv:1:"),
    ("a\tb\n\n\n", "1 sentence pair; give at least 2"),
])
def test_bad_pair_files_are_named_with_the_line(tmp_path, content, message):
    path = tmp_path / "pairs.tsv"
    path.write_text(content)
    with pytest.raises(DataError, match=message.replace("(", r"\(")):
        PairData.read(Source((str(path),)), "chars", 12)


def test_an_encoder_decoder_learns_sentence_pairs(tmp_path):
    words = sorted(set(TEXT.lower().replace(".", "").replace(",", "").replace(":", "").replace(";", "").split()))
    path = tmp_path / "pairs.tsv"
    path.write_text("".join(f"{w}\t{w[::-1]}\n" for w in words * 4))
    config = TrainConfig(data=[str(path)], tokenizer="chars", steps=120, batch=16, lr=3e-3, warmup=10, eval_size=32,
                         eval_every=120, label_smoothing=0.0)
    run = train("examples/vaswani_base.tfs", config, None, overrides={"layers": 1, "d_model": 32, "heads": 2,
                                                                      "d_ff": 64, "vocab": 40}, progress=False,
                log=quiet)
    assert sum(run.losses[-10:]) / 10 < sum(run.losses[:10]) / 10 - 1.0
    assert run.evaluations[-1]["token_accuracy"] > 0.5


# ---------------------------------------------------------------- refusals
TOKENIZER_ERRORS = [
    (["--tokenizer", "bpe:10"], "bpe:10: a byte-level BPE needs at least 261 tokens", 1),
    (["--tokenizer", "bpe:many"], "bpe:N takes the number of tokens", 2),
    (["--tokenizer", "missing/tokenizer.json"], "missing/tokenizer.json: no such tokenizer file", 1),
    (["--tokenizer", "bpe:340"], "has vocab 300, but this data needs 340 ids (the 340 tokens of tokenizer.json)", 1),
]


def test_tokenizer_errors(tmp_path, text, tfspec_cli):
    results = tfspec_cli.many(*(("train", GPT_SPEC, *sets({**GPT, "vocab": 300}), "--data", str(text), "--seq-len",
                                 "16", "--steps", "1", *args, "--out", str(tmp_path / f"run{i}"))
                                for i, (args, _, _) in enumerate(TOKENIZER_ERRORS)))
    for i, ((args, message, code), result) in enumerate(zip(TOKENIZER_ERRORS, results)):
        assert result.returncode == code and message in result.stderr, (args, result.stderr)
        assert "Traceback" not in result.stderr and not (tmp_path / f"run{i}" / "latest").exists()


def test_a_tokenizer_that_is_not_one_is_refused(tmp_path, text):
    (tmp_path / "tokenizer.json").write_text('{"not": "a tokenizer"}')
    with pytest.raises(DataError, match="not a readable tokenizer.json"):
        TextData.read(Source((str(text),)), str(tmp_path / "tokenizer.json"), 16)


def test_masked_language_modelling_needs_a_mask_token(tmp_path, text):
    word_tokenizer(tmp_path / "tokenizer.json", specials=("[PAD]", "[UNK]"))
    spec = """model mlm
        embedding tokens { vocab 100; dim 32; position learned(32) }
        encoder x 1 { attention self heads=2 mask=padding; feedforward d_ff=64 }
        head tied(tokens)"""
    config = TrainConfig(data=[str(text)], tokenizer=str(tmp_path / "tokenizer.json"), seq_len=16, steps=1)
    with pytest.raises(DataError, match="has no mask token, which masked-language modelling needs"):
        train(spec, config, None, progress=False, log=quiet)


def test_an_encoder_decoder_needs_start_and_end_tokens(tmp_path):
    word_tokenizer(tmp_path / "tokenizer.json", specials=("[PAD]", "[UNK]"))
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("a spec says\twhat a model is\n" * 10)
    config = TrainConfig(data=[str(pairs)], tokenizer=str(tmp_path / "tokenizer.json"), steps=1)
    with pytest.raises(DataError, match="has no start or eos token, which training an encoder-decoder needs "
                                        r"\(named by config.json's decoder_start_token_id"):
        train("examples/vaswani_base.tfs", config, None, overrides={"layers": 1, "d_model": 32, "heads": 2,
                                                                    "d_ff": 64, "vocab": 100},
              progress=False, log=quiet)


def test_init_refusals(tmp_path, text, cli):
    run = tmp_path / "run"
    config = TrainConfig(data=[str(text)], tokenizer="bpe:300", seq_len=16, steps=1, batch=2, eval_size=2)
    train(GPT_SPEC, config, run, overrides={**GPT, "vocab": 300}, progress=False, log=quiet)
    base = ["train", "--data", str(text), "--seq-len", "16", "--steps", "1"]

    again = cli(*base, "--init", str(run), "--tokenizer", "bytes", "--out", str(tmp_path / "a"))
    assert again.returncode == 1 and "come with their vocabulary (tokenizer.json (300 tokens)); drop --tokenizer" \
        in again.stderr

    bigger = cli(*base, GPT_SPEC, *sets({**GPT, "vocab": 300, "d_model": 48}), "--init", str(run),
                        "--out", str(tmp_path / "b"))
    assert bigger.returncode == 1 and "its weights do not fit" in bigger.stderr and "shapes differ" in bigger.stderr

    nowhere = cli(*base, "--init", str(tmp_path / "nowhere"), "--out", str(tmp_path / "c"))
    assert nowhere.returncode == 1 and "no such run, checkpoint or Hugging Face model directory" in nowhere.stderr

    directory = tmp_path / "hf"
    T.GPT2LMHeadModel(T.GPT2Config(vocab_size=300, n_embd=32, n_layer=1, n_head=2, n_positions=32)).save_pretrained(
        directory)
    untokenized = cli(*base, "--init", str(directory), "--out", str(tmp_path / "d"))
    assert untokenized.returncode == 1 and "come without a tokenizer" in untokenized.stderr

    task = cli("train", "--init", str(run), "--steps", "1", "--out", str(tmp_path / "e"))
    assert task.returncode == 1 and "train them on a text: --data PATH" in task.stderr

    for result in (again, bigger, nowhere, untokenized, task):
        assert "Traceback" not in result.stderr


def test_init_from_a_hugging_face_directory_starts_from_its_weights_and_tokenizer(tmp_path, text):
    directory = tmp_path / "hf"
    torch.manual_seed(0)
    reference = T.GPT2LMHeadModel(T.GPT2Config(vocab_size=100, n_embd=32, n_layer=1, n_head=2, n_positions=32))
    reference.save_pretrained(directory)
    tokenizer = word_tokenizer(directory / "tokenizer.json")
    config = TrainConfig(data=[str(text)], init=str(directory), seq_len=16, steps=1, batch=2, eval_size=2, lr=1e-6,
                         warmup=1)
    # the run stage reads runs and checkpoints; a Hugging Face directory is the interop stage's, which tfspec.train asks
    with pytest.raises(DataError, match="a Hugging Face model directory; read it with tfspec.interop.initial"):
        train(None, config, tmp_path / "refused", progress=False, log=quiet)
    assert not (tmp_path / "refused").exists()
    run = tfspec.train(None, config, tmp_path / "run", progress=False, log=quiet)
    assert run.objective.text.train.ids[:20].tolist() == tokenizer.encode(TEXT).ids[:20]  # the directory's tokens
    assert (run.checkpoint / "tokenizer.json").read_bytes() == (directory / "tokenizer.json").read_bytes()
    theirs = reference.transformer.wte.weight.detach()
    ours = ckpt.load(run.checkpoint).weights["embeddings.tokens.tokens.weight"]
    assert_close(ours, theirs, 1e-4)  # one step at lr 1e-6 from the checkpoint's weights
