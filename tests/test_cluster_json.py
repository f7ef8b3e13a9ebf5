"""Cluster files written as JSON: read by the json module (fast at 100k GPUs), with exactly the answers of the
YAML reading of the same text - the same model when it is valid, the same message and line when it is not."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_in_process import run
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_solver_properties import clusters

from placer.model.cluster import ClusterSpec
from placer.model.errors import InputError
from placer.model.load import load_cluster, load_model, read_text
from placer.model.yaml_text import parse_documents
from placer.topology.generate import dump_cluster_json, generate_cluster

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = sorted((ROOT / "fixtures" / "clusters").glob("*.yaml"))


def _as_yaml_reads(path: Path) -> ClusterSpec | str:
    """What the YAML reading (the only one before JSON was read apart) makes of the file: a model or a message."""
    try:
        return load_model(path, ClusterSpec)
    except InputError as exc:
        return str(exc)


def _as_loaded(path: Path) -> ClusterSpec | str:
    try:
        return load_cluster(path)
    except InputError as exc:
        return str(exc)


@pytest.mark.parametrize("fixture", FIXTURES, ids=lambda p: p.name)
def test_a_fixture_written_as_json_is_the_same_cluster(fixture: Path, tmp_path: Path) -> None:
    ((data, _node),) = parse_documents(read_text(fixture), str(fixture))
    path = tmp_path / "cluster.json"
    path.write_text(dump_cluster_json(data))
    assert load_cluster(path) == load_cluster(fixture)


def _mutations(doc: dict) -> list[tuple[str, str]]:
    """(what, JSON text) pairs, each a plausible mistake in a JSON cluster file."""
    text = dump_cluster_json(doc)
    node0 = json.dumps(doc["nodes"][0], separators=(", ", ": "))
    return [
        ("valid", text),
        ("node name a number", text.replace('"name": "n0"', '"name": 7', 1)),
        ("busy a string", text.replace(node0, node0.replace('"rack"', '"busy": "0", "rack"'), 1)),
        ("unknown field", text.replace('"kind": "Cluster"', '"kind": "Cluster", "nodez": []', 1)),
        ("duplicate key", text.replace('"name": "n0"', '"name": "n0", "name": "n9"', 1)),
        ("NaN", text.replace('"memoryGiB": 80', '"memoryGiB": NaN', 1)),
        ("a number of 5000 digits", text.replace('"memoryGiB": 80', '"memoryGiB": ' + "9" * 5000, 1)),
        ("wrong kind", text.replace('"kind": "Cluster"', '"kind": "ServingTopology"', 1)),
        ("a list, not an object", f"[{text}]"),
        ("trailing comma", text.replace("\n]", ",\n]", 1)),
        ("cut short", text[: len(text) // 2]),
        ("two nodes of one name", text.replace('"name": "n1"', '"name": "n0"', 1)),
        # what JSON takes and YAML refuses or reads otherwise, in free-text fields (a review found each one
        # loading from JSON and refused, or read otherwise, from YAML)
        ("a lone surrogate escape", text.replace('"product": "H100"', '"product": "H100\\ud800"', 1)),
        ("a surrogate pair escape", text.replace('"product": "H100"', '"product": "H\\ud83d\\ude00"', 1)),
        ("a raw DEL", text.replace('"product": "H100"', '"product": "H100\x7f"', 1)),
        ("a raw C1 control", text.replace('"product": "H100"', '"product": "H100\x80"', 1)),
        ("a raw U+FFFE", text.replace('"product": "H100"', '"product": "H100\ufffe"', 1)),
        ("a raw NEL, a line break to YAML", text.replace('"product": "H100"', '"product": "H\x85100"', 1)),
        ("a raw line separator", text.replace('"product": "H100"', '"product": "H\u2028100"', 1)),
        ("an escaped NEL", text.replace('"product": "H100"', '"product": "H\\u0085100"', 1)),
        (
            "a class name of 1,100 characters",
            text.replace('"nodes": [', '"nodeClasses": {"' + "c" * 1100 + '": {}},\n"nodes": [', 1),
        ),
        ("a key on the line before its colon", text.replace('"kind": "Cluster"', '"kind"\n: "Cluster"', 1)),
        ("an integer of 4,300 digits and a sign", text.replace('"memoryGiB": 80', '"memoryGiB": -' + "9" * 4300, 1)),
    ]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(doc=clusters(max_nodes=4, max_gpus=8), data=st.data())
def test_json_reads_as_yaml_reads_it(doc: dict, data, tmp_path: Path) -> None:
    what, text = data.draw(st.sampled_from(_mutations(doc)))
    path = tmp_path / "cluster.json"
    path.write_text(text)
    got, want = _as_loaded(path), _as_yaml_reads(path)
    assert got == want, what
    if isinstance(want, str) and "YAML" not in want:
        assert want.startswith(f"{path}:"), want  # a line, or at least the file, as for any input error


def test_an_error_in_a_json_file_names_its_line(tmp_path: Path) -> None:
    doc = generate_cluster("dgx-h100", 64, 0)
    text = dump_cluster_json(doc).replace(f'"name": "{doc["nodes"][5]["name"]}"', '"name": ["x"]', 1)
    path = tmp_path / "c.json"
    path.write_text(text)
    line = next(i for i, row in enumerate(text.splitlines(), start=1) if '"name": ["x"]' in row)
    with pytest.raises(InputError, match=rf"^{path}:{line}: nodes\[5\]\.name"):
        load_cluster(path)


@pytest.mark.parametrize("style", ["dgx-h100", "gb200-nvl72"])
def test_generate_json_solves_to_the_same_bytes_as_yaml(style: str, tmp_path: Path) -> None:
    spec = ROOT / "fixtures" / "specs" / "llama-70b-disagg.yaml"
    outs = []
    for suffix in ("yaml", "json"):
        cluster = tmp_path / f"c.{suffix}"
        made = run("cluster", "generate", "--style", style, "--gpus", "512", "--seed", "3", "-o", cluster)
        assert made.returncode == 0, made.stderr
        if suffix == "json":
            assert json.loads(cluster.read_text())["kind"] == "Cluster"
        solved = run("solve", spec, cluster, "-q")
        assert solved.returncode in (0, 1), solved.stderr
        outs.append((solved.returncode, solved.stdout))
    assert outs[0] == outs[1]
    assert outs[0][1]  # something was printed to compare


def test_an_error_found_after_loading_names_its_json_line(tmp_path: Path) -> None:
    """Errors the topology build finds (a busy GPU the node does not have) are located in the JSON text too."""
    doc = generate_cluster("dgx-h100", 64, 0)
    doc["nodes"][3]["busy"] = [9]
    text = dump_cluster_json(doc)
    path = tmp_path / "c.json"
    path.write_text(text)
    line = next(i for i, row in enumerate(text.splitlines(), start=1) if '"busy": [9]' in row)
    done = run("validate", ROOT / "fixtures" / "specs" / "llama-70b-disagg.yaml", path)
    assert done.returncode == 2
    assert f"{path}:{line}: nodes[3].busy: GPU index 9 is not a GPU" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_a_cluster_is_read_with_the_cycle_collector_paused(tmp_path, monkeypatch):
    """Reading builds objects that outlive it (load_cluster says why the collector pauses): paused while the
    text is parsed, as the caller had it afterwards, after an error too."""
    import gc

    import placer.model.load as load

    seen: list[bool] = []
    for name in ("read_text", "json_object", "load_model"):  # reading, the JSON parse, the YAML parse
        real = getattr(load, name)
        monkeypatch.setattr(load, name, lambda *a, real=real: (seen.append(gc.isenabled()), real(*a))[1])
    assert gc.isenabled()
    assert load_cluster(FIXTURES[0]).nodes
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: placer.dev/v1alpha1\nkind: Cluster\nmetadata: {name: c}\nnodes: 3\n")
    with pytest.raises(InputError):
        load_cluster(bad)
    assert gc.isenabled()
    assert len(seen) >= 5 and not any(seen)  # the valid file: read, JSON; the bad one: read, JSON, YAML
    gc.disable()  # a caller that collects by hand is left so
    try:
        load_cluster(FIXTURES[0])
        assert not gc.isenabled()
    finally:
        gc.enable()
