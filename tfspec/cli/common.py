"""What several commands share: option types and their ranges, devices, output paths, the memory check, JSON."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from ..errors import shown
from ..files import check_writable, write_atomically


DEFAULT_GLOB = "*.txt"  # tfspec.run.corpus.DEFAULT_GLOB, named here so --help does not import torch


def parse_set(item: str) -> tuple[str, Any]:
    """``--set layers=2`` -> ("layers", 2); a non-number stays text and is parsed as an expression."""
    name, sep, value = item.partition("=")
    name, value = name.strip(), value.strip()
    if not sep or not name or not value:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {item!r}")
    for kind in (int, float):
        try:
            number = kind(value)
        except ValueError:
            continue
        # beyond a float (1e400) it stays as written: the spec's parser names it, as the user wrote it
        return name, number if number == number and abs(number) != float("inf") else value
    return name, value


def overrides(args) -> dict[str, Any]:
    return dict(args.set or [])


DTYPES = ("float32", "bfloat16", "float16")


def torch_device(name: str):
    import torch

    try:
        device = torch.device(name)
    except RuntimeError:
        raise UsageError(f"--device {name}: not a device name (cpu, cuda, cuda:1, mps)") from None
    if device.type == "meta":
        raise UsageError(f"--device {name}: meta tensors hold no values, so nothing can run on them; use cpu or cuda")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UsageError(f"--device {name}: CUDA is not available on this machine")
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise UsageError(f"--device {name}: MPS is not available on this machine")
    return device


class UsageError(Exception):
    """A bad command-line argument: printed, exit status 2."""


def writable(path: str, what: str) -> None:
    problem = check_writable(path)
    if problem is not None:
        raise UsageError(f"{what} {shown(path)}: {problem}")


def fits(spec, batch: int, length: int, what: str, device=None, beyond_positions_ok: bool = False) -> None:
    """Refuse up front a batch of ``length``-token sequences that the analysis says will not fit: its activation
    memory (``tfspec summary``'s estimate, an upper bound for a forward pass) and the token ids, against the
    memory left on ``device``; the message gives the figures."""
    from ..inspect.analysis import AnalysisError, analyse
    from ..backend.compiler import available_memory_bytes

    try:
        activations = analyse(spec, seq_len=length, batch=batch).total.memory
    except AnalysisError as exc:  # a length past the learned positions
        if beyond_positions_ok:  # the command stops there, or says why in its own words
            return
        raise UsageError(f"{what}: {exc}") from None
    need, have = activations + 16 * batch * length, available_memory_bytes(device)
    if need > have:
        raise UsageError(f"{what}: a batch of {batch:,} × {length:,} tokens needs about {gib(need)} of memory "
                         f"(activations, as tfspec summary estimates them), but {gib(have)} is available; "
                         "use fewer or shorter sequences")


def gib(n: float) -> str:
    return f"{n / 2 ** 30:,.1f} GiB" if n < 2 ** 50 else f"{n / 2 ** 30:.2e} GiB"


def check_output(output: str | None, suffix: str) -> None:
    """``-o``: standard output (None or -), or a file that can be written (not a directory)."""
    if output is None or output == "-":
        return
    writable(output, "-o")
    if os.path.isdir(output):
        raise UsageError(f"-o {shown(output)}: is a directory; name the {suffix} file to write")


def write_output(output: str | None, text: str) -> bool:
    """Write ``text`` to ``-o`` atomically (checked by ``check_output``), or to standard output; True: a file."""
    if output is None or output == "-":
        sys.stdout.write(text)
        return False
    write_atomically(output, text.encode("utf-8"))  # a failure names the file: exit 1, the old file kept
    return True


def quiet_transformers() -> None:
    """No progress bars from transformers while a command loads or writes a model (its output is ours), and each of
    its log messages on one line: a warning about a hostile configuration printed the whole configuration."""
    try:
        from transformers.utils import logging
    except ImportError:  # reported where it is needed
        return
    logging.disable_progress_bar()
    for handler in logging.get_logger().handlers:  # (transformers' own root logger and its handler)
        if not any(isinstance(f, _FirstLine) for f in handler.filters):
            handler.addFilter(_FirstLine())


class _FirstLine:
    """A logging filter that keeps a record's first line (and says how many more there were)."""

    def filter(self, record) -> bool:
        message = record.getMessage()
        if "\n" in message:
            first, rest = message.split("\n", 1)
            record.msg, record.args = f"{first} (and {rest.count(chr(10)) + 1} more lines)", ()
        return True


def with_json(p):
    p.add_argument("--json", action="store_true", help="print the result as JSON on standard output")
    return p


def print_json(data) -> None:
    """``data`` as JSON on standard output, in UTF-8, every character that is not printable written as JSON's
    ``\\uXXXX``: a name's control characters (``\\x9b`` starts a terminal's escape sequence) cannot reach a
    terminal, and its bytes that are not UTF-8 (kept by Python as lone surrogates) come out as ``\\udcXX``, which
    ``json.loads`` and ``os.fsencode`` turn back into the bytes, rather than as bytes that would make the output
    neither UTF-8 nor JSON."""
    text = json.dumps(data, indent=2, ensure_ascii=False)
    print("".join(c if c.isprintable() or c == "\n" else _escaped(c) for c in text))


def _escaped(character: str) -> str:
    units = character.encode("utf-16-le", "surrogatepass")
    return "".join(f"\\u{int.from_bytes(units[i:i + 2], 'little'):04x}" for i in range(0, len(units), 2))


def with_set(p):
    p.add_argument("--set", action="append", type=parse_set, metavar="NAME=VALUE",
                   help="override a `let` parameter, e.g. --set layers=2 (repeatable)")
    return p


def number(text: str, ok, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
    if not ok(value):
        raise argparse.ArgumentTypeError(f"expected {what}, got {text}")
    return value


def within(low: float, high: float, low_open: bool = False, high_open: bool = False):
    """An argparse type for a number in [low, high] (``low_open``: above low; ``high_open``: below high)."""
    what = f"a number in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"

    def check(v: float) -> bool:
        return (low < v if low_open else low <= v) and (v < high if high_open else v <= high)
    return lambda text: number(text, check, what)


def example_count(text: str) -> int:
    value = positive(text)
    if value > 10_000:
        raise argparse.ArgumentTypeError(f"expected at most 10000 examples per property, got {value}")
    return value


def seed_number(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if not 0 <= value < 2 ** 63:
        raise argparse.ArgumentTypeError(f"expected a seed from 0 to 2**63 - 1, got {text}")
    return value


def data_path(text: str) -> str:
    if not text or "\x00" in text:
        raise argparse.ArgumentTypeError(f"not a path: {text!r}")
    return text


def natural(text: str) -> int:
    return 0 if text.strip() == "0" else positive(text)


def positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def one_model(spec, command: str):
    """``spec`` where it is a model of one or two stacks; a model of towers is refused, at its first tower, for a
    command that does not read towers yet (a SpecError: the caret shows where)."""
    from ..errors import Diagnostic, SpecError
    from ..front.schema import Towers

    if not isinstance(spec, Towers):
        return spec
    where = spec.towers[0].span
    raise SpecError([Diagnostic("structure", f"`tfspec {command}` reads a model of one or two stacks; "
                                f"'{spec.name}' is {len(spec.towers)} towers", where,
                                "check, diff, render, summary, report, verify, train, build, mask, emit, "
                                "import and export --to hf read towers; compile them in Python (tfspec.compile) for the rest")], spec._sources)
