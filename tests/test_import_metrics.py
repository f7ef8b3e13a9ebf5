"""``placer cluster import --metrics``: real vLLM, SGLang, Dynamo and DCGM output (tests/data/metrics, sources in
its README) becomes per-GPU ``metrics`` whose figures the test derives from the sample itself; those figures move
the real solver's choice the expected way (a long queue or a low hit rate is avoided, an unknown hit rate is
neutral); bad input exits 2 naming the file; the parser round-trips random series and never crashes."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
import yaml
from cli_in_process import run
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_cli import run as run_process

from placer.importers.prom import parse_metrics
from placer.importers.run import ImportOptions, import_cluster
from placer.importers.telemetry import counter_increase, gauge_value, histogram_quantile
from placer.model.errors import InputError
from placer.model.load import load_cluster
from placer.model.spec import ServingTopology
from placer.solver.problem import build_problem
from placer.solver.solve import SolveOptions, solve
from placer.topology.build import build_topology

DATA = Path(__file__).resolve().parent / "data" / "metrics"
VLLM = DATA / "vllm-v1-metrics.txt"
VLLM_API = DATA / "vllm-production-stack-keda-query.json"
SGLANG = DATA / "sglang-production-metrics.txt"
DYNAMO_WORKER = DATA / "dynamo-worker-metrics.txt"
DYNAMO_FRONTEND = DATA / "dynamo-frontend-metrics.txt"
DCGM = DATA / "dcgm-exporter-t4-metrics.txt"
GPUS = 8


# ---------------------------------------------------------------- what the samples say, read independently


def sample(path: Path, name: str) -> float:
    """The value of the first ``name`` line of a text-format sample."""
    for line in path.read_text().splitlines():
        m = re.match(rf"^{re.escape(name)}(\{{.*\}})?\s+(\S+)$", line)
        if m:
            return float(m.group(2))
    raise AssertionError(f"{name} not in {path.name}")


def buckets(path: Path, name: str) -> list[tuple[float, float]]:
    out = []
    for line in path.read_text().splitlines():
        m = re.match(rf'^{re.escape(name)}_bucket\{{.*le="([^"]+)".*\}}\s+(\S+)$', line)
        if m:
            out.append((float(m.group(1)), float(m.group(2))))
    return sorted(out)


def p90_ms(pairs: list[tuple[float, float]]) -> float:
    """histogram_quantile(0.9) as the Prometheus docs define it, written out for the test."""
    total = pairs[-1][1]
    rank = 0.9 * total
    prev_le, prev_n = 0.0, 0.0
    for le, n in pairs:
        if n >= rank:
            if math.isinf(le):
                return round(prev_le * 1000, 1)
            return round((prev_le + (le - prev_le) * (rank - prev_n) / (n - prev_n)) * 1000, 1)
        prev_le, prev_n = le, n
    raise AssertionError("no bucket holds the rank")


def nodes_json(tmp_path: Path, names: list[str]) -> Path:
    """kubectl get nodes -o json for identical 8 x H100 nodes (the cluster shape, not telemetry)."""
    items = [
        {
            "kind": "Node",
            "metadata": {
                "name": n,
                "labels": {
                    "kubernetes.io/hostname": n,
                    "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                    "nvidia.com/gpu.count": str(GPUS),
                    "nvidia.com/gpu.memory": "81559",
                },
            },
            "status": {
                "capacity": {"nvidia.com/gpu": str(GPUS), "cpu": "128", "memory": "1Ti"},
                "allocatable": {"nvidia.com/gpu": str(GPUS), "cpu": "128", "memory": "1Ti"},
            },
        }
        for n in names
    ]
    path = tmp_path / "nodes.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
    return path


def imported(tmp_path: Path, names: list[str], metrics: list[str], pods: Path | None = None) -> dict:
    result = import_cluster(ImportOptions(nodes=nodes_json(tmp_path, names), pods=pods, metrics=tuple(metrics)))
    return {n["name"]: n.get("metrics") for n in result.document["nodes"]}


# ---------------------------------------------------------------- each engine's sample -> per-GPU metrics


def test_sglang_sample_gives_queue_hit_and_ttft(tmp_path):
    got = imported(tmp_path, ["gpu-a"], [f"gpu-a={SGLANG}"])["gpu-a"]
    assert got["queueDepth"] == round(sample(SGLANG, "sglang:num_queue_reqs") / GPUS, 3)
    assert got["kvCacheHit"] == round(sample(SGLANG, "sglang:cache_hit_rate"), 4)
    assert got["ttftP90Ms"] == p90_ms(buckets(SGLANG, "sglang:time_to_first_token_seconds"))


def test_vllm_sample_gives_queue_and_ttft_and_leaves_an_unqueried_cache_unknown(tmp_path):
    got = imported(tmp_path, ["gpu-a"], [f"gpu-a={VLLM}"])["gpu-a"]
    assert got["queueDepth"] == sample(VLLM, "vllm:num_requests_waiting") / GPUS
    assert sample(VLLM, "vllm:prefix_cache_queries_total") == 0  # nothing queried yet: no hit rate to report
    assert "kvCacheHit" not in got
    assert got["ttftP90Ms"] == p90_ms(buckets(VLLM, "vllm:time_to_first_token_seconds"))


def test_dynamo_worker_and_frontend_samples(tmp_path):
    got = imported(tmp_path, ["gpu-a"], [f"gpu-a={DYNAMO_WORKER}", f"gpu-a={DYNAMO_FRONTEND}"])["gpu-a"]
    assert got["kvCacheHit"] == sample(DYNAMO_WORKER, "dynamo_component_kvstats_gpu_prefix_cache_hit_rate")
    assert got["ttftP90Ms"] == p90_ms(buckets(DYNAMO_FRONTEND, "dynamo_frontend_time_to_first_token_seconds"))
    assert "queueDepth" not in got  # the frontend's HTTP queue is not held by any GPU


def test_dcgm_sample_is_reported_not_charged(tmp_path):
    result = import_cluster(ImportOptions(nodes=nodes_json(tmp_path, ["gpu-a"]), metrics=(f"gpu-a={DCGM}",)))
    assert "metrics" not in result.document["nodes"][0]
    util = sample(DCGM, "DCGM_FI_DEV_GPU_UTIL")
    assert any(f"DCGM_FI_DEV_GPU_UTIL {util:.0f} %" in n.text for n in result.report.notes)
    uses = {u.metric: u.use for u in result.report.telemetry}
    assert uses["DCGM_FI_DEV_GPU_UTIL"].startswith("reported")
    assert uses["DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"].startswith("reported")


def test_api_json_sample_maps_through_the_pod_to_its_gpus(tmp_path):
    """The production-stack example has a pod label only: --pods says where that pod runs and which GPUs
    (placer.dev/gpus), so its queue lands on those GPUs alone."""
    data = json.loads(VLLM_API.read_text())
    pod_name = data["data"]["result"][0]["metric"]["pod"]
    pods = tmp_path / "pods.json"
    pods.write_text(json.dumps({"kind": "List", "items": [_pod(pod_name, "gpu-b", [2, 3])]}))
    # the sample's queue is 0; raise it through the documented one-number edit to see it split over 2 GPUs
    data["data"]["result"][0]["value"][1] = "6"
    edited = tmp_path / "q.json"
    edited.write_text(json.dumps(data))
    got = imported(tmp_path, ["gpu-a", "gpu-b"], [str(VLLM_API)], pods)
    assert got["gpu-b"]["queueDepth"] == {2: 0.0, 3: 0.0} and got["gpu-a"] is None
    got = imported(tmp_path, ["gpu-a", "gpu-b"], [str(edited)], pods)
    assert got["gpu-b"]["queueDepth"] == {2: 3.0, 3: 3.0}


def _pod(name: str, node: str, gpus: list[int]) -> dict:
    return {
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "default",
            "annotations": {"placer.dev/gpus": ",".join(map(str, gpus))},
        },
        "spec": {
            "nodeName": node,
            "containers": [{"name": "vllm", "resources": {"limits": {"nvidia.com/gpu": str(len(gpus))}}}],
        },
        "status": {"phase": "Running"},
    }


def to_api(text_sample: Path, labels: dict[str, str], matrix: bool = False) -> dict:
    """The documented transform of a /metrics dump into what /api/v1/query returns after scraping: every
    sample line becomes a vector item, the scrape's target labels added (kube-prometheus adds pod, namespace,
    node...). ``matrix``: the same value at two timestamps, as query_range would return a flat series."""
    result = []
    for s in parse_metrics(text_sample.read_text(), str(text_sample)).series:
        metric = {"__name__": s.name, **dict(s.labels), **labels}
        value = s.points[0][1]
        if matrix:
            result.append({"metric": metric, "values": [[1700000000, repr(value)], [1700000015, repr(value)]]})
        else:
            result.append({"metric": metric, "value": [1700000000, repr(value)]})
    return {"status": "success", "data": {"resultType": "matrix" if matrix else "vector", "result": result}}


@pytest.mark.parametrize("matrix", [False, True], ids=["vector", "matrix"])
def test_api_json_with_a_node_label_equals_the_text_import(tmp_path, matrix):
    direct = imported(tmp_path, ["gpu-a", "gpu-b"], [f"gpu-b={SGLANG}"])
    api = tmp_path / "api.json"
    api.write_text(json.dumps(to_api(SGLANG, {"node": "gpu-b", "pod": "sglang-0"}, matrix)))
    if matrix:  # a flat range: gauges keep their mean, the TTFT histogram had no new observation in it
        del direct["gpu-b"]["ttftP90Ms"]
    assert imported(tmp_path, ["gpu-a", "gpu-b"], [str(api)]) == direct


def test_a_range_of_counters_uses_the_increase_and_a_gauge_its_mean():
    assert counter_increase(((0, 10.0), (15, 30.0), (30, 5.0), (45, 25.0))) == 20 + 5 + 20  # reset at t=30
    assert gauge_value(((0, 2.0), (15, 4.0))) == 3.0
    assert histogram_quantile(0.9, [(1.0, 0.0), (2.0, 10.0), (math.inf, 10.0)]) == pytest.approx(1.9)
    assert histogram_quantile(0.9, [(1.0, 0.0), (math.inf, 0.0)]) is None


def test_series_that_map_nowhere_are_listed_with_the_reason(tmp_path):
    result = import_cluster(ImportOptions(nodes=nodes_json(tmp_path, ["gpu-a"]), metrics=(str(SGLANG),)))
    assert "metrics" not in result.document["nodes"][0]
    uses = {u.metric: u.use for u in result.report.telemetry}
    assert "names no node" in uses["sglang:num_queue_reqs"]
    api = tmp_path / "api.json"
    api.write_text(json.dumps(to_api(SGLANG, {"node": "elsewhere"})))
    result = import_cluster(ImportOptions(nodes=nodes_json(tmp_path, ["gpu-a"]), metrics=(str(api),)))
    assert "node=elsewhere is not a node" in {u.metric: u.use for u in result.report.telemetry}["sglang:num_queue_reqs"]


# ---------------------------------------------------------------- the placement moves the expected way


def _spec() -> ServingTopology:
    return ServingTopology.model_validate(
        {
            "apiVersion": "placer.dev/v1alpha1",
            "kind": "ServingTopology",
            "metadata": {"name": "probe"},
            "model": {"layers": 4, "hiddenSize": 1024, "kvHeads": 2, "headDim": 64},
            "pools": {
                "aggregated": {
                    "instances": 1,
                    "tensorParallel": 4,
                    "placement": {"required": "node"},
                    "template": {
                        "image": "example.com/engine:1",
                        "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
                    },
                }
            },
        }
    )


def chosen_node(tmp_path: Path, names: list[str], metrics: list[str]) -> str:
    result = import_cluster(ImportOptions(nodes=nodes_json(tmp_path, names), metrics=tuple(metrics)))
    placement = solve(build_problem(_spec(), result.topology), SolveOptions(time_limit_s=20))
    (node,) = {p.node for r in placement.replicas for i in r.instances for p in i.pods}
    return node


def test_the_node_with_the_long_sglang_queue_is_avoided_either_way_round(tmp_path):
    assert chosen_node(tmp_path, ["gpu-a", "gpu-b"], [f"gpu-a={SGLANG}", f"gpu-b={VLLM}"]) == "gpu-b"
    assert chosen_node(tmp_path, ["gpu-a", "gpu-b"], [f"gpu-b={SGLANG}", f"gpu-a={VLLM}"]) == "gpu-a"


def test_a_measured_full_miss_is_avoided_but_an_unknown_hit_rate_is_not(tmp_path):
    # gpu-a: Dynamo worker, prefix-cache hit rate 0 (measured); gpu-b: nothing; gpu-c: SGLang, a small hit
    # rate and a long queue. Unknown counts as the measured mean, above gpu-a's 0: gpu-b wins.
    metrics = [f"gpu-a={DYNAMO_WORKER}", f"gpu-c={SGLANG}"]
    assert chosen_node(tmp_path, ["gpu-a", "gpu-b", "gpu-c"], metrics) == "gpu-b"
    topo = import_cluster(
        ImportOptions(nodes=nodes_json(tmp_path, ["gpu-a", "gpu-b", "gpu-c"]), metrics=tuple(metrics))
    ).topology
    hits = {n.name: n.kv_cache_hit for n in topo.nodes}
    assert hits["gpu-b"] == pytest.approx((hits["gpu-a"] + hits["gpu-c"]) / 2)
    assert {n.name: bool(n.kv_cache_unknown) for n in topo.nodes} == {"gpu-a": False, "gpu-b": True, "gpu-c": False}


def test_with_no_telemetry_the_cache_term_is_zero(tmp_path):
    topo = import_cluster(ImportOptions(nodes=nodes_json(tmp_path, ["gpu-a", "gpu-b"]))).topology
    assert all(n.kv_cache_hit == 1.0 for n in topo.nodes)


# ---------------------------------------------------------------- bad input: exit 2, file and reason


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (
            '{"status":"error","errorType":"bad_data","error":"parse error at char 5"}',
            "Prometheus answered with an error ('bad_data'): 'parse error at char 5'",
        ),
        ('{"status":"success","data":{"resultType":"scalar","result":[1,"2"]}}', "expected a vector or a matrix"),
        (
            '{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,2]}]}}',
            "number in a string",
        ),
        ('{"status": "success", "data": ', "not valid JSON"),
        ("apiVersion: v1\nkind: List\n", "Prometheus text format"),
        ("", "empty file"),
    ],
    ids=["prometheus-error", "scalar", "unquoted-value", "truncated", "yaml", "empty"],
)
def test_bad_metrics_exit_2_naming_the_file(tmp_path, content, expected):
    bad = tmp_path / "m.json"
    bad.write_text(content)
    r = run("cluster", "import", "--nodes", nodes_json(tmp_path, ["gpu-a"]), "--metrics", bad)
    assert r.returncode == 2, r.stderr
    assert str(bad) in r.stderr and expected in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and r.stdout == ""


def test_import_with_metrics_is_byte_deterministic(tmp_path):
    args = ["cluster", "import", "--nodes", nodes_json(tmp_path, ["gpu-a", "gpu-b"]), "-q"]
    args += ["--metrics", f"gpu-a={SGLANG}", "--metrics", f"gpu-b={VLLM}", "--metrics", f"gpu-b={DYNAMO_FRONTEND}"]
    first, second = run(*args), run_process(*args)  # two processes: two hash seeds
    assert first.returncode == 0, first.stderr
    assert first.stdout == second.stdout
    doc = yaml.safe_load(first.stdout)
    assert [n.get("metrics") is not None for n in doc["nodes"]] == [True, True]
    out = tmp_path / "c.yaml"
    out.write_text(first.stdout)
    build_topology(load_cluster(out))


# ---------------------------------------------------------------- parser properties

NAMES = st.from_regex(r"[a-zA-Z_:][a-zA-Z0-9_:]{0,20}", fullmatch=True)
LABELS = st.dictionaries(
    st.from_regex(r"[a-zA-Z_][a-zA-Z0-9_]{0,10}", fullmatch=True).filter(lambda k: k != "__name__"),
    st.text(max_size=12),
    max_size=4,
)
VALUES = st.floats(allow_nan=False, allow_infinity=False, width=64)
SERIES = st.lists(
    st.tuples(
        NAMES,
        LABELS,
        st.lists(st.tuples(st.integers(0, 2**31), VALUES), min_size=1, max_size=4, unique_by=lambda p: p[0]),
    ),
    max_size=6,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(SERIES, st.booleans())
def test_api_json_round_trips(series, matrix):
    result = []
    for name, labels, points in series:
        points = points if matrix else points[:1]
        item = {"metric": {"__name__": name, **labels}}
        if matrix:
            item["values"] = [[ts, repr(v)] for ts, v in points]
        else:
            item["value"] = [points[0][0], repr(points[0][1])]
        result.append(item)
    doc = {"status": "success", "data": {"resultType": "matrix" if matrix else "vector", "result": result}}
    parsed = parse_metrics(json.dumps(doc), "m.json").series
    assert [(s.name, dict(s.labels)) for s in parsed] == [(n, lab) for n, lab, _ in series]
    for s, (_, _, points) in zip(parsed, series, strict=True):
        want = dict(points if matrix else points[:1])
        assert dict(s.points) == {float(k): v for k, v in want.items()}


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


@settings(max_examples=60, deadline=None)
@given(SERIES)
def test_text_format_round_trips(series):
    lines = []
    for name, labels, points in series:
        body = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
        lines.append(f"{name}{{{body}}} {points[0][1]!r}")
    lines.append("# a comment")
    if not series:
        return
    parsed = parse_metrics("\n".join(lines) + "\n", "m.txt").series
    assert [(s.name, dict(s.labels), s.points[0][1]) for s in parsed] == [(n, lab, p[0][1]) for n, lab, p in series]


@settings(max_examples=200, deadline=None)
@given(
    st.one_of(
        st.text(max_size=200),
        st.binary(max_size=200).map(lambda b: b.decode("latin-1")),
        st.recursive(
            st.none() | st.booleans() | st.floats() | st.text(max_size=5),
            lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=8), c, max_size=3),
            max_leaves=12,
        ).map(json.dumps),
    )
)
def test_garbage_is_refused_or_parsed_never_crashes(text):
    try:
        parse_metrics(text, "m.json")
    except InputError as exc:
        assert str(exc).startswith("m.json")


def test_lists_json_lines_nan_and_huge_numbers():
    one = {
        "status": "success",
        "data": {
            "resultType": "vector",
            "result": [
                {"metric": {"__name__": "a"}, "value": [1, "2"]},
                {"metric": {"__name__": "b"}, "value": [1, "NaN"]},
            ],
        },
    }
    two = {
        "status": "success",
        "data": {"resultType": "matrix", "result": [{"metric": {"__name__": "c"}, "values": [[1, "3"], [2, "+Inf"]]}]},
    }
    as_list = parse_metrics(json.dumps([one, two]), "m.json")
    as_lines = parse_metrics(json.dumps(one) + "\n" + json.dumps(two) + "\n", "m.jsonl")
    assert [(s.name, s.points) for s in as_list.series] == [("a", ((1.0, 2.0),)), ("c", ((1.0, 3.0),))]
    assert as_lines.series == as_list.series
    assert "2 sample(s) were NaN or infinite" in as_list.notes[0].text
    for bad in (
        '{"status":"success","data":{"result":[{"metric":{},"value":[1' + "0" * 400 + ',"1"]}]}}',
        "a 1 " + "9" * 5000,
    ):
        with pytest.raises(InputError, match="timestamp"):
            parse_metrics(bad, "m")


def test_dcgm_pod_attribution_puts_an_engine_on_its_gpus(tmp_path):
    """dcgm-exporter in Kubernetes mode labels a GPU's series with the pod using it; the engine's series carry
    the same pod label, so its queue lands on those GPUs, on the node DCGM's Hostname names."""

    def item(name: str, value: str, **labels: str) -> dict:
        return {"metric": {"__name__": name, **labels}, "value": [1700000000, value]}

    pod = {"pod": "llama-decode-0", "namespace": "serving"}
    doc = {
        "status": "success",
        "data": {
            "resultType": "vector",
            "result": [
                item("DCGM_FI_DEV_GPU_UTIL", "97", gpu="2", Hostname="gpu-b", **pod),
                item("DCGM_FI_DEV_GPU_UTIL", "95", gpu="3", Hostname="gpu-b", **pod),
                item("DCGM_FI_DEV_GPU_UTIL", "0", gpu="0", Hostname="gpu-b"),
                item("vllm:num_requests_waiting", "10", **pod),
                item("vllm:prefix_cache_hits_total", "30", **pod),
                item("vllm:prefix_cache_queries_total", "40", **pod),
            ],
        },
    }
    path = tmp_path / "m.json"
    path.write_text(json.dumps(doc))
    got = imported(tmp_path, ["gpu-a", "gpu-b"], [str(path)])
    assert got["gpu-a"] is None
    assert got["gpu-b"] == {"queueDepth": {2: 5.0, 3: 5.0}, "kvCacheHit": {2: 0.75, 3: 0.75}}
