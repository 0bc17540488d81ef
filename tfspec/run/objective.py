"""What a model learns from its kind: batches of a task or a text, the loss, and held-out evaluation."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from ..errors import LengthError
from ..registry import INPUTS
from .config import TrainConfig
from .corpus import PairData, TextData, positions_in_documents
from .data import (BOS, EOS, EVAL, IGNORE, PAD, SEP, TRAIN, Batch, DataError, TaskData, Vocabulary, generator_for,
                   mlm_batch, prompted_batch, seq2seq_batch)
from .decoding import Continuation, Restricted, sample
from .distributed import World, all_sum, unwrap


# ---------------------------------------------------------------- the task a model learns
class Objective:
    """Makes batches for a model kind and data source, and evaluates on held-out data."""

    def __init__(self, model, config: TrainConfig, vocab=None, world: World = World()):
        """``vocab``: the vocabulary the weights already use (a resumed or fine-tuned run's); ``world``: the
        workers each global batch of ``config.batch`` rows is shared among."""
        spec = model.spec
        self.model, self.config, self.kind, self.world = model, config, spec.kind, world
        self.rows = config.batch
        if config.batch % world.size:
            raise DataError(f"--batch {config.batch} is the global batch, shared equally among {world.size} "
                            f"workers; make it a multiple of {world.size}")
        self.text = self.pairs = self.tasks = self.generated = None
        self.notes: list[str] = []
        if spec.head is None:
            shipped = ("; examples/bert_base_mlm.tfs is BERT-base with its masked-language-modelling head"
                       if spec.kind == "encoder-only" else "")
            raise DataError(f"{spec.name} has no head, so there are no logits to train; add one, e.g. "
                            f"`head tied(tokens)` (a pooler alone is not an output layer){shipped}")
        source, held_out = config.source(), config.eval_source()
        if source is None and (config.tokenizer is not None or held_out is not None):
            raise DataError(f"--{'tokenizer' if config.tokenizer else 'eval-data'} goes with --data; a task's "
                            "sequences are letters")
        embedding = spec.embedding(spec.stacks[0].embedding)
        if embedding.input is not None:  # pictures: the input kind's generated task (the digits), classified
            self.read_examples(embedding, spec, source, vocab)
            return
        stack = getattr(model, spec.stacks[0].role)
        # the run-time input that keeps packed documents apart, when the spec's masks read one
        self.documents_input = next((name for name, i in stack.inputs.items() if i.documents), None)
        if source is not None and spec.kind == "encoder-decoder":
            self.pairs = PairData.read(source, config.tokenizer, self.window(model), vocab, held_out)
            self.vocab = self.pairs.vocab
            if self.pairs.skipped:
                self.notes.append(f"left out {self.pairs.skipped} sentence pairs longer than {self.window(model)} "
                                  "tokens a side (--seq-len)")
        elif source is not None:
            if len(source.paths) == 2:
                raise DataError(f"--data {' '.join(source.paths)}: two aligned files are sentence pairs, for an "
                                f"encoder-decoder; {spec.name} is {spec.kind} and learns from one")
            self.text = TextData.read(source, config.tokenizer, self.window(model), vocab, held_out)
            self.vocab = self.text.vocab
            if self.text.documents > 1:
                self.notes.append(self._packing_note())
        else:
            if vocab is not None and vocab.kind != "letters":
                raise DataError(f"these weights read {vocab.describe()}, not a task's letters; "
                                "train them on a text: --data PATH")
            self.vocab = vocab or Vocabulary.letters(config.symbols)
            self.tasks = TaskData(config.task, self.vocab, config.min_len, config.max_len)
        self.check_specials()
        self.check_fits(model)
        encoder, decoder = getattr(model, "encoder", None), getattr(model, "decoder", None)
        self.padding = {  # which padding masks the model reads (it rejects one it would ignore)
            "src": encoder is not None and (encoder.masks_padding or (decoder is not None and decoder.memory_masks_padding)),
            "tgt": spec.kind == "encoder-decoder" and decoder.masks_padding}
        self.eval_set = [self.batch(EVAL, i) for i in range(math.ceil(config.eval_size / self.rows))]

    def read_examples(self, embedding, spec, source, vocab) -> None:
        """A model of an input kind's tensors (pictures) learns the task it generates (the digits, classified) at
        its size; its head's outputs are the classes."""
        kind, options = INPUTS.of(embedding.input)
        if source is not None or vocab is not None:
            raise DataError(f"{spec.name} reads {kind.what}: it trains on the generated {kind.task}, not on "
                            f"{'--data' if source is not None else 'the token vocabulary of these weights'}")
        if spec.kind != "encoder-only":
            raise DataError(f"{spec.name} reads {kind.what} into an encoder-decoder; the generated {kind.task} are "
                            "classified by an encoder alone, and tfspec train has no generated task with targets "
                            "to decode from them")
        if spec.head.out < kind.classes:
            raise DataError(f"the head has {spec.head.out} outputs, but the {kind.task} task has {kind.classes} "
                            f"classes; give it linear({kind.classes}) or more")
        problem = kind.task_problem(options)
        if problem is not None:
            raise DataError(problem.message)
        self.generated, self.vocab, self.padding = (kind, options), None, {}
        self.notes.append(kind.task_note(options))
        self.eval_set = [self.batch(EVAL, i) for i in range(math.ceil(self.config.eval_size / self.rows))]

    def _packing_note(self) -> str:
        from ..registry import MASKS

        packed = f"{self.text.documents:,} documents are packed into rows" + (
            " with the end token between them" if self.vocab.eos is not None else "")
        if self.documents_input is not None:
            return f"{packed}; each attends within itself ({self.documents_input}), positions restarting at 0"
        masks = [name for name in MASKS if any(i.documents for i in MASKS[name].inputs)]
        return (f"{packed}; attention crosses their boundaries, as in GPT-2 and nanoGPT (a mask that keeps each "
                f"to itself: {', '.join(masks)})")

    def check_specials(self) -> None:
        """The special ids this objective puts in batches exist in the vocabulary."""
        needed = {"encoder-only": ("mask",), "encoder-decoder": ("start", "eos")}.get(self.kind, ())
        missing = [role for role in needed if getattr(self.vocab, role) is None]
        if missing:
            if self.kind == "encoder-only":
                purpose, hint = "masked-language modelling", 'tokenizer_config.json\'s "mask_token", e.g. "[MASK]"'
            else:
                purpose, hint = "training an encoder-decoder", ("config.json's decoder_start_token_id and "
                                                                 "eos_token_id, or tokenizer_config.json's "
                                                                 "bos_token and eos_token")
            raise DataError(f"{self.vocab.describe()} has no {' or '.join(missing)} token, which {purpose} needs "
                            f"(named by {hint})")

    def window(self, model) -> int:
        role = model.spec.stacks[0].role
        limit = model.max_len[role]
        if self.config.seq_len is not None:
            return self.config.seq_len
        return min(256, limit) if limit else 256

    def lengths(self) -> dict[str, int]:
        """The longest input each stack sees."""
        c = self.config
        if self.pairs is not None:
            return {"encoder": self.window(self.model), "decoder": self.window(self.model)}
        if self.text is not None:
            return {self.model.spec.stacks[0].role: self.window(self.model)}
        if self.kind == "encoder-decoder":
            return {"encoder": c.max_len, "decoder": c.max_len + 1}
        if self.kind == "decoder-only":
            return {"decoder": 2 * c.max_len + 1}
        return {"encoder": 2 * c.max_len + 2}

    def check_fits(self, model) -> None:
        spec = model.spec
        for role, length in self.lengths().items():
            limit = model.max_len[role]
            if limit is not None and length > limit:
                what = "--seq-len" if self.config.data is not None else "--max-len"
                raise LengthError(f"sequences reach length {length} in the {role}, beyond its learned positions "
                                f"(learned({limit})); lower {what} or raise max_len in the spec")
        needed = self.vocab.size
        for name, embedding in model.embeddings.items():
            if embedding.vocab < needed:
                raise DataError(f"embedding '{name}' has vocab {embedding.vocab}, but this data needs {needed} ids "
                                f"({self.vocab.needs()}); raise its vocab")
        if spec.head.out < needed:
            raise DataError(f"the head has {spec.head.out} outputs, but this data needs {needed} "
                            f"({self.vocab.needs()})")

    def batch(self, stream: int, index: int, micro: int = 0) -> Batch:
        c = self.config
        generator = generator_for(c.seed, stream, index * c.accumulate + micro if stream == TRAIN else index)
        evaluation = stream == EVAL
        if self.generated is not None:  # (held out by their own stream of the generator)
            kind, options = self.generated
            given, labels = kind.examples_of(options, self.rows, generator)
            return Batch({kind.argument: given}, labels)
        if self.pairs is not None:
            src, tgt, src_lengths, tgt_lengths = self.pairs.batch(self.rows, generator, evaluation)
            return seq2seq_batch(src, tgt, src_lengths, self.padding, tgt_lengths, self.vocab)
        if self.text is not None:
            windows, documents = self.text.windows(self.rows, self.window(self.model), generator, evaluation)
            if self.kind == "decoder-only":
                batch = Batch({"tokens": windows[:, :-1]}, windows[:, 1:])
            else:
                batch = mlm_batch(windows[:, :-1], generator, self.vocab, self.padding["src"])
            if self.documents_input is not None:  # each document its own sequence, as if it had a row to itself
                documents = documents[:, :-1]
                batch.inputs.update({self.documents_input: documents, "position_ids": positions_in_documents(documents)})
            return batch
        src, tgt, lengths = self.tasks.pairs(self.rows, generator, evaluation)
        if self.kind == "encoder-decoder":
            return seq2seq_batch(src, tgt, lengths, self.padding)
        prompted = prompted_batch(src, tgt, lengths)
        if self.kind == "decoder-only":
            return prompted
        sequence = torch.cat((prompted.inputs["tokens"], prompted.labels[:, -1:].clamp(min=0)), dim=1)
        return mlm_batch(sequence, generator, self.vocab, self.padding["src"])

    def loss(self, model, batch: Batch, label_smoothing: float = 0.0):
        """The batch's cross-entropy, summed over its labelled positions (the trainer divides by them)."""
        # multi-token prediction trains on the labels further ahead: the same positions' labels, shifted
        ahead = {"labels": batch.labels} if unwrap(model).mtp is not None else {}
        logits = output_logits(model(**batch.inputs, **ahead))
        return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), batch.labels.flatten(),
                               ignore_index=IGNORE, label_smoothing=label_smoothing, reduction="sum")

    @property
    def unit(self) -> str:
        """What the log counts a second: tokens, or the examples an input kind makes (pictures)."""
        return self.generated[0].what if self.generated is not None else "tokens"

    # ------------------------------------------------------------ evaluation
    @torch.no_grad()
    def evaluate(self, model, device, autocast) -> dict[str, float]:
        """Held-out loss and token accuracy; exact match of greedy decoding for the tasks. Each worker evaluates
        its rows of the held-out batches and the sums are added up, so every worker gets the same figures."""
        model = unwrap(model)
        was_training = model.training
        model.eval()
        nll = correct = total = text_bytes = 0.0
        language_model = self.text is not None and self.kind == "decoder-only"
        byte_lengths = self.vocab.byte_lengths() if language_model else None
        for batch in self.eval_set:
            batch = batch.rows(self.world.rows(self.rows)).to(device)
            with autocast():
                logits = output_logits(model(**batch.inputs))
            labelled = batch.labels != IGNORE
            nll += F.cross_entropy(logits.float()[labelled], batch.labels[labelled], reduction="sum").item()
            correct += (logits.argmax(-1)[labelled] == batch.labels[labelled]).sum().item()
            total += labelled.sum().item()
            if language_model:
                text_bytes += byte_lengths[batch.labels[labelled].cpu()].sum().item()
        nll, correct, total, text_bytes = all_sum([nll, correct, total, text_bytes], self.world)
        if self.generated is not None:  # one label per picture
            model.train(was_training)
            return {"eval_loss": nll / total, "accuracy": correct / total}
        metrics = {"eval_loss": nll / total, "token_accuracy": correct / total}
        if language_model:  # per token, and per byte of text: comparable across tokenizers
            metrics["perplexity"] = math.exp(min(nll / total, 700.0))
            metrics["bits_per_byte"] = nll / math.log(2) / max(text_bytes, 1.0)
        if self.tasks is not None and self.kind != "encoder-only":
            metrics["exact_match"] = self.exact_match(model, device, autocast)
        model.train(was_training)
        return metrics

    def exact_match(self, model, device, autocast) -> float:
        examples = self.decode_examples(model, device, autocast)
        return sum(e["prediction"] == e["target"] for e in examples) / len(examples)

    @torch.no_grad()
    def decode_examples(self, model, device, autocast, count: int | None = None, draw: int = 0) -> list[dict]:
        """Greedy decoding of held-out sources: [{"source", "target", "prediction"}] (as text).

        ``draw`` 0 is the set the periodic evaluation uses; another number draws
        other held-out sequences (a final report independent of early stopping).
        """
        count = count or self.config.eval_size
        src, tgt, lengths = self.tasks.pairs(count, generator_for(self.config.seed, EVAL, (1 << 20) + draw), True)
        predictions: list[list[int]] = [[] for _ in range(count)]
        allowed = self.vocab.output_ids(model.spec.head.out, end=True)
        with autocast():
            if self.kind == "encoder-decoder":
                for rows in torch.arange(count).split(self.config.batch):
                    width = int(lengths[rows].max())
                    s = src[rows, :width].to(device)
                    steps = Restricted(Continuation(model, s, s == PAD if self.padding["src"] else None), allowed)
                    out = sample(steps, torch.full((len(rows), 1), BOS, device=device), self.config.max_len + 1, EOS)
                    for r, p in zip(rows.tolist(), out):
                        predictions[r] = p
            else:  # one prompt length per batch: "source SEP"
                for n in lengths.unique().tolist():
                    rows = (lengths == n).nonzero().squeeze(1)
                    prompt = torch.cat((src[rows, :n], torch.full((len(rows), 1), SEP)), dim=1).to(device)
                    out = sample(Restricted(Continuation(model), allowed), prompt, n + 1, EOS)
                    for r, p in zip(rows.tolist(), out):
                        predictions[r] = p
        decode = self.vocab.decode
        return [{"source": decode(src[i, : lengths[i]].tolist()), "target": decode(tgt[i, : lengths[i]].tolist()),
                 "prediction": decode(predictions[i] + [EOS])} for i in range(count)]


def output_logits(out):
    return out[0] if isinstance(out, tuple) else out
