"""What a model of towers learns from ``tfspec train``. Two joined by a contrastive head learn to match the
examples an input kind generates (pictures of digits) with their classes' names, written in letters (CLIP's task,
on data that needs no download); two joined by a connector, to answer with the name after the picture's image
tokens (``AnsweringObjective``: a vision-language model's).

Each batch pairs ``rows`` generated examples with the names of their classes (``seven``, then the end token, then
padding); the loss is the contrastive head's. Held out: that loss, and the accuracy of choosing each example's
name among all the classes' names (CLIP's zero-shot classification). Batches are pure functions of
``(seed, stream, index)``, as every task's, so a resumed run sees the batches an uninterrupted one would.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from ..registry import INPUTS, POOLS
from .config import TrainConfig
from .data import EOS, EVAL, IGNORE, PAD, SEP, Batch, DataError, Vocabulary, generator_for
from .distributed import World, unwrap

NUMBER_NAMES = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")


class PairedObjective:
    """The generated pairs of a model of towers (see the module's docstring); the trainer asks it what it asks
    ``objective.Objective``: batches, the loss of one, held-out metrics, notes and the vocabulary."""

    generated = tasks = text = pairs = None

    def __init__(self, model, config: TrainConfig, vocab=None, world: World = World()):
        spec = model.spec
        self.model, self.config, self.kind, self.world = model, config, spec.kind, world
        self.rows = config.batch
        if spec.contrastive is None:  # (a connector's towers learn AnsweringObjective's task)
            raise DataError(f"{spec.name} is towers without a contrastive head: tfspec train trains two towers "
                            "joined by one (contrastive A B)")
        if world.size > 1:
            raise DataError("the contrastive loss compares every pair of a batch, which one worker holds: train a "
                            "model of towers with one worker (no --nproc)")
        if config.source() is not None or config.tokenizer is not None:
            raise DataError(f"{spec.name} is two towers: it trains on generated examples paired with their "
                            "classes' names, not on --data")
        readers = {t.name: t.spec.embedding(t.spec.stacks[0].embedding).input for t in spec.towers}
        examples = [name for name in spec.contrastive.towers if readers[name] is not None]
        texts = [name for name in spec.contrastive.towers if readers[name] is None]
        if len(examples) != 1 or len(texts) != 1:
            raise DataError(f"{spec.name}'s contrastive head joins {' and '.join(spec.contrastive.towers)}; tfspec "
                            "train pairs a tower reading generated examples (pictures) with one reading token ids")
        self.examples_tower, self.text_tower = examples[0], texts[0]
        self.input_kind = INPUTS.of(readers[self.examples_tower])
        kind, options = self.input_kind
        problem = kind.task_problem(options)
        if problem is not None:
            raise DataError(problem.message)
        if kind.classes > len(NUMBER_NAMES):
            raise DataError(f"the generated {kind.task} have {kind.classes} classes; tfspec names ten")
        if vocab is not None and vocab.kind != "letters":
            raise DataError(f"these weights read {vocab.describe()}, not the letters of the classes' names")
        self.vocab = vocab or Vocabulary.letters(26)
        self.names = NUMBER_NAMES[:kind.classes]
        self.width = max(map(len, self.names)) + 1  # each name and its end token
        self.names_ids, self.names_padding = self._encoded(self.names)
        self._check_text_tower(model)
        self.notes = [f"{kind.task_note(options)}, each paired with its class's name ({', '.join(self.names[:3])}, "
                      f"...) for the contrastive head ({spec.contrastive.loss}); held out: the accuracy of choosing "
                      "each example's name among all of them"]
        self.eval_set = [self.batch(EVAL, i) for i in range(math.ceil(config.eval_size / self.rows))]

    def _encoded(self, names) -> tuple[Tensor, Tensor]:
        """Each name's letters, the end token, then padding: ids and the padding mask ``(len(names), width)``."""
        ids = torch.full((len(names), self.width), PAD, dtype=torch.long)
        for row, name in enumerate(names):
            ids[row, :len(name) + 1] = torch.tensor(self.vocab.encode(name) + [EOS])
        return ids, ids == PAD

    def _check_text_tower(self, model) -> None:
        tower = model.towers[self.text_tower]
        spec = tower.spec
        needed = self.vocab.size
        if tower.embeddings[tower.stack_embedding[spec.stacks[0].role]].vocab < needed:
            raise DataError(f"tower '{self.text_tower}' reads {needed} ids ({self.vocab.needs()}), the letters of the "
                            "classes' names: raise its vocab")
        limit = tower.max_len[spec.stacks[0].role]
        if limit is not None and limit < self.width:
            raise DataError(f"the classes' names take {self.width} positions (the longest and its end token), "
                            f"beyond tower '{self.text_tower}''s learned({limit})")
        pool = spec.head.pool
        variant, options = POOLS.of(pool)
        if variant.reads_ids and variant.token(options) != EOS:
            raise DataError(f"tower '{self.text_tower}' pools at {pool}: a name's end token is {EOS}, so "
                            f"pool=token({EOS}) reads it (or pool=last, first, mean)")
        self.text_padding = getattr(tower, spec.stacks[0].role).masks_padding

    @property
    def unit(self) -> str:
        """What the log counts a second: the pairs."""
        return f"{self.input_kind[0].what} and names"

    def lengths(self) -> dict[str, int]:
        """The sequence each tower reads."""
        kind, options = self.input_kind
        return {self.examples_tower: kind.length(options), self.text_tower: self.width}

    def _inputs(self, examples: Tensor, labels: Tensor) -> dict[str, Tensor]:
        inputs = {self.examples_tower: examples, self.text_tower: self.names_ids[labels]}
        if self.text_padding:
            inputs[f"{self.text_tower}_padding_mask"] = self.names_padding[labels]
        return inputs

    def batch(self, stream: int, index: int, micro: int = 0) -> Batch:
        c = self.config
        generator = generator_for(c.seed, stream, index * c.accumulate + micro if stream != EVAL else index)
        kind, options = self.input_kind
        examples, labels = kind.examples_of(options, self.rows, generator)
        return Batch(self._inputs(examples, labels), labels)

    def loss(self, model, batch: Batch, label_smoothing: float = 0.0) -> Tensor:
        """The contrastive loss of the batch's pairs, summed over its rows (the trainer divides by them)."""
        out = model(**batch.inputs)
        return unwrap(model).loss(out).float() * batch.labels.shape[0]

    @torch.no_grad()
    def evaluate(self, model, device, autocast) -> dict[str, float]:
        """Held-out contrastive loss, and the accuracy of choosing each example's name among all the names."""
        model = unwrap(model)
        was_training = model.training
        model.eval()
        names = {"input": self.names_ids.to(device)}
        if self.text_padding:
            names["padding_mask"] = self.names_padding.to(device)
        total = correct = loss = 0.0
        with autocast():
            for batch in self.eval_set:
                batch = batch.to(device)
                loss += model.loss(model(**batch.inputs)).float().item() * len(batch.labels)
                texts = model.tower(self.text_tower, **names)
                examples = model.tower(self.examples_tower, input=batch.inputs[self.examples_tower])
                first, second = (texts, examples) if model.joined[0] == self.text_tower else (examples, texts)
                logits = model.contrastive(first, second).logits
                by_example = logits.t() if model.joined[0] == self.text_tower else logits  # (examples, names)
                correct += (by_example.argmax(-1) == batch.labels).sum().item()
                total += len(batch.labels)
        model.train(was_training)
        return {"eval_loss": loss / total, "accuracy": correct / total}


class AnsweringObjective:
    """What a model of towers joined by a connector learns from ``tfspec train``: to answer with the name of the
    class of the example an input kind generates (the digit drawn in a picture). Each row is the picture's image
    tokens, the separator, then the name and the end token; the loss is the decoder's cross-entropy on the name
    and its end. Held out: the answer's token accuracy, and the share of answers right in every token
    (``exact_match``: what greedy decoding then writes, token for token)."""

    generated = tasks = text = pairs = None

    def __init__(self, model, config: TrainConfig, vocab=None, world: World = World()):
        spec = model.spec
        self.model, self.config, self.kind, self.world = model, config, spec.kind, world
        self.rows = config.batch
        if config.source() is not None or config.tokenizer is not None:
            raise DataError(f"{spec.name} is towers joined by a connector: it trains on generated examples and "
                            "their classes' names, not on --data")
        if world.size > 1:
            raise DataError("train a model of towers with one worker (no --nproc)")
        connector = spec.connectors[0]
        self.source, self.target, self.image_token = connector.source, connector.target, connector.image_token
        kind, options = self.input_kind = INPUTS.of(spec.tower(self.source).embeddings[0].input)
        problem = kind.task_problem(options)
        if problem is not None:
            raise DataError(problem.message)
        if vocab is not None and vocab.kind != "letters":
            raise DataError(f"these weights read {vocab.describe()}, not the letters of the classes' names")
        self.vocab = vocab or Vocabulary.letters(26)
        if self.image_token < self.vocab.size:
            raise DataError(f"image_token {self.image_token} is among the letters' ids (0-{self.vocab.size - 1}: "
                            f"{self.vocab.needs()}); give the connector an id after them (image_token="
                            f"{self.vocab.size} or more)")
        self.names = NUMBER_NAMES[:kind.classes]
        self.pictures = connector.vectors(kind.length(options))
        self.width = self.pictures + 1 + max(map(len, self.names)) + 1  # image tokens, SEP, a name, its end
        tower = model.towers[self.target]
        limit = tower.max_len[tower.spec.stacks[-1].role]
        if limit is not None and limit < self.width:
            raise DataError(f"a row takes {self.width} positions ({self.pictures} image tokens, the separator, the "
                            f"longest name and its end), beyond tower '{self.target}''s learned({limit})")
        self.notes = [f"{kind.task_note(options)}; tower {self.target} answers with the digit's name after its "
                      f"{self.pictures} image tokens"]
        self.eval_set = [self.batch(EVAL, i) for i in range(math.ceil(config.eval_size / self.rows))]

    unit = property(lambda self: f"{self.input_kind[0].what}")

    def lengths(self) -> dict[str, int]:
        kind, options = self.input_kind
        return {self.source: kind.length(options), self.target: self.width}

    def batch(self, stream: int, index: int, micro: int = 0) -> Batch:
        c = self.config
        generator = generator_for(c.seed, stream, index * c.accumulate + micro if stream != EVAL else index)
        kind, options = self.input_kind
        examples, labels = kind.examples_of(options, self.rows, generator)
        sequence = torch.full((self.rows, self.width), PAD, dtype=torch.long)
        targets = torch.full((self.rows, self.width - 1), IGNORE, dtype=torch.long)
        for row, label in enumerate(labels.tolist()):
            answer = self.vocab.encode(self.names[label]) + [EOS]
            start = self.pictures + 1  # after the image tokens and the separator
            sequence[row, :self.pictures] = self.image_token
            sequence[row, self.pictures] = SEP
            sequence[row, start:start + len(answer)] = torch.tensor(answer)
            targets[row, start - 1:start - 1 + len(answer)] = torch.tensor(answer)  # (the label of i is i + 1)
        return Batch({self.target: sequence[:, :-1], self.source: examples}, targets)

    def loss(self, model, batch: Batch, label_smoothing: float = 0.0) -> Tensor:
        logits = model(**batch.inputs).float()
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch.labels.flatten(), ignore_index=IGNORE,
                               label_smoothing=label_smoothing, reduction="sum")

    @torch.no_grad()
    def evaluate(self, model, device, autocast) -> dict[str, float]:
        model = unwrap(model)
        was_training = model.training
        model.eval()
        nll = correct = total = right = rows = 0.0
        with autocast():
            for batch in self.eval_set:
                batch = batch.to(device)
                logits = model(**batch.inputs).float()
                labelled = batch.labels != IGNORE
                nll += F.cross_entropy(logits[labelled], batch.labels[labelled], reduction="sum").item()
                hits = (logits.argmax(-1) == batch.labels) | ~labelled
                correct += (hits & labelled).sum().item()
                total += labelled.sum().item()
                right += hits.all(dim=1).sum().item()
                rows += len(batch.labels)
        model.train(was_training)
        return {"eval_loss": nll / total, "token_accuracy": correct / total, "exact_match": right / rows}
