"""placer autoscale: on a recorded trace it scales out on the trigger (before the SLO breaks), holds during
the cool-down, scales back in after scaleDownAfter; it prints only new and changed objects, never moves what
runs, stays within its bounds for any telemetry, and gives the same bytes for the same inputs."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml
from cli_in_process import run
from hypothesis import event, given, settings
from hypothesis import strategies as st
from test_cli import ROOT, assert_clean_failure, placer_cmd, user_env
from test_cli import run as run_process

from placer.emit.readback import load_running
from placer.model.errors import InputError
from placer.model.load import load_spec
from placer.model.spec import ServingTopology
from placer.pipeline import Observed, Shape, State, decide
from placer.solver.autoscale import parse_now, state_of

DATA = Path(__file__).parent / "data" / "autoscale"
SPEC = DATA / "spec.yaml"


def _cluster(tmp_path: Path, metrics: dict, name: str, busy: dict | None = None) -> Path:
    doc = yaml.safe_load((DATA / "cluster.yaml").read_text())
    for node in doc["nodes"]:
        if node["name"] in metrics:
            node["metrics"] = metrics[node["name"]]
        if busy and node["name"] in busy:
            node["busy"] = busy[node["name"]]
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc))
    return path


def _docs(text: str) -> list[dict]:
    return [d for d in yaml.safe_load_all(text) if d]


def _key(doc: dict) -> tuple[str, str]:
    return doc["kind"], doc["metadata"]["name"]


def _no_status(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if "placer.dev/solver-status" not in line)


def _pods(path: Path) -> dict:
    return {k: inst.pods for r in load_running([path]) for k, inst in r.instances.items()}


def test_the_recorded_trace_scales_out_on_the_trigger_holds_then_scales_in(tmp_path):
    trace = yaml.safe_load((DATA / "trace.yaml").read_text())
    slo = load_spec(SPEC).slo.ttft_ms
    running, state = DATA / "running.yaml", None
    first_full = run("solve", SPEC, DATA / "cluster.yaml", "-q").stdout
    previous_full = first_full
    for n, step in enumerate(trace):
        cluster = _cluster(tmp_path, step["metrics"], f"c{n}.yaml")
        decision, after = tmp_path / f"d{n}.json", tmp_path / f"p{n}.yaml"
        args = ["autoscale", SPEC, cluster, "--keep", running, "--now", str(step["now"]), "--decision", decision]
        args += ["--placement", after, *(["--state", state] if state else [])]
        proc = run(*args)
        assert proc.returncode == 0, proc.stderr
        record = json.loads(decision.read_text())
        assert f"{record['action']} {record['scope']}".strip() == step["expect"], record["reason"]
        full = run(*args[:-4], "--full", *(["--state", state] if state else [])).stdout
        if record["action"] == "none":
            assert proc.stdout == ""  # nothing to apply, nothing placed
            # the same objects; only the cost record moves with the telemetry (unknown hit rates are
            # charged at the measured GPUs' mean, docs/DESIGN.md)
            assert _no_status(full) == _no_status(previous_full)
            assert not after.exists()
        else:
            before_pods, after_pods = _pods(running), _pods(after)
            # never moves a running instance: every kept instance has the pods it had
            assert all(after_pods[k] == v for k, v in before_pods.items() if k in after_pods)
            old = {_key(d): d for d in _docs(previous_full)}
            new = {_key(d): d for d in _docs(full)}
            applied = {_key(d): d for d in _docs(proc.stdout)}
            # only incremental objects: exactly those of the full set that are new or differ from before
            assert applied == {k: d for k, d in new.items() if old.get(k) != d}
            assert sorted(f"{k[0]}/{k[1]}" for k in set(old) - set(new)) == sorted(
                p.split("/", 1)[0].split(".")[0] + "/" + p.rsplit("/", 1)[1] for p in record["objects"]["prune"]
            )
            running, previous_full = after, full
        state = decision
        if step["expect"] == "scale-out pool/prefill":
            assert record["observed"]["prefill"]["ttftP90Ms"] < slo  # on the trigger, before the SLO breaks
            assert ("StatefulSet", "chat-r0-prefill-1") in {_key(d) for d in _docs(proc.stdout)}
        if n == 2:
            assert "cooldown" in record["reason"]
        if step["expect"] == "scale-in pool/prefill":
            assert record["objects"]["prune"] == ["StatefulSet.apps/serving/chat-r0-prefill-1"]
            # back to the first deployment, byte for byte but for the cost (the telemetry is part of it)
            assert _no_status(full) == _no_status(first_full)


def test_same_inputs_same_bytes(tmp_path):
    step = yaml.safe_load((DATA / "trace.yaml").read_text())[1]
    cluster = _cluster(tmp_path, step["metrics"], "c.yaml")
    outs = []
    for n, runner in enumerate((run, run_process)):  # two processes, two hash seeds
        d = tmp_path / f"d{n}.json"
        proc = runner("autoscale", SPEC, cluster, "--keep", DATA / "running.yaml", "--now", "60", "--decision", d)
        assert proc.returncode == 0, proc.stderr
        outs.append((proc.stdout, d.read_bytes()))
    assert outs[0] == outs[1]


@pytest.mark.parametrize("n1_free", [True, False])
def test_a_scale_out_that_does_not_fit_exits_1_and_says_why(tmp_path, n1_free):
    """n2 full, n3 has only the running deployment's 6 GPUs and two busy ones, and a KV floor only NVLink
    meets keeps a replica on one node: no room for prefill-1 beside the pinned instances. With n1 free the
    whole replica fits there, so --allow-moves is suggested; with n1 full it fits nowhere, and the suggestion
    (made before whether or not it would help) is not."""
    step = yaml.safe_load((DATA / "trace.yaml").read_text())[1]
    busy = {"n2": list(range(8)), "n3": [6, 7]} | ({} if n1_free else {"n1": list(range(8))})
    cluster = _cluster(tmp_path, step["metrics"], "c.yaml", busy=busy)
    spec = tmp_path / "floor.yaml"
    spec.write_text(SPEC.read_text() + "transfer: {minBandwidthGBps: 500}\n")
    outs = [tmp_path / "next.json", tmp_path / "next.yaml"]
    proc = run(
        "autoscale",
        spec,
        cluster,
        "--keep",
        DATA / "running.yaml",
        "--now",
        "60",
        "--decision",
        outs[0],
        "--placement",
        outs[1],
    )
    assert_clean_failure(proc, 1)
    assert "cannot be placed" in proc.stderr
    assert ("--allow-moves lets running instances" in proc.stderr) == n1_free
    if not n1_free:
        assert "1 replica(s) need 8 GPUs across all pools; only 6 matching GPUs are free" in proc.stderr
    assert not any(p.exists() for p in outs)  # nothing written: the next call retries with the same --state


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--now", "yesterday"], "--now"),
        (["--now", "60", "--keep", "nothing.yaml"], "nothing of serving/chat runs"),
    ],
)
def test_bad_input_exits_2(tmp_path, extra, message):
    (tmp_path / "nothing.yaml").write_text("")
    args = ["autoscale", SPEC, DATA / "cluster.yaml", *extra]
    if "--keep" not in extra:
        args += ["--keep", DATA / "running.yaml"]
    proc = run(*args, cwd=tmp_path)
    assert_clean_failure(proc, 2)
    assert message in proc.stderr


def test_time_must_not_run_backwards_and_the_state_must_be_a_record():
    with pytest.raises(InputError, match="before the previous"):
        state_of({"kind": "AutoscaleDecision", "state": {"at": 100}}, "s.json", 50)
    with pytest.raises(InputError, match="decision record"):
        state_of({"kind": "Placement"}, "s.json", 50)
    for bad in ({"at": float("nan")}, {"lastScaleAt": float("inf")}, {"coldSince": {"pool/decode": float("nan")}}):
        with pytest.raises(InputError, match="must be finite numbers"):  # json.loads reads NaN and Infinity
            state_of({"kind": "AutoscaleDecision", "state": bad}, "s.json", 50)
    assert parse_now("1970-01-01T00:01:00Z") == 60.0


def test_a_spec_without_bounds_that_hold_is_refused(tmp_path):
    doc = yaml.safe_load(SPEC.read_text())
    doc["scaling"]["minReplicas"] = 3
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(InputError, match="minReplicas 3 is more than maxReplicas 2"):
        load_spec(path)
    doc = yaml.safe_load(SPEC.read_text())
    doc["pools"]["decode"]["scaling"]["scaleDownAfter"] = "soon"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(InputError, match="not a duration"):
        load_spec(path)


SPEC_OBJ = load_spec(SPEC)


def test_prefill_hot_and_decode_idle_shifts_one_instance():
    shape = Shape(1, {"prefill": 1, "decode": 2})
    seen = {"prefill": Observed(2, 1.0, 850.0), "decode": Observed(4, 0.2, 850.0)}
    d = decide(SPEC_OBJ, shape, seen, State(), 0)
    assert (d.action, d.scope) == ("shift", "pool/decode->pool/prefill")
    assert d.after.instances == {"prefill": 2, "decode": 1}
    assert d.after.gpus(SPEC_OBJ) == d.before.gpus(SPEC_OBJ)


def test_replicas_scale_out_when_the_pools_are_at_their_maximum():
    shape = Shape(1, {"prefill": 3, "decode": 3})
    seen = {"prefill": Observed(6, 9.0, 990.0), "decode": Observed(6, 9.0, 990.0)}
    d = decide(SPEC_OBJ, shape, seen, State(), 0)
    assert (d.action, d.scope, d.after.replicas) == ("scale-out", "replicas", 2)
    held = decide(SPEC_OBJ, shape, seen, State(0, 0, {}), 60)  # within the 300 s replica cooldown
    assert held.action == "none" and "cooldown" in held.reason


def test_no_telemetry_never_scales_in():
    shape = Shape(2, {"prefill": 2, "decode": 2})
    seen = {"prefill": Observed(4, None, None), "decode": Observed(4, None, None)}
    d = decide(SPEC_OBJ, shape, seen, State(0, None, {"replicas": 0, "pool/decode": 0}), 10_000)
    assert d.action == "none"


_value = st.one_of(st.none(), st.floats(0, 50, allow_nan=False))
_ttft = st.one_of(st.none(), st.floats(0, 3000, allow_nan=False))


@settings(max_examples=300, deadline=None)
@given(
    replicas=st.integers(1, 2),
    prefill=st.integers(1, 3),
    decode=st.integers(1, 3),
    q=st.tuples(_value, _value),
    t=st.tuples(_ttft, _ttft),
    last=st.one_of(st.none(), st.floats(0, 1000)),
    cold=st.dictionaries(st.sampled_from(["replicas", "pool/prefill", "pool/decode"]), st.floats(0, 1000)),
    now=st.floats(1000, 5000),
)
def test_any_telemetry_keeps_the_bounds_and_the_hierarchical_minimums(replicas, prefill, decode, q, t, last, cold, now):
    shape = Shape(replicas, {"prefill": prefill, "decode": decode})
    seen = {"prefill": Observed(2 * prefill, q[0], t[0]), "decode": Observed(2 * decode, q[1], t[1])}
    d = decide(SPEC_OBJ, shape, seen, State(None, last, cold), now)
    a = d.after
    assert 1 <= a.replicas <= 2
    assert all(1 <= a.instances[p] <= 3 for p in ("prefill", "decode"))  # a complete instance of each, per replica
    changed = abs(a.replicas - replicas) + sum(abs(a.instances[p] - shape.instances[p]) for p in a.instances)
    assert changed == {"none": 0, "scale-out": 1, "scale-in": 1, "shift": 2}[d.action]
    assert d.action == "none" or last is None or now - last >= 120
    assert d.state.at == now


@given(st.floats(0, 50), st.sampled_from([1, 2, 4, 8]), st.integers(2, 16))
def test_one_fewer_never_projects_below_the_linear_share(q, gpus, units):
    """Removing a unit raises each remaining unit's utilisation by n/(n-1); as queues grow like 1/(1-rho),
    the projected queue is at least the linear share, and saturation reads as infinite."""
    from placer.solver.autoscale import one_fewer

    after = one_fewer(q, gpus, units)
    assert after >= q * units / (units - 1) - 1e-9
    rho = q * gpus / (1 + q * gpus) * units / (units - 1)
    assert (after == float("inf")) == (rho >= 1)


@given(q=_value, replicas=st.integers(1, 3), prefill=st.integers(2, 3))
def test_a_pools_judgement_does_not_depend_on_how_many_replicas_share_its_load(q, replicas, prefill):
    """The same queue per GPU on every instance reads the same whatever the replica count: one instance fewer
    per replica loads each remaining instance alike (the queue is an instance's, not the whole pool's)."""
    from placer.solver.autoscale import signals

    def pool_signals(r):
        shape = Shape(r, {"prefill": prefill, "decode": 2})
        gpus = SPEC_OBJ.pools["prefill"].gpus_per_instance
        seen = {"prefill": Observed(gpus * prefill * r, q, None), "decode": Observed(4 * r, q, None)}
        return [(s.scope, s.level) for s in signals(SPEC_OBJ, shape, seen) if s.scope.startswith("pool/")]

    assert pool_signals(replicas) == pool_signals(1)


@pytest.mark.parametrize(
    "content, said", [(None, "cannot read (No such file or directory)"), ('{"a":\n', ":2: not valid JSON (Expecting")]
)
def test_a_state_file_that_cannot_be_read_is_bad_input(tmp_path: Path, content: str | None, said: str) -> None:
    """Said as every other input is ("cannot read (...)", file:line), not Python's "[Errno 2] ..." text."""
    state = tmp_path / "state.json"
    if content is not None:
        state.write_text(content)
    args = [SPEC, DATA / "cluster.yaml", "--keep", DATA / "running.yaml", "--now", "2025-06-01T12:00:00Z"]
    proc = run("autoscale", *args, "--state", state)
    assert_clean_failure(proc, 2)
    assert f"--state {state}{said}" in proc.stderr or f"--state {state}: {said}" in proc.stderr, proc.stderr
    assert "Errno" not in proc.stderr


def test_a_state_given_as_stdin_is_read_from_stdin() -> None:
    """'--state -' read a file named '-' ("No such file or directory"); every other input takes '-'."""
    args = [SPEC, DATA / "cluster.yaml", "--keep", DATA / "running.yaml", "--now", "2025-06-01T12:00:00Z"]
    proc = subprocess.run(
        [*placer_cmd(), "autoscale", *map(str, args), "--state", "-"],
        input='{"a":\n',
        cwd=ROOT,
        env=user_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert_clean_failure(proc, 2)
    assert "--state -:2: not valid JSON" in proc.stderr, proc.stderr


@pytest.mark.parametrize("target", ["kueue", "grove", "lws"])
def test_a_scale_out_follows_the_target_the_running_manifests_were_written_for(tmp_path, target):
    # Manifests of another scheduler beside the running ones would be a second gang nobody schedules together.
    running = tmp_path / "running.yaml"
    placed = run("solve", SPEC, DATA / "cluster.yaml", "-q", "-t", target)
    assert placed.returncode == 0, placed.stderr
    running.write_text(placed.stdout)
    step = yaml.safe_load((DATA / "trace.yaml").read_text())[1]
    cluster = _cluster(tmp_path, step["metrics"], "c.yaml")
    d = tmp_path / "d.json"
    proc = run("autoscale", SPEC, cluster, "--keep", running, "--now", "60", "--full", "--decision", d)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(d.read_text())["action"] == "scale-out"
    new_kinds = {doc["kind"] for doc in _docs(proc.stdout)}
    old_kinds = {doc["kind"] for doc in _docs(placed.stdout)}
    assert new_kinds == old_kinds  # the same target's kinds, none of the default's PodGroup added
    # and every running object is still in the full set, so nothing of the running deployment is pruned
    assert {_key(doc) for doc in _docs(placed.stdout)} <= {_key(doc) for doc in _docs(proc.stdout)}
    assert json.loads(d.read_text())["objects"]["prune"] == []
    if target == "grove":  # a PodCliqueSet whose cliques or topology constraint change is flagged before apply
        old = {
            doc["metadata"]["name"]: doc["spec"]["template"]
            for doc in _docs(placed.stdout)
            if doc["kind"] == "PodCliqueSet"
        }
        new = {
            doc["metadata"]["name"]: doc["spec"]["template"]
            for doc in _docs(proc.stdout)
            if doc["kind"] == "PodCliqueSet"
        }
        frozen = [
            name
            for name, t in new.items()
            if name in old
            and (
                t.get("topologyConstraint") != old[name].get("topologyConstraint")
                or sorted(c["name"] for c in t["cliques"]) != sorted(c["name"] for c in old[name]["cliques"])
            )
        ]
        assert ("does not allow on an update" in proc.stderr) == bool(frozen), proc.stderr
    other = run("autoscale", SPEC, cluster, "--keep", running, "--now", "60", "-t", "kai")
    assert_clean_failure(other, 2)
    assert f"written for --target {target}" in other.stderr and f"-t {target}" in other.stderr


def test_no_telemetry_at_all_is_said_not_read_as_quiet(tmp_path):
    d = tmp_path / "d.json"
    proc = run(
        "autoscale", SPEC, DATA / "cluster.yaml", "--keep", DATA / "running.yaml", "--now", "60", "--decision", d
    )
    assert proc.returncode == 0, proc.stderr
    record = json.loads(d.read_text())
    assert record["action"] == "none" and record["reason"].startswith("no telemetry")
    assert "serving/chat: none (no telemetry" in proc.stderr
    quiet = _cluster(tmp_path, {"n3": {"queueDepth": 1, "ttftP90Ms": 500}}, "q.yaml")
    said = run("autoscale", SPEC, quiet, "--keep", DATA / "running.yaml", "--now", "60", "--decision", d)
    assert json.loads(d.read_text())["reason"] == "every signal between the scale-in and scale-out lines", said.stderr


@pytest.mark.parametrize("now", ["nan", "inf", "-inf", "NaN"])
def test_now_must_be_a_time(now):
    proc = run("autoscale", SPEC, DATA / "cluster.yaml", "--keep", DATA / "running.yaml", "--now", now)
    assert_clean_failure(proc, 2)
    assert "--now" in proc.stderr


def test_a_state_recorded_for_another_deployment_is_refused(tmp_path):
    step = yaml.safe_load((DATA / "trace.yaml").read_text())[1]
    cluster = _cluster(tmp_path, step["metrics"], "c.yaml")
    d = tmp_path / "d.json"
    first = run("autoscale", SPEC, cluster, "--keep", DATA / "running.yaml", "--now", "60", "--decision", d)
    assert first.returncode == 0, first.stderr
    record = json.loads(d.read_text())
    record["deployment"] = "serving/other"
    other = tmp_path / "other.json"
    other.write_text(json.dumps(record))
    proc = run("autoscale", SPEC, cluster, "--keep", DATA / "running.yaml", "--now", "120", "--state", other)
    assert_clean_failure(proc, 2)
    assert "--state: the decision record is of serving/other, not of serving/chat" in proc.stderr
    ok = run("autoscale", SPEC, cluster, "--keep", DATA / "running.yaml", "--now", "120", "--state", d)
    assert ok.returncode == 0, ok.stderr


def test_a_deployment_placed_in_another_namespace_is_scaled_there(tmp_path):
    """solve -n team-b placed it in team-b: autoscale -n team-b finds it and writes its objects there."""
    placed = tmp_path / "ns.yaml"
    first = run("solve", SPEC, DATA / "cluster.yaml", "-q", "-n", "team-b", "--placement", placed)
    assert first.returncode == 0, first.stderr
    step = yaml.safe_load((DATA / "trace.yaml").read_text())[1]
    cluster = _cluster(tmp_path, step["metrics"], "c.yaml")
    without = run("autoscale", SPEC, cluster, "--keep", placed, "--now", "60")
    assert_clean_failure(without, 2)
    assert "nothing of serving/chat runs there, but team-b/chat does: give its namespace with -n (-n team-b)" in (
        without.stderr
    )  # it said "place it first with placer solve", which would have placed it twice
    proc = run("autoscale", SPEC, cluster, "--keep", placed, "--now", "60", "-n", "team-b")
    assert proc.returncode == 0, proc.stderr
    docs = _docs(proc.stdout)
    assert docs and {d["metadata"]["namespace"] for d in docs} == {"team-b"}
    assert "team-b/chat: scale-out pool/prefill" in proc.stderr
    bad = run("autoscale", SPEC, cluster, "--keep", placed, "--now", "60", "-n", "Team_B")
    assert_clean_failure(bad, 2)


def test_a_scale_out_with_no_room_left_does_not_blame_a_healthy_instance(tmp_path):
    """After prefill's scale-out n3 is full, and n1 and n2 are busy: decode's scale-out has nowhere to go.
    The running decode-0 was said to break the spec's placement rules, which it keeps."""
    step = yaml.safe_load((DATA / "trace.yaml").read_text())[1]
    first, d1 = tmp_path / "p1.yaml", tmp_path / "d1.json"
    out = run(
        "autoscale", SPEC, _cluster(tmp_path, step["metrics"], "c1.yaml"), "--keep", DATA / "running.yaml",
        "--now", "60", "--placement", first, "--decision", d1,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    full = _cluster(
        tmp_path,
        {"n3": {"queueDepth": 9, "ttftP90Ms": 990}},
        "full.yaml",
        busy={"n1": list(range(8)), "n2": list(range(8))},
    )
    proc = run("autoscale", SPEC, full, "--keep", first, "--now", "1000", "--state", d1)
    assert_clean_failure(proc, 1)
    assert "breaks the spec's placement rules" not in proc.stderr
    # moving the running instances would not help either: the shortage is said, not a pinned instance blamed
    assert "no single domain has the 10 free GPUs this requires" in proc.stderr
    assert "--allow-moves" not in proc.stderr


def test_the_readme_loop_keeps_the_target_through_placement_records(tmp_path):
    """README's loop feeds the record --placement wrote to the next call's --keep: the record says the target,
    so the second scale-out is Kueue's too, not a coscheduling gang beside Kueue's pods."""
    running = tmp_path / "run.yaml"
    running.write_text(run("solve", SPEC, DATA / "cluster.yaml", "-q", "-t", "kueue").stdout)
    step = yaml.safe_load((DATA / "trace.yaml").read_text())[1]
    p1, d1 = tmp_path / "p1.yaml", tmp_path / "d1.json"
    first = run(
        "autoscale", SPEC, _cluster(tmp_path, step["metrics"], "c1.yaml"), "--keep", running, "--now", "60",
        "--placement", p1, "--decision", d1,
    )  # fmt: skip
    assert first.returncode == 0, first.stderr
    assert yaml.safe_load(p1.read_text())["target"] == "kueue"
    hot = _cluster(tmp_path, {"n3": {"queueDepth": 9, "ttftP90Ms": 990}}, "c2.yaml")
    second = run("autoscale", SPEC, hot, "--keep", p1, "--now", "1000", "--state", d1, "--full")
    assert second.returncode == 0, second.stderr
    kinds = {d["kind"] for d in _docs(second.stdout)}
    assert "PodGroup" not in kinds and "StatefulSet" not in kinds and "Deployment" in kinds


def _templates(doc: dict) -> object:
    spec = doc.get("spec", {})
    return spec.get("template", spec.get("leaderWorkerTemplate"))


@pytest.mark.parametrize("target", ["coscheduling", "kai", "lws"])
def test_a_scale_out_leaves_the_pod_templates_of_running_engines_as_they_are(tmp_path, target):
    """The replica's worst KV transfer rode in every engine's pod template: a new prefill instance placed
    further away changed it, and `kubectl apply` rolled every serving pod of the replica (an outage)."""
    two = tmp_path / "two-prefill.yaml"
    text = SPEC.read_text()
    assert text.count("instances: 1") >= 1
    two.write_text(text.replace("instances: 1", "instances: 2", 1))
    placed = run("solve", two, DATA / "cluster.yaml", "-q", "-t", target)
    assert placed.returncode == 0, placed.stderr
    running = tmp_path / "running.yaml"
    running.write_text(placed.stdout)
    names = [n["name"] for n in yaml.safe_load((DATA / "cluster.yaml").read_text())["nodes"]]
    hot = _cluster(tmp_path, {n: {"ttftP90Ms": 850} for n in names}, "hot.yaml")
    d = tmp_path / "d.json"
    record = tmp_path / "after.json"  # a .json record is JSON (it was a YAML stream)
    proc = run(
        "autoscale", SPEC, hot, "--keep", running, "--now", "60", "--full", "--decision", d, "--placement", record
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(d.read_text())["action"] == "scale-out"
    assert json.loads(record.read_text())["kind"] == "Placement"
    before = {_key(doc): doc for doc in _docs(placed.stdout)}
    after = {_key(doc): doc for doc in _docs(proc.stdout)}

    def kv(docs: dict) -> set:
        return {d["metadata"].get("annotations", {}).get("placer.dev/kv-transfer-us") for d in docs.values()} - {None}

    assert kv(after) and kv(after) != kv(before)  # the worst KV transfer changed, on the objects' own metadata
    kept = [k for k in before if k in after and k[0] in ("StatefulSet", "LeaderWorkerSet")]
    assert kept and len(after) > len(before)
    for key in kept:
        assert _templates(after[key]) == _templates(before[key]), key


# The recorded spec with every lower bound raised to 2 (maxReplicas 3), so that shapes below a minimum are drawn.
RAISED = ServingTopology.model_validate(
    yaml.safe_load(
        SPEC.read_text()
        .replace("minReplicas: 1", "minReplicas: 2")
        .replace("maxReplicas: 2", "maxReplicas: 3")
        .replace("minInstances: 1", "minInstances: 2")
    )
)
# (spec, {scope: (lo, hi)}) as each spec file says
BOUNDS = [
    (SPEC_OBJ, {"replicas": (1, 2), "pool/decode": (1, 3), "pool/prefill": (1, 3)}),
    (RAISED, {"replicas": (2, 3), "pool/decode": (2, 3), "pool/prefill": (2, 3)}),
]


@settings(max_examples=200, deadline=None)
@given(
    which=st.sampled_from(BOUNDS),
    replicas=st.integers(1, 4),
    prefill=st.integers(1, 5),
    decode=st.integers(1, 5),
    q=st.tuples(_value, _value),
    last=st.one_of(st.none(), st.floats(0, 1000)),
)
def test_a_shape_outside_its_bounds_goes_back_to_the_nearest_bound_first(which, replicas, prefill, decode, q, last):
    """A shape outside the policies' bounds (3 replicas against maxReplicas 2, or 1 against minReplicas 2)
    was left as it was: "none, every signal between the lines". It now goes back to the nearest bound,
    replicas first, whatever the telemetry or the cooldown, as a HorizontalPodAutoscaler does."""
    spec, bounds = which
    shape = Shape(replicas, {"prefill": prefill, "decode": decode})
    seen = {"prefill": Observed(2 * prefill, q[0], None), "decode": Observed(2 * decode, q[1], None)}
    d = decide(spec, shape, seen, State(None, last, {}), 1000)
    counts = {"replicas": replicas, "pool/decode": decode, "pool/prefill": prefill}
    outside = [(scope, counts[scope], *bounds[scope]) for scope in ("replicas", "pool/decode", "pool/prefill")]
    outside = [(scope, n, lo, hi) for scope, n, lo, hi in outside if not lo <= n <= hi]
    if not outside:
        return
    scope, n, lo, hi = outside[0]
    event("below its minimum" if n < lo else "above its maximum")
    assert (d.action, d.scope) == ("scale-out" if n < lo else "scale-in", scope)
    assert min(max(n, lo), hi) == (d.after.replicas if scope == "replicas" else d.after.instances[scope[5:]])
    word = "Replicas" if scope == "replicas" else "Instances"
    assert d.reason == (f"{n} running, below min{word} {lo}" if n < lo else f"{n} running, above max{word} {hi}")


def test_a_pool_below_its_min_instances_scales_out_to_it():
    prefill = SPEC_OBJ.pools["prefill"]
    assert prefill.scaling is not None
    raised = prefill.model_copy(update={"scaling": prefill.scaling.model_copy(update={"min_instances": 3})})
    spec = SPEC_OBJ.model_copy(update={"pools": SPEC_OBJ.pools | {"prefill": raised}})
    shape = Shape(1, {"prefill": 1, "decode": 2})
    calm = {"prefill": Observed(2, 1.0, 500.0), "decode": Observed(4, 1.0, 500.0)}
    d = decide(spec, shape, calm, State(0, 0, {}), 10)  # in cooldown, and calm: a bound does not wait
    assert (d.action, d.scope, d.after.instances["prefill"]) == ("scale-out", "pool/prefill", 3)
    assert d.reason == "1 running, below minInstances 3"


def test_asking_for_nccl_values_the_running_objects_lack_shows_every_engine_as_changed(tmp_path):
    """The running objects were printed without --nccl; autoscale --nccl compared against objects it
    regenerated with NCCL values, so the record listed the engines as unchanged and the incremental stream
    left them without the values --full gives them."""
    running = tmp_path / "running.yaml"
    placed = run("solve", SPEC, DATA / "cluster.yaml", "-q")
    assert placed.returncode == 0, placed.stderr
    running.write_text(placed.stdout)
    step = yaml.safe_load((DATA / "trace.yaml").read_text())[1]
    cluster = _cluster(tmp_path, step["metrics"], "c.yaml")
    for nccl, engines_unchanged in ((["--nccl"], False), ([], True)):
        d = tmp_path / "d.json"
        proc = run("autoscale", SPEC, cluster, "--keep", running, "--now", "60", "--decision", d, *nccl)
        assert proc.returncode == 0, proc.stderr
        unchanged = json.loads(d.read_text())["objects"]["unchanged"]
        assert any(u.startswith("StatefulSet.") for u in unchanged) == engines_unchanged, unchanged
        printed = {_key(doc) for doc in _docs(proc.stdout)}
        kept = {_key(doc) for doc in _docs(placed.stdout) if doc["kind"] == "StatefulSet"}
        assert (kept <= printed) != engines_unchanged


@pytest.mark.parametrize("target", ["coscheduling", "kai", "volcano", "kueue", "grove", "lws", "dynamo"])
@pytest.mark.parametrize("nccl", ["--nccl", "--no-nccl"])
def test_running_manifests_say_whether_they_carry_placers_nccl_values(tmp_path, target, nccl):
    """Grove's clique of single-node instances carried the NCCL env but no placer.dev/nccl, so autoscale read
    it as printed without NCCL values and its --full stream stripped them from the running engines."""
    placed = run("solve", SPEC, DATA / "cluster.yaml", "-q", "-t", target, nccl)
    assert placed.returncode == 0, placed.stderr
    path = tmp_path / "running.yaml"
    path.write_text(placed.stdout)
    (running,) = load_running([path])
    assert running.nccl is (nccl == "--nccl")


def test_a_grove_scale_out_that_widens_the_packed_domain_is_flagged_before_apply(tmp_path):
    """The running replica sits on n3 alone (its PodCliqueSet packs at host level). With n3's last two GPUs
    taken, the new prefill instance goes to the other rack, so the pack constraint must change: Grove's update
    webhook holds topology constraints immutable, and autoscale says so, naming the PodCliqueSet, before
    kubectl apply is refused. The same scale-out with room on n3 says nothing of the kind."""
    running = tmp_path / "running.yaml"
    placed = run("solve", SPEC, DATA / "cluster.yaml", "-q", "-t", "grove")
    assert placed.returncode == 0, placed.stderr
    (pcs,) = [d for d in _docs(placed.stdout) if d["kind"] == "PodCliqueSet"]
    assert pcs["spec"]["template"]["topologyConstraint"]["pack"]["required"] == "host"
    running.write_text(placed.stdout)
    step = yaml.safe_load((DATA / "trace.yaml").read_text())[1]
    full = _cluster(tmp_path, step["metrics"], "full.yaml", busy={"n3": [6, 7]})
    proc = run("autoscale", SPEC, full, "--keep", running, "--now", "60", "--full")
    assert proc.returncode == 0, proc.stderr
    said = " ".join(proc.stderr.split())
    assert (
        "PodCliqueSet chat-r0 changes its topology constraint" in said and "kubectl delete podcliqueset chat-r0" in said
    )
    (after,) = [d for d in _docs(proc.stdout) if d["kind"] == "PodCliqueSet"]
    assert after["spec"]["template"].get("topologyConstraint") != pcs["spec"]["template"]["topologyConstraint"]
    room = run("autoscale", SPEC, _cluster(tmp_path, step["metrics"], "room.yaml"), "--keep", running, "--now", "60")
    assert room.returncode == 0 and "does not allow on an update" not in room.stderr
