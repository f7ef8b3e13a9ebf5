"""The ``placer`` command run inside the test process: ``placer.cli.main`` with its own argv, streams, working
directory and environment, returning what ``subprocess.run`` would.

Why: a real process costs 1.2-1.5 CPU seconds before it does anything (the interpreter, OR-Tools, pydantic,
rich), and the suite ran the CLI some hundreds of times, over half of its time. ``main`` is everything the
process runs except the last step (``placer.cli.run``: flush stdout, report a stdout that failed, end the
process at once), so tests that check what a command prints, writes and exits with use this; tests of the
process itself (stdout closed or full, a pipe, a signal, bytes across hash seeds, interpreter start-up) run
the real one (tests/test_cli.py ``run``). tests/test_cli.py checks that both give the same exit code and bytes.
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import placer.cli

ROOT = Path(__file__).resolve().parent.parent


TIMEOUT_S = 300.0  # as subprocess.run(timeout=...): a command that hangs fails its test, not the whole run


def run(
    *args: str | Path,
    cwd: Path = ROOT,
    stdin: str | bytes | None = None,
    env: dict[str, str] | None = None,
    timeout: float = TIMEOUT_S,
) -> subprocess.CompletedProcess[str]:
    """``placer ARGS`` in this process; stdout and stderr decoded as text, as ``subprocess.run(text=True)``
    gives them (universal newlines)."""
    done = run_bytes(*args, cwd=cwd, stdin=stdin, env=env, timeout=timeout)
    return subprocess.CompletedProcess(done.args, done.returncode, _text(done.stdout), _text(done.stderr))


def run_bytes(
    *args: str | Path,
    cwd: Path = ROOT,
    stdin: str | bytes | None = None,
    env: dict[str, str] | None = None,
    timeout: float = TIMEOUT_S,
) -> subprocess.CompletedProcess[bytes]:
    """``placer ARGS`` in this process, stdout and stderr as the bytes the process would write."""
    argv = ["placer", *map(str, args)]
    data = stdin.encode() if isinstance(stdin, str) else (stdin or b"")
    out, err = _Kept(), _Kept()
    with (
        _environment(env),
        _cwd(cwd),
        _streams(io.BytesIO(data), out, err),
        _argv(argv),
        _warnings(),
        _deadline(timeout, argv),
    ):
        code = _main()
    return subprocess.CompletedProcess(argv, code, out.getvalue(), err.getvalue())


class _Kept(io.BytesIO):
    """A stream the command may close (as it may close its stdout) and the caller still reads."""

    def close(self) -> None:
        pass


class CommandTimedOut(BaseException):
    """Raised in the command by an alarm: a BaseException, so that placer's own handlers do not take it."""


@contextlib.contextmanager
def _deadline(seconds: float, argv: list[str]) -> Iterator[None]:
    def expire(_signum, _frame):
        raise CommandTimedOut(f"{' '.join(argv)} did not end within {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@contextlib.contextmanager
def _warnings() -> Iterator[None]:
    """Warnings as a fresh interpreter shows them, on the command's stderr: pytest would otherwise record
    them, and a check that stderr is empty would pass while the real process printed one."""

    def show(message, category, filename, lineno, file=None, line=None) -> None:
        sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))

    with warnings.catch_warnings():
        warnings.resetwarnings()
        for action, category in (
            ("ignore", DeprecationWarning),
            ("ignore", PendingDeprecationWarning),
            ("ignore", ImportWarning),
            ("ignore", ResourceWarning),
        ):
            warnings.simplefilter(action, category)
        warnings.filterwarnings("default", category=DeprecationWarning, module="__main__")
        warnings.showwarning = show
        yield


def _main() -> int:
    try:
        placer.cli.main()
    except SystemExit as exc:
        code = exc.code
    else:  # main always exits; an exit code of 0 is what the process would give if it did not
        code = 0
    if code is None:
        return 0
    if not isinstance(code, int):  # as placer.cli.run turns sys.exit("text") into 1
        print(code, file=sys.stderr)
        return 1
    return code


def _text(data: bytes) -> str:
    return data.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")


@contextlib.contextmanager
def _streams(stdin: io.BytesIO, stdout: io.BytesIO, stderr: io.BytesIO) -> Iterator[None]:
    """stdin, stdout and stderr as a process with pipes has them: UTF-8 text over bytes, not a terminal."""
    saved = sys.stdin, sys.stdout, sys.stderr
    wrapped = [
        io.TextIOWrapper(stream, encoding="utf-8", errors="backslashreplace" if stream is stderr else "strict")
        for stream in (stdin, stdout, stderr)
    ]
    sys.stdin, sys.stdout, sys.stderr = wrapped
    try:
        yield
    finally:
        sys.stdin, sys.stdout, sys.stderr = saved
        for stream in wrapped:
            with contextlib.suppress(ValueError, OSError):  # a stream the command closed
                stream.flush()
                stream.detach()


@contextlib.contextmanager
def _argv(argv: list[str]) -> Iterator[None]:
    """``sys.argv``, and ``__main__`` made to look like a script: click names the program in usage messages
    from them, and would otherwise say "python -m pytest"."""
    main = sys.modules["__main__"]
    saved = sys.argv, getattr(main, "__spec__", None), getattr(main, "__package__", None)
    sys.argv, main.__spec__, main.__package__ = argv, None, None
    try:
        yield
    finally:
        sys.argv, main.__spec__, main.__package__ = saved


@contextlib.contextmanager
def _cwd(path: Path) -> Iterator[None]:
    saved = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(saved)


@contextlib.contextmanager
def _environment(env: dict[str, str] | None) -> Iterator[None]:
    """The environment a user's shell gives (no PLACER_DEBUG, which turns errors into tracebacks), or ``env``."""
    saved = dict(os.environ)
    wanted = env if env is not None else {k: v for k, v in saved.items() if k != "PLACER_DEBUG"}
    os.environ.clear()
    os.environ.update(wanted)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)
