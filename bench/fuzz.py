"""Fuzz placer's inputs through its real command line: structure-aware mutations of real files.

Seeds are the shipped fixtures (specs, the small cluster), a placement record solved from them, and the real
public samples of every importer format (kubectl nodes and pods, nvidia-smi topo -m, NCCL topology XML,
nccl-tests output, Slurm topology.conf / topology.yaml, AWS instance topology). Each case takes one seed and
applies one to three mutations:

* structure-aware (YAML and JSON): a field deleted, duplicated under another key or as a second list item,
  retyped (string, number, list, mapping, null, bool), set to an extreme number (0, -1, 2**63, 10**30,
  1e308, NaN, infinity, a 5,000-digit integer), or to a hostile string (unicode, NUL, newlines, rich
  markup, 10,000 characters);
* text: a YAML tag before a value (``!foo``, ``!!python/object/apply:os.system``), an anchor and alias, a
  duplicated or deleted line, a token replaced by an extreme number, a truncation, a NUL byte, bytes that
  are not UTF-8, flow nesting thousands deep.

Every case runs the command the seed belongs to (validate, solve, cluster show, explain, solve --keep,
cluster import --<format>) and must end in exit 0, 1 or 2, with nothing on stdout unless it exits 0, no
traceback, no "internal error", and within the time bound. Most cases run in-process through the CLI's own
entry point (``placer.cli.main``), a few hundred as fresh processes (where a crash of the C YAML loader or
the memory limit would show).

Run: nice -n 15 python bench/fuzz.py --cases 10000 --processes 300 --seed 18 > bench/FUZZ.md
The test suite runs a small sample of the same generator (tests/test_fuzz_cli.py).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import json
import os
import platform
import random
import resource
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "tests" / "data" / "samples"
SPEC = ROOT / "fixtures" / "specs" / "aggregated-tp8.yaml"
CLUSTER = ROOT / "fixtures" / "clusters" / "small-mixed.yaml"
TIME_BOUND_S = 60.0  # a case that takes longer is reported as a hang
MEMORY_BOUND = 3 * 1024**3  # address space of a subprocess case


@dataclass(frozen=True)
class Seed:
    """A real input file and how to feed it to the CLI (``FILE`` is replaced by the mutated file)."""

    name: str
    path: Path
    fmt: str  # yaml, json or text: which structure-aware mutations apply
    argv: tuple[str, ...]


def seeds(workdir: Path) -> list[Seed]:
    """The seed corpus; files that must be made (a placement record, a pod list, nodes for nccl-tests) go
    into ``workdir``."""
    record = workdir / "record.yaml"
    if not record.exists():
        _run_inprocess(["solve", str(SPEC), str(CLUSTER), "--placement", str(record), "-q"])
    pods = workdir / "pods.json"
    pods.write_text(json.dumps(_pods(), indent=1))
    nccl_nodes = workdir / "nccl-nodes.json"
    nccl_nodes.write_text(json.dumps(_nodes_named(["ztan-mig-235z", "ztan-mig-gq73"])))
    nodes = str(SAMPLES / "k8s-gpu-node-kubectl-get-nodes.json")
    imp = ("cluster", "import", "-q")
    out: list[Seed] = []
    for spec in sorted((ROOT / "fixtures" / "specs").glob("*.yaml")):
        out.append(Seed(f"spec:{spec.stem}", spec, "yaml", ("validate", "FILE", str(CLUSTER))))
    out.append(Seed("spec:solve", SPEC, "yaml", ("solve", "FILE", str(CLUSTER), "--time-limit", "2", "-q")))
    out.append(Seed("cluster:validate", CLUSTER, "yaml", ("validate", str(SPEC), "FILE")))
    out.append(Seed("cluster:solve", CLUSTER, "yaml", ("solve", str(SPEC), "FILE", "--time-limit", "2", "-q")))
    out.append(Seed("cluster:show", CLUSTER, "yaml", ("cluster", "show", "FILE")))
    out.append(
        Seed(
            "record:explain",
            record,
            "yaml",
            ("explain", "FILE", "--cluster", str(CLUSTER), "--no-baselines", "-o", "json"),
        )
    )
    out.append(
        Seed(
            "record:keep",
            record,
            "yaml",
            ("solve", str(SPEC), str(CLUSTER), "--keep", "FILE", "--time-limit", "2", "-q"),
        )
    )
    out.append(Seed("import:nodes", Path(nodes), "json", (*imp, "--nodes", "FILE")))
    out.append(
        Seed(
            "import:nodes-aws-dump",
            SAMPLES / "aws-eks-node-topology-labels-aws-ofi-nccl.json",
            "json",
            (*imp, "--nodes", "FILE"),
        )
    )
    out.append(Seed("import:pods", pods, "json", (*imp, "--nodes", nodes, "--pods", "FILE")))
    for name in ("dgx-a100-topo-m.txt", "hgx-h200-12nic-topo-m.txt", "power9-v100-nv3-topo-m.txt"):
        out.append(Seed(f"import:topo:{name}", SAMPLES / name, "text", (*imp, "--topo", "FILE")))
    for name in ("azure-ndv4-topo.xml", "aws-p4d-24xl-topo.xml"):
        out.append(Seed(f"import:nccl-xml:{name}", SAMPLES / name, "text", (*imp, "--nccl-xml", "FILE")))
    out.append(
        Seed(
            "import:nccl-tests",
            SAMPLES / "nccl-tests-allreduce-gcp-a3mega-h100-2node.txt",
            "text",
            (*imp, "--nodes", str(nccl_nodes), "--nccl-tests", "FILE"),
        )
    )
    for name in ("slurm-topology-tree.conf", "slurm-topology-block.conf", "topograph-generated-slurm-tree.conf"):
        out.append(Seed(f"import:slurm:{name}", SAMPLES / name, "text", (*imp, "--slurm", "FILE")))
    out.append(Seed("import:slurm-yaml", SAMPLES / "slurm-topology.yaml", "yaml", (*imp, "--slurm", "FILE")))
    out.append(
        Seed(
            "import:aws",
            SAMPLES / "aws-describe-instance-topology-cli-example.json",
            "json",
            (*imp, "--aws-topology", "FILE"),
        )
    )
    return out


def _pods() -> dict[str, Any]:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "engine-0", "namespace": "serving"},
        "spec": {
            "nodeName": "nori",
            "containers": [
                {
                    "name": "engine",
                    "resources": {"limits": {"nvidia.com/gpu": "1"}, "requests": {"cpu": "2", "memory": "4Gi"}},
                }
            ],
        },
        "status": {"phase": "Running"},
    }
    return {"apiVersion": "v1", "kind": "List", "items": [pod]}


def _nodes_named(names: list[str]) -> dict[str, Any]:
    base = json.loads((SAMPLES / "k8s-gpu-node-kubectl-get-nodes.json").read_text())["items"][0]
    items = []
    for name in names:
        node = copy.deepcopy(base)
        node["metadata"]["name"] = name
        node["metadata"]["labels"]["kubernetes.io/hostname"] = name
        items.append(node)
    return {"apiVersion": "v1", "kind": "List", "items": items}


# --- mutations ------------------------------------------------------------------------------------------

EXTREME_NUMBERS: list[Any] = [0, -1, 2**63, 10**30, 1e308, -1e308, float("nan"), float("inf"), 1e-320, 0.5]
HOSTILE_STRINGS = [
    "",
    " ",
    " padded ",
    "ünïcödé-名前",
    "\u202eevil",
    "🚀",
    "a\nb",
    "x\x00y",
    "[/x]",
    "[bold]x",
    "'; rm -rf /",
    "${HOME}",
    "a" * 10_000,
    "1e30",
    "-5",
    "NaN",
]
TAGS = [
    "!foo ",
    "!!python/object/apply:os.system ['true'] ",
    "!!binary ",
    "!!set ",
    "!!omap ",
    "!!timestamp ",
    "!!float ",
]


def _paths(data: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a value inside parsed YAML/JSON (bounded, so that huge seeds stay cheap)."""
    out: list[tuple[Any, ...]] = []
    stack: list[tuple[Any, tuple[Any, ...]]] = [(data, prefix)]
    while stack and len(out) < 5000:
        node, path = stack.pop()
        if isinstance(node, dict):
            for k, v in node.items():
                out.append((*path, k))
                stack.append((v, (*path, k)))
        elif isinstance(node, list):
            for i, v in enumerate(node[:50]):
                out.append((*path, i))
                stack.append((v, (*path, i)))
    return out


def _parent(data: Any, path: tuple[Any, ...]) -> Any:
    for part in path[:-1]:
        data = data[part]
    return data


def _random_value(rng: random.Random) -> Any:
    kind = rng.randrange(7)
    if kind == 0:
        return rng.choice(EXTREME_NUMBERS)
    if kind == 1:
        return rng.choice(HOSTILE_STRINGS)
    if kind == 2:
        return [rng.choice(EXTREME_NUMBERS), rng.choice(HOSTILE_STRINGS)]
    if kind == 3:
        return {rng.choice(HOSTILE_STRINGS) or "k": rng.choice(EXTREME_NUMBERS)}
    if kind == 4:
        return None
    if kind == 5:
        return rng.choice([True, False])
    return rng.randint(-(2**31), 2**31)


def mutate_structure(data: Any, rng: random.Random) -> tuple[Any, str]:
    """One structure-aware mutation of parsed data; returns the data and what was done."""
    paths = _paths(data)
    if not paths:
        return _random_value(rng), "replaced the document"
    path = rng.choice(paths)
    parent = _parent(data, path)
    key = path[-1]
    op = rng.choice(["delete", "duplicate", "retype", "extreme", "string", "deep"])
    where = "/".join(map(str, path))
    if op == "delete":
        del parent[key]
    elif op == "duplicate":
        if isinstance(parent, list):
            parent.insert(key, copy.deepcopy(parent[key]))
        else:
            parent[f"{key}Copy" if rng.random() < 0.5 else str(key).upper()] = copy.deepcopy(parent[key])
    elif op == "retype":
        parent[key] = _random_value(rng)
    elif op == "extreme":
        parent[key] = rng.choice(EXTREME_NUMBERS)
    elif op == "string":
        parent[key] = rng.choice(HOSTILE_STRINGS)
    else:
        value: Any = parent[key]
        for _ in range(rng.choice([10, 100, 2000])):
            value = [value]
        parent[key] = value
    return data, f"{op} {where}"


def _dump(data: Any, fmt: str, rng: random.Random) -> str:
    if fmt == "json":
        text = json.dumps(data, allow_nan=True)
        if rng.random() < 0.2:
            text = text.replace("1e+308", "1" + "0" * 5000, 1)
        return text
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=rng.random() < 0.5, width=10_000)


def mutate_text(text: str, rng: random.Random, fmt: str) -> tuple[str, str]:
    """One text-level mutation (any format)."""
    lines = text.splitlines(keepends=True) or [""]
    i = rng.randrange(len(lines))
    op = rng.choice(["tag", "anchor", "dup-line", "del-line", "number", "truncate", "nul", "deep", "token", "crlf"])
    if op == "tag" and fmt != "text":
        line = lines[i]
        cut = line.find(": ")
        if cut < 0:
            cut = line.find("- ")
        if cut >= 0:
            lines[i] = line[: cut + 2] + rng.choice(TAGS) + line[cut + 2 :]
        else:
            lines.insert(i, f"x: {rng.choice(TAGS)}1\n")
    elif op == "anchor" and fmt == "yaml":
        lines[i] = lines[i].replace(": ", ": &a ", 1)
        lines.insert(min(i + 1, len(lines)), f"{' ' * (len(lines[i]) - len(lines[i].lstrip()))}again: *a\n")
    elif op == "dup-line":
        lines.insert(i, lines[i])
    elif op == "del-line":
        del lines[i]
    elif op == "number":
        lines[i] = _replace_number(lines[i], rng)
    elif op == "truncate":
        joined = "".join(lines)
        return joined[: rng.randrange(len(joined) + 1)], "truncate at a random byte"
    elif op == "nul":
        pos = rng.randrange(len(lines[i]) + 1)
        lines[i] = lines[i][:pos] + "\x00" * rng.choice([1, 57]) + lines[i][pos:]
    elif op == "deep":
        depth = rng.choice([100, 1000, 30000])
        lines.insert(i, "x: " + "[" * depth + "]" * depth + "\n")
    elif op == "token":
        words = lines[i].split()
        if words:
            j = rng.randrange(len(words))
            words[j] = rng.choice(HOSTILE_STRINGS).replace("\n", " ") or "X"
            lines[i] = " ".join(words) + "\n"
    else:
        lines = [ln.replace("\n", "\r\n") for ln in lines]
    return "".join(lines), f"{op} (line {i + 1})"


def _replace_number(line: str, rng: random.Random) -> str:
    import re

    numbers = list(re.finditer(r"\d+(\.\d+)?", line))
    if not numbers:
        return line
    m = rng.choice(numbers)
    value = rng.choice(["0", "-1", "9" * 5000, "1e308", "nan", ".inf", "99999999999999999999", "0.000001"])
    return line[: m.start()] + value + line[m.end() :]


def make_case(seed: Seed, rng: random.Random) -> tuple[bytes, list[str]]:
    """A mutated copy of ``seed``: 1-3 mutations, structure-aware where the format allows; a few cases end
    with bytes that are not UTF-8."""
    text = seed.path.read_text(encoding="utf-8")
    done = []
    for _ in range(rng.choice([1, 1, 2, 3])):
        if seed.fmt in ("yaml", "json") and rng.random() < 0.65:
            try:
                data = yaml.safe_load(text) if seed.fmt == "yaml" else json.loads(text)
            except Exception:  # noqa: BLE001 - PyYAML itself fails on some mutations; mutate the text then
                data = None
            if data is not None:
                data, what = mutate_structure(data, rng)
                try:
                    text = _dump(data, seed.fmt, rng)
                except (RecursionError, ValueError, yaml.YAMLError):
                    continue
                done.append(what)
                continue
        text, what = mutate_text(text, rng, seed.fmt)
        done.append(what)
    raw = text.encode("utf-8", "surrogatepass")
    if rng.random() < 0.04 and raw:
        pos = rng.randrange(len(raw))
        raw = raw[:pos] + b"\xff\xfe" + raw[pos:]
        done.append("non-UTF-8 bytes")
    return raw, done


# --- running a case -------------------------------------------------------------------------------------


class Hang(BaseException):
    """Raised by the alarm; a BaseException so that placer's own handlers cannot swallow it."""


@dataclass
class Outcome:
    code: int
    stdout: str
    stderr: str
    seconds: float

    def problems(self) -> list[str]:
        """What breaks the contract: exit outside 0/1/2, stdout on failure, a traceback, an internal error."""
        out = []
        if self.code not in (0, 1, 2):
            out.append(f"exit {self.code}")
        if self.code != 0 and self.stdout:
            out.append("stdout on failure")
        if "Traceback" in self.stderr:
            out.append("traceback")
        if "internal error" in self.stderr:
            out.append("internal error")
        if self.seconds > TIME_BOUND_S:
            out.append(f"took {self.seconds:.0f}s")
        return out


def _entry_point() -> Callable[[], None]:
    """The installed ``placer`` console script's command, called in this process. The script's function is
    ``placer.cli.run``: ``main``, then the process ends at once (os._exit), which would end the fuzzer too;
    so where the script runs ``run``, its ``main`` is what is called here."""
    from importlib.metadata import entry_points

    from placer import cli

    (script,) = entry_points(group="console_scripts", name="placer")
    function = script.load()
    return cli.main if function is cli.run else function


def _run_inprocess(argv: list[str], time_bound: float = TIME_BOUND_S) -> Outcome:
    main = _entry_point()

    out, err = io.StringIO(), io.StringIO()
    old_argv, old_handler = sys.argv, signal.getsignal(signal.SIGALRM)

    def on_alarm(_sig: int, _frame: Any) -> None:
        raise Hang

    sys.argv = ["placer", *argv]
    signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, time_bound)
    t0 = time.perf_counter()
    code = 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            main()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except Hang:
        code = -1
        err.write(f"hang: no answer in {time_bound:.0f}s\n")
    except BaseException as exc:  # noqa: BLE001 - anything escaping main() is a finding
        import traceback

        code = 3
        err.write("Traceback (escaped main):\n" + "".join(traceback.format_exception(exc)))
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old_handler)
        sys.argv = old_argv
    return Outcome(code, out.getvalue(), err.getvalue(), time.perf_counter() - t0)


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BOUND, MEMORY_BOUND))


def _run_process(argv: list[str], time_bound: float = TIME_BOUND_S) -> Outcome:
    env = {k: v for k, v in os.environ.items() if k != "PLACER_DEBUG"}
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "placer", *argv],
            cwd=ROOT,
            env=env,
            capture_output=True,
            timeout=time_bound,
            preexec_fn=_limit_memory,
        )
    except subprocess.TimeoutExpired:
        return Outcome(-1, "", f"hang: no answer in {time_bound:.0f}s", time.perf_counter() - t0)
    stderr = proc.stderr.decode("utf-8", "replace")
    return Outcome(proc.returncode, proc.stdout.decode("utf-8", "replace"), stderr, time.perf_counter() - t0)


def run_case(seed: Seed, raw: bytes, workdir: Path, as_process: bool = False) -> Outcome:
    suffix = {"yaml": ".yaml", "json": ".json"}.get(seed.fmt, seed.path.suffix or ".txt")
    case = workdir / f"case{suffix}"
    case.write_bytes(raw)
    argv = [str(case) if a == "FILE" else a for a in seed.argv]
    return (_run_process if as_process else _run_inprocess)(argv)


@dataclass
class Tally:
    cases: int = 0
    processes: int = 0
    exits: Counter[int] = field(default_factory=Counter)
    by_seed: Counter[str] = field(default_factory=Counter)
    problems: list[tuple[str, list[str], list[str], str]] = field(default_factory=list)
    slowest: float = 0.0


def campaign(n: int, processes: int, master_seed: int, progress: Callable[[str], None]) -> Tally:
    rng = random.Random(master_seed)
    tally = Tally()
    with tempfile.TemporaryDirectory(prefix="placer-fuzz-") as tmp:
        workdir = Path(tmp)
        corpus = seeds(workdir)
        process_every = max(1, n // max(processes, 1)) if processes else 0
        for i in range(n):
            seed = corpus[i % len(corpus)] if i < len(corpus) else rng.choice(corpus)
            raw, what = make_case(seed, rng)
            as_process = bool(process_every) and i % process_every == 0 and tally.processes < processes
            outcome = run_case(seed, raw, workdir, as_process)
            tally.cases += 1
            tally.processes += as_process
            tally.exits[outcome.code] += 1
            tally.by_seed[seed.name] += 1
            tally.slowest = max(tally.slowest, outcome.seconds)
            bad = outcome.problems()
            if bad:
                tally.problems.append(
                    (
                        seed.name,
                        what,
                        bad,
                        outcome.stderr.strip().splitlines()[-1:][0] if outcome.stderr.strip() else "",
                    )
                )
            if (i + 1) % 250 == 0:
                progress(f"{i + 1}/{n} cases, {len(tally.problems)} problem(s), exits {dict(tally.exits)}")
    return tally


def report(tally: Tally, args: argparse.Namespace, seconds: float) -> str:
    lines = [
        "# placer input fuzzing: results",
        "",
        f"`python bench/fuzz.py --cases {args.cases} --processes {args.processes} --seed {args.seed}` on "
        f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; {seconds:.0f} s.",
        "",
        f"- cases: **{tally.cases}** ({tally.cases - tally.processes} in-process through `placer.cli.main`, "
        f"{tally.processes} as fresh processes with a {MEMORY_BOUND // 1024**3} GiB address-space limit)",
        "- exit codes: " + ", ".join(f"{code}: {count}" for code, count in sorted(tally.exits.items())),
        f"- contract breaks (exit outside 0/1/2, stdout on failure, traceback, internal error, over "
        f"{TIME_BOUND_S:.0f} s): **{len(tally.problems)}**",
        f"- slowest case: {tally.slowest:.1f} s",
        "",
        "| seed | cases |",
        "|---|---|",
        *[f"| {name} | {count} |" for name, count in sorted(tally.by_seed.items())],
        "",
    ]
    if tally.problems:
        lines += ["## Contract breaks", "", "| seed | mutations | problem | last stderr line |", "|---|---|---|---|"]
        for name, what, bad, last in tally.problems[:200]:
            lines.append(f"| {name} | {'; '.join(what)} | {', '.join(bad)} | `{last[:160]}` |")
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=10_000)
    parser.add_argument("--processes", type=int, default=300, help="how many of the cases run as fresh processes")
    parser.add_argument("--seed", type=int, default=18)
    args = parser.parse_args()
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 1000))
    t0 = time.perf_counter()
    tally = campaign(args.cases, args.processes, args.seed, lambda m: print(m, file=sys.stderr, flush=True))
    sys.stdout.write(report(tally, args, time.perf_counter() - t0))
    sys.exit(1 if tally.problems else 0)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
