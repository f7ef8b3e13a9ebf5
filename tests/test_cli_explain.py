"""``placer explain`` end to end (in-process, tests/cli_in_process.py): where its output goes, the SVG, exit codes."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest
import yaml
from cli_in_process import run
from test_cli import CLUSTERS, DISAGG, SMALL, SPECS

AGG = SPECS / "aggregated-tp8.yaml"


@pytest.fixture(scope="module")
def placed(tmp_path_factory):
    out = tmp_path_factory.mktemp("placed")
    record = out / "placed.yaml"
    done = run("solve", AGG, SMALL, "--placement", record, "-q")
    assert done.returncode == 0, done.stderr
    manifests = out / "manifests.yaml"
    manifests.write_text(done.stdout)
    return record, manifests


def test_human_view_goes_to_stderr_when_piped(placed):
    record, _ = placed
    done = run("explain", record, "--cluster", SMALL)
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    assert "tensor-parallel groups" in done.stderr and "counterfactual" in done.stderr


def test_text_when_asked_goes_to_stdout(placed):
    record, _ = placed
    done = run("explain", record, "--cluster", SMALL, "--output", "text", "--no-baselines")
    assert done.returncode == 0, done.stderr
    assert "tensor-parallel groups" in done.stdout and "counterfactual" not in done.stdout


def test_json_from_manifests_equals_json_from_record(placed):
    record, manifests = placed
    a = run("explain", record, SMALL, "-o", "json")
    b = run("explain", manifests, SMALL, "-o", "json")
    assert a.returncode == b.returncode == 0, a.stderr + b.stderr
    assert a.stdout == b.stdout
    doc = json.loads(a.stdout)
    assert doc["kind"] == "Explanation" and doc["solver"]["status"] == "optimal"
    assert sum(t["units"] for t in doc["cost"]["terms"]) == doc["cost"]["totalUnits"] == doc["solver"]["objective"]


@pytest.fixture(scope="module")
def record_explained(placed):
    done = run("explain", placed[0], "-c", SMALL, "-o", "json", "--no-baselines")
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize("target", ["coscheduling", "kai", "volcano", "kueue", "grove", "lws", "dra"])
def test_explain_on_every_targets_output_equals_explain_on_the_record(record_explained, target, tmp_path):
    """solve --target T (YAML, or -o json for a List) -> explain -o json: byte-identical to the record's."""
    fmt = "json" if target in ("kai", "kueue", "lws") else "yaml"
    done = run("solve", AGG, SMALL, "--target", target, "-o", fmt, "-q")
    assert done.returncode == 0, done.stderr
    manifests = tmp_path / f"manifests.{fmt}"
    manifests.write_text(done.stdout)
    done = run("explain", manifests, "-c", SMALL, "-o", "json", "--no-baselines")
    assert done.returncode == 0, done.stderr
    assert done.stdout == record_explained


def test_incomplete_manifests_are_bad_input_naming_the_file(placed, tmp_path):
    _, manifests = placed
    docs = [d for d in yaml.safe_load_all(manifests.read_text()) if d]
    cut = tmp_path / "cut.yaml"
    cut.write_text(yaml.safe_dump_all([d for d in docs if d["kind"] != "Deployment"]))
    done = run("explain", cut, "-c", SMALL)
    assert done.returncode == 2 and done.stdout == "" and "Traceback" not in done.stderr
    assert f"{cut}: replica 0 has no router object with a placer.dev/node annotation" in done.stderr


def test_svg_is_written_atomically_and_well_formed(placed, tmp_path):
    record, _ = placed
    svg = tmp_path / "placement.svg"
    done = run("explain", record, "-c", SMALL, "-o", "json", "--svg", svg)
    assert done.returncode == 0, done.stderr
    root = ET.fromstring(svg.read_text())
    assert root.tag.endswith("svg")
    assert not list(tmp_path.glob(".*.tmp"))


def test_wrong_cluster_is_bad_input(placed):
    record, _ = placed
    done = run("explain", record, "--cluster", CLUSTERS / "dgx-h100-1024.yaml")
    assert done.returncode == 2
    assert "made on cluster 'small-mixed'" in done.stderr and "Traceback" not in done.stderr
    assert done.stdout == ""


def test_missing_cluster_and_garbage_input_are_bad_input(placed, tmp_path):
    record, _ = placed
    assert run("explain", record).returncode == 2
    junk = tmp_path / "junk.yaml"
    junk.write_text("kind: Pod\napiVersion: v1\nmetadata: {name: x}\n")
    done = run("explain", junk, "-c", SMALL)
    assert done.returncode == 2 and "not manifests placer emitted" in done.stderr


def test_why_not_exit_codes_and_json(tmp_path):
    spec = yaml.safe_load(DISAGG.read_text())
    spec["transfer"]["minBandwidthGBps"] = 5000
    strict = tmp_path / "strict.yaml"
    strict.write_text(yaml.safe_dump(spec))
    dgx = CLUSTERS / "dgx-h100-1024.yaml"
    done = run("explain", "--why-not", strict, dgx, "-o", "json")
    assert done.returncode == 1, done.stderr
    doc = json.loads(done.stdout)
    assert doc["kind"] == "WhyNot" and doc["fits"] is False
    (conflict,) = doc["conflicts"]
    assert conflict["rule"] == "transfer"
    assert conflict["relax"].startswith("lower transfer.minBandwidthGBps to 200")
    fits = run("explain", "--why-not", DISAGG, dgx, "-o", "text", "--no-baselines")
    assert fits.returncode == 0 and "KV-cache transfer" in fits.stdout


def test_why_not_says_when_the_clock_ended_its_explanation(tmp_path, monkeypatch):
    """The clock note reaches `-o json` as `notes` (not as a conflict) and the text table as a row, and only
    when a guard ended the explanation (here made to end it at once: the run's guard is the parent)."""
    from placer.solver import conflicts
    from placer.solver.options import CLOCK_NOTE

    spec = yaml.safe_load(DISAGG.read_text())
    spec["transfer"]["minBandwidthGBps"] = 5000
    strict = tmp_path / "strict.yaml"
    strict.write_text(yaml.safe_dump(spec))
    dgx = CLUSTERS / "dgx-h100-1024.yaml"
    idle = json.loads(run("explain", "--why-not", strict, dgx, "-o", "json").stdout)
    assert "notes" not in idle
    real = conflicts.explain_infeasible

    def clock_ends_it(problem, seconds=20.0, within=None):
        found = real(problem, seconds, within)
        within.cut_by_clock()
        return found

    monkeypatch.setattr(conflicts, "explain_infeasible", clock_ends_it)
    cut = run("explain", "--why-not", strict, dgx, "-o", "json")
    assert cut.returncode == 1, cut.stderr
    doc = json.loads(cut.stdout)
    assert doc["notes"] == [CLOCK_NOTE] and doc["conflicts"] == idle["conflicts"]
    text = run("explain", "--why-not", strict, dgx, "-o", "text")
    assert text.returncode == 1 and "wall-clock guard ended" in text.stdout


def test_solve_infeasible_names_the_conflict_on_stderr(tmp_path):
    spec = yaml.safe_load(DISAGG.read_text())
    spec["transfer"]["minBandwidthGBps"] = 5000
    strict = tmp_path / "strict.yaml"
    strict.write_text(yaml.safe_dump(spec))
    done = run("solve", strict, CLUSTERS / "dgx-h100-1024.yaml")
    assert done.returncode == 1 and done.stdout == ""
    assert "joined by at least 5000 GB/s" in done.stderr and "Relax: lower transfer.minBandwidthGBps" in done.stderr


def test_readme_explain_excerpt_is_what_placer_prints(tmp_path):
    """README.md shows explain's KV and counterfactual tables for the disaggregated fixture on the 1,024-GPU
    cluster: every line of that excerpt is a line placer prints today (it had drifted: cost, leaf, headers)."""
    from pathlib import Path

    cluster = CLUSTERS / "dgx-h100-1024.yaml"
    record = tmp_path / "placed.yaml"
    assert run("solve", DISAGG, cluster, "--placement", record, "-q").returncode == 0
    done = run("explain", record, "--cluster", cluster, "-o", "text")
    assert done.returncode == 0, done.stderr
    printed = {line.rstrip() for line in done.stdout.splitlines()}
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    start = readme.index("KV-cache transfer, worst prefill → decode pair per replica\n")
    excerpt = readme[start : readme.index("```", start)].splitlines()
    assert len(excerpt) > 20
    missing = [line for line in excerpt if line.rstrip() not in printed]
    assert not missing, "\n".join(missing)


def test_the_header_gives_the_recorded_objective_and_says_when_the_cluster_now_prices_it_otherwise(placed, tmp_path):
    record, _ = placed
    recorded = yaml.safe_load(record.read_text())["status"]["objective"]
    same = run("explain", record, "--cluster", SMALL, "-o", "text", "--no-baselines")
    assert f"objective {recorded} units (bound " in same.stdout
    assert f") = {recorded / 100:,.1f} weighted µs" in same.stdout
    assert "on this cluster file it costs" not in same.stdout
    cluster = yaml.safe_load(SMALL.read_text())
    for node in cluster["nodes"]:
        node["metrics"] = {"queueDepth": 4, "kvCacheHit": 0.1}  # every GPU now queued and cold
    hot = tmp_path / "hot.yaml"
    hot.write_text(yaml.safe_dump(cluster))
    now = json.loads(run("explain", record, "--cluster", hot, "-o", "json", "--no-baselines").stdout)
    total = now["cost"]["totalUnits"]
    assert total > recorded and now["solver"]["objective"] == recorded
    assert f"on this cluster file it costs {total:,} units, not the {recorded:,} it was solved at" in " ".join(
        now["notes"]
    )
    text = run("explain", record, "--cluster", hot, "-o", "text", "--no-baselines").stdout
    assert f") = {recorded / 100:,.1f} weighted µs" in text  # the objective's, not the table's total


def test_why_not_on_a_directory_says_it_takes_one_spec():
    done = run("explain", "--why-not", SPECS, SMALL)
    assert done.returncode == 2 and done.stdout == ""
    assert "--why-not explains one spec" in done.stderr and "Traceback" not in done.stderr
