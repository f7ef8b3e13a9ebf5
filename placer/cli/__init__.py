"""The ``placer`` command. One file per subcommand; this module registers them and owns exit codes.

stdout carries only manifests / machine output; everything for people goes to stderr. Exit codes:
0 placed, 1 infeasible (with the conflicting constraints), 2 bad input, 3 internal check failed.
A traceback is shown only when PLACER_DEBUG is set.
"""

from __future__ import annotations

import contextlib
import errno
import gc
import os
import sys

import typer

from placer.cli import autoscale, cluster, explain, plan, schema, size, solve, validate
from placer.cli.deferred import defer_pandas

app = typer.Typer(
    name="placer",
    help="Topology-aware gang placement of LLM serving topologies on GPU clusters.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.command("solve")(solve.solve_command)
app.command("explain")(explain.explain_command)
app.command("plan")(plan.plan_command)
app.command("autoscale")(autoscale.autoscale_command)
app.command("validate")(validate.validate_command)
app.command("size")(size.size_command)
app.command("schema")(schema.schema_command)
app.add_typer(cluster.app, name="cluster")


def main() -> None:
    """One command: its exit code as SystemExit. What it read from stdin or a FIFO is forgotten at the end
    (looked up, not imported: ``--help`` should not pay for the input models)."""
    try:
        _command()
    finally:
        load = sys.modules.get("placer.model.load")
        if load is not None:
            load.forget_streams()


def _command() -> None:
    from placer.model.errors import InfeasibleError, PlacerError

    try:
        # Without standalone mode click returns the code of a typer.Exit instead of raising it.
        code = app(standalone_mode=False)
    except InfeasibleError as exc:
        _err(f"infeasible: {exc}")
        for reason in exc.reasons:
            _err(f"  - {reason}")
        sys.exit(exc.exit_code)
    except PlacerError as exc:
        _err(f"error: {exc}")
        sys.exit(exc.exit_code)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except OSError as exc:  # the output could not be written (a full disk, a device error): not a bug here
        if os.environ.get("PLACER_DEBUG"):
            raise
        _err(f"error: {exc.filename}: {exc.strerror}" if exc.filename else _stdout_failed(exc))
        sys.exit(2)
    except Exception as exc:  # usage errors (click, vendored by typer) and anything unexpected
        if hasattr(exc, "show") and isinstance(getattr(exc, "exit_code", None), int):
            exc.show(file=sys.stderr)  # type: ignore[attr-defined]
            sys.exit(2)
        if type(exc).__name__ == "Abort":
            _err("aborted")
            sys.exit(130)
        if os.environ.get("PLACER_DEBUG"):
            raise
        _err(f"internal error: {type(exc).__name__}: {exc} (set PLACER_DEBUG=1 for a traceback)")
        sys.exit(3)
    sys.exit(code if isinstance(code, int) else 0)


def run() -> None:
    """The process entry point (the ``placer`` script and ``python -m placer``): ``main``, then leave.

    Why not a plain exit: tearing the interpreter down (OR-Tools, pandas, numpy and pydantic module by
    module) takes ~0.1 s of every process, a sixth of a small solve's, to free memory the OS takes back
    anyway. So the streams are flushed and the process ends at once; nothing placer writes is pending by
    then (files are written atomically and closed before ``main`` returns). ``main`` itself still raises
    SystemExit, for callers in-process.

    For the same reason Python's cycle collector is off for the command: each full collection walks every
    live object, a loaded cluster's millions included, to find a few MB of cyclic garbage (1-24 MB in the
    commands measured at 30k-100k GPUs) that the process would give back at its end anyway. ``placer
    validate`` on 100k GB200 GPUs: 8.1 -> 4.8 CPU s (bench/NOTES.md). In-process callers keep theirs (the
    runners only set it aside while they build their inputs: ``pipeline.LongLived``).

    And pandas, which OR-Tools imports and placer never uses, is loaded only if something asks for it
    (``placer.cli.deferred``): about a fifth of a small solve's process.

    stdout is UTF-8 whatever the locale says: manifests and JSON are UTF-8 by their formats, the same input
    gives the same bytes under any ``LANG``, and a table with "µs" no longer fails on an ASCII locale."""
    defer_pandas()
    _utf8_stdout()
    collecting = gc.isenabled()
    gc.disable()
    try:
        main()
        code: object = 0
    except SystemExit as exc:
        code = exc.code
    if code is None:
        code = 0
    elif not isinstance(code, int):  # what Python does with sys.exit("text")
        _err(str(code))
        code = 1
    try:
        if sys.stdout is not None:  # None when the process started with stdout closed
            sys.stdout.flush()
    except OSError as exc:
        if exc.errno == errno.EPIPE:  # the reader went away (placer solve ... | head): as typer reports it
            code = code or 1
        else:  # a full disk, say: the manifests are lost, which is not "placed"
            _err(_stdout_failed(exc))
            code = 2
    with contextlib.suppress(OSError, AttributeError):
        sys.stderr.flush()
    if collecting:  # as it was, should the process go on (a test making _end_process raise)
        gc.enable()
    _end_process(code)


def _utf8_stdout() -> None:
    stream = sys.stdout
    encoding = (getattr(stream, "encoding", None) or "").lower().replace("_", "-")
    if encoding not in ("utf-8", "utf8") and hasattr(stream, "reconfigure"):
        with contextlib.suppress(OSError, ValueError):
            stream.reconfigure(encoding="utf-8", errors=stream.errors)  # a handler the user chose stays


_end_process = os._exit  # one name, so tests can make it raise in their own process (tests/conftest.py)


def _stdout_failed(exc: OSError) -> str:
    return f"error: cannot write to stdout ({exc.strerror or exc})"


def _err(text: str) -> None:
    print(text, file=sys.stderr)
