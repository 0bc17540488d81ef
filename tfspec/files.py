"""Files: writing them whole or not at all, reading only regular ones, knowing a path can be written."""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from pathlib import Path


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
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


class NotAFile(OSError):
    """A path that names something other than a regular file (a directory, a device, a FIFO)."""


def read_regular(path: str | Path, limit: int | None = None) -> bytes:
    """The bytes of the regular file ``path``, refusing before any read a directory, a device (``/dev/zero``
    never ends) or a FIFO (it blocks until a writer comes), and a file over ``limit`` bytes; ``OSError``s
    (``NotAFile`` among them) carry the reason in ``strerror``.

    >>> read_regular("/dev/zero")
    Traceback (most recent call last):
    ...
    tfspec.files.NotAFile: [Errno 22] not a regular file (a device, a FIFO or a socket): '/dev/zero'
    """
    path = Path(path)
    info = path.stat()
    if stat.S_ISDIR(info.st_mode):
        raise IsADirectoryError(errno.EISDIR, "a directory, not a file", str(path))
    if not stat.S_ISREG(info.st_mode):
        raise NotAFile(errno.EINVAL, "not a regular file (a device, a FIFO or a socket)", str(path))
    if limit is not None and info.st_size > limit:
        raise NotAFile(errno.EFBIG, f"{info.st_size:,} bytes, more than the {limit:,} a spec may have", str(path))
    with open(path, "rb") as handle:
        data = handle.read() if limit is None else handle.read(limit + 1)
    if limit is not None and len(data) > limit:  # it grew after stat
        raise NotAFile(errno.EFBIG, f"more than the {limit:,} bytes a spec may have", str(path))
    return data


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
