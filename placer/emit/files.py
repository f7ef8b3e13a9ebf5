"""Writing output files safely: the one function every writing option uses.

Like coreutils and kubectl: ``-`` is stdout; a FIFO, a character device (``/dev/null``, ``/dev/stdout``) or a
socket is written through, never replaced; a symlink is followed and the file it points to is written; a
regular file is replaced atomically (a temporary file beside the real target, fsynced, then renamed over
it), keeping the existing file's mode or, for a new file, the mode the umask gives (``0666 & ~umask``). An
output that is one of the run's own input files is refused. Every failure is an ``InputError`` (exit 2)
naming the option and the path, and leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import os
import stat
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path

from placer.model.errors import InputError

STDOUT = "-"


def _label(path: Path | str, option: str) -> str:
    return f"{option} {path}" if option else str(path)


def _reason(exc: OSError) -> str:
    return exc.strerror or type(exc).__name__


def check_output(path: Path | str, option: str = "", inputs: Iterable[Path | str] = (), stdout_busy: str = "") -> None:
    """Refuse, before any work is done, an output that cannot be written: ``''``, a directory, a path under
    a missing directory or a non-directory, one of the run's inputs (the same file by any name), or ``-``
    when stdout already carries ``stdout_busy`` (e.g. "the manifests")."""
    text = str(path)
    if text == STDOUT:
        if stdout_busy:
            raise InputError(f"{_label(path, option)}: '-' means stdout, which already carries {stdout_busy}")
        return
    if text in ("", "."):
        raise InputError(f"{option}: cannot write {text!r} (give a file name, or '-' for stdout)".lstrip())
    for source in inputs:
        if _same_file(path, source):
            raise InputError(f"{_label(path, option)}: cannot write: it is also an input of this run ({source})")
    try:
        info = os.stat(path)
    except FileNotFoundError:
        parent = Path(os.path.realpath(path)).parent
        if not parent.is_dir():
            raise InputError(f"{_label(path, option)}: cannot write (directory {parent} does not exist)") from None
        return
    except OSError as exc:
        raise InputError(f"{_label(path, option)}: cannot write ({_reason(exc)})") from None
    if stat.S_ISDIR(info.st_mode):
        raise InputError(f"{_label(path, option)}: cannot write: it is a directory")


def _same_file(out: Path | str, source: Path | str) -> bool:
    if str(source) == STDOUT:
        return False
    try:
        return os.path.samefile(out, source)
    except OSError:
        return os.path.realpath(out) == os.path.realpath(source)


def write_output(path: Path | str, text: str, option: str = "", inputs: Iterable[Path | str] = ()) -> None:
    """Write ``text`` to ``path`` as described in the module docstring."""
    check_output(path, option, inputs)
    if str(path) == STDOUT:
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    data = text.encode("utf-8")
    try:
        info: os.stat_result | None = os.stat(path)  # follows symlinks, /dev/stdout's magic link included
    except FileNotFoundError:
        info = None
    except OSError as exc:
        raise InputError(f"{_label(path, option)}: cannot write ({_reason(exc)})") from None
    if info is not None and not stat.S_ISREG(info.st_mode):
        _write_through(path, data, option)
        return
    _replace_atomically(Path(os.path.realpath(path)), data, info, _label(path, option))


def _write_through(path: Path | str, data: bytes, option: str) -> None:
    """A FIFO or a device: open it for writing as it is (no temporary file, no rename)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NOCTTY)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
    except OSError as exc:
        raise InputError(f"{_label(path, option)}: cannot write ({_reason(exc)})") from None


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _replace_atomically(real: Path, data: bytes, info: os.stat_result | None, label: str) -> None:
    """A regular file: write a temporary file beside it, fsync, give it the right mode, rename over it."""
    try:
        fd, tmp = tempfile.mkstemp(dir=real.parent, prefix=f".{real.name}.", suffix=".tmp")
    except OSError as exc:
        raise InputError(f"{label}: cannot write ({_reason(exc)})") from None
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        if info is not None:
            os.chmod(tmp, stat.S_IMODE(info.st_mode))
            with contextlib.suppress(OSError):  # keep the owner where allowed (root); else it is ours
                os.chown(tmp, info.st_uid, info.st_gid)
        else:
            os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, real)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise InputError(f"{label}: cannot write ({_reason(exc)})") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    with contextlib.suppress(OSError):  # make the rename durable too
        dir_fd = os.open(real.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def write_atomic(path: Path, text: str) -> None:
    """Kept for callers of the old name: :func:`write_output` without an option label."""
    write_output(path, text)
