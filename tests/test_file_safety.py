"""The file-safety matrix (issue 18): every option that writes a file, against every kind of target.

Writers: ``solve --placement``, ``plan --placement``, ``cluster generate -o``, ``cluster import -o``,
``explain --svg`` and ``schema --write``. Targets: a new file (mode from the umask), an existing file (keeps
its mode), a symlink (the file it points to is written; the link stays), a FIFO and a character device
(written through, never replaced), ``-`` (stdout, or refused where stdout already carries output), places
that cannot be written (a directory, ``''``, under /proc, under a regular file, a read-only directory), the
run's own input file (refused, untouched), two writers at once, and kill -9 in the middle of a write.
A run that fails writes nothing. The CLI runs in-process (tests/cli_in_process.py) except where only a
process shows the behaviour: /dev/stdout, a full stdout, two writers at once, kill -9."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from cli_in_process import run_bytes

import placer

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "fixtures" / "specs" / "aggregated-tp8.yaml"
CLUSTER = ROOT / "fixtures" / "clusters" / "small-mixed.yaml"
NODES = ROOT / "tests" / "data" / "samples" / "k8s-gpu-node-kubectl-get-nodes.json"


def placer_cmd() -> list[str]:
    if (Path(placer.__file__).parent / "__main__.py").exists():
        return [sys.executable, "-m", "placer"]
    return [str(Path(sys.executable).parent / "placer")]


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "PLACER_DEBUG"}


def run(args: list[str | Path], umask: int = 0o022, cwd: Path = ROOT) -> subprocess.CompletedProcess[bytes]:
    """The CLI in this process (tests/cli_in_process.py) under ``umask``: the test process's own, put back."""
    saved = os.umask(umask)
    try:
        return run_bytes(*args, cwd=cwd)
    finally:
        os.umask(saved)


def run_process(args: list[str | Path]) -> subprocess.CompletedProcess[bytes]:
    """The real process, for what only a process shows: its stdout as a file (/dev/stdout), two at once, kill -9."""
    return subprocess.run([*placer_cmd(), *map(str, args)], cwd=ROOT, env=_env(), capture_output=True, timeout=120)


@dataclass(frozen=True)
class Writer:
    """One writing option: the arguments with OUT where the output path goes, and the run's input files."""

    name: str
    args: Callable[[Path, Path], list[str | Path]]  # (output path, record path) -> arguments
    inputs: Callable[[Path], list[Path]]  # record path -> input files
    stdout_free: bool  # stdout carries nothing else, so '-' may mean stdout


WRITERS = [
    Writer(
        "solve --placement", lambda o, r: ["solve", SPEC, CLUSTER, "--placement", o], lambda r: [SPEC, CLUSTER], False
    ),
    Writer(
        "plan --placement",
        lambda o, r: ["plan", "--from", r, CLUSTER, "--cut", "0", "--time-limit", "5", "--placement", o],
        lambda r: [r, CLUSTER],
        False,
    ),
    Writer(
        "cluster generate -o",
        lambda o, r: ["cluster", "generate", "--gpus", "16", "--seed", "3", "-o", o],
        lambda r: [],
        True,
    ),
    Writer(
        "cluster import -o",
        lambda o, r: ["cluster", "import", "--nodes", NODES, "-q", "-o", o],
        lambda r: [NODES],
        True,
    ),
    Writer(
        "explain --svg",
        lambda o, r: ["explain", r, "--cluster", CLUSTER, "--no-baselines", "--svg", o],
        lambda r: [r, CLUSTER],
        True,
    ),
]
IDS = [w.name for w in WRITERS]


@pytest.fixture(scope="module")
def record(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A placement record of one replica: what ``plan`` starts from and ``explain`` reads."""
    path = tmp_path_factory.mktemp("record") / "running.yaml"
    one = tmp_path_factory.mktemp("spec") / "one.yaml"
    one.write_text(
        SPEC.read_text().replace("replicas: 2", "replicas: 1").replace("name: llama-70b-agg", "name: running")
    )
    proc = run(["solve", one, CLUSTER, "--placement", path])
    assert proc.returncode == 0, proc.stderr.decode()
    return path


@pytest.fixture(scope="module")
def expected(record: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    """What each writer writes into a new regular file (the reference for every other target)."""
    out = {}
    for w in WRITERS:
        path = tmp_path_factory.mktemp("ref") / ("out.svg" if "svg" in w.name else "out.yaml")
        proc = run(w.args(path, record))
        assert proc.returncode == 0, (w.name, proc.stderr.decode())
        out[w.name] = path.read_bytes()
        assert out[w.name]
    return out


def _leftovers(directory: Path, *keep: str) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name not in keep)


@pytest.mark.parametrize("writer", WRITERS, ids=IDS)
@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_new_file_honours_the_umask(
    writer: Writer, umask: int, record: Path, expected: dict[str, bytes], tmp_path: Path
) -> None:
    out = tmp_path / ("new.svg" if "svg" in writer.name else "new.yaml")
    proc = run(writer.args(out, record), umask=umask)
    assert proc.returncode == 0, proc.stderr.decode()
    assert out.read_bytes() == expected[writer.name]
    assert stat.S_IMODE(out.stat().st_mode) == 0o666 & ~umask
    assert _leftovers(tmp_path, out.name) == []


@pytest.mark.parametrize("writer", WRITERS, ids=IDS)
def test_existing_file_keeps_its_mode(writer: Writer, record: Path, expected: dict[str, bytes], tmp_path: Path) -> None:
    out = tmp_path / "existing"
    out.write_text("old\n")
    out.chmod(0o640)
    proc = run(writer.args(out, record), umask=0o077)
    assert proc.returncode == 0, proc.stderr.decode()
    assert out.read_bytes() == expected[writer.name]
    assert stat.S_IMODE(out.stat().st_mode) == 0o640
    assert _leftovers(tmp_path, out.name) == []


@pytest.mark.parametrize("writer", WRITERS, ids=IDS)
def test_symlink_is_followed_to_the_real_file(
    writer: Writer, record: Path, expected: dict[str, bytes], tmp_path: Path
) -> None:
    real_dir = tmp_path / "real"
    real_dir.mkdir()
    target = real_dir / "target"
    target.write_text("old\n")
    link = tmp_path / "link"
    link.symlink_to(Path("real") / "target")  # relative, as users make them
    proc = run(writer.args(link, record))
    assert proc.returncode == 0, proc.stderr.decode()
    assert link.is_symlink() and os.readlink(link) == str(Path("real") / "target")
    assert target.read_bytes() == expected[writer.name]
    assert _leftovers(real_dir, "target") == []  # the temporary file was made beside the target
    assert _leftovers(tmp_path, "real", "link") == []


@pytest.mark.parametrize("writer", WRITERS, ids=IDS)
def test_dangling_symlink_creates_its_target(
    writer: Writer, record: Path, expected: dict[str, bytes], tmp_path: Path
) -> None:
    link = tmp_path / "link"
    link.symlink_to("made-by-placer")
    proc = run(writer.args(link, record))
    assert proc.returncode == 0, proc.stderr.decode()
    assert link.is_symlink()
    assert (tmp_path / "made-by-placer").read_bytes() == expected[writer.name]


@pytest.mark.parametrize("writer", WRITERS, ids=IDS)
def test_fifo_is_written_through(writer: Writer, record: Path, expected: dict[str, bytes], tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    got: list[bytes] = []

    def reader() -> None:
        with open(fifo, "rb") as fh:
            got.append(fh.read())

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    try:
        proc = run(writer.args(fifo, record))
    finally:
        thread.join(timeout=30)
        if thread.is_alive():  # placer never opened the FIFO: unblock the reader (a reader is waiting, so no ENXIO)
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            thread.join(timeout=30)
    assert proc.returncode == 0, proc.stderr.decode()
    assert stat.S_ISFIFO(fifo.lstat().st_mode)
    assert got == [expected[writer.name]]


@pytest.mark.parametrize("writer", WRITERS, ids=IDS)
def test_character_device_is_written_through(writer: Writer, record: Path, tmp_path: Path) -> None:
    """A private /dev/null (mknod c 1 3): placer once replaced /dev/null itself with a regular file."""
    null = tmp_path / "null"
    try:
        os.mknod(null, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("mknod needs CAP_MKNOD")
    proc = run(writer.args(null, record))
    assert proc.returncode == 0, proc.stderr.decode()
    assert stat.S_ISCHR(null.lstat().st_mode)
    assert _leftovers(tmp_path, "null") == []


@pytest.mark.parametrize("writer", WRITERS, ids=IDS)
def test_symlink_to_stdout_is_written_through(
    writer: Writer, record: Path, expected: dict[str, bytes], tmp_path: Path
) -> None:
    """``-o /dev/stdout`` (here a link to it, so that no test can ever replace the real /dev/stdout)."""
    link = tmp_path / "stdout"
    link.symlink_to("/dev/stdout")
    proc = run_process(writer.args(link, record))
    assert proc.returncode == 0, proc.stderr.decode()
    assert link.is_symlink()
    assert expected[writer.name] in proc.stdout
    assert _leftovers(tmp_path, "stdout") == []


@pytest.mark.parametrize("writer", WRITERS, ids=IDS)
def test_dash_means_stdout(writer: Writer, record: Path, expected: dict[str, bytes], tmp_path: Path) -> None:
    proc = run(writer.args(Path("-"), record), cwd=tmp_path)
    assert b"Traceback" not in proc.stderr
    assert list(tmp_path.iterdir()) == []  # no file named '-'
    if writer.stdout_free:
        assert proc.returncode == 0, proc.stderr.decode()
        assert proc.stdout == expected[writer.name]
    else:
        assert proc.returncode == 2, proc.stderr.decode()
        assert proc.stdout == b""
        assert b"'-' means stdout, which already carries" in proc.stderr


UNWRITABLE = {
    "directory": (lambda t: t, "is a directory"),
    "empty path": (lambda t: Path(""), "cannot write"),
    "under /proc": (lambda t: Path("/proc/placer-cannot-write-here.yaml"), "cannot write"),
    "under a regular file": (lambda t: t / "file" / "out.yaml", "cannot write"),
    "missing directory": (lambda t: t / "no-such-dir" / "out.yaml", "cannot write"),
}


@pytest.mark.parametrize("writer", WRITERS, ids=IDS)
@pytest.mark.parametrize("case", list(UNWRITABLE))
def test_unwritable_target_is_bad_input(writer: Writer, case: str, record: Path, tmp_path: Path) -> None:
    (tmp_path / "file").write_text("untouched\n")
    make, fragment = UNWRITABLE[case]
    out = make(tmp_path)
    proc = run(writer.args(out, record))
    assert b"Traceback" not in proc.stderr
    assert proc.returncode == 2, proc.stderr.decode()
    assert proc.stdout == b""
    assert fragment.encode() in proc.stderr, proc.stderr.decode()
    assert (tmp_path / "file").read_text() == "untouched\n"
    assert _leftovers(tmp_path, "file") == []


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
@pytest.mark.parametrize("writer", WRITERS, ids=IDS)
def test_read_only_directory_is_bad_input(writer: Writer, record: Path, tmp_path: Path) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        proc = run(writer.args(ro / "out", record))
    finally:
        ro.chmod(0o755)
    assert proc.returncode == 2, proc.stderr.decode()
    assert b"cannot write" in proc.stderr and b"Permission denied" in proc.stderr
    assert list(ro.iterdir()) == []


@pytest.mark.parametrize("writer", [w for w in WRITERS if w.name != "cluster generate -o"], ids=IDS[:2] + IDS[3:])
@pytest.mark.parametrize("via", ["same path", "symlink", "hard link"])
def test_input_file_given_as_output_is_refused(writer: Writer, via: str, record: Path, tmp_path: Path) -> None:
    # Copy the inputs, so that a failure of this test cannot damage the fixtures.
    copies = {}
    for path in writer.inputs(record):
        copy = tmp_path / path.name
        copy.write_bytes(path.read_bytes())
        copies[path] = copy
    victim_src = writer.inputs(record)[0]
    victim = copies[victim_src]
    before = victim.read_bytes()
    out = {"same path": victim, "symlink": tmp_path / "alias", "hard link": tmp_path / "hard"}[via]
    if via == "symlink":
        out.symlink_to(victim.name)
    elif via == "hard link":
        os.link(victim, out)
    args = [copies.get(a, a) if isinstance(a, Path) else a for a in writer.args(out, record)]
    args = [copies.get(Path(a), a) if isinstance(a, str) and Path(a) in copies else a for a in args]
    proc = run(args)
    assert b"Traceback" not in proc.stderr
    assert proc.returncode == 2, proc.stderr.decode()
    assert proc.stdout == b""
    assert b"is also an input of this run" in proc.stderr, proc.stderr.decode()
    assert victim.read_bytes() == before


def test_schema_write_matrix(tmp_path: Path) -> None:
    """``schema --write DIR``: new files honour the umask, a symlinked schema file is followed, a FIFO written
    through, an existing file keeps its mode, and a regular file given as DIR is bad input."""
    reference = tmp_path / "ref"
    assert run(["schema", "--write", reference]).returncode == 0
    names = sorted(p.name for p in reference.iterdir())
    assert names == ["cluster.schema.json", "placement.schema.json", "servingtopology.schema.json"]
    out = tmp_path / "out"
    out.mkdir()
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text("old\n")
    (out / "cluster.schema.json").symlink_to(elsewhere)
    (out / "placement.schema.json").write_text("old\n")
    (out / "placement.schema.json").chmod(0o600)
    os.mkfifo(out / "servingtopology.schema.json")
    got: list[bytes] = []
    thread = threading.Thread(
        target=lambda: got.append((out / "servingtopology.schema.json").read_bytes()), daemon=True
    )
    thread.start()
    proc = run(["schema", "--write", out], umask=0o002)
    thread.join(timeout=30)
    assert proc.returncode == 0, proc.stderr.decode()
    assert (out / "cluster.schema.json").is_symlink()
    assert elsewhere.read_bytes() == (reference / "cluster.schema.json").read_bytes()
    assert (out / "placement.schema.json").read_bytes() == (reference / "placement.schema.json").read_bytes()
    assert stat.S_IMODE((out / "placement.schema.json").stat().st_mode) == 0o600
    assert got == [(reference / "servingtopology.schema.json").read_bytes()]
    assert stat.S_IMODE((reference / "cluster.schema.json").stat().st_mode) == 0o644
    assert sorted(p.name for p in out.iterdir()) == names
    proc = run(["schema", "--write", elsewhere])
    assert proc.returncode == 2 and b"Traceback" not in proc.stderr, proc.stderr.decode()
    assert elsewhere.read_bytes() == (reference / "cluster.schema.json").read_bytes()


@pytest.mark.parametrize("writer", [WRITERS[0], WRITERS[3]], ids=[IDS[0], IDS[3]])
def test_failed_run_writes_nothing(writer: Writer, record: Path, tmp_path: Path) -> None:
    """Bad input (a spec or node file that does not parse): the existing output is untouched, none is created."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: [\n")
    existing = tmp_path / "existing"
    existing.write_text("old\n")
    for out in (existing, tmp_path / "new"):
        args = [bad if a in (SPEC, NODES) else a for a in writer.args(out, record)]
        proc = run(args)
        assert proc.returncode == 2, proc.stderr.decode()
    assert existing.read_text() == "old\n"
    assert _leftovers(tmp_path, "bad.yaml", "existing") == []


def test_infeasible_solve_writes_no_placement(tmp_path: Path) -> None:
    spec = tmp_path / "big.yaml"
    spec.write_text(SPEC.read_text().replace("instances: 1", "instances: 8"))
    out = tmp_path / "placement.yaml"
    proc = run(["solve", spec, CLUSTER, "--placement", out])
    assert proc.returncode == 1, proc.stderr.decode()
    assert proc.stdout == b""
    assert _leftovers(tmp_path, "big.yaml") == []


def _generate(seed: int, out: Path, gpus: int = 4096) -> list[str]:
    return [*placer_cmd(), "cluster", "generate", "--gpus", str(gpus), "--seed", str(seed), "-o", str(out)]


def test_two_concurrent_writers_leave_one_whole_file(tmp_path: Path) -> None:
    texts = {}
    for seed in (1, 2):
        texts[seed] = run(["cluster", "generate", "--gpus", "4096", "--seed", str(seed)]).stdout
    out = tmp_path / "cluster.yaml"
    for _ in range(3):
        procs = [
            subprocess.Popen(_generate(seed, out), cwd=ROOT, env=_env(), stderr=subprocess.PIPE) for seed in (1, 2)
        ]
        for p in procs:
            _, err = p.communicate(timeout=120)
            assert p.returncode == 0, err.decode()
        assert out.read_bytes() in (texts[1], texts[2])
        assert _leftovers(tmp_path, "cluster.yaml") == []


def test_kill_9_mid_write_never_leaves_a_torn_file(tmp_path: Path) -> None:
    new = run(["cluster", "generate", "--gpus", "40000", "--seed", "5"]).stdout
    out = tmp_path / "cluster.yaml"
    out.write_bytes(b"old: whole\n")
    outcomes = set()
    for delay in (0.3, 0.6, 0.9, 1.2, 1.5, 2.0, 3.0):
        proc = subprocess.Popen(_generate(5, out, 40000), cwd=ROOT, env=_env(), stderr=subprocess.DEVNULL)
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
        content = out.read_bytes()
        assert content in (b"old: whole\n", new), f"torn file after kill at {delay}s: {len(content)} bytes"
        outcomes.add(content == new)
        out.write_bytes(b"old: whole\n")
        for leftover in tmp_path.glob(".cluster.yaml.*"):
            leftover.unlink()  # a temporary file a killed process could not remove is allowed; a torn target is not
    # A kill at 0.3 s lands before the process has even generated the cluster (start-up alone takes longer),
    # so the old file must have survived at least once; test_an_output_file_changes_in_one_step shows,
    # whatever the timing, that the target only ever changes by one rename.
    assert False in outcomes


AUTOSCALE = ROOT / "tests" / "data" / "autoscale"
# name -> (output path, placement record, a second spec for a batch) -> arguments
FULL_STDOUT_RUNS: dict[str, Callable[[Path, Path, Path], list[str | Path]]] = {
    "solve --placement": lambda o, r, s: ["solve", SPEC, CLUSTER, "--placement", o],
    "solve --topology-objects": lambda o, r, s: ["solve", SPEC, CLUSTER, "--target", "kueue", "--topology-objects", o],
    "solve (batch) --placement": lambda o, r, s: ["solve", SPEC, s, CLUSTER, "--placement", o],
    "plan --placement": lambda o, r, s: [
        "plan",
        "--from",
        r,
        CLUSTER,
        "--cut",
        "0",
        "--time-limit",
        "5",
        "--placement",
        o,
    ],
    "explain --svg": lambda o, r, s: ["explain", r, "--cluster", CLUSTER, "--no-baselines", "-o", "json", "--svg", o],
    "autoscale --decision": lambda o, r, s: [
        "autoscale",
        AUTOSCALE / "spec.yaml",
        AUTOSCALE / "cluster.yaml",
        "--keep",
        AUTOSCALE / "running.yaml",
        "--now",
        "2025-06-01T12:00:00Z",
        "--full",
        "--decision",
        o,
    ],
}


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
@pytest.mark.parametrize("name", list(FULL_STDOUT_RUNS))
def test_stdout_that_cannot_be_written_leaves_no_output_file(name: str, record: Path, tmp_path: Path) -> None:
    """The files appear only once stdout is written: a record of manifests nobody received would be pinned
    by a later --keep. An existing file keeps its bytes; no temporary is left behind."""
    second = tmp_path / "second.yaml"
    second.write_text(
        SPEC.read_text().replace("name: llama-70b-agg", "name: second").replace("replicas: 2", "replicas: 1")
    )
    existing = tmp_path / "existing"
    existing.write_text("old\n")
    for out in (existing, tmp_path / "new"):
        args = FULL_STDOUT_RUNS[name](out, record, second)
        with open("/dev/full", "wb") as full:
            proc = subprocess.run(
                [*placer_cmd(), *map(str, args)], cwd=ROOT, env=_env(), stdout=full, stderr=subprocess.PIPE, timeout=120
            )
        assert proc.returncode == 2, proc.stderr.decode()
        assert b"cannot write to stdout" in proc.stderr and b"Traceback" not in proc.stderr, proc.stderr.decode()
    assert existing.read_text() == "old\n"
    assert _leftovers(tmp_path, "existing", "second.yaml") == []


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
@pytest.mark.parametrize("name", list(FULL_STDOUT_RUNS))
def test_an_output_device_that_fails_fails_the_run_before_anything_is_printed(
    name: str, record: Path, tmp_path: Path
) -> None:
    """A device or FIFO cannot be staged like a regular file, so it is written before stdout: when it fails
    (a full disk), stdout is still empty, and `| kubectl apply -f -` applies nothing of a run that exits 2."""
    second = tmp_path / "second.yaml"
    second.write_text(
        SPEC.read_text().replace("name: llama-70b-agg", "name: second").replace("replicas: 2", "replicas: 1")
    )
    proc = run(FULL_STDOUT_RUNS[name](Path("/dev/full"), record, second))
    assert proc.returncode == 2, proc.stderr.decode()
    assert proc.stdout == b"", proc.stdout[:200]
    assert b"/dev/full: cannot write" in proc.stderr and b"Traceback" not in proc.stderr, proc.stderr.decode()


@pytest.mark.skipif(not Path("/sys/kernel").is_dir(), reason="needs Linux sysfs, where nobody can create a file")
def test_an_output_where_no_file_can_be_created_is_refused_before_solving():
    """Permission bits do not say (root passes every access check): placer creates and removes a file where
    the output's temporary will go before it solves, so the run fails at once, not after the solve."""
    proc = run_bytes("solve", SPEC, CLUSTER, "--placement", "/sys/kernel/placer-probe.json")
    err = proc.stderr.decode()
    assert proc.returncode == 2 and proc.stdout == b"", err
    assert "--placement /sys/kernel/placer-probe.json: cannot write" in err
    assert "solving" not in err
    assert not any(p.name.startswith(".placer-probe-") for p in Path("/sys/kernel").iterdir())


def test_an_output_that_is_stdout_itself_is_refused(tmp_path):
    """--placement /dev/stdout with stdout redirected to a file renamed the record over that file, and the
    manifests were lost; it is '-' under another name, and refused the same way."""
    out = tmp_path / "manifests.yaml"
    with out.open("wb") as sink:
        proc = subprocess.run(
            [sys.executable, "-m", "placer", "solve", SPEC, CLUSTER, "--placement", "/dev/stdout"],
            stdout=sink,
            stderr=subprocess.PIPE,
            check=False,
        )
    assert proc.returncode == 2, proc.stderr
    assert b"--placement /dev/stdout: cannot write: it is stdout" in proc.stderr
    assert out.read_bytes() == b""


@pytest.mark.parametrize(
    "args",
    [
        ["cluster", "generate", "--gpus", "64", "--seed", "3", "-o", "{out}"],
        [
            "solve",
            str(ROOT / "fixtures" / "specs" / "aggregated-tp8.yaml"),
            str(ROOT / "fixtures" / "clusters" / "small-mixed.yaml"),
            "-q",
            "--placement",
            "{out}",
        ],
    ],  # fmt: skip
    ids=["cluster-generate", "solve-placement"],
)
def test_an_output_file_changes_in_one_step(tmp_path: Path, monkeypatch, args: list[str]) -> None:
    """Atomic, seen from inside: while the new bytes are written, the target still holds the old ones, and
    it changes only by one rename of a complete temporary beside it (a reader or a crash sees old or new,
    never part). A plain write into the target fails this at once, whatever the timing."""
    out = tmp_path / "out.yaml"
    out.write_bytes(b"old: whole\n")
    seen = []
    real_replace = os.replace

    def replace_spy(src, dst, *a, **kw):
        if Path(dst) == out:
            seen.append((Path(src).parent == out.parent, out.read_bytes(), Path(src).read_bytes()))
        return real_replace(src, dst, *a, **kw)

    monkeypatch.setattr(os, "replace", replace_spy)
    from cli_in_process import run as run_in_process

    proc = run_in_process(*[a.format(out=out) for a in args], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    new = out.read_bytes()
    assert new != b"old: whole\n" and seen == [(True, b"old: whole\n", new)]
    assert _leftovers(tmp_path, "out.yaml") == []
