"""``placer solve --keep``: new objects are written for the --target the running manifests were written
for (placer.emit.readback.target_of reads it off their kinds), so a scale-out never mixes two schedulers'
objects; a --target that differs from it is refused."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from cli_in_process import run
from test_cli import ROOT, assert_clean_failure
from test_dra_ids import with_gpu_ids

from placer.emit.readback import load_running, target_of
from placer.emit.targets import TARGETS
from placer.model.load import load_cluster

SPEC = ROOT / "fixtures" / "specs" / "llama-70b-disagg.yaml"
CLUSTER = ROOT / "fixtures" / "clusters" / "dgx-h100-1024.yaml"


def _dra_cluster(tmp_path: Path) -> Path:
    """The fixture cluster with a uuid and bus id per GPU, which --target dra selects by."""
    path = tmp_path / "cluster-ids.yaml"
    data = with_gpu_ids(load_cluster(CLUSTER)).model_dump(mode="json", by_alias=True, exclude_none=True)
    path.write_text(yaml.safe_dump(data))
    return path


def _solve(tmp_path: Path, target: str, *extra) -> Path:
    cluster = _dra_cluster(tmp_path) if target == "dra" else CLUSTER
    out = run("solve", SPEC, cluster, "-q", "-t", target, *extra)
    assert out.returncode == 0, out.stderr
    path = tmp_path / f"{target}.yaml"
    path.write_text(out.stdout)
    return path


@pytest.mark.parametrize("target", TARGETS)
def test_every_targets_manifests_say_which_target_wrote_them(tmp_path, target):
    path = _solve(tmp_path, target)
    assert [r.target for r in load_running([path])] == [target]
    assert target_of([d for d in yaml.safe_load_all(path.read_text()) if d]) == target


def test_records_and_unknown_objects_name_no_target():
    assert target_of([{"apiVersion": "v1", "kind": "Service"}]) is None
    assert target_of([{"apiVersion": "apps/v1", "kind": "Deployment", "spec": {"template": {}}}]) is None


@pytest.mark.parametrize("target", ["kueue", "kai", "dynamo"])
def test_solve_keep_writes_for_the_running_target_and_refuses_another(tmp_path, target):
    running = _solve(tmp_path, target)
    again = run("solve", SPEC, CLUSTER, "--keep", running, "-q")
    assert again.returncode == 0, again.stderr
    assert again.stdout == running.read_text()  # nothing changed: the same objects, byte for byte
    other = "grove" if target != "grove" else "kai"
    refused = run("solve", SPEC, CLUSTER, "--keep", running, "-q", "-t", other)
    assert_clean_failure(refused, 2)
    assert f"written for --target {target}" in refused.stderr
    assert run("solve", SPEC, CLUSTER, "--keep", running, "-q", "-t", target).stdout == running.read_text()


def test_a_placement_record_keeps_the_default_or_the_target_given(tmp_path):
    record = tmp_path / "p.yaml"
    assert run("solve", SPEC, CLUSTER, "-q", "-t", "kai", "--placement", record).returncode == 0
    kinds = {d["kind"] for d in yaml.safe_load_all(run("solve", SPEC, CLUSTER, "--keep", record, "-q").stdout) if d}
    assert "PodGroup" in kinds  # a record does not say which target: the default, coscheduling
    given = run("solve", SPEC, CLUSTER, "--keep", record, "-q", "-t", "kai").stdout
    assert "scheduling.run.ai/" in given


def test_topology_objects_follow_the_kept_target(tmp_path):
    running = _solve(tmp_path, "kueue")
    out = run("solve", SPEC, CLUSTER, "--keep", running, "-q", "--topology-objects", "-")
    assert out.returncode == 0, out.stderr
    assert {"Topology"} <= {d["kind"] for d in yaml.safe_load_all(out.stdout) if d}
    lws = _solve(tmp_path, "lws")
    refused = run("solve", SPEC, CLUSTER, "--keep", lws, "-q", "--topology-objects", "-")
    assert_clean_failure(refused, 2)
    assert "the lws target refers to no topology object" in refused.stderr


def test_manifests_of_two_targets_kept_together_need_a_target(tmp_path):
    a = _solve(tmp_path, "kueue")
    other = tmp_path / "other-spec.yaml"
    doc = yaml.safe_load(SPEC.read_text())
    doc["metadata"]["name"] = "second"
    other.write_text(yaml.safe_dump(doc))
    out = run("solve", other, CLUSTER, "-q", "-t", "grove")
    b = tmp_path / "b.yaml"
    b.write_text(out.stdout)
    proc = run("solve", SPEC, other, CLUSTER, "--keep", a, "--keep", b, "-q")
    assert_clean_failure(proc, 2)
    assert "different targets" in proc.stderr
