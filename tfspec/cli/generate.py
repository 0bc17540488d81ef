"""`tfspec generate`: decode from a trained checkpoint (greedy, sampling, beam search), over a KV cache."""

from __future__ import annotations

import argparse
import sys

from ..errors import LengthError, RunError, shown
from ..registry import INPUTS
from .common import fits, number, positive, print_json, seed_number, torch_device, UsageError, with_json, within


MAX_COUNT = 10_000


def _device_of(model):
    return next(model.parameters()).device


def add(sub) -> None:
    """The `generate` command's arguments."""
    generate = with_json(sub.add_parser("generate", help="decode from a trained checkpoint: greedy, sampling or "
                                                         "beam search"))
    generate.add_argument("checkpoint", metavar="CHECKPOINT", help="a run directory (its latest checkpoint) or "
                                                                  "a checkpoint directory")
    generate.add_argument("--input", "--prompt", action="append", metavar="TEXT",
                          help="a source to transform (task models) or a prompt to continue (text models); "
                               "repeatable. Task models default to held-out examples")
    generate.add_argument("--count", type=positive, default=5, help="held-out examples without --input (default 5)")
    generate.add_argument("--digit", type=int, action="append", choices=range(10), metavar="D",
                          help="a vision-language run: a generated picture of digit D to answer about (repeatable; "
                               "default: --count held-out pictures)")
    generate.add_argument("--image", action="append", metavar="FILE",
                          help="a vision-language run: a picture file (PNG, JPEG, ...) to answer about, prepared as "
                               "its training pictures are (repeatable)")
    generate.add_argument("--max-new", type=positive, help="most tokens to generate (default: the task's "
                                                            "longest target + 1, or 200 for text)")
    generate.add_argument("--temperature", type=_temperature, help="sample at this temperature (0: greedy; "
                                                                   "1 when only --top-k/--top-p are given)")
    generate.add_argument("--top-k", type=positive, help="sample among the k most likely tokens (more than the "
                                                          "vocabulary: all of them)")
    generate.add_argument("--top-p", type=_unit, help="sample from the smallest set holding this much probability")
    generate.add_argument("--beam", type=_beam, nargs="?", const=4, help=f"beam search (default width 4, at most "
                                                                         f"{MAX_BEAM})")
    generate.add_argument("--alpha", type=within(0, 10), default=0.6, help="beam length penalty in [0, 10] "
                                                                          "(default 0.6)")
    generate.add_argument("--seed", type=seed_number, default=0, help="sampling seed (default 0)")
    generate.add_argument("--device", default="cpu")
    generate.add_argument("--accept-edits", action="store_true", help="take a checkpoint whose spec.tfs or "
                                                                       "weights changed since it was saved")
    generate.add_argument("--no-cache", action="store_true", help="recompute the whole prefix each step "
                                                                  "(slower; the KV cache gives the same logits)")
    generate.add_argument("--compile", action="store_true", help="decode through a static KV cache and a step "
                                                                 "torch.compile compiles once (pays off over long "
                                                                 "outputs: compiling takes seconds)")
    generate.set_defaults(run=run)


def run(args) -> int:
    import torch

    from ..run import checkpoint as ckpt
    from ..run.decoding import Strategy, complete

    for text in args.input or []:
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:  # bytes that are not UTF-8 arrive as surrogates
            byte = text[exc.start].encode("utf-8", "surrogateescape")
            raise UsageError(f"--input: not UTF-8 text (byte 0x{byte.hex()} at character {exc.start}); the model "
                             "reads text") from None
    saved = ckpt.load(args.checkpoint, accept_edits=args.accept_edits)
    if "vocab" not in saved.meta:
        raise RunError(f"{shown(saved.path)}: imported from {saved.meta.get('imported_from', 'elsewhere')} without a "
                       "tokenizer.json, so there is no vocabulary to encode text with")
    model = saved.model(device=torch_device(args.device))
    vocab = saved.vocabulary()
    kind = model.spec.kind
    # an imported model (no training configuration) continues a prompt, or maps an input to an output
    config = saved.config()
    if kind == "towers" and model.connectors:  # a vision-language run: its answers about generated pictures
        return _answer_pictures(args, saved, model, vocab)
    if kind == "towers":
        raise RunError(f"{shown(saved.path)}: two towers joined by a contrastive head compare examples, they generate "
                       "no tokens; compare from Python: model(NAME=...) gives the contrastive logits")
    if args.digit or args.image:
        raise UsageError(f"{'--digit draws' if args.digit else '--image reads'} a picture for a vision-language run "
                         "(towers joined by a connector)")
    if kind == "encoder-only":
        raise RunError(f"{shown(saved.path)}: an encoder-only model (a masked-language model, a classifier) has no "
                       "decoder to generate with")
    given = model.spec.embedding(model.spec.stacks[0].embedding).input
    if given is not None:  # an encoder of spectrograms (Whisper's): its source is no text
        kind_of_input = INPUTS[given.name]
        raise RunError(f"{shown(saved.path)}: its encoder reads {kind_of_input.what}, not text, and tfspec generate "
                       f"encodes text; decode from Python with tfspec.run.decoding.Continuation(model, "
                       f"{kind_of_input.argument})")
    if args.compile and args.no_cache:
        raise UsageError("--compile decodes over a KV cache; it does not combine with --no-cache")
    if args.beam is not None and (args.temperature is not None or args.top_k or args.top_p):
        raise UsageError("--beam searches for the most likely output; it does not combine with sampling options")
    prompted = config is not None and config.data is None
    temperature = args.temperature if args.temperature is not None else (1.0 if args.top_k or args.top_p else 0.0)
    strategy = Strategy(temperature, args.top_k, args.top_p, args.beam, args.alpha)
    generator = torch.Generator().manual_seed(args.seed)
    max_new = args.max_new or ((config.max_len + 1) if prompted else 200)
    if args.count > MAX_COUNT:
        raise UsageError(f"--count {args.count:,}: at most {MAX_COUNT:,} held-out examples are decoded in one call")
    # a prompt has at most as many tokens as bytes: an upper bound for any tokenizer
    longest = max([len(x.encode("utf-8")) for x in args.input or []] + [config.max_len if config else 0])
    fits(model.spec, len(args.input or []) or args.count, longest + max_new + 2, "--max-new", _device_of(model),
          beyond_positions_ok=True)
    references = {}
    inputs = args.input
    if not inputs:
        if not prompted:
            raise UsageError("give a prompt to continue: --input TEXT")
        from ..run.data import EVAL, TaskData, generator_for

        tasks = TaskData(config.task, vocab, config.min_len, config.max_len)
        src, tgt, lengths = tasks.pairs(args.count, generator_for(args.seed, EVAL, 1 << 21), True)
        inputs = [vocab.decode(src[i, : lengths[i]].tolist()) for i in range(args.count)]
        references = {x: vocab.decode(tgt[i, : lengths[i]].tolist()) for i, x in enumerate(inputs)}
    how = (f"beam search (beam {args.beam}, alpha {args.alpha:g})" if args.beam else
           "greedy decoding" if not temperature else
           f"sampling (temperature {temperature:g}" + (f", top-k {args.top_k}" if args.top_k else "")
           + (f", top-p {args.top_p:g}" if args.top_p else "") + ")")
    if not args.json:
        print(f"{shown(saved.path)} (step {saved.step}): {model.spec.name}, {kind}; {how}")
    try:
        results = complete(model, vocab, inputs, prompted=prompted, max_new=max_new, strategy=strategy,
                           generator=generator, use_cache=False if args.no_cache else None,
                           # asked for: all of it, or a refusal up front
                           strict=args.max_new is not None, compile=args.compile)
    except LengthError:  # no room left after the prompt
        raise
    except ValueError as exc:  # text outside the vocabulary, an empty prompt
        raise RunError(str(exc)) from None
    if args.json:
        print_json({"checkpoint": str(saved.path), "step": saved.step, "name": model.spec.name, "decoding": how,
                     "results": [{"input": r.input, "output": r.output, "score": r.score, "cut_at": r.cut_at,
                                  **({"reference": references[r.input], "correct": references[r.input] == r.output}
                                     if r.input in references else {})} for r in results]})
        return 0
    for r in results:
        if prompted or kind == "encoder-decoder":  # an input mapped to an output
            line = f"  {r.input} -> {r.output}"
            if r.input in references:
                ok = "✓" if references[r.input] == r.output else f"✗ (expected {references[r.input]})"
                line += f"  {ok}"
        else:
            line = r.input + r.output
        if r.score is not None:
            line += f"  [score {r.score:.3f}]"
        print(line)
        if r.cut_at is not None:
            print(f"note: stopped after {r.cut_at} tokens, where the learned positions "
                  f"({model.max_len['decoder']}) end; give --max-new to have all of it or a refusal", file=sys.stderr)
    return 0


MAX_BEAM = 100  # hypotheses per input: each is a forward pass per step (a million took minutes without end)


def _beam(text: str) -> int:
    value = positive(text)
    if value > MAX_BEAM:
        raise argparse.ArgumentTypeError(f"expected a beam width from 1 to {MAX_BEAM}, got {value}")
    return value


def _unit(text: str) -> float:
    return number(text, lambda v: 0 < v <= 1, "a probability in (0, 1]")


def _temperature(text: str) -> float:
    return number(text, lambda v: 0 <= v <= 1e4, "a temperature from 0 (greedy) to 10000")


def _answer_pictures(args, saved, model, vocab) -> int:
    """A vision-language run (towers joined by a connector) answers about generated pictures (beside the digit
    drawn) or picture files (``--image``): each its image tokens and the separator, then the answer decoded
    greedily."""
    import torch

    from ..run.contrastive import NUMBER_NAMES
    from ..run.data import EOS, SEP
    from ..run.decoding import Continuation, Restricted, sample

    if args.input or args.beam or args.temperature or args.top_k or args.top_p:
        raise UsageError("a vision-language run answers about pictures greedily: --digit D, --count N or --image "
                         "FILE, not --input or sampling options")
    if args.image and args.digit:
        raise UsageError("--image and --digit: answer about your pictures or about generated ones, not both")
    (source, connector), = model.connectors.items()
    kind, options = INPUTS.of(model.spec.tower(source).embeddings[0].input)
    wanted = args.digit or []
    count = len(args.image or wanted) or args.count
    if count > MAX_COUNT:
        raise UsageError(f"--count {count:,}: at most {MAX_COUNT:,} pictures are answered in one call")
    if args.image:
        if "imported_from" in saved.meta:
            raise RunError(f"{shown(saved.path)}: imported from {saved.meta['imported_from']}, it reads pictures as "
                           "its Hugging Face processor prepares them; --image prepares them as tfspec's digits task "
                           "draws them. Decode from Python: Continuation.of(model, "
                           "vision=tfspec.interop.pictures(PATH, processor outputs)), docs/interop.md")
        pictures, labels = [kind.example_from_file(options, path) for path in args.image], [None] * count
    else:
        pictures, labels = _drawn(args, kind, options, wanted, count)
    device = _device_of(model)
    pixels = torch.stack(pictures).to(device)
    vectors = model.features(source, pixels).shape[1]
    prompt = torch.cat((torch.full((count, vectors), connector.image_token), torch.full((count, 1), SEP)), dim=1)
    vocab_size = model.towers[connector.target].spec.embeddings[0].vocab
    allowed = torch.arange(vocab_size, device=device) != connector.image_token
    with torch.no_grad():
        answers = sample(Restricted(Continuation.of(model, **{source: pixels}, use_cache=not args.no_cache), allowed),
                         prompt.to(device), args.max_new or 8, eos=EOS)
    if args.image:
        results = [{"image": path, "answer": vocab.decode(answer)} for path, answer in zip(args.image, answers)]
    else:
        results = [{"digit": label, "answer": vocab.decode(answer), "correct": vocab.decode(answer) ==
                    NUMBER_NAMES[label]} for label, answer in zip(labels, answers)]
    if args.json:
        print_json({"checkpoint": str(saved.path), "step": saved.step, "name": model.spec.name,
                     "decoding": "greedy decoding", "results": results})
        return 0
    print(f"{shown(saved.path)} (step {saved.step}): {model.spec.name}, towers; greedy decoding after each picture's "
          f"{vectors} image tokens")
    if args.image:
        for r in results:
            print(f"  {r['image']} -> {r['answer']}")
        return 0
    for r in results:
        mark = "✓" if r["correct"] else f"✗ (it shows {NUMBER_NAMES[r['digit']]})"
        print(f"  a picture of {r['digit']} -> {r['answer']}  {mark}")
    right = sum(r["correct"] for r in results)
    print(f"{right} of {len(results)} right")
    return 0


def _drawn(args, kind, options, wanted: list[int], count: int) -> tuple[list, list[int]]:
    """``count`` held-out pictures of the digits task and their digits: those ``wanted`` in order, or any."""
    from ..run.data import EVAL, generator_for

    pictures, labels, draw = [], [], 0
    while len(pictures) < count:  # held-out draws (the evaluation's stream), kept where they show a wanted digit
        given, drawn = kind.examples_of(options, 64, generator_for(args.seed, EVAL, (1 << 22) + draw))
        draw += 1
        for picture, label in zip(given, drawn.tolist()):
            if len(pictures) == count:
                break
            if not wanted or wanted[len(pictures)] == label:
                pictures.append(picture)
                labels.append(label)
        if draw > 1000:
            raise RunError(f"no generated picture of {wanted[len(pictures)]} in 64,000 draws")
    return pictures, labels
