"""Writing output files safely: the one function every writing option uses.

Like coreutils and kubectl: ``-`` is stdout; a FIFO, a character device (``/dev/null``, ``/dev/stdout``) or a
socket is written through, never replaced; a symlink is followed and the file it points to is written; a
regular file is replaced atomically (a temporary file beside the real target, fsynced, then renamed over
it), keeping the existing file's mode or, for a new file, the mode the umask gives (``0666 & ~umask``). An
output that is one of the run's own input files is refused. Every failure is an ``InputError`` (exit 2)
naming the option and the path, and leaves nothing behind. A command that also prints collects its files in
``Outputs``, so they appear only once stdout is written: a run that fails writes no file.
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
        _probe(path, option, parent)
        return
    except OSError as exc:
        raise InputError(f"{_label(path, option)}: cannot write ({_reason(exc)})") from None
    if stat.S_ISDIR(info.st_mode):
        raise InputError(f"{_label(path, option)}: cannot write: it is a directory")
    if stdout_busy and stat.S_ISREG(info.st_mode) and _is_stdout(info):
        # /dev/stdout (or the file itself) while stdout goes to a file: the record would be renamed over it
        # and the manifests lost (a pipe or terminal is written through, before stdout)
        raise InputError(f"{_label(path, option)}: cannot write: it is stdout, which already carries {stdout_busy}")
    if stat.S_ISREG(info.st_mode):
        _probe(path, option, Path(os.path.realpath(path)).parent)


def _is_stdout(info: os.stat_result) -> bool:
    try:
        out = os.fstat(sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # no real stdout (captured, closed)
        return False
    return (info.st_dev, info.st_ino) == (out.st_dev, out.st_ino)


def _probe(path: Path | str, option: str, parent: Path) -> None:
    """Create and remove a file where the output's temporary will go: permissions alone do not say (root
    passes every access check, yet cannot create a file in /sys or on a read-only mount)."""
    try:
        with tempfile.NamedTemporaryFile(dir=parent, prefix=".placer-probe-"):
            pass
    except OSError as exc:
        raise InputError(f"{_label(path, option)}: cannot write ({_reason(exc)})") from None


def _same_file(out: Path | str, source: Path | str) -> bool:
    if str(source) == STDOUT:
        return False
    try:
        return os.path.samefile(out, source)
    except OSError:
        return os.path.realpath(out) == os.path.realpath(source)


def write_output(path: Path | str, text: str, option: str = "", inputs: Iterable[Path | str] = ()) -> None:
    """Write ``text`` to ``path`` as described in the module docstring."""
    with Outputs() as outputs:
        outputs.add(path, text, option, inputs)
        outputs.commit()


class Outputs:
    """The files a command writes beside what it prints, made visible only after stdout is written.

    Why: ``placer solve --placement p.yaml > /dev/full`` failed (exit 2) after p.yaml was in place, a record
    of manifests nobody received, which a later ``--keep p.yaml`` would pin. So ``add`` writes each regular
    file to its temporary beside the target (a full disk fails the run before anything is printed), the
    command prints and flushes stdout, and ``commit`` renames them into place. Leaving the ``with`` block
    without ``commit`` (any error, stdout's included) removes the temporaries. ``-`` is printed at once (it
    goes in front of what follows on stdout). FIFOs and devices cannot be staged, so they are written at
    ``add``, before anything is printed: a device that fails (``--placement /dev/full``) must fail the run
    while stdout is still empty, or ``| kubectl apply -f -`` would apply the manifests of a failed run."""

    def __init__(self) -> None:
        self._staged: list[tuple[str, Path, str]] = []  # (temporary, real target, label)

    def __enter__(self) -> Outputs:
        return self

    def __exit__(self, *exc: object) -> None:
        for tmp, *_ in self._staged:
            Path(tmp).unlink(missing_ok=True)
        self._staged.clear()

    def add(self, path: Path | str, text: str, option: str = "", inputs: Iterable[Path | str] = ()) -> None:
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
        real = Path(os.path.realpath(path))
        label = _label(path, option)
        self._staged.append((_stage(real, data, info, label), real, label))

    def commit(self) -> None:
        """Make every added regular file visible: its temporary renamed over its target."""
        while self._staged:
            tmp, real, label = self._staged[0]
            try:
                os.replace(tmp, real)
            except OSError as exc:
                raise InputError(f"{label}: cannot write ({_reason(exc)})") from None
            self._staged.pop(0)
            _sync_directory(real.parent)


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


def _stage(real: Path, data: bytes, info: os.stat_result | None, label: str) -> str:
    """A regular file's temporary beside it, written, fsynced and given the right mode: renamed over the
    target at commit. Returns the temporary's path."""
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
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise InputError(f"{label}: cannot write ({_reason(exc)})") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return tmp


def _sync_directory(directory: Path) -> None:
    """Make a rename durable too."""
    with contextlib.suppress(OSError):
        dir_fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def write_atomic(path: Path, text: str) -> None:
    """Kept for callers of the old name: :func:`write_output` without an option label."""
    write_output(path, text)
