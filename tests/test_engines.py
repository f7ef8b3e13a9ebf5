"""Engine presets (``template.engine``): the flags placer writes follow from the spec and the placement
(TP, PP, role, KV transfer, port, multi-node rank and leader), user args that contradict them are refused at
load time with the file and line (exit 2), and each preset's manifests match a golden file
(PLACER_UPDATE_GOLDEN=1 regenerates them)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml
from cli_in_process import run
from fixtures_solved import solved_fixture
from hypothesis import given, settings
from hypothesis import strategies as st
from k8s_acceptance import assert_accepted, made_pods

from placer.emit.manifests import build_manifests, to_yaml
from placer.emit.targets import common
from placer.model import engines
from placer.model.errors import InputError
from placer.model.load import load_spec
from placer.model.spec import ServingTopology

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "golden" / "presets"
MODEL = "meta-llama/Llama-3.3-70B-Instruct"
IMAGES = {
    "vllm": "vllm/vllm-openai:v0.15.0",
    "sglang": "lmsysorg/sglang:v0.5.5",
    "trtllm": "nvcr.io/nvidia/tensorrt-llm/release:1.0.0",
}
TP_FLAG = {"vllm": "--tensor-parallel-size", "sglang": "--tp-size", "trtllm": "--tp_size"}
PP_FLAG = {"vllm": "--pipeline-parallel-size", "sglang": "--pp-size", "trtllm": "--pp_size"}


def with_engine(spec: ServingTopology, engine: str, router: str | None = None) -> ServingTopology:
    """The spec with every pool on ``engine`` (its preset, no user args) and the router of ``router``."""
    data = spec.model_dump(mode="json", by_alias=True, exclude_defaults=True)
    for pool in data["pools"].values():
        t = pool["template"]
        t.update(engine=engine, model=MODEL, image=IMAGES[engine])
        t.pop("args", None)
        t.pop("ports", None)
    if "router" in data:
        data["router"]["kind"] = router or ("vllm" if engine == "trtllm" else engine)
        if engine == "trtllm" and router is None:
            data["router"] = {k: v for k, v in data["router"].items() if k != "kind"} | {
                "kind": "custom",
                "image": "example.com/router:1",
                "args": ["--prefill", "{prefill_urls}", "--decode", "{decode_urls}"],
            }
    return ServingTopology.model_validate(data)


@pytest.fixture(scope="module")
def disagg():
    return solved_fixture("llama-70b-disagg")


@pytest.fixture(scope="module")
def multinode():
    return solved_fixture("tp16-multinode")


def flags(args: list[str]) -> dict[str, list[str | None]]:
    """Every ``--flag`` with the value after it (None for a switch followed by another flag)."""
    out: dict[str, list[str | None]] = {}
    for k, arg in enumerate(args):
        if arg.startswith("--"):
            head, eq, tail = arg.partition("=")
            nxt = args[k + 1] if k + 1 < len(args) and not args[k + 1].startswith("--") else None
            out.setdefault(head, []).append(tail if eq else nxt)
    return out


def engine_pods(docs: list[dict]) -> list[dict]:
    """The engine pods the controllers make (templates of StatefulSets, Deployments; LWS templates below)."""
    return [d for d in made_pods(docs) if d["metadata"]["labels"].get("placer.dev/pool")]


def container_of(pod: dict) -> dict:
    return next(c for c in pod["spec"]["containers"] if c["name"] == "engine")


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm"])
def test_single_node_flags_follow_the_spec(disagg, engine):
    base, topo, placement, report = disagg
    spec = with_engine(base, engine)
    docs = build_manifests(spec, topo, placement, report, target="coscheduling")
    assert_accepted(docs)
    pods = engine_pods(docs)
    assert pods
    for pod in pods:
        pool_name = pod["metadata"]["labels"]["placer.dev/pool"]
        pool, role = spec.pools[pool_name], spec.role_of(pool_name)
        c = container_of(pod)
        f = flags(c["args"])
        port = engines.DEFAULT_PORT[engine]
        assert f[TP_FLAG[engine]] == [str(pool.tensor_parallel)]
        assert f[PP_FLAG[engine]] == [str(pool.pipeline_parallel)]
        assert f["--port"] == [str(port)] and f["--host"] == ["0.0.0.0"]
        assert c["ports"] == [{"name": "http", "containerPort": port}]
        assert c["readinessProbe"]["httpGet"] == {"path": "/health", "port": port}
        assert c["startupProbe"]["failureThreshold"] * c["startupProbe"]["periodSeconds"] >= 1800
        # SGLang's /health generates a token and sleeps 1 s before answering: past Kubernetes' default 1 s
        # timeout, every probe would fail and the container be restarted for ever.
        assert all(c[p].get("timeoutSeconds", 1) >= 5 for p in ("startupProbe", "readinessProbe", "livenessProbe"))
        gpus = int(c["resources"]["limits"]["nvidia.com/gpu"])
        assert gpus == pool.tensor_parallel * pool.pipeline_parallel  # one pod holds the whole instance
        if engine == "vllm":
            assert c["command"] == ["vllm", "serve"] and c["args"][0] == MODEL
            kv = json.loads(str(f["--kv-transfer-config"][0]))
            assert kv == {"kv_connector": "NixlConnector", "kv_role": "kv_both"}
        elif engine == "sglang":
            assert c["command"] == ["python3", "-m", "sglang.launch_server"]
            assert f["--model-path"] == [MODEL] and f["--disaggregation-mode"] == [role]
            assert ("--disaggregation-bootstrap-port" in f) == (role == "prefill")
        else:
            assert c["command"] == ["trtllm-serve"] and c["args"][0] == MODEL
        assert not {"--nnodes", "--node-rank", "--headless", "--dist-init-addr"} & set(f)


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_multi_node_flags_reference_rank_and_leader(multinode, engine):
    base, topo, placement, report = multinode
    spec = with_engine(base, engine)
    docs = build_manifests(spec, topo, placement, report, target="coscheduling")
    assert_accepted(docs)
    pods = sorted(engine_pods(docs), key=lambda p: p["metadata"]["name"])
    inst = placement.replicas[0].instances[0]
    assert len(pods) == len(inst.pods) == spec.pools["aggregated"].node_count
    for rank, pod in enumerate(pods):
        c = container_of(pod)
        f = flags(c["args"])
        assert f[TP_FLAG[engine]] == [str(spec.pools["aggregated"].tensor_parallel)]
        assert f["--nnodes"] == [f"$({common.PODS_ENV})"] and f["--node-rank"] == [f"$({common.RANK_ENV})"]
        leader = f"$({common.LEADER_ENV})"
        if engine == "vllm":
            assert f["--master-addr"] == [leader]
            assert ("--headless" in f) == (rank > 0)  # the leader alone serves HTTP
        else:
            assert f["--dist-init-addr"] == [f"{leader}:{engines.SGLANG_DIST_PORT}"]
        assert ("readinessProbe" in c) == (rank == 0)
        # the env names the flags reference are the ones the targets give every engine container
        assert {common.RANK_ENV, common.PODS_ENV, common.LEADER_ENV} == {
            engines.RANK_ENV,
            engines.PODS_ENV,
            engines.LEADER_ENV,
        }


def test_multi_node_vllm_in_a_shared_template_decides_headless_by_rank(multinode):
    base, topo, placement, report = multinode
    spec = with_engine(base, "vllm")
    docs = build_manifests(spec, topo, placement, report, target="lws")
    assert_accepted(docs)
    lws = next(d for d in docs if d["kind"] == "LeaderWorkerSet")
    group = lws["spec"]["leaderWorkerTemplate"]
    leader = container_of(group["leaderTemplate"])  # rank 0: serves HTTP, never headless
    assert "--headless" not in leader["args"] and "readinessProbe" in leader
    assert {"name": engines.RANK_ENV, "value": "0"} in leader["env"]
    c = container_of(group["workerTemplate"])  # one template for ranks 1..n-1: the rank decides at start
    assert c["command"][:2] == ["/bin/sh", "-c"] and "--headless" in c["command"][2]
    assert f"${engines.RANK_ENV}" in c["command"][2]
    assert "readinessProbe" not in c  # the template serves ranks that run no HTTP server
    rank_env = next(e for e in c["env"] if e["name"] == engines.RANK_ENV)
    assert (
        rank_env["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.labels['leaderworkerset.sigs.k8s.io/worker-index']"
    )


def test_trtllm_multi_node_is_refused_with_its_line(tmp_path):
    text = (ROOT / "fixtures" / "specs" / "tp16-multinode.yaml").read_text()
    text = text.replace("engine: vllm ", "engine: trtllm ")
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    with pytest.raises(InputError, match=r"spec\.yaml:\d+: pools\.aggregated\.template\.engine: trtllm-serve"):
        load_spec(path)


def _write_with_args(tmp_path: Path, args: str, engine: str = "vllm") -> tuple[Path, int]:
    """The quick-start spec with ``args`` on the prefill template; returns the file and the args line."""
    lines = (ROOT / "fixtures" / "specs" / "llama-70b-disagg.yaml").read_text().splitlines()
    at = next(k for k, line in enumerate(lines) if "engine: vllm" in line)  # the prefill pool's template
    lines[at] = lines[at].replace("engine: vllm", f"engine: {engine}")
    lines.insert(at + 1, f"      args: {args}")
    text = "\n".join(lines) + "\n"
    if engine != "vllm":
        text = text.replace("engine: vllm", f"engine: {engine}").replace("kind: vllm", f"kind: {engine}")
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    return path, at + 2


@pytest.mark.parametrize(
    "engine,args",
    [
        ("vllm", '[--tensor-parallel-size, "4"]'),
        ("vllm", "[--tensor-parallel-size=4]"),
        ("vllm", '[--max-model-len, "8192", -tp, "4"]'),
        ("vllm", '[--tensor_parallel_size, "4"]'),
        ("sglang", '[--tp-size, "4"]'),
        ("sglang", "[--tp=4]"),
        ("sglang", '[--tp, "4"]'),
        ("sglang", '[--tensor-parallel-size, "4"]'),
    ],
)
def test_contradicting_tp_exits_2_with_file_and_line(tmp_path, engine, args):
    path, line = _write_with_args(tmp_path, args, engine)
    proc = run("solve", path, ROOT / "fixtures" / "clusters" / "dgx-h100-1024.yaml")
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    assert f"{path}:{line}: pools.prefill.template.args[" in proc.stderr
    assert "tensorParallel is 8" in proc.stderr and "contradicts" in proc.stderr


@pytest.mark.parametrize("flag", ["--tp_size", "--tensor_parallel_size"])  # click aliases in trtllm-serve
def test_trtllm_serve_tp_under_either_name_is_checked(tmp_path, flag):
    doc = yaml.safe_load((ROOT / "fixtures" / "specs" / "aggregated-tp8.yaml").read_text())
    doc.pop("router")
    t = doc["pools"]["aggregated"]["template"]
    t |= {"engine": "trtllm", "image": "nvcr.io/nvidia/tensorrt-llm/release:1.1.0", "args": [flag, "4"]}
    t.pop("ports", None)
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(doc))
    proc = run("validate", path, ROOT / "fixtures" / "clusters" / "dgx-h100-1024.yaml")
    assert proc.returncode == 2, proc.stderr
    assert f"{flag} 4 contradicts the spec: pools.aggregated.tensorParallel is 8" in proc.stderr


@pytest.mark.parametrize(
    "args,why",
    [
        ('[--port, "9000"]', "port is 8000"),
        ("[--nnodes, '2']", "placer's to write"),
        ("[--headless]", "placer's to write"),
        ('[--kv-transfer-config, \'{"kv_connector":"LMCacheConnectorV1","kv_role":"kv_both"}\']', "role prefill"),
        ("[--model, other/model]", "template.model is"),
    ],
)
def test_other_contradictions_are_refused(tmp_path, args, why):
    path, line = _write_with_args(tmp_path, args)
    with pytest.raises(InputError) as err:
        load_spec(path)
    assert f"{path}:{line}:" in str(err.value) and why in str(err.value)


def test_the_same_value_is_accepted_and_written_once(tmp_path, disagg):
    _, topo, placement, report = disagg
    path, _ = _write_with_args(tmp_path, '[--tensor-parallel-size, "8", --max-model-len=8192, --port=8000]')
    spec = load_spec(path)
    docs = build_manifests(spec, topo, placement, report, target="coscheduling")
    pods = engine_pods(docs)
    assert {pod["metadata"]["labels"]["placer.dev/pool"] for pod in pods} == {"prefill", "decode"}
    for pod in pods:
        f = flags(container_of(pod)["args"])
        assert len(f["--tensor-parallel-size"]) == 1 and len(f["--port"]) == 1
        if pod["metadata"]["labels"]["placer.dev/pool"] == "prefill":
            assert f["--max-model-len"] == ["8192"]  # what placer does not own passes through


def test_preset_needs_a_model_and_no_command(tmp_path):
    text = (ROOT / "fixtures" / "specs" / "llama-70b-disagg.yaml").read_text()
    path = tmp_path / "spec.yaml"
    path.write_text(text.replace("      model: meta-llama/Llama-3.3-70B-Instruct\n", "", 1))
    with pytest.raises(InputError, match=r"model: engine vllm needs the model"):
        load_spec(path)
    path.write_text(text.replace("      model: meta-llama", "      command: [python3]\n      model: meta-llama", 1))
    with pytest.raises(InputError, match=r"command: engine vllm writes the command"):
        load_spec(path)


def test_dynamo_router_kind_makes_the_engines_dynamo_workers(disagg):
    base, topo, placement, report = disagg
    for engine, module in (("vllm", "dynamo.vllm"), ("sglang", "dynamo.sglang"), ("trtllm", "dynamo.trtllm")):
        spec = with_engine(base, engine, router="dynamo")
        docs = build_manifests(spec, topo, placement, report, target="coscheduling")
        assert_accepted(docs)
        pods = engine_pods(docs)
        assert {pod["metadata"]["labels"]["placer.dev/pool"] for pod in pods} == {"prefill", "decode"}
        for pod in pods:
            c = container_of(pod)
            role = spec.role_of(pod["metadata"]["labels"]["placer.dev/pool"])
            assert c["command"] == ["python3", "-m", module]
            f = flags(c["args"])
            tp = str(spec.pools[pod["metadata"]["labels"]["placer.dev/pool"]].tensor_parallel)
            assert tp in (f.get("--tensor-parallel-size") or f.get("--tp-size") or [])
            assert "--port" not in f and "ports" not in c  # Dynamo's frontend finds them; no HTTP of their own
            # ai-dynamo 1.5.0 knows no --is-prefill-worker (vLLM's parser exits on it), and its vLLM prefill
            # refuses to start without a KV transfer config
            assert "--is-prefill-worker" not in f and f["--disaggregation-mode"] == [role]
            if engine == "vllm":
                assert json.loads(f["--kv-transfer-config"][0])["kv_connector"] == "NixlConnector"


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm"])
def test_golden_per_preset(disagg, engine):
    base, topo, placement, report = disagg
    docs = build_manifests(with_engine(base, engine), topo, placement, report, target="coscheduling")
    path = GOLDEN / f"{engine}-llama-70b-disagg-dgx-h100-1024.yaml"
    got = to_yaml(docs)
    if os.environ.get("PLACER_UPDATE_GOLDEN"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(got)
    assert got == path.read_text(), f"{path} differs (PLACER_UPDATE_GOLDEN=1 regenerates)"


# ---- the args parser -----------------------------------------------------------------------------------

TP = engines.Flag(("--tensor-parallel-size", "-tp"), "8", "tensorParallel is 8")
_other = st.sampled_from(["--max-model-len", "--dtype", "--seed", "--enforce-eager", "x", "8", "4", "--tp"])


@settings(max_examples=300, deadline=None)
@given(
    before=st.lists(_other, max_size=6),
    after=st.lists(_other, max_size=6),
    spelling=st.sampled_from(["--tensor-parallel-size", "-tp", "--tensor_parallel_size"]),
    value=st.integers(1, 16),
    form=st.sampled_from(["space", "equals"]),
)
def test_parser_finds_tp_in_either_form(before, after, spelling, value, form):
    # the other tokens never spell the TP flag, and a value-taking flag before it never swallows it
    before = [t for t in before if not t.startswith("--")]
    tp = [f"{spelling}={value}"] if form == "equals" else [spelling, str(value)]
    args = [*before, *tp, *after]
    found = engines.flag_occurrences(args, TP, "vllm")
    assert [(k, v) for k, _s, v in found] == [(len(before), str(value))]
    if value == 8:
        drop = engines.check_args(args, [TP], "vllm", "args")
        kept = [a for k, a in enumerate(args) if k not in drop]
        assert kept == [*before, *after]
    else:
        with pytest.raises(ValueError, match=rf"args\[{len(before)}\]: .* {value} contradicts"):
            engines.check_args(args, [TP], "vllm", "args")


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.sampled_from(["--max-model-len", "8", "--tp", "-t", "--tensor-parallel", "x=--tp-size"]), max_size=8)
)
def test_parser_ignores_lookalikes(args):
    assert engines.flag_occurrences(args, TP, "vllm") == []


def test_no_placeholder_router_image_anywhere():
    files = [*ROOT.glob("placer/**/*.py"), *ROOT.glob("docs/*.md"), ROOT / "README.md", *ROOT.glob("schemas/*.json")]
    files += [*ROOT.glob("fixtures/specs/*.yaml"), *ROOT.glob("tests/golden/**/*.yaml")]
    marker = "ghcr.io/placer/" + "router"
    assert [str(f) for f in files if marker in f.read_text()] == []


def test_a_kv_config_that_extends_placers_replaces_it_and_one_that_contradicts_is_refused(tmp_path):
    """NIXL with more keys (kv_buffer_device) keeps placer's connector and role: the user's config is written
    instead of placer's, once. A different kv_role contradicts the pool's role: exit 2 with file and line."""
    extended = '{"kv_connector":"NixlConnector","kv_role":"kv_both","kv_buffer_device":"cuda"}'
    path, _ = _write_with_args(tmp_path, json.dumps(["--kv-transfer-config", extended]))
    done = run("solve", path, ROOT / "fixtures" / "clusters" / "dgx-h100-1024.yaml", "-q")
    assert done.returncode == 0, done.stderr
    prefill = [
        p
        for p in made_pods(list(yaml.safe_load_all(done.stdout)))
        if p["metadata"]["labels"].get("placer.dev/pool") == "prefill"
    ]
    assert prefill
    for pod in prefill:
        f = flags(container_of(pod)["args"])
        assert f["--kv-transfer-config"] == [extended]
    producer = '{"kv_connector":"NixlConnector","kv_role":"kv_producer"}'
    path, line = _write_with_args(tmp_path, json.dumps(["--kv-transfer-config", producer]))
    refused = run("solve", path, ROOT / "fixtures" / "clusters" / "dgx-h100-1024.yaml", "-q")
    assert (refused.returncode, refused.stdout) == (2, "")
    assert f"{path}:{line}: pools.prefill.template.args[0]: --kv-transfer-config" in refused.stderr
