"""Files: writing them whole or not at all, reading only regular ones, knowing a path can be written."""

from __future__ import annotations

import errno
import io
import os
import re
import shutil
import stat
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, Iterator


def write_atomically(path: str | Path, data: bytes) -> None:
    """Write ``data`` to a temporary file beside ``path``, then rename it into place.

    An interrupted write leaves the previous file untouched. A replaced file keeps
    its permission bits; a new one gets the usual ones (0666 less the umask),
    not ``mkstemp``'s private 0600.
    """
    path = Path(path)
    if path.exists() and not path.is_file():  # renaming over a device or a FIFO would replace it (as root: /dev/null)
        raise NotAFile(errno.EINVAL, "not a regular file; tfspec writes regular files only", str(path))
    try:
        mode = path.stat().st_mode & 0o7777
    except FileNotFoundError:
        mode = _usual_mode(0o666)
    with naming(path):
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.chmod(tmp, mode)
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise


def append_line(path: str | Path, line: str) -> None:
    """Append ``line`` and a newline to ``path`` whole or not at all: a write that fails (a full disk) is cut
    back off, so the file never ends in half a line."""
    data = (line + "\n").encode("utf-8")
    with naming(path):
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, _usual_mode(0o666))
        try:
            start = os.lseek(fd, 0, os.SEEK_END)
            try:
                written = 0
                while written < len(data):
                    written += os.write(fd, data[written:])
            except OSError:
                os.ftruncate(fd, start)
                raise
        finally:
            os.close(fd)


def _usual_mode(bits: int) -> int:
    """``bits`` less the process's umask: the mode a plain ``open``/``mkdir`` would give."""
    umask = os.umask(0)
    os.umask(umask)
    return bits & ~umask


def figure_text(text: object) -> str:
    """Text for a matplotlib figure (a legend's label, a title), drawn as written: a path's or a name's ``$``
    escaped, so that ``$a$b$`` is not read as mathtext (which fails to draw), and its control characters shown
    as escapes (``tfspec.errors.shown``)."""
    from .errors import shown

    return shown(text).replace("$", r"\$")


def save_figure(fig, path: str | Path, **options) -> None:
    """``fig.savefig`` whole or not at all: drawn in memory (format from the suffix), then ``write_atomically``."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format=Path(path).suffix.lstrip(".").lower() or "png", **options)
    write_atomically(path, buffer.getvalue())


def as_os_error(exc: BaseException, path: str | Path) -> OSError | None:
    """``exc`` as an ``OSError`` naming ``path``: an ``OSError`` without a file name (a full disk seen by
    ``write``), or safetensors' ``SafetensorError`` wrapping one (``... (os error 28)``); None for other errors."""
    if isinstance(exc, OSError):
        if exc.filename is not None:
            return exc
        return OSError(exc.errno, exc.strerror or str(exc) or type(exc).__name__, str(path))
    if type(exc).__name__ == "SafetensorError":
        found = re.search(r"os error (\d+)", str(exc))
        code = int(found.group(1)) if found else errno.EIO
        return OSError(code, os.strerror(code) if found else str(exc), str(path))
    return None


def moved_error(exc: BaseException, tmp: Path, final: Path) -> OSError | None:
    """``as_os_error(exc)``, naming a file under the temporary directory ``tmp`` by where it was going (``final``)."""
    error = as_os_error(exc, tmp) if isinstance(exc, Exception) else None
    if error is None:
        return None
    where = str(error.filename)
    if where == str(tmp) or where.startswith(str(tmp) + os.sep):
        where = str(final) + where[len(str(tmp)):]
    return OSError(error.errno, error.strerror, where)


@contextmanager
def naming(path: str | Path) -> Iterator[None]:
    """Errors of writing ``path`` (``OSError``, safetensors' I/O errors) leave as ``OSError``s that name it."""
    try:
        yield
    except Exception as exc:
        error = as_os_error(exc, path)
        if error is None or error is exc:
            raise
        raise error from None


@contextmanager
def removed_on_failure(path: str | Path) -> Iterator[None]:
    """When the block fails, ``path`` goes back to how it was found if that was absent (removed) or an empty
    directory (emptied): a command that fails leaves no half-made output directory."""
    path = Path(path)
    existed = path.exists()
    if existed and (not path.is_dir() or any(path.iterdir())):
        yield
        return
    try:
        yield
    except BaseException:
        undo_directory(path, existed)
        raise


def undo_directory(path: Path, keep_empty: bool) -> None:
    """Remove ``path`` with everything in it, or (``keep_empty``) only what is in it."""
    if not keep_empty:
        shutil.rmtree(path, ignore_errors=True)
    elif path.is_dir():
        for child in path.iterdir():
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child, ignore_errors=True)
            else:
                child.unlink(missing_ok=True)


@contextmanager
def new_directory(path: str | Path) -> Iterator[Path]:
    """A directory written whole or not at all: the block fills a hidden temporary sibling, renamed to ``path``
    when it ends without error and removed otherwise (``path``: absent or an empty directory). An ``OSError``
    inside names the file as it would be under ``path``, not the temporary one.
    """
    path = Path(path)
    parent = path.parent if str(path.parent) else Path(".")
    tmp = Path(tempfile.mkdtemp(dir=parent, prefix=f".{path.name}."))
    try:
        os.chmod(tmp, _usual_mode(0o777))  # mkdtemp's 0700 is for secrets; an output directory is ordinary
        try:
            yield tmp
        except Exception as exc:
            error = moved_error(exc, tmp, path)
            if error is None:
                raise
            raise error from None
        with naming(path):
            if path.is_dir():
                path.rmdir()  # empty: the caller refuses any other
            os.rename(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


class NotAFile(OSError):
    """A path that names something other than a regular file (a directory, a device, a FIFO)."""


def open_regular(path: str | Path, limit: int | None = None) -> BinaryIO:
    """``path`` opened for reading in binary, once the open file itself (not the name, which could be swapped
    meanwhile) is known to be a regular file of at most ``limit`` bytes. It is opened without blocking, so a FIFO
    (which would wait for a writer forever) is refused like a directory or a device (``/dev/zero`` never ends);
    ``OSError``s (``NotAFile`` among them) carry the reason in ``strerror``."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise IsADirectoryError(errno.EISDIR, "a directory, not a file", str(path))
        if not stat.S_ISREG(info.st_mode):
            raise NotAFile(errno.EINVAL, "not a regular file (a device, a FIFO or a socket)", str(path))
        if limit is not None and info.st_size > limit:
            raise NotAFile(errno.EFBIG, f"{info.st_size:,} bytes, more than the {limit:,} tfspec reads from such "
                           "a file", str(path))
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def regular_file(path: str | Path) -> Path:
    """``path``, once it is known to be a regular file (``open_regular``), for a reader that opens it by name itself
    (safetensors, ``torch.load``): a FIFO or a device in its place is refused, not waited on."""
    with open_regular(path):
        return Path(path)


def read_regular(path: str | Path, limit: int | None = None) -> bytes:
    """The bytes of the regular file ``path`` (see ``open_regular``: a directory, a device, a FIFO or a file over
    ``limit`` bytes is refused before any read).

    >>> read_regular("/dev/zero")
    Traceback (most recent call last):
    ...
    tfspec.files.NotAFile: [Errno 22] not a regular file (a device, a FIFO or a socket): '/dev/zero'
    """
    with open_regular(path, limit) as handle:
        if limit is None:
            return handle.read()
        # a read of n bytes reserves n: the file's size (one more to see it grew), never all of ``limit``
        size = min(limit, os.fstat(handle.fileno()).st_size)
        data = handle.read(size + 1)
        if len(data) > size:  # it grew since it was opened: up to one byte past the limit, to tell
            data += handle.read(limit + 1 - len(data))
    if limit is not None and len(data) > limit:
        raise NotAFile(errno.EFBIG, f"more than the {limit:,} bytes tfspec reads from such a file", str(path))
    return data


JSON_DEPTH = 64  # arrays and objects within each other: a configuration has 3 or 4, a tokenizer 6


class TooDeep(ValueError):
    """JSON nested deeper than ``JSON_DEPTH``."""


def loads_json(text: str | bytes, depth: int = JSON_DEPTH):
    """``json.loads(text)``, where arrays and objects nest at most ``depth`` deep: deeper is a ``TooDeep`` (a
    ``ValueError``), never a ``RecursionError`` from the parser or a later walk over the value. The depth is
    measured before parsing, by one pass over the brackets outside strings.

    >>> loads_json("[[[1]]]", depth=3)
    [[[1]]]
    >>> loads_json("[[[1]]]", depth=2)
    Traceback (most recent call last):
    ...
    tfspec.files.TooDeep: JSON nested 3 deep, deeper than the 2 tfspec reads
    """
    import json

    data = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    # (a metrics or corpus line has a few brackets: counted, not walked)
    found = nesting(data) if data.count(b"[") + data.count(b"{") > depth else 0
    if found > depth:
        raise TooDeep(f"JSON nested {found} deep, deeper than the {depth} tfspec reads")
    return json.loads(text)


_STRINGS = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")


def nesting(data: bytes) -> int:
    """How deep the arrays and objects of the JSON text ``data`` nest (brackets inside strings not counted)."""
    import numpy

    brackets = numpy.frombuffer(_STRINGS.sub(b"", data).translate(None, _NOT_BRACKETS), dtype=numpy.uint8)
    if not len(brackets):
        return 0
    steps = numpy.where((brackets == ord("[")) | (brackets == ord("{")), 1, -1)
    return int(numpy.cumsum(steps).max(initial=0))


def read_json(path: str | Path, limit: int = 64 << 20):
    """The JSON value in the regular file ``path`` of at most ``limit`` bytes (``read_regular``) and
    ``JSON_DEPTH`` levels (``loads_json``); ``OSError``s as there, ``ValueError`` (``UnicodeDecodeError``,
    ``json.JSONDecodeError``, ``TooDeep``) for text that is not JSON tfspec reads."""
    return loads_json(read_regular(path, limit).decode("utf-8"))


def check_writable(path: str | Path) -> str | None:
    """Why a new file cannot be written at ``path`` (its directory missing, not a directory, or refusing a new
    file, as ``/proc`` does), or None: a file is created beside it and removed, so the answer is the
    filesystem's. (Whether ``path`` itself is a directory is the caller's to say.)"""
    path = Path(path)
    directory = path.parent if str(path.parent) else Path(".")
    if path.exists() and not path.is_file() and not path.is_dir():
        return "not a regular file (a device, a FIFO or a socket); tfspec writes regular files only"
    if not directory.exists():
        return f"directory {directory} does not exist"
    if not directory.is_dir():
        return f"{directory} is not a directory"
    try:
        fd, probe = tempfile.mkstemp(dir=directory, prefix=f".{path.name}.")
    except OSError as exc:
        return f"cannot write in {directory}: {exc.strerror or exc}"
    os.close(fd)
    os.unlink(probe)
    return None


def safe_reason(exc: BaseException) -> str:
    """Why a file was refused, in one line, without the advice of torch's refusal of a pickle to load it again
    unsafely (``weights_only=False``), which would run whatever code the file holds."""
    text = str(exc).strip()
    unsafe = re.search(r"weights_only|arbitrary code|WeightsUnpickler|Unsupported global", text)
    if unsafe:
        found = re.search(r"Unsupported global: GLOBAL ([\w.]+)|unsupported (?:GLOBAL|class) ([\w.]+)", text)
        what = f" ({found.group(1) or found.group(2)})" if found else ""
        return (f"a pickle that holds more than tensors{what}; tfspec loads only plain tensors and never runs code "
                "from a file: save the weights as safetensors")
    first = text.splitlines()[0] if text else ""
    return f"{type(exc).__name__}: {first[:300]}" if first else type(exc).__name__
