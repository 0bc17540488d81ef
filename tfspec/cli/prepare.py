"""`tfspec prepare`: text tokenised once into a memory-mapped token file that `train --data` reads."""

from __future__ import annotations

import os
import sys

from ..errors import shown
from .common import DEFAULT_GLOB, data_path, print_json, UsageError, with_json


def add(sub) -> None:
    """The `prepare` command's arguments."""
    prep = with_json(sub.add_parser("prepare", help="tokenise text once into a memory-mapped token file that train "
                                                    "--data streams (a corpus larger than memory trains)"))
    prep.add_argument("data", nargs="+", metavar="PATH", type=data_path,
                      help="a text file, a JSONL file or a directory (its files matching --glob, recursively)")
    prep.add_argument("-o", "--output", required=True, metavar="DIR", help="the prepared directory; made again "
                      "only when the files or the tokenizer changed")
    prep.add_argument("--tokenizer", metavar="KIND", help="bytes (default), chars, bpe:N or PATH/tokenizer.json")
    prep.add_argument("--glob", help=f"a directory's files to read (default {DEFAULT_GLOB!r})")
    prep.add_argument("--field", help="a JSONL record's text (default 'text')")
    prep.set_defaults(run=run)


def run(args) -> int:
    from ..run.corpus import DEFAULT_GLOB as glob, Source, prepare

    if len(args.data) > 1:
        raise UsageError("prepare reads one PATH (a file, a JSONL file or a directory); sentence pairs are read "
                         "as they are, by train --data")
    if os.path.exists(args.output) and not os.path.isdir(args.output):
        raise UsageError(f"-o {shown(args.output)}: a file; name a directory to prepare into")
    source = Source(tuple(args.data), args.glob or glob, args.field or "text")
    prepared = prepare(source, args.tokenizer, args.output,
                       log=lambda line: print(line, file=sys.stderr if args.json else sys.stdout, flush=True))
    if args.json:
        print_json({"output": args.output, **{k: v for k, v in prepared.meta.items() if k != "format"}})
    return 0
