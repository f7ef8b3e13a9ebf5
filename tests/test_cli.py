"""The ``placer`` command end to end on the fixtures, through a real subprocess: exit codes, what goes to
stdout (manifests only) and stderr (everything else), the placement file, determinism, schemas. Tests of what
a command says or writes rather than of the process run it in-process (``run_in_process``), which the last
test here holds to the real process's bytes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from cli_in_process import run as run_in_process
from hypothesis import given, settings
from hypothesis import strategies as st
from k8s_acceptance import made_pods

import placer
from placer.model.load import load_cluster
from placer.topology.build import build_topology

ROOT = Path(__file__).resolve().parent.parent
SPECS = ROOT / "fixtures" / "specs"
CLUSTERS = ROOT / "fixtures" / "clusters"
SMALL = CLUSTERS / "small-mixed.yaml"
AGG = SPECS / "aggregated-tp8.yaml"
DISAGG = SPECS / "llama-70b-disagg.yaml"
MANIFEST_KINDS = {"PodGroup", "StatefulSet", "Deployment", "Service"}
SUMMARY = re.compile(r"^placed (\d+)/(\d+) replica\(s\), (\d+) GPUs, (\d+) objects; ", re.MULTILINE)

# (spec, cluster) pairs that place.
FEASIBLE = [
    ("aggregated-tp8.yaml", "small-mixed.yaml"),
    ("aggregated-tp8.yaml", "dgx-h100-1024.yaml"),
    ("llama-70b-disagg.yaml", "dgx-h100-1024.yaml"),
    ("llama-70b-disagg.yaml", "gb200-nvl72-1008.yaml"),
    ("tp16-multinode.yaml", "dgx-h100-1024.yaml"),
]
FEASIBLE_IDS = [f"{s.removesuffix('.yaml')}-on-{c.removesuffix('.yaml')}" for s, c in FEASIBLE]


def placer_cmd() -> list[str]:
    """The real CLI: ``python -m placer`` when the package has a __main__, else the console script."""
    if (Path(placer.__file__).parent / "__main__.py").exists():
        return [sys.executable, "-m", "placer"]
    return [str(Path(sys.executable).parent / "placer")]


def user_env() -> dict[str, str]:
    """The environment as a user's shell has it: no debug switch, and Python's streams buffered (a CI shell
    may set PYTHONUNBUFFERED, which would hide an output lost at exit)."""
    return {k: v for k, v in os.environ.items() if k not in ("PLACER_DEBUG", "PYTHONUNBUFFERED")}


def run(
    *args: str | Path, cwd: Path = ROOT, stdin: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*placer_cmd(), *map(str, args)],
        cwd=cwd,
        env=user_env() | (env or {}),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )


def manifests_of(stdout: str) -> list[dict[str, Any]]:
    """Parse stdout as multi-document YAML holding only manifests of the expected kinds."""
    docs = [d for d in yaml.safe_load_all(stdout) if d is not None]
    assert docs, "no manifests on stdout"
    for doc in docs:
        assert isinstance(doc, dict), f"stdout carries a non-manifest document: {doc!r}"
        assert doc.get("kind") in MANIFEST_KINDS, doc.get("kind")
        assert doc.get("apiVersion") and doc.get("metadata", {}).get("name")
    return docs


def assert_clean_failure(proc: subprocess.CompletedProcess[str], code: int) -> None:
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == code, proc.stderr
    assert proc.stdout == ""


# --- help -----------------------------------------------------------------------------------------------


def test_help_lists_the_commands() -> None:
    proc = run("--help")
    assert proc.returncode == 0, proc.stderr
    for command in ("solve", "validate", "schema", "cluster"):
        assert re.search(rf"\b{command}\b", proc.stdout), proc.stdout
    sub = run("cluster", "--help")
    assert sub.returncode == 0 and "generate" in sub.stdout


@pytest.mark.parametrize(
    "args",
    [
        ["no-such-command"],
        ["solve", str(AGG), str(SMALL), "-o", "xml"],
        ["solve", str(AGG)],
        ["solve", str(AGG), str(SMALL), "--time-limit", "0"],
    ],
    ids=["unknown-command", "bad-output-format", "missing-argument", "time-limit-below-min"],
)
def test_usage_errors_exit_2(args: list[str]) -> None:
    assert_clean_failure(run(*args), 2)


# --- solve ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("spec, cluster", FEASIBLE, ids=FEASIBLE_IDS)
def test_solve_prints_only_manifests(spec: str, cluster: str) -> None:
    proc = run("solve", SPECS / spec, CLUSTERS / cluster)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("---\n")
    docs = manifests_of(proc.stdout)
    summary = SUMMARY.search(proc.stderr)
    assert summary, proc.stderr
    placed, wanted, gpus, objects = map(int, summary.groups())
    assert placed == wanted and objects == len(docs)
    kinds = [d["kind"] for d in docs]
    assert kinds.count("PodGroup") == placed  # one gang per replica
    assert "Traceback" not in proc.stderr


def test_solve_json_is_a_v1_list_of_the_same_manifests() -> None:
    as_yaml = run("solve", AGG, SMALL, "-q")
    as_json = run("solve", AGG, SMALL, "-q", "-o", "json")
    assert as_json.returncode == 0, as_json.stderr
    data = json.loads(as_json.stdout)
    assert data["apiVersion"] == "v1" and data["kind"] == "List"
    assert {d["kind"] for d in data["items"]} <= MANIFEST_KINDS
    assert data["items"] == manifests_of(as_yaml.stdout)


def test_quiet_is_silent_and_verbose_does_not_touch_stdout() -> None:
    plain = run("solve", DISAGG, CLUSTERS / "dgx-h100-1024.yaml")
    quiet = run("solve", DISAGG, CLUSTERS / "dgx-h100-1024.yaml", "-q")
    verbose = run("solve", DISAGG, CLUSTERS / "dgx-h100-1024.yaml", "-v")
    assert plain.returncode == quiet.returncode == verbose.returncode == 0
    assert quiet.stderr == ""
    assert len(verbose.stderr.splitlines()) > len(plain.stderr.splitlines())  # the solver log goes to stderr
    assert plain.stdout == quiet.stdout == verbose.stdout


@pytest.mark.parametrize("suffix", [".json", ".yaml"])
def test_placement_file(suffix: str, tmp_path: Path) -> None:
    out = tmp_path / f"out{suffix}"
    proc = run_in_process("solve", DISAGG, CLUSTERS / "dgx-h100-1024.yaml", "--placement", out)
    assert proc.returncode == 0, proc.stderr
    text = out.read_text()
    record = json.loads(text) if suffix == ".json" else yaml.safe_load(text)
    assert record["kind"] == "Placement" and record["apiVersion"] == "placer.dev/v1alpha1"
    assert record["metadata"] == {"name": "llama-70b", "namespace": "serving"}
    assert record["cluster"] == "dgx-h100-1024"
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(record, json.loads((ROOT / "schemas" / "placement.schema.json").read_text()))
    # The record and the Pods on stdout describe the same GPUs: one Pod per (node, GPU set).
    gpus = sum(len(p["gpus"]) for r in record["replicas"] for i in r["instances"] for p in i["pods"])
    summary = SUMMARY.search(proc.stderr)
    assert summary and gpus == int(summary.group(3))
    in_record = sorted(
        (p["node"], ",".join(map(str, p["gpus"])))
        for r in record["replicas"]
        for i in r["instances"]
        for p in i["pods"]
    )
    in_pods = sorted(
        (_hostname(d), d["metadata"]["annotations"]["placer.dev/gpus"])
        for d in made_pods(manifests_of(proc.stdout))
        if d["metadata"]["labels"]["app.kubernetes.io/component"] != "router"
    )
    assert in_record == in_pods
    assert sorted(p.name for p in tmp_path.iterdir()) == [out.name]  # no temporary left behind


def _hostname(pod: dict[str, Any]) -> str:
    required = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    terms = required["nodeSelectorTerms"]
    (expr,) = [e for e in terms[0]["matchExpressions"] if e["key"] == "kubernetes.io/hostname"]
    (node,) = expr["values"]
    return node


def test_json_and_yaml_placement_hold_the_same_record(tmp_path: Path) -> None:
    run_in_process("solve", AGG, SMALL, "-q", "--placement", tmp_path / "p.json")
    run_in_process("solve", AGG, SMALL, "-q", "--placement", tmp_path / "p.yaml")
    assert json.loads((tmp_path / "p.json").read_text()) == yaml.safe_load((tmp_path / "p.yaml").read_text())


@pytest.mark.parametrize(
    "spec, cluster, code",
    [
        (DISAGG, SMALL, 1),  # infeasible
        (AGG, ROOT / "tests" / "data" / "invalid" / "cluster-unknown-class.yaml", 2),  # bad input
        (SPECS / "tp16-multinode.yaml", CLUSTERS / "gb200-nvl72-1008.yaml", 1),  # selector matches nothing
    ],
    ids=["infeasible", "bad-input", "no-matching-gpu"],
)
@pytest.mark.parametrize("suffix", [".json", ".yaml"])
def test_failed_solve_writes_no_placement(spec: Path, cluster: Path, code: int, suffix: str, tmp_path: Path) -> None:
    proc = run_in_process("solve", spec, cluster, "--placement", tmp_path / f"out{suffix}")
    assert_clean_failure(proc, code)
    assert list(tmp_path.iterdir()) == []


def test_placement_into_missing_directory_is_bad_input(tmp_path: Path) -> None:
    target = tmp_path / "missing" / "out.json"
    proc = run_in_process("solve", AGG, SMALL, "--placement", target)
    assert_clean_failure(proc, 2)
    assert str(target) in proc.stderr


def test_deterministic(tmp_path: Path) -> None:
    """Same input, same bytes: two processes with different string-hash seeds (so set and dict orders of
    strings differ between them) print the same manifests and write the same record."""
    runs = []
    for k in (1, 2):
        (tmp_path / str(k)).mkdir()
        proc = run(
            "solve",
            DISAGG,
            CLUSTERS / "dgx-h100-1024.yaml",
            "-q",
            "--placement",
            "out.json",
            cwd=tmp_path / str(k),
            env={"PYTHONHASHSEED": str(k)},
        )
        assert proc.returncode == 0, proc.stderr
        runs.append((proc.stdout, (tmp_path / str(k) / "out.json").read_bytes()))
    assert runs[0] == runs[1]


def test_infeasible_names_the_constraints() -> None:
    proc = run_in_process("solve", DISAGG, SMALL)
    assert_clean_failure(proc, 1)
    assert "infeasible" in proc.stderr
    reasons = [line for line in proc.stderr.splitlines() if line.startswith("  - ")]
    assert reasons, proc.stderr
    text = "\n".join(reasons)
    for constraint in ("prefill", "decode", "200 GB/s", "router"):
        assert constraint in text, text
    assert "Relax" in text  # each reason says what to give up


# --- validate, schema, cluster generate -----------------------------------------------------------------


@pytest.mark.parametrize("spec, cluster", FEASIBLE, ids=FEASIBLE_IDS)
def test_validate_good_inputs(spec: str, cluster: str) -> None:
    proc = run_in_process("validate", SPECS / spec, CLUSTERS / cluster)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""
    assert f"{SPECS / spec}: ServingTopology" in proc.stderr
    assert f"{CLUSTERS / cluster}: Cluster" in proc.stderr


def test_validate_fails_a_gpu_selector_that_matches_no_node(tmp_path: Path) -> None:
    """A spec asking more GPU memory than any node has (100 GiB of H100 80GBs) is valid, the cluster is
    valid, and nothing can ever be placed. validate said "0 candidate place(s)" and exited 0."""
    doc = yaml.safe_load((SPECS / "aggregated-tp8.yaml").read_text())
    doc["pools"]["aggregated"]["gpu"] = {"minMemoryGiB": 100}
    spec = tmp_path / "big.yaml"
    spec.write_text(yaml.safe_dump(doc))
    proc = run_in_process("validate", spec, SMALL)
    assert proc.returncode == 1 and proc.stdout == ""
    assert "Traceback" not in proc.stderr
    assert f"error: {spec}: pools.aggregated: no schedulable node has GPUs of at least 100 GiB; this cluster has" in (
        proc.stderr
    )
    solved = run_in_process("solve", spec, SMALL)
    assert solved.returncode == 1  # what solve would say on any state of this cluster


def test_schema_matches_the_committed_files(tmp_path: Path) -> None:
    proc = run("schema")
    assert proc.returncode == 0, proc.stderr
    schemas = json.loads(proc.stdout)
    assert set(schemas) == {"servingtopology", "cluster", "placement"}
    for name, schema in schemas.items():
        committed = json.loads((ROOT / "schemas" / f"{name}.schema.json").read_text())
        assert committed == schema, f"schemas/{name}.schema.json is stale: run placer schema --write schemas"
    written = run("schema", "--write", tmp_path)
    assert written.returncode == 0 and written.stdout == ""
    for name in schemas:
        file = f"{name}.schema.json"
        assert (tmp_path / file).read_bytes() == (ROOT / "schemas" / file).read_bytes()


def test_cluster_generate_validates(tmp_path: Path) -> None:
    args = ("cluster", "generate", "--style", "dgx-h100", "--gpus", "64", "--seed", "3")
    proc = run(*args)
    assert proc.returncode == 0, proc.stderr
    path = tmp_path / "gen.yaml"
    path.write_text(proc.stdout)
    topo = build_topology(load_cluster(path))
    assert sum(len(n.gpus) for n in topo.nodes) == 64
    again = run(*args, "-o", tmp_path / "out.yaml")
    assert again.returncode == 0 and again.stdout == ""
    assert (tmp_path / "out.yaml").read_text() == proc.stdout  # same seed, same file
    checked = run("validate", AGG, path)
    assert checked.returncode == 0, checked.stderr


# --- the process's exit (placer.cli.run ends the process without tearing the interpreter down) ----------


def test_every_stream_is_flushed_before_the_process_ends() -> None:
    """``run`` ends with os._exit: whatever a command left in Python's buffers must still arrive, and
    ``schema`` writes its JSON without flushing it itself."""
    proc = run("schema")
    assert proc.returncode == 0, proc.stderr
    assert set(json.loads(proc.stdout)) == {"servingtopology", "cluster", "placement"}
    failed = run("solve", SPECS / "missing.yaml", SMALL)
    assert_clean_failure(failed, 2)
    assert "missing.yaml" in failed.stderr


def test_a_reader_that_goes_away_ends_the_process_with_1_and_no_traceback() -> None:
    proc = subprocess.Popen(
        [*placer_cmd(), "solve", str(DISAGG), str(CLUSTERS / "dgx-h100-1024.yaml"), "-q"],
        cwd=ROOT,
        env=user_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader is gone before a byte is written
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 1
    assert err == ""


def test_a_full_disk_on_stdout_is_an_error_not_a_placement() -> None:
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full here")
    with open("/dev/full", "w") as full:
        proc = subprocess.run(
            [*placer_cmd(), "schema"], stdout=full, stderr=subprocess.PIPE, env=user_env(), text=True, timeout=60
        )
    assert proc.returncode == 2
    assert "cannot write to stdout" in proc.stderr and "Traceback" not in proc.stderr


def test_a_closed_stdout_still_ends_cleanly() -> None:
    script = "import sys, placer.cli as cli\nsys.stdout = None\ncli.main = lambda: None\ncli.run()\n"
    proc = subprocess.run([sys.executable, "-c", script], env=user_env(), capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stderr) == (0, "")


@pytest.mark.parametrize(
    ("body", "code", "stderr"),
    [
        ("sys.exit('went wrong')", 1, "went wrong\n"),  # what Python does with a text exit
        ("sys.exit(None)", 0, ""),
        ("sys.exit(3)", 3, ""),
        ("print('kept', end='')", 0, ""),  # returned normally: 0, and unflushed stdout still arrives
    ],
)
def test_run_exits_as_python_would(body: str, code: int, stderr: str) -> None:
    script = f"import sys, placer.cli as cli\ndef main():\n    {body}\ncli.main = main\ncli.run()\n"
    proc = subprocess.run([sys.executable, "-c", script], env=user_env(), capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stderr) == (code, stderr)
    assert proc.stdout == ("kept" if "kept" in body else "")


def test_the_command_runs_without_the_cycle_collector() -> None:
    """run() turns Python's cycle collector off for the one-shot command (placer.cli.run says why)."""
    script = "import gc, placer.cli as cli\ncli.main = lambda: print(gc.isenabled(), end='')\ncli.run()\n"
    proc = subprocess.run([sys.executable, "-c", script], env=user_env(), capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "False", "")


def test_a_solve_loads_neither_pandas_nor_networkx() -> None:
    """The command's process solves, checks and prints without importing pandas (OR-Tools imports it for
    helpers placer never calls: placer.cli.deferred) or networkx (Topology.graph is built on request only):
    together ~0.45 s of a 1,024-GPU solve's ~1.2 s process (bench/NOTES.md). The manifests are the same."""
    script = (
        "import sys, placer.cli as cli\n"
        "def main():\n"
        "    try:\n"
        "        real()\n"
        "    finally:\n"
        "        print(sorted(m for m in ('pandas', 'networkx') if type(sys.modules.get(m)).__name__ == 'module'),"
        " file=sys.stderr)\n"
        "real, cli.main = cli.main, main\n"
        "cli.run()\n"
    )
    args = ["solve", str(SPECS / "llama-70b-disagg.yaml"), str(CLUSTERS / "dgx-h100-1024.yaml"), "-q"]
    proc = subprocess.run(
        [sys.executable, "-c", script, *args], env=user_env(), capture_output=True, text=True, timeout=120
    )
    assert (proc.returncode, proc.stderr) == (0, "[]\n")
    assert proc.stdout == run(*args).stdout  # the same bytes as the installed script prints


@pytest.mark.parametrize("first", ["Series", "Index", "DataFrame"])
def test_the_pandas_stand_in_hands_over_the_real_module(first: str) -> None:
    """Code that does use pandas in the command's process gets the real one, whichever name it reads
    first: through the stand-in that OR-Tools kept, from a later import, and inside cp_model's own pandas
    helpers (whose isinstance checks read pandas.Index when called)."""
    script = (
        "import sys\n"
        "from placer.cli.deferred import defer_pandas\n"
        "defer_pandas()\n"
        "from ortools.sat.python import cp_model\n"
        "assert type(sys.modules['pandas']).__name__ == '_DeferredPandas'\n"
        "import pandas as pd\n"
        f"real = getattr(pd, {first!r})\n"
        "assert type(sys.modules['pandas']).__name__ == 'module'\n"
        "import pandas\n"
        "assert real is getattr(pandas, real.__name__) and pd.Series is pandas.Series\n"
        "frame = cp_model.pd.DataFrame({'a': [1, 2]})\n"
        "import pandas.api.types\n"
        "model = cp_model.CpModel()\n"
        "flags = model.new_bool_var_series('b', pandas.Index(['x', 'y']))\n"
        "assert isinstance(flags, pandas.Series) and len(flags) == 2\n"
        "print(int(frame['a'].sum()), end='')\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], env=user_env(), capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "3", "")


def test_stdout_is_utf8_whatever_the_locale(tmp_path) -> None:
    """A determinism audit found `explain -o text` (its table says "µs") ending in exit 3 with a
    UnicodeEncodeError where stdout's locale encoding is ASCII or Latin-1. The process writes UTF-8: the
    same bytes under any encoding the environment asks for."""
    record = tmp_path / "placed.yaml"
    cluster = CLUSTERS / "dgx-h100-1024.yaml"
    assert run("solve", SPECS / "llama-70b-disagg.yaml", cluster, "--placement", record, "-q").returncode == 0
    outputs = {}
    for encoding in ("utf-8", "ascii", "latin-1"):
        proc = subprocess.run(
            [*placer_cmd(), "explain", str(record), str(cluster), "-o", "text"],
            env=user_env() | {"PYTHONIOENCODING": encoding},
            capture_output=True,
            timeout=120,
        )
        assert (proc.returncode, proc.stderr) == (0, b""), encoding
        outputs[encoding] = proc.stdout
    assert "µs" in outputs["utf-8"].decode("utf-8")
    assert outputs["ascii"] == outputs["utf-8"] == outputs["latin-1"]


def test_run_gives_the_collector_back_before_it_ends(monkeypatch) -> None:
    """Should the process go on after run() (here _end_process is the conftest's, which raises), its
    collector is as it was."""
    import gc

    import placer.cli as cli

    monkeypatch.setattr(cli, "main", lambda: None)
    monkeypatch.setattr(cli, "defer_pandas", lambda: None)  # the stand-in is for the command's own process
    assert gc.isenabled()
    with pytest.raises(AssertionError, match="ended the process with 0"):
        cli.run()
    assert gc.isenabled()


def test_the_installed_script_and_python_m_both_end_through_run() -> None:
    from importlib.metadata import entry_points

    (script,) = [e for e in entry_points(group="console_scripts") if e.name == "placer"]
    assert script.value == "placer.cli:run"
    assert "run()" in (Path(placer.__file__).parent / "__main__.py").read_text()


def test_every_time_limit_option_refuses_zero_as_usage() -> None:
    """A budget of 0 or less is bad input (exit 2) in every command that takes one, never an "infeasible"
    (exit 1): ``placer size --time-limit 0`` said "no placement found in time". A new command that forgets
    the bound fails here."""
    import typer.main

    from placer.cli import app

    def walk(command):
        yield command
        for sub in getattr(command, "commands", {}).values():
            yield from walk(sub)

    found = []
    for command in walk(typer.main.get_command(app)):
        for param in command.params:
            if "--time-limit" in getattr(param, "opts", []):
                found.append(command.name)
                assert getattr(param, "min", None) == 0.1, command.name
    assert {"solve", "explain", "plan", "autoscale", "size"} <= set(found), found
    assert_clean_failure(run("size", SPECS / "llama-70b-disagg.yaml", SMALL, "--time-limit", "0"), 2)


def test_validate_takes_what_solve_takes(tmp_path: Path) -> None:
    """A batch (a directory, several files, a multi-document file) is validated before it is solved; a bad
    second document or a name given twice is exit 2 naming the document, as solve says it."""
    ok = run_in_process("validate", SPECS, CLUSTERS / "dgx-h100-1024.yaml")
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout == "" and ok.stderr.count("is valid") == len(list(SPECS.glob("*.yaml"))) + 1
    text = AGG.read_text()
    two = tmp_path / "two.yaml"
    two.write_text(text + "---\n" + text.replace("name: llama-70b-agg", "name: other"))
    assert run_in_process("validate", two, SMALL).returncode == 0
    bad = tmp_path / "bad.yaml"
    bad.write_text(text + "---\n" + text.replace("tensorParallel: 8", "tensorParallel: 0"))
    proc = run_in_process("validate", bad, SMALL)
    assert_clean_failure(proc, 2)
    assert f"{bad}#2:" in proc.stderr and "tensorParallel" in proc.stderr
    dup = tmp_path / "dup.yaml"
    dup.write_text(text + "---\n" + text)
    for command in ("validate", "solve"):
        proc = run_in_process(command, dup, SMALL)
        assert_clean_failure(proc, 2)
        assert f"{dup}#2: deployment default/llama-70b-agg is also given in {dup}#1" in proc.stderr


def test_an_error_found_after_loading_names_the_document_and_its_line(tmp_path: Path) -> None:
    """A pool that cannot pack on the cluster is found when the problem is built, after loading: in document 2
    of a file the line is looked up in document 2 (validate said document 1's line, and solve gave none), and
    a file whose own name ends in '#2' is that file, not document 2 of another."""
    text = AGG.read_text()
    first_doc_lines = text.count("\n") + 1  # the '---' line
    line = next(i for i, row in enumerate(text.splitlines(), 1) if "tensorParallel: 8" in row)
    multi = tmp_path / "multi.yaml"
    multi.write_text(
        text
        + "---\n"
        + text.replace("name: llama-70b-agg", "name: other").replace("tensorParallel: 8", "tensorParallel: 16")
    )
    hashed = tmp_path / "one#2"
    hashed.write_text(text.replace("tensorParallel: 8", "tensorParallel: 16"))
    for command in ("validate", "solve"):
        proc = run_in_process(command, multi, SMALL)
        assert_clean_failure(proc, 2)
        assert f"error: {multi}#2:{first_doc_lines + line}: pools." in proc.stderr, proc.stderr
        proc = run_in_process(command, hashed, SMALL)
        assert_clean_failure(proc, 2)
        assert f"error: {hashed}:{line}: pools." in proc.stderr, proc.stderr


def test_replicas_counted_out_say_matching_only_when_a_selector_leaves_gpus_out(tmp_path: Path) -> None:
    """small-mixed has a CPU-only node, which no pool is eligible for: 'matching the pools' GPU selectors'
    was said for a spec with no selector. With a selector that leaves some GPUs out, it is said."""
    five = tmp_path / "five.yaml"
    five.write_text(AGG.read_text().replace("replicas: 2", "replicas: 5\nminReplicas: 1"))
    proc = run_in_process("solve", five, SMALL)
    assert proc.returncode == 0, proc.stderr
    assert "at most 3 of 5 replica(s) can fit: 29 free GPUs, 8 per replica" in proc.stderr
    text = five.read_text().replace("tensorParallel: 8", "tensorParallel: 8\n    gpu: {product: NVIDIA-H100-80GB-HBM3}")
    five.write_text(text)
    proc = run_in_process("solve", five, SMALL)
    assert proc.returncode == 0, proc.stderr
    assert "GPUs matching the pools' GPU selectors, 8 per replica" in proc.stderr


# (arguments, stdin): a placement, a batch, an infeasible spec, bad input, a usage error, stdin, other commands.
SAME_IN_PROCESS = [
    (["solve", str(AGG), str(SMALL)], None),
    (["solve", str(SPECS), str(CLUSTERS / "dgx-h100-1024.yaml"), "-q"], None),
    (["solve", str(DISAGG), str(SMALL)], None),
    (["solve", str(ROOT / "tests" / "data" / "invalid" / "spec-duplicate-key.yaml"), str(SMALL)], None),
    (["solve", "--no-such-option"], None),
    (["solve", "-", str(SMALL), "-o", "json"], AGG.read_text()),
    (["explain", str(DISAGG), "--cluster", str(CLUSTERS / "dgx-h100-1024.yaml"), "--no-baselines"], None),
    (["validate", str(AGG), str(SMALL)], None),
    (["cluster", "show", str(SMALL)], None),
]


@pytest.mark.parametrize("args, stdin", SAME_IN_PROCESS, ids=[" ".join(a[:2]) for a, _ in SAME_IN_PROCESS])
def test_the_in_process_runner_gives_what_the_process_gives(args: list[str], stdin: str | None) -> None:
    """Most test modules run the CLI in-process (tests/cli_in_process.py) for speed; that is sound only while
    it gives the exit code and the bytes the real process gives."""
    proc = run(*args, stdin=stdin)
    inside = run_in_process(*args, stdin=stdin)
    assert (inside.returncode, inside.stdout) == (proc.returncode, proc.stdout)

    def same(stderr: str) -> str:  # usage names the program as it was started; wall times differ
        return re.sub(r"\b\d+\.\d+ ?s\b", "N s", re.sub(r"python\S* -m placer", "placer", stderr))

    assert same(inside.stderr) == same(proc.stderr)


def test_the_in_process_runner_shows_warnings_restores_a_closed_stdout_and_times_out(monkeypatch) -> None:
    """What a process would show or do: a warning on stderr (pytest would record it), a stdout the command
    closed (the test process keeps its own), a command that hangs (fails, as subprocess.run(timeout=) does)."""
    import time
    import warnings

    import cli_in_process

    def warns() -> None:
        warnings.warn("careful", UserWarning, stacklevel=1)
        sys.stdout.close()
        raise SystemExit(0)

    monkeypatch.setattr(placer.cli, "main", warns)
    done = cli_in_process.run("solve")
    assert done.returncode == 0 and "UserWarning: careful" in done.stderr
    assert not sys.stdout.closed
    monkeypatch.setattr(placer.cli, "main", lambda: time.sleep(30))
    with pytest.raises(cli_in_process.CommandTimedOut):
        cli_in_process.run("solve", timeout=0.2)


@settings(max_examples=300, deadline=None)
@given(
    name=st.text(alphabet="ab9-", min_size=1, max_size=44),
    pool=st.text(alphabet="ab9-", min_size=1, max_size=15),
    namespace=st.text(alphabet="ab9-", min_size=1, max_size=66),
)
def test_the_schema_names_what_the_loader_accepts(name: str, pool: str, namespace: str) -> None:
    """schemas/ now carries the name rules the loader enforces (metadata.name a DNS-1035 label of at most 40
    characters; pool names DNS labels of at most 12 not ending in -<number>): an editor that validates with
    the schema refuses exactly what placer refuses."""
    from pydantic import ValidationError

    from placer.model.spec import ServingTopology

    schema = json.loads((ROOT / "schemas" / "servingtopology.schema.json").read_text())
    meta = schema["$defs"]["Metadata"]["properties"]["name"]
    names = schema["properties"]["pools"]["propertyNames"]
    doc = yaml.safe_load((SPECS / "aggregated-tp8.yaml").read_text())
    doc["metadata"]["name"] = name
    doc["metadata"]["namespace"] = namespace
    doc["pools"] = {pool: doc["pools"]["aggregated"] | {"role": "aggregated"}}
    doc.pop("router", None)
    try:
        ServingTopology.model_validate(doc)
        accepted = True
    except ValidationError:
        accepted = False
    ns = schema["$defs"]["Metadata"]["properties"]["namespace"]
    by_schema = (
        len(namespace) <= ns["maxLength"]
        and re.search(ns["pattern"], namespace) is not None
        and len(name) <= meta["maxLength"]
        and re.search(meta["pattern"], name) is not None
        and len(pool) <= names["maxLength"]
        and re.search(names["pattern"], pool) is not None
    )
    assert accepted == by_schema


def test_solve_warns_when_communication_alone_breaks_the_slo(tmp_path: Path) -> None:
    """DESIGN says solve checks the SLO's communication share; it printed nothing and exited 0 silently."""
    doc = yaml.safe_load(DISAGG.read_text())
    doc["slo"] = {"ttftMs": 10, "itlMs": 1}
    tight = tmp_path / "tight.yaml"
    tight.write_text(yaml.safe_dump(doc))
    proc = run_in_process("solve", tight, CLUSTERS / "dgx-h100-1024.yaml")
    assert proc.returncode == 0, proc.stderr  # still the best placement there is
    assert "warning: slo.ttftMs 10 ms: communication alone takes" in proc.stderr
    assert "warning: slo.itlMs 1 ms: communication alone takes" in proc.stderr
    doc["slo"] = {"ttftMs": 2000, "itlMs": 100}
    tight.write_text(yaml.safe_dump(doc))
    easy = run_in_process("solve", tight, CLUSTERS / "dgx-h100-1024.yaml")
    assert easy.returncode == 0 and "warning: slo" not in easy.stderr
    quiet = run_in_process("solve", tight, CLUSTERS / "dgx-h100-1024.yaml", "-q")
    assert quiet.stderr == ""
    doc["slo"] = {"ttftMs": 10, "itlMs": 1}
    tight.write_text(yaml.safe_dump(doc))
    batch = run_in_process("solve", tight, SPECS / "aggregated-tp8.yaml", CLUSTERS / "dgx-h100-1024.yaml")
    assert batch.returncode == 0, batch.stderr  # each deployment of a batch is named in its warnings
    assert "serving/llama-70b: warning: slo.ttftMs 10 ms: communication alone takes" in batch.stderr
    assert "llama-70b-agg: warning" not in batch.stderr  # it gives no SLO


@pytest.mark.parametrize("value", ["inf", "nan", "1e400"])
@pytest.mark.parametrize("command", ["solve", "size", "explain --why-not"])
def test_a_time_limit_that_is_not_a_number_of_seconds_is_bad_input(command: str, value: str) -> None:
    """``--time-limit inf`` passed the lower bound and overflowed the solver's budget: exit 3."""
    proc = run(*command.split(), AGG, SMALL, "--time-limit", value)
    assert_clean_failure(proc, 2)
    assert "--time-limit" in proc.stderr


def test_empty_yaml_documents_beside_specs_and_clusters_are_skipped_as_kubectl_does(tmp_path: Path) -> None:
    """A trailing '---' (common in generated YAML) was refused as 'got an empty document'."""
    spec, cluster = tmp_path / "spec.yaml", tmp_path / "cluster.yaml"
    spec.write_text("---\n" + AGG.read_text() + "---\n" + DISAGG.read_text() + "---\n")
    cluster.write_text(SMALL.read_text() + "---\n")
    proc = run("validate", spec, cluster)
    assert proc.returncode == 0, proc.stderr
    assert f"{spec}#2: ServingTopology 'llama-70b' is valid" in proc.stderr  # empty documents are not counted
    one = tmp_path / "one.yaml"
    one.write_text(AGG.read_text() + "---\n")
    alone = run("solve", one, cluster, "--dry-run")  # one spec, not a batch of one
    assert alone.stdout == run("solve", AGG, cluster, "--dry-run").stdout
    empty = tmp_path / "empty.yaml"
    empty.write_text("---\n---\n")
    refused = run("validate", empty, cluster)
    assert_clean_failure(refused, 2)
    assert "empty document" in refused.stderr


def test_a_json_placement_file_is_json_for_batches_keep_and_plan(tmp_path: Path) -> None:
    """README: --placement writes `.json` or `.yaml`; a batch, --keep and plan wrote a YAML stream into x.json."""
    dgx = CLUSTERS / "dgx-h100-1024.yaml"
    batch = tmp_path / "batch.json"
    proc = run_in_process("solve", AGG, DISAGG, dgx, "-q", "--placement", batch)
    assert proc.returncode == 0, proc.stderr
    whole = json.loads(batch.read_text())
    assert whole["kind"] == "List" and [r["kind"] for r in whole["items"]] == ["Placement", "Placement"]
    assert {r["metadata"]["name"] for r in whole["items"]} == {"llama-70b", "llama-70b-agg"}
    kept = tmp_path / "kept.json"
    again = run_in_process("solve", AGG, dgx, "-q", "--keep", batch, "--placement", kept)
    assert again.returncode == 0, again.stderr
    assert json.loads(kept.read_text())["kind"] == "Placement"  # one record is the record itself
    explained = run_in_process("explain", batch, dgx, "-d", "llama-70b", "-o", "json", "--no-baselines")
    assert explained.returncode == 0, explained.stderr
    moved = tmp_path / "plan.json"
    plan = run_in_process("plan", "--from", kept, DISAGG, dgx, "--placement", moved)
    assert plan.returncode == 0, plan.stderr
    after = json.loads(moved.read_text())
    assert after["kind"] == "List" and {r["metadata"]["name"] for r in after["items"]} == {"llama-70b", "llama-70b-agg"}


def test_plan_refuses_a_pending_deployment_given_twice(tmp_path: Path) -> None:
    """plan took it twice and invented a conflict between the two copies (exit 1); solve and validate refuse."""
    record = tmp_path / "run.yaml"
    assert run_in_process("solve", DISAGG, CLUSTERS / "dgx-h100-1024.yaml", "-q", "--placement", record).returncode == 0
    proc = run_in_process("plan", "--from", record, AGG, AGG, CLUSTERS / "dgx-h100-1024.yaml")
    assert (proc.returncode, proc.stdout) == (2, ""), proc.stderr
    assert f"{AGG}: deployment default/llama-70b-agg is given twice (the same file twice?)" in proc.stderr


def test_explain_names_both_namespaces_when_a_deployment_name_is_ambiguous(tmp_path: Path) -> None:
    specs = []
    for ns in ("team-a", "team-b"):
        doc = yaml.safe_load(AGG.read_text())
        doc["metadata"]["namespace"] = ns
        path = tmp_path / f"{ns}.yaml"
        path.write_text(yaml.safe_dump(doc))
        specs.append(path)
    dgx = CLUSTERS / "dgx-h100-1024.yaml"
    records, manifests = tmp_path / "two.yaml", tmp_path / "two.m.yaml"
    solved = run_in_process("solve", *specs, dgx, "-q", "--placement", records)
    assert solved.returncode == 0, solved.stderr
    manifests.write_text(solved.stdout)
    for placed in (records, manifests):  # said "must be the only document" / "different placer.dev/spec"
        proc = run_in_process("explain", placed, dgx, "-d", "llama-70b-agg", "-o", "json", "--no-baselines")
        assert (proc.returncode, proc.stdout) == (2, ""), proc.stderr
        assert "is in several namespaces here: give team-a/llama-70b-agg or team-b/llama-70b-agg" in proc.stderr
        chosen = run_in_process("explain", placed, dgx, "-d", "team-b/llama-70b-agg", "-o", "json", "--no-baselines")
        assert chosen.returncode == 0, chosen.stderr


def test_generate_refuses_a_size_that_rounds_past_the_cluster_formats_node_limit(tmp_path: Path) -> None:
    """400,000 GB200 GPUs round up to 100,008 nodes: written after 27 s, then refused by every other command."""
    out = tmp_path / "big.yaml"
    proc = run_in_process("cluster", "generate", "--style", "gb200-nvl72", "--gpus", "400000", "-o", out)
    assert (proc.returncode, proc.stdout) == (2, ""), proc.stderr
    assert "make 100008 nodes; a cluster file holds at most 100000 nodes" in proc.stderr
    assert not out.exists()


def test_plan_says_the_cut_it_was_asked_for(tmp_path: Path) -> None:
    """--cut 0.0001 was reported as "cost drop by 0%"."""
    record = tmp_path / "run.yaml"
    assert run_in_process("solve", DISAGG, CLUSTERS / "dgx-h100-1024.yaml", "-q", "--placement", record).returncode == 0
    proc = run_in_process("plan", "--from", record, CLUSTERS / "dgx-h100-1024.yaml", "--cut", "0.0001")
    assert proc.returncode == 1, proc.stderr
    assert "cost drop by 0.01%" in proc.stderr


PLAN_CLUSTER = """apiVersion: placer.dev/v1alpha1
kind: Cluster
metadata: {name: lab}
fabric:
  network: {kind: infiniband, railGBps: 50, railsPerNode: 8, latencyUs: 2}
nodeClasses:
  dgx-h100: {gpus: {count: 8, product: NVIDIA-H100-80GB-HBM3, memoryGiB: 80}, nvlinkGBps: 900, cpu: "224", memory: 2Ti}
  a100-pcie:
    {gpus: {count: 8, product: NVIDIA-A100-PCIE-40GB, memoryGiB: 40}, interconnect: pcie, cpu: "128", memory: 1Ti}
nodes:
  - {name: dgx-001, class: dgx-h100, rack: r01, leaf: su1}
  - {name: pcie-001, class: a100-pcie, rack: r01, leaf: su1}
  - {name: cpu-1, rack: r01, leaf: su1, cpu: "32", memory: 128Gi}
"""

PLAN_SPEC = """apiVersion: placer.dev/v1alpha1
kind: ServingTopology
metadata: {name: NAME}
model: {layers: 80, hiddenSize: 8192, kvHeads: 8, headDim: 128}
pools:
  aggregated:
    instances: 1
    tensorParallel: 8
    placement: {required: node}
    gpu: {product: PRODUCT}
    template: {engine: vllm, model: meta-llama/Llama-3.3-70B-Instruct, image: vllm/vllm-openai:v0.15.0}
router: {kind: vllm, near: {pool: aggregated, level: rack}}
"""


def test_plan_says_two_pending_deployments_want_the_same_gpus(tmp_path: Path) -> None:
    """Two pending TP8 deployments for the cluster's one H100 node, beside an unrelated A100 one: each alone
    fits, and explaining each alone blamed router.near, then (dropped) what runs. They compete for the GPUs."""
    cluster = tmp_path / "c.yaml"
    cluster.write_text(PLAN_CLUSTER)
    specs = {}
    for name, product in [
        ("h1", "NVIDIA-H100-80GB-HBM3"),
        ("h2", "NVIDIA-H100-80GB-HBM3"),
        ("run", "NVIDIA-A100-PCIE-40GB"),
    ]:
        specs[name] = tmp_path / f"{name}.yaml"
        specs[name].write_text(PLAN_SPEC.replace("NAME", name).replace("PRODUCT", product))
    record = tmp_path / "run.json"
    assert run_in_process("solve", specs["run"], cluster, "-q", "--placement", record).returncode == 0
    proc = run_in_process("plan", "--from", record, specs["h1"], specs["h2"], cluster)
    assert proc.returncode == 1, proc.stderr
    assert "default/h2: aggregated needs 8 GPUs for 1 replica(s); only 0 matching GPUs are free" in proc.stderr
    assert "which hold 8 GPUs" in proc.stderr
    assert "default/h1" not in proc.stderr and "scale them in" not in proc.stderr


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (["-q", "-v"], "-q and -v contradict each other"),
        (["--dry-run", "--placement", "PLACED"], "--dry-run writes no files: drop --placement"),
        (["--dry-run", "-o", "json"], "--dry-run prints a text plan; -o json is for the manifests"),
    ],
)
def test_solve_refuses_options_that_contradict_each_other(tmp_path: Path, extra: list[str], said: str) -> None:
    """-q -v streamed the solver log; --dry-run dropped --placement and -o json silently."""
    args = [str(tmp_path / "placed.json") if a == "PLACED" else a for a in extra]
    proc = run_in_process("solve", AGG, SMALL, *args)
    assert (proc.returncode, proc.stdout) == (2, ""), proc.stderr
    assert said in proc.stderr and "Traceback" not in proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_quiet_batch_still_says_why_a_deployment_was_left_out() -> None:
    """-q promises nothing on stderr unless something fails; a batch that left one out exited 1 in silence."""
    proc = run_in_process("solve", SPECS, CLUSTERS / "dgx-h100-1024.yaml", "-q")
    assert proc.returncode == 1
    assert "serving/llama-70b-large (" in proc.stderr and "not placed:" in proc.stderr
    assert "  - prefill needs 32 groups of 8 GPUs" in proc.stderr


def test_a_quiet_batch_says_when_the_clock_decided_what_it_left_out() -> None:
    """A review found -q printing the reasons of what was left out but not the clock note, which the table
    shows: with a guard that has passed before anything is solved, both are said."""
    proc = run_in_process("solve", SPECS, CLUSTERS / "dgx-h100-1024.yaml", "-q", "--wall-limit", "0.1")
    assert proc.returncode == 1
    assert "not placed:" in proc.stderr
    assert "note: the wall-clock guard ended the search" in proc.stderr


def test_a_keep_solve_reports_its_own_proven_bound(tmp_path: Path) -> None:
    """A scale-out with --keep said "optimal" in the table but "gap 65.10%" in the summary: the batch bound
    freed what runs, so the new replica could take the kept replica's cheap GPUs."""
    one = tmp_path / "one.yaml"
    one.write_text(AGG.read_text().replace("replicas: 2", "replicas: 1"))
    first = tmp_path / "v1.yaml"
    assert run_in_process("solve", one, SMALL, "-q", "--placement", first).returncode == 0
    for spec in (one, AGG):  # the same deployment again, then scaled out to two replicas
        proc = run_in_process("solve", spec, SMALL, "--keep", first)
        assert proc.returncode == 0, proc.stderr
        assert "optimal" in proc.stderr and "(gap 0.00%)" in proc.stderr, proc.stderr


def test_an_object_name_over_its_limit_points_at_the_specs_name(tmp_path: Path) -> None:
    """The refusal named no file or line: it came from deep in the emitter, after the solve."""
    doc = yaml.safe_load(AGG.read_text())
    doc["metadata"]["name"] = "a" * 40  # the loader's maximum; with pool 'aggregated' a 56-character StatefulSet
    spec = tmp_path / "long.yaml"
    spec.write_text(yaml.safe_dump(doc, sort_keys=False))
    line = next(n for n, text in enumerate(spec.read_text().splitlines(), 1) if text.strip() == f"name: {'a' * 40}")
    for args in ([spec, SMALL], [spec, DISAGG, CLUSTERS / "dgx-h100-1024.yaml"]):  # alone, and in a batch
        proc = run_in_process("solve", *args, "-q")
        assert (proc.returncode, proc.stdout) == (2, ""), proc.stderr
        assert f"{spec}:{line}: metadata.name: StatefulSet name '{'a' * 40}-r0-aggregated-0' has 56" in proc.stderr


def test_a_kept_deployment_that_adds_nothing_is_not_said_to_add_something(tmp_path: Path) -> None:
    """With cpu raised past every node and --keep of its own placement, it said "what it adds does not fit",
    though it added nothing: its running instances no longer keep the spec."""
    first = tmp_path / "v1.yaml"
    assert run_in_process("solve", AGG, SMALL, "-q", "--placement", first).returncode == 0
    more = tmp_path / "cpu.yaml"
    text = AGG.read_text()
    assert 'requests: {cpu: "16", memory: 128Gi}' in text
    more.write_text(text.replace('requests: {cpu: "16"', 'requests: {cpu: "250"'))
    proc = run_in_process("solve", more, SMALL, "--keep", first)
    assert proc.returncode == 1
    assert "its 2 running instance(s) are all it asks for, and where they run they no longer keep" in proc.stderr
    assert "what it adds does not fit" not in proc.stderr
