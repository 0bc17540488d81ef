"""`tfspec train`: a new run, a fine-tuning (``--init``) or a resumed one (``--resume``), in one process or several."""

from __future__ import annotations

import argparse
import os
import signal
import sys

from ..errors import shown
from ..ir.api import load, parse
from ..front.schema import Towers
from ..registry import INPUTS
from ..run.watch import LOGGERS, missing as missing_logger
from .common import (DEFAULT_GLOB, DTYPES, data_path, fits, gib, natural, overrides, positive, print_json,
                     quiet_transformers, seed_number, torch_device, UsageError, with_json, with_set, within)


TASKS = ("copy", "reverse", "sort")  # tfspec.run.data.TASKS, named here so --help does not import torch


TASK_HELP = {"copy": "the target is the source", "reverse": "the source backwards",
             "sort": "the source's symbols in ascending order"}


TRAIN_OPTIONS = ("task", "data", "glob", "field", "eval_data", "tokenizer", "init", "symbols", "min_len", "max_len",
                 "seq_len", "steps", "batch", "accumulate",
                 "lr", "warmup", "grad_clip", "label_smoothing", "weight_decay", "seed", "dtype", "eval_every",
                 "eval_size", "save_every", "log_every", "log", "lora", "activation_checkpointing", "compile")


def _train_config(args):
    from ..run.train import TrainConfig

    given = {k: getattr(args, k) for k in TRAIN_OPTIONS if getattr(args, k) is not None}
    spelled = {}  # the option the user wrote, for a field it sets under another name
    if args.data is None and "seq_len" in given and "max_len" not in given:  # a task's longest source
        given["max_len"] = given.pop("seq_len")
        spelled["max_len"] = "seq_len"
        if "min_len" not in given:
            given["min_len"] = min(TrainConfig.model_fields["min_len"].default, given["max_len"])
    if args.data is not None and "task" in given:
        raise UsageError("--data and --task are alternatives: text to learn, or a built-in task")
    if args.data is not None and len(args.data) > 2:
        raise UsageError(f"--data takes one path, or two aligned files of sentence pairs; got {len(args.data)}")
    if args.data is None and (args.glob or args.field):
        raise UsageError(f"--{'glob' if args.glob else 'field'} says how to read --data; give --data")
    if "lora" in given:
        from ..run.lora import missing as missing_lora

        why = missing_lora()
        if why:
            raise UsageError(why)
        if args.strategy == "fsdp":
            raise UsageError("--lora with --strategy fsdp is not supported; use ddp (the default)")
    if "log" in given:
        given["log"] = tuple(dict.fromkeys(given["log"]))
        why = missing_logger(given["log"])
        if why:
            raise UsageError(why)
    from pydantic import ValidationError

    try:
        return TrainConfig(**given, device=str(torch_device(args.device)))
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            message = error["msg"].removeprefix("Value error, ")
            field = spelled.get(str(error["loc"][0]), str(error["loc"][0])) if error["loc"] else ""
            problems.append(f"--{field.replace('_', '-')}: {message}" if field else message)
        raise UsageError("; ".join(problems)) from None


def _fresh_run_dir(spec_name: str, what: str) -> str:
    base = os.path.join("runs", f"{spec_name}-{what}")
    path, n = base, 1
    while os.path.exists(path):
        n += 1
        path = f"{base}-{n}"
    return path


def add(sub) -> None:
    """The `train` command's arguments."""
    train = with_json(with_set(sub.add_parser("train", help="train a spec on a built-in task or a text file, "
                                                            "with checkpoints, evaluation and a loss curve")))
    train.add_argument("file", nargs="?", metavar="SPEC")
    data = train.add_argument_group("data (default: the reverse task)")
    data.add_argument("--task", choices=sorted(TASKS), help="built-in task: " +
                      "; ".join(f"{k}: {v}" for k, v in sorted(TASK_HELP.items())))
    data.add_argument("--data", "--text", nargs="+", metavar="PATH", type=data_path,
                      help="learn text: decoder-only as a language model, encoder-only by masked-language "
                           "modelling, encoder-decoder from sentence pairs. PATH: a text file, a JSONL file, a "
                           "directory (its files matching --glob, recursively), a directory made by tfspec "
                           "prepare; pairs: lines of source<TAB>target, or two aligned files (PATH TARGET)")
    data.add_argument("--glob", help=f"a directory's files to read (default {DEFAULT_GLOB!r})")
    data.add_argument("--field", help="a JSONL record's text (default 'text'; pairs: SOURCE,TARGET)")
    data.add_argument("--eval-data", metavar="PATH", type=data_path,
                      help="held-out text or pairs, read as --data (default: the last tenth of --data)")
    data.add_argument("--tokenizer", metavar="KIND", help="how a text becomes tokens: bytes (default), chars, "
                      "bpe:N (a byte-level BPE of N tokens learned from the text) or PATH/tokenizer.json; "
                      "saved in every checkpoint")
    data.add_argument("--init", metavar="RUN_OR_DIR", help="start from these weights (fine-tuning): a run, a "
                      "checkpoint or a Hugging Face model directory; SPEC may then be left out")
    data.add_argument("--symbols", type=positive, help="task alphabet size, 2-52 (default 26)")
    data.add_argument("--min-len", type=positive, help="task: shortest source (default 4)")
    data.add_argument("--max-len", type=positive, help="task: longest source (default 24)")
    data.add_argument("--seq-len", type=positive, help="text: window length (default 256, or the learned "
                                                        "positions); task: the longest source")
    opt = train.add_argument_group("optimisation (defaults: the architecture's paper)")
    opt.add_argument("--steps", type=positive, help="optimizer steps (default 2000)")
    opt.add_argument("--batch", type=positive, help="sequences per micro-batch, all workers together (default 64)")
    opt.add_argument("--accumulate", type=positive, help="micro-batches per optimizer step (default 1)")
    opt.add_argument("--lr", type=within(0, 10, low_open=True), help="peak learning rate, in (0, 10]")
    opt.add_argument("--warmup", type=natural, help="warm-up steps")
    opt.add_argument("--grad-clip", type=within(0, 1e6), help="clip the gradient norm (0: never), at most 1e6")
    opt.add_argument("--label-smoothing", type=within(0, 1, high_open=True), help="in [0, 1)")
    opt.add_argument("--weight-decay", type=within(0, 10), help="in [0, 10]")
    opt.add_argument("--seed", type=seed_number, help="seed of initialisation, data and dropout (default 0)")
    opt.add_argument("--device", help="cpu (default), cuda, cuda:N, mps")
    opt.add_argument("--dtype", choices=DTYPES, help="float32 (default); bfloat16/float16 train under autocast")
    tune = train.add_argument_group("fine-tuning and memory")
    tune.add_argument("--lora", type=_lora, metavar="SETTINGS", help="train low-rank adapters only (peft), e.g. "
                      "r=8,alpha=16,targets=q,v (defaults: r=8, alpha=16, dropout=0, targets=q,v); checkpoints "
                      "hold the merged weights")
    tune.add_argument("--activation-checkpointing", action="store_true", default=None,
                      help="keep only each layer's input for backward and recompute the rest: less memory, ~1/3 "
                           "more compute, the same gradients")
    tune.add_argument("--compile", action="store_true", default=None, help="torch.compile the model (slow to "
                      "start, faster steps)")
    running = train.add_argument_group("run")
    running.add_argument("--out", metavar="DIR", help="run directory (default runs/NAME-TASK, numbered if taken)")
    running.add_argument("--resume", metavar="DIR", help="continue the run in DIR from its latest checkpoint")
    running.add_argument("--nproc", type=positive, help="train in N worker processes started by torchrun (as "
                         "`torchrun --nproc-per-node N -m tfspec train ...` does); each takes 1/N of every --batch")
    running.add_argument("--strategy", choices=("ddp", "fsdp"), help="several workers: DistributedDataParallel "
                         "(default) or FSDP2's fully_shard")
    running.add_argument("--eval-every", type=positive, help="steps between held-out evaluations (default 250)")
    running.add_argument("--eval-size", type=positive, help="held-out sequences per evaluation (default 500)")
    running.add_argument("--save-every", type=positive, help="steps between checkpoints (default 500)")
    running.add_argument("--log-every", type=positive, help="without a progress bar (output not a terminal, or "
                         "--no-progress): a line every N steps with loss, lr, tokens/s and ETA (default: 100 a run)")
    running.add_argument("--no-progress", action="store_true", help="no progress bar")
    running.add_argument("--log", action="append", choices=LOGGERS, help="also write the run for TensorBoard "
                         "(event files in RUN/tensorboard: tensorboard --logdir RUN)")
    running.add_argument("--accept-edits", action="store_true", help="--resume/--init: take a checkpoint whose "
                         "spec.tfs or weights changed since it was saved")
    train.set_defaults(run=run)


def run(args) -> int:
    from ..run.distributed import World, broadcast, join, launched, leave
    from ..run.train import resume, train

    if args.nproc is not None and args.nproc > 1 and not launched():
        return _launch_workers(args)
    if args.strategy is not None and not launched():
        raise UsageError(f"--strategy {args.strategy} shares a run among workers; give --nproc N as well")
    world = World()
    if launched():
        world = join(args.strategy or "ddp", str(torch_device(args.device or "cpu")))
        if args.nproc is not None and args.nproc != world.size:
            raise UsageError(f"--nproc {args.nproc}: torchrun started {world.size} workers; drop --nproc")
    where = sys.stderr if args.json else sys.stdout  # --json: the log apart from the result
    say = (lambda line: print(line, file=where, flush=True)) if world.main else (lambda line: None)
    if args.resume:
        _check_resume(args)
        run_dir = args.resume
        run = resume(run_dir, steps=args.steps, device=str(torch_device(args.device)) if args.device else None,
                     progress=not args.no_progress, log=say, accept_edits=args.accept_edits, world=world)
    else:
        spec, config, initial, run_dir = _new_run(args, load_initial=True)
        run_dir = broadcast(run_dir, world)  # one directory, named by rank 0
        given = next((kind for part in spec.parts().values()  # the first input kind, in whichever tower
                      if (kind := part.embedding(part.stacks[0].embedding).input) is not None), None)
        data = (f"--data {' '.join(config.data)}" if config.data else
                f"the generated {INPUTS[given.name].task}" if given is not None else f"the {config.task} task")
        data += " and their names" if isinstance(spec, Towers) else ""
        start = f", from the weights of {config.init}" if config.init else ""
        say(f"training {spec.name} ({spec.kind}, {spec.parameter_count():,} parameters) on {data}{start}; "
            f"run directory {shown(run_dir)}")
        run = train(args.file, config, run_dir, overrides=overrides(args), progress=not args.no_progress,
                    log=say, initial=initial, world=world)
    if world.main:
        _report(run, run_dir, args.json)
    status = 128 + signal.Signals[run.signal].value if run.interrupted and run.signal else 130 if run.interrupted else 0
    return leave(world, status)  # only when the run went well: a worker that fails exits, and torchrun stops the others


def _check_resume(args) -> None:
    if args.file:
        raise UsageError("give either a SPEC to start a run or --resume DIR to continue one, not both")
    given = [k for k in TRAIN_OPTIONS if getattr(args, k) is not None and k != "steps"] + (["set"] if args.set else [])
    if given:
        raise UsageError(f"--resume continues the saved configuration; drop --{given[0].replace('_', '-')} "
                         "(only --steps, --device, --nproc and --strategy may change)")


def _new_run(args, load_initial: bool):
    """(spec, config, initial weights, run directory) of a new run, every option checked; without
    ``load_initial`` (the launcher) ``--init`` weights are left for the workers to read."""
    from ..backend.compiler import available_memory_bytes

    if not args.file and not args.init:
        raise UsageError("give a SPEC to train, --init weights to fine-tune, or --resume DIR")
    args.device = args.device or "cpu"
    config = _train_config(args)
    initial = None
    if args.init and load_initial:
        from ..interop.initial import read_initial

        quiet_transformers()  # a Hugging Face directory is read with transformers: no progress bars of its own
        initial = read_initial(args.init, accept_edits=args.accept_edits)
    if args.file:
        spec = load(args.file, overrides=overrides(args))
    elif initial is not None:  # the spec the initial weights came with
        spec = parse(initial.spec_text, file=initial.name, overrides={**initial.overrides, **overrides(args)})
    else:
        return None, config, None, args.out
    if args.out and os.path.exists(args.out) and not os.path.isdir(args.out):
        raise UsageError(f"--out {shown(args.out)}: a file, not a run directory")
    if isinstance(spec, Towers):  # generated examples paired with their classes' names
        named = _towers_run(args, spec, config)  # (its checks, whether or not --out names the directory)
        return spec, config, initial, args.out or named
    length = (config.seq_len or 256) if config.data else config.max_len + 2
    from ..ir.queries import fixed_length
    fixed = fixed_length(spec.graph(), spec.stacks[0].role)
    kind = INPUTS[spec.embedding(spec.stacks[0].embedding).input.name] if fixed is not None else None
    if kind is not None:  # a model of pictures learns its input kind's generated task (classifies the digits)
        if spec.kind != "encoder-only":
            raise UsageError(f"{spec.name} reads {kind.what} into an {spec.kind}; the generated {kind.task} are "
                             "classified by an encoder alone, and tfspec train has no generated task with targets to "
                             "decode from them")
        given = [f"--{name.replace('_', '-')}" for name in ("task", "data", "tokenizer", "seq_len", "max_len")
                 if getattr(args, name, None) is not None]
        if given:
            raise UsageError(f"{spec.name} reads {kind.what} and trains on the generated {kind.task}; "
                             f"{', '.join(given)} describe{'s' if len(given) == 1 else ''} token sequences")
        length = fixed
    fits(spec, config.batch, length, "--batch × --seq-len", config.device, beyond_positions_ok=True)
    if config.eval_size * length * 16 > available_memory_bytes(config.device) // 4:
        raise UsageError(f"--eval-size {config.eval_size:,}: the held-out set alone would take "
                         f"{gib(config.eval_size * length * 16)}; use fewer sequences")
    task = kind.task if kind is not None else "text" if config.data else config.task
    return spec, config, initial, args.out or _fresh_run_dir(spec.name, task)


def _towers_run(args, spec, config) -> str:
    """A model of towers' checks before its run directory is named: no token options (it reads the generated
    examples and their names), each tower's batch within memory."""
    from ..ir.queries import default_length

    given = [f"--{name.replace('_', '-')}" for name in ("task", "data", "tokenizer", "seq_len", "max_len")
             if getattr(args, name, None) is not None]
    if given:
        raise UsageError(f"{spec.name} is two towers and trains on generated examples paired with their classes' "
                         f"names; {', '.join(given)} describe{'s' if len(given) == 1 else ''} token sequences")
    for tower in spec.towers:
        fits(tower.spec, config.batch, default_length(tower.spec.graph()), f"--batch (tower {tower.name})",
             config.device, beyond_positions_ok=True)
    return _fresh_run_dir(spec.name, "pairs")


def _launch_workers(args) -> int:
    """``--nproc N``: the options checked here, then the same command in N workers started by torchrun."""
    from ..run.distributed import launch

    device = torch_device(args.device or "cpu")
    available = (_cuda_devices() if device.type == "cuda" else os.cpu_count() or 1)
    if args.nproc > available:
        what = "GPUs" if device.type == "cuda" else "CPU cores"
        raise UsageError(f"--nproc {args.nproc}: this machine has {available} {what}, and each worker takes one")
    if args.resume:
        _check_resume(args)
        extra = []
    else:
        _, config, _, run_dir = _new_run(args, load_initial=False)
        if config.batch % args.nproc:
            raise UsageError(f"--batch {config.batch} is the global batch, shared equally among --nproc "
                             f"{args.nproc} workers; make it a multiple of {args.nproc}")
        extra = [] if args.out or run_dir is None else ["--out", run_dir]
    argv, skip = [], False
    for i, arg in enumerate(args.argv):  # the command as given, less --nproc N
        if skip:
            skip = False
        elif arg == "--nproc":
            skip = True
        elif not arg.startswith("--nproc="):
            argv.append(arg)
    return launch(argv + extra, args.nproc)


def _report(run, run_dir, as_json: bool = False) -> None:
    if as_json:
        print_json({"run": str(run_dir), "step": run.step, "steps": run.objective.config.steps,
                     "finished": run.step >= run.objective.config.steps, "interrupted": run.interrupted,
                     "seconds": round(run.seconds, 3), "checkpoint": str(run.checkpoint) if run.checkpoint else None,
                     "last_loss": run.losses[-1] if run.losses else None,
                     "evaluation": run.evaluations[-1] if run.evaluations else None,
                     "metrics": f"{run_dir}/metrics.jsonl"})
        return
    if run.signal == "SIGTERM":  # a service manager's stop: one line, where its log collects errors
        print(f"tfspec train: stopped by SIGTERM at step {run.step} of {run.objective.config.steps}; "
              f"{'saved ' + shown(run.checkpoint) if run.checkpoint else 'nothing to save yet'}; continue with: "
              f"tfspec train --resume {shown(run_dir)}", file=sys.stderr)
        return
    state = "interrupted" if run.interrupted else "stopped"
    if run.step < run.objective.config.steps:
        print(f"{state} at step {run.step} of {run.objective.config.steps}; continue with: "
              f"tfspec train --resume {shown(run_dir)}")
    else:
        print(f"finished {run.step} steps in {run.seconds:.1f} s")
    if run.checkpoint is not None:
        print(f"checkpoint: {shown(run.checkpoint)}")
    print(f"metrics: {shown(run_dir)}/metrics.jsonl, loss curve: {shown(run_dir)}/loss.png")


def _lora(text: str):
    from pydantic import ValidationError

    from ..run.lora import parse_settings

    try:
        return parse_settings(text)
    except ValidationError as exc:
        error = exc.errors()[0]
        raise argparse.ArgumentTypeError(f"{'.'.join(map(str, error['loc']))}: {error['msg']}") from None
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _cuda_devices() -> int:
    import torch

    return torch.cuda.device_count()
