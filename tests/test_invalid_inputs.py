"""Bad input, end to end: every file in tests/data/invalid/ makes the CLI exit 2 with a message that names the
file, the field and (where the loader can know it) the line, and never a traceback or stdout. The CLI runs
in-process (tests/cli_in_process.py); tests/test_cli.py holds the real process to the same bytes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_in_process import run
from hypothesis import given, settings
from hypothesis import strategies as st

import placer
import placer.model.load
import placer.model.spec
from placer.model.errors import InputError
from placer.model.load import load_cluster, load_spec

ROOT = Path(__file__).resolve().parent.parent
INVALID = ROOT / "tests" / "data" / "invalid"
GOOD_SPEC = ROOT / "fixtures" / "specs" / "aggregated-tp8.yaml"
GOOD_CLUSTER = ROOT / "fixtures" / "clusters" / "small-mixed.yaml"

# file name -> (which argument it is, line the message must give or None, fragment after "file:LINE: ")
CASES: dict[str, tuple[str, int | None, str]] = {
    "spec-tp-zero.yaml": ("spec", 10, "pools.aggregated.tensorParallel: Input should be greater than"),
    "spec-unknown-field.yaml": ("spec", 11, "pools.aggregated.tensorParalel: unknown field"),
    "spec-wrong-type-instances.yaml": ("spec", 9, "pools.aggregated.instances: expected an integer, got 'many'"),
    "spec-nodecount-mismatch.yaml": ("spec", 8, "pools.aggregated: nodeCount x gpusPerNode = 2 x 4 = 8"),
    "spec-unknown-pool-in-transfer.yaml": ("spec", 18, "transfer.to"),
    "spec-router-near-unknown-pool.yaml": ("spec", 13, "router.near.pool"),
    "spec-bad-image.yaml": ("spec", 12, "pools.aggregated.template.image: image"),
    "spec-env-name-injection.yaml": ("spec", 14, "pools.aggregated.template.env[0].name: env name"),
    "spec-label-injection-name.yaml": ("spec", 5, "metadata.name: metadata.name 'Llama:70B'"),
    "spec-name-starts-with-digit.yaml": (
        "spec",
        6,
        "metadata.name: metadata.name '70b-llama' must start with a letter",
    ),
    "spec-min-replicas-above-replicas.yaml": ("spec", 13, "minReplicas"),
    "spec-preferred-broader-than-required.yaml": ("spec", 11, "pools.aggregated.placement: preferred"),
    "spec-gpu-resource-in-template.yaml": ("spec", 14, "pools.aggregated.template.resources.limits"),
    "spec-malformed-yaml.yaml": ("spec", 9, "not valid YAML"),
    "spec-alias-bomb.yaml": ("spec", None, "YAML anchors and aliases are not allowed"),
    "spec-duplicate-key.yaml": ("spec", 11, "key 'tensorParallel' appears twice"),
    "spec-wrong-kind.yaml": ("spec", 3, "kind: expected 'ServingTopology', got 'Cluster'"),
    "spec-tp-bigger-than-any-node.yaml": ("spec", 10, "pools.aggregated.tensorParallel"),
    "cluster-duplicate-node.yaml": ("cluster", 12, "nodes[2].name: node 'dgx-a' appears twice"),
    "cluster-unknown-busy-gpu.yaml": ("cluster", 11, "nodes[1].busy"),
    "cluster-gpu-uuid-twice.yaml": (
        "cluster",
        None,
        "nodes[1].gpuIds: uuid GPU-2fa81118-5a5f-aa66-7660-471eed407181 is also a GPU of node 'a'",
    ),
    "cluster-unknown-class.yaml": ("cluster", 11, "nodes[1].class: 'dgx-h200' is not in nodeClasses"),
    "cluster-domains-not-nested.yaml": ("cluster", 12, "nodes[2]"),
    "cluster-bad-override-domain.yaml": ("cluster", 15, "overrides[1].domain"),
    "cluster-negative-cpu.yaml": ("cluster", 9, "nodeClasses.dgx-h100.cpu: '-224' is not a"),
    "cluster-astronomical-cpu.yaml": ("cluster", 9, "nodeClasses.dgx-h100.cpu: '1e999999' is out of range"),
    "cluster-kv-hit-above-one.yaml": ("cluster", 16, "nodes[1].metrics.kvCacheHit"),
    # issue 18: inputs that ended in exit 3 (or a crash) instead of exit 2
    "spec-yaml-tag-custom.yaml": ("spec", 9, "YAML tag '!foo' is not allowed"),
    "spec-yaml-tag-python-object.yaml": ("spec", 9, "YAML tag '!!python/object/apply:os.system' is not allowed"),
    "cluster-yaml-tag-python-name.yaml": ("cluster", 9, "YAML tag '!!python/name:os.system' is not allowed"),
    "spec-yaml-explicit-bool-tag.yaml": ("spec", 9, "'maybe' is not a valid !!bool"),
    "spec-bare-equals-value.yaml": ("spec", 9, "a bare '=' is not a value; quote it"),
    "spec-complex-mapping-key.yaml": ("spec", 9, "a mapping key must be a plain value, not a sequence"),
    "spec-integer-5000-digits.yaml": ("spec", 9, "a number of 5000 digits is over the 4300-digit limit"),
    "spec-kind-is-list.yaml": ("spec", 3, "kind: expected 'ServingTopology', got a list"),
    "spec-kind-nested-1000-deep.yaml": ("spec", 3, "YAML nested more than 64 levels deep"),
    "spec-flow-nesting-25000-deep.yaml": ("spec", 3, "YAML nested more than 64 levels deep"),
    "spec-name-trailing-newline.yaml": ("spec", 5, "metadata.name: metadata.name 'demo\\n'"),
    "spec-cpu-request-1e29.yaml": (
        "spec",
        14,
        "pools.aggregated.template.resources.requests: cpu '1e29' is over the limit of 1000000 cores",
    ),
    "cluster-cpu-1e30.yaml": ("cluster", 9, "nodeClasses.dgx-h100.cpu: '1e30' is over the limit of 1000000 cores"),
    "cluster-memory-1e30.yaml": ("cluster", 9, "nodeClasses.dgx-h100.memory: '1e30' is over the limit of 1Pi bytes"),
    "cluster-queue-depth-nan.yaml": ("cluster", 16, "nodes[1].metrics.queueDepth: expected a number, got nan"),
    "cluster-queue-depth-inf.yaml": ("cluster", 17, "nodes[1].metrics.queueDepth[1]: expected a number, got inf"),
    "cluster-queue-depth-1e308.yaml": ("cluster", 16, "nodes[1].metrics.queueDepth: expected finite numbers"),
    # booleans where numbers belong (pydantic's lax mode read true as 1)
    "spec-tp-true.yaml": ("spec", 10, "pools.aggregated.tensorParallel: expected an integer, got true"),
    "spec-tp-not-dividing-kv-heads.yaml": (
        "spec",
        12,
        "pools.aggregated.tensorParallel: vllm splits the model's 8 KV heads (model.kvHeads) over the",
    ),
    "spec-nccl-env-reserved.yaml": (
        "spec",
        14,
        "nccl.env: 'PLACER_INSTANCE_PODS' is reserved: placer sets the PLACER_* variables",
    ),
    "spec-data-parallel-args.yaml": (
        "spec",
        16,
        "pools.aggregated.template.args[2]: -dp 2 contradicts the spec: an instance is one data-parallel rank",
    ),
    "spec-requests-above-limits.yaml": (
        "spec",
        13,
        "pools.aggregated.template.resources: requests.cpu: 16 is more than limits.cpu 8 (the API refuses it)",
    ),
    "spec-extended-resource-without-limit.yaml": (
        "spec",
        14,
        "pools.aggregated.template.resources: requests.rdma/hca_shared_devices_a: Kubernetes does not overcommit",
    ),
    "spec-tp-quoted.yaml": (
        "spec",
        11,
        "pools.aggregated.tensorParallel: expected an integer, got '8' (a string: write it without quotes)",
    ),
    "spec-replicas-yes.yaml": ("spec", 12, "replicas: expected an integer, got 'yes'"),  # YAML 1.2: yes is text
    "spec-kv-floor-true.yaml": ("spec", 11, "transfer.minBandwidthGBps: expected a number, got true"),
    "cluster-busy-true.yaml": ("cluster", 11, "nodes[1].busy[0]: expected an integer, got true"),
    "cluster-queue-depth-map-true.yaml": (
        "cluster",
        12,
        "nodes[1].metrics.queueDepth[0]: expected a number, got true",
    ),
    "cluster-gpu-count-true.yaml": ("cluster", 9, "nodeClasses.dgx-h100.gpus.count: expected an integer"),
    # from the audits of 2026-11-28
    "spec-cpu-not-a-quantity.yaml": (
        "spec",
        14,
        "pools.aggregated.template.resources.requests: cpu 'abc' is not a Kubernetes quantity",
    ),
    "spec-key-read-as-boolean.yaml": ("spec", 10, "pools.aggregated.on: unknown field"),  # YAML 1.2: on is text
    "spec-env-reserved.yaml": (
        "spec",
        15,
        "pools.aggregated.template.env[0].name: env name 'PLACER_POD_RANK' is reserved",
    ),
    "spec-router-kind-empty.yaml": ("spec", 15, "router.kind: Input should be 'sglang', 'vllm', 'dynamo' or 'custom'"),
    "cluster-override-bandwidth-tiny.yaml": ("cluster", 14, "overrides[0].bandwidthGBps: Input should be greater than"),
    "cluster-override-twice.yaml": (
        "cluster",
        15,
        "overrides[1].domain: 'node/dgx-a' is also the domain of overrides[0]",
    ),
    # Found comparing the JSON Schemas with the loader (YAML 1.2, as editors read it, and the schemas' rules):
    "spec-snake-case-field.yaml": (
        "spec",
        9,
        "pools.aggregated.tensor_parallel: unknown field: field names are camelCase",
    ),
    "spec-key-true.yaml": ("spec", 9, "key 'true' is read as a boolean"),
    "spec-null-key.yaml": ("spec", 9, "a mapping key must be a name, not null"),
    "spec-quantity-with-spaces.yaml": ("spec", 16, "pools.aggregated.template.resources.requests: cpu '16 ' is not"),
    "spec-image-uppercase-path.yaml": ("spec", 14, "pools.aggregated.template.image: image 'vllm/VLLM-openai"),
    "spec-duration-spaced.yaml": ("spec", 27, "scaling.cooldown: '5 m' is not a duration"),
    "spec-number-grouped.yaml": ("spec", 19, "replicas: expected an integer, got '1_0' (YAML 1.2 reads"),
    "spec-router-kind-missing.yaml": ("spec", 21, "router.kind: give sglang, vllm, dynamo, or custom"),
    "spec-pool-name-digit.yaml": ("spec", 10, "pools.8b.tensorParallel: vllm splits"),
    "cluster-schedulable-n.yaml": ("cluster", 40, "nodes[0].schedulable: expected true or false, got 'n'"),
    "cluster-class-capitalised.yaml": ("cluster", 25, "nodeClasses.DGX.sockets: Input should be greater"),
    "cluster-gpu-list-no-memory.yaml": ("cluster", 42, "nodes[0].gpus[1].memoryGiB: Field required"),
    "spec-pool-named-router.yaml": ("spec", 35, "pools.router: the router's objects are named 'router'"),
    "cluster-memory-inf.yaml": ("cluster", 22, "nodeClasses.dgx-h100.gpus.memoryGiB: expected a number, got inf"),
    "cluster-duplicate-hostname-label.yaml": (
        "cluster",
        15,
        "nodes[1].labels: kubernetes.io/hostname 'gpu-1' is also the hostname of node 'dgx-a'",
    ),
}


def test_table_covers_every_file() -> None:
    assert sorted(p.name for p in INVALID.glob("*.yaml")) == sorted(CASES)


@pytest.mark.parametrize("command", ["solve", "validate"])
@pytest.mark.parametrize("name", list(CASES))
def test_invalid_input_exits_2(name: str, command: str, tmp_path: Path) -> None:
    which, line, fragment = CASES[name]
    bad = Path("tests/data/invalid") / name  # relative to ROOT, as a user would type it
    spec, cluster = (bad, GOOD_CLUSTER) if which == "spec" else (GOOD_SPEC, bad)
    extra: list[str | Path] = ["--placement", tmp_path / "placement.json"] if command == "solve" else []
    proc = run(command, spec, cluster, *extra)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    assert list(tmp_path.iterdir()) == []  # no placement file, no temporary left behind
    assert str(bad) in proc.stderr, f"stderr does not name {bad}:\n{proc.stderr}"
    expected = f"{name}:{line}: {fragment}" if line is not None else fragment
    assert expected in proc.stderr, f"expected {expected!r} in:\n{proc.stderr}"


@pytest.mark.parametrize("loader, path", [(load_spec, GOOD_SPEC), (load_cluster, GOOD_CLUSTER)])
def test_size_limit(loader, path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    size = path.stat().st_size
    monkeypatch.setattr(placer.model.load, "MAX_BYTES", size - 1)
    with pytest.raises(InputError) as info:
        loader(path)
    message = str(info.value)
    assert str(path) in message and f"{size} bytes" in message and "input limit" in message
    monkeypatch.setattr(placer.model.load, "MAX_BYTES", size)  # the limit itself is allowed
    loader(path)


@pytest.mark.parametrize("which", ["spec", "cluster"])
@pytest.mark.parametrize("command", ["solve", "validate"])
def test_missing_file(which: str, command: str, tmp_path: Path) -> None:
    missing = tmp_path / f"no-such-{which}.yaml"
    spec, cluster = (missing, GOOD_CLUSTER) if which == "spec" else (GOOD_SPEC, missing)
    proc = run(command, spec, cluster)
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    assert f"{missing}: cannot read (No such file or directory)" in proc.stderr, proc.stderr


def _numeric_fields():
    """(model, field) for every field of the input models whose type holds an int or a float."""
    import typing

    from pydantic import BaseModel

    import placer.model.cluster
    import placer.model.record
    import placer.model.spec

    def numeric(tp) -> bool:
        if tp in (int, float):
            return True
        return any(numeric(a) for a in typing.get_args(tp) if not isinstance(a, (str, bytes)))

    for module in (placer.model.spec, placer.model.cluster, placer.model.record):
        for model in vars(module).values():
            if isinstance(model, type) and issubclass(model, BaseModel) and model.__module__ == module.__name__:
                for name, field in model.model_fields.items():
                    if numeric(field.annotation):
                        yield model, name


def _with_bool(tp, value: bool):
    """A value of type ``tp`` (a number, or a list / tuple / mapping of them) with ``value`` where a number goes."""
    import typing

    origin, args = typing.get_origin(tp), [a for a in typing.get_args(tp) if a is not type(None)]
    if origin in (list, tuple, set, frozenset):
        return [_with_bool(args[0], value)]
    if origin is dict:
        return {"k" if args[0] is str else 0: _with_bool(args[1], value)}
    if origin is typing.Union or origin is type(int | None):
        return _with_bool(args[0], value)
    if origin is typing.Annotated:
        return _with_bool(args[0], value)
    return value


def test_every_numeric_field_refuses_a_boolean() -> None:
    """YAML's true / yes in a number field is an error, not 1, in every input model (a new field written as
    plain ``int`` or ``float`` fails this)."""
    from pydantic import TypeAdapter, ValidationError

    fields = list(_numeric_fields())
    assert len(fields) > 40  # the walk found the models' fields
    for model, name in fields:
        field = model.model_fields[name]
        adapter = TypeAdapter(typing_annotated(field))
        for value in (True, False):
            bad = _with_bool(field.annotation, value)
            with pytest.raises(ValidationError, match="got (true|false)"):
                adapter.validate_python(bad)


def typing_annotated(field):
    """The field's type with its constraints (``ge``, ``le``), without its alias (a model's business)."""
    import typing

    return typing.Annotated[field.annotation, *field.metadata] if field.metadata else field.annotation


def test_a_union_reports_only_the_member_that_got_further() -> None:
    """``gpus`` is a mapping or a list: a bad count inside the mapping is the problem, not "should be a list"."""
    proc = run("validate", GOOD_SPEC, INVALID / "cluster-gpu-count-true.yaml")
    assert proc.returncode == 2, proc.stderr
    assert "gpus.count: expected an integer" in proc.stderr
    assert "valid list" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_a_union_of_a_number_and_a_map_reports_only_the_map_error() -> None:
    """queueDepth is a number or a map of numbers: a bad value inside a map is the one error, not also "Input
    should be a valid number" from the number member, which was never what the file meant."""
    proc = run("validate", GOOD_SPEC, INVALID / "cluster-queue-depth-map-true.yaml")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and "valid number" not in proc.stderr, proc.stderr


@pytest.mark.parametrize("written", ["8.192e3", "8192e0", "8.192E+3", "819.2e1"])
def test_a_plain_exponent_is_a_number_as_in_yaml_1_2(tmp_path, written):
    """PyYAML (YAML 1.1) reads plain 8.192e3 as a string; with strings refused in number fields (as the JSON
    Schemas refuse them), the loader reads it as YAML 1.2 does. Quoted, it stays a string and is refused."""
    text = GOOD_SPEC.read_text()
    assert "hiddenSize: 8192" in text
    plain = tmp_path / "plain.yaml"
    plain.write_text(text.replace("hiddenSize: 8192", f"hiddenSize: {written}"))
    assert load_spec(plain) == load_spec(GOOD_SPEC)
    quoted = tmp_path / "quoted.yaml"
    quoted.write_text(text.replace("hiddenSize: 8192", f'hiddenSize: "{written}"'))
    with pytest.raises(InputError, match=r"model.hiddenSize: expected an integer, got .* without quotes"):
        load_spec(quoted)


@pytest.mark.parametrize(
    ("cpu", "accepted", "as_text"),
    [(16, True, "16"), (0.5, True, "0.5"), (1e-7, True, "0.0000001"), ("16", True, "16"), ("500m", True, "500m")]
    + [(True, False, "expected a quantity such as 16 or 500m, got true"), (1e300, False, "'1e+300' is out of range")],
)
def test_a_quantity_may_be_a_number_as_kubernetes_takes_it_and_the_schema_agrees(cpu, accepted, as_text):
    """`cpu: 16` was refused ("Input should be a valid string"), though Kubernetes takes it."""
    import jsonschema
    import yaml

    doc = yaml.safe_load(GOOD_SPEC.read_text())
    doc["pools"]["aggregated"]["template"]["resources"]["requests"]["cpu"] = cpu
    doc["router"]["cpu"] = cpu
    schema = json.loads((ROOT / "schemas" / "servingtopology.schema.json").read_text())
    by_schema = jsonschema.Draft202012Validator(schema).is_valid(doc)
    try:
        spec = placer.model.spec.ServingTopology.model_validate(doc)
    except ValueError as exc:
        assert not accepted and as_text in str(exc)  # 1e300 was quoted as a 301-digit number
        assert by_schema == isinstance(cpu, float)  # (the schema does not bound a number)
        return
    assert accepted and by_schema
    assert spec.pools["aggregated"].template.resources.requests["cpu"] == as_text
    assert spec.router is not None and spec.router.cpu == as_text


def test_a_string_that_reads_as_an_exponent_is_written_quoted_and_read_back(tmp_path):
    """With plain 1e3 read as a number, the writers (YAML 1.1 rules) still wrote the string "1e3" unquoted:
    placer could not read its own record back, and kubectl would read the env value as a number."""
    import yaml

    text = GOOD_SPEC.read_text()
    assert "      model: meta-llama/Llama-3.3-70B-Instruct\n" in text
    spec, plain = tmp_path / "spec.yaml", tmp_path / "plain.yaml"
    spec.write_text(text.replace("      model: meta", "      env: [{name: MAX_SEQS, value: '1e3'}]\n      model: meta"))
    plain.write_text(text.replace("      model: meta", "      env: [{name: MAX_SEQS, value: 1e3}]\n      model: meta"))
    with pytest.raises(InputError, match=r"value: Input should be a valid string \(got the number 1000.0: quote it"):
        load_spec(plain)  # as kubectl reads it: a number where a string belongs
    record = tmp_path / "record.yaml"
    solved = run("solve", spec, GOOD_CLUSTER, "-q", "--placement", record)
    assert solved.returncode == 0, solved.stderr
    assert "value: '1e3'" in solved.stdout
    assert "value: '1e3'" in record.read_text()
    explained = run("explain", record, GOOD_CLUSTER, "-o", "json", "--no-baselines")
    assert explained.returncode == 0, explained.stderr
    for text in (solved.stdout, record.read_text()):
        values = [e["value"] for d in yaml.safe_load_all(text) if d for e in _envs(d) if e.get("name") == "MAX_SEQS"]
        assert values and set(values) == {"1e3"}


def _envs(node) -> list[dict]:
    if isinstance(node, dict):
        own = node.get("env") if isinstance(node.get("env"), list) else []
        return [e for e in own if isinstance(e, dict)] + [e for v in node.values() for e in _envs(v)]
    if isinstance(node, list):
        return [e for v in node for e in _envs(v)]
    return []


def test_metric_maps_keyed_by_gpu_index_take_json_string_keys(tmp_path):
    """JSON writes every key as a string: {"0": 0.5} must stay GPU 0's value, while a string value is refused."""
    import yaml

    doc = yaml.safe_load(GOOD_CLUSTER.read_text())
    node = doc["nodes"][0]
    node["metrics"] = {"kvCacheHit": {"0": 0.5, "1": 0.25}}
    path = tmp_path / "cluster.json"
    path.write_text(json.dumps(doc))
    cluster = load_cluster(path)
    assert cluster.nodes[0].metrics is not None and cluster.nodes[0].metrics.kv_cache_hit == {0: 0.5, 1: 0.25}
    node["metrics"] = {"kvCacheHit": {"0": "0.5"}}
    path.write_text(json.dumps(doc))
    with pytest.raises(InputError, match=r"kvCacheHit.*expected a number, got '0.5'"):
        load_cluster(path)


def test_a_limit_without_its_request_is_what_the_scheduler_counts(tmp_path):
    """Kubernetes copies a limit into a missing request: a pod with only limits {cpu: 300} asks for 300 cores.
    placer counted no CPU and printed a gang no node could start (exit 0)."""
    text = GOOD_SPEC.read_text()
    assert 'requests: {cpu: "16", memory: 128Gi}' in text
    spec = tmp_path / "limits.yaml"
    spec.write_text(text.replace('requests: {cpu: "16", memory: 128Gi}', 'limits: {cpu: "300", memory: 128Gi}'))
    proc = run("solve", spec, GOOD_CLUSTER)
    assert (proc.returncode, proc.stdout) == (1, ""), proc.stderr
    assert "each pod requests cpu 300 (the most free is 224" in proc.stderr
    assert "Relax: lower pools.aggregated.template.resources.limits.cpu to 224" in proc.stderr  # the field it has
    why = run("explain", "--why-not", spec, GOOD_CLUSTER, "-o", "json")
    rules = [
        c["rule"] for doc in why.stdout.split("\n---\n") if doc.strip() for c in json.loads(doc).get("conflicts", [])
    ]
    assert "pools.aggregated.template.resources.limits" in rules, rules


def test_only_a_whole_exponent_number_is_quoted_by_the_writers():
    """The writers' resolver matched a prefix, so "5e7a9c" (a digest) and "1e100-r0" were quoted needlessly."""
    from placer.emit.manifests import to_yaml

    text = to_yaml([{"digest": "5e7a9c", "name": "1e100-r0", "text": "1e3", "also": "1.5E+2"}])
    assert "digest: 5e7a9c\n" in text and "name: 1e100-r0\n" in text
    assert "text: '1e3'\n" in text and "also: '1.5E+2'\n" in text


def _spec_doc() -> dict:
    import yaml

    return yaml.safe_load(GOOD_SPEC.read_text())


def _cluster_doc() -> dict:
    import yaml

    return yaml.safe_load(GOOD_CLUSTER.read_text())


def _set(doc: dict, path: str, value) -> dict:
    *parents, last = path.split(".")
    node = doc
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node[key]
    node[last] = value
    return doc


# (which format, path in the fixture, value): each once taken by one side only (a schema-vs-loader audit).
AGREEMENT = [
    ("spec", "pools.aggregated.tensorParallel", 8),  # a control: both take it
    ("spec", "pools.aggregated.template.resources.requests.cpu", "16 "),
    ("spec", "pools.aggregated.template.resources.requests.cpu", -1),
    ("spec", "pools.aggregated.template.image", "vllm/VLLM-openai:v0.15.0"),
    ("spec", "pools.aggregated.template.image", "vllm/vllm-openai:v0.15.0é"),
    ("spec", "router.startFirst", "yes"),
    ("spec", "router.startFirst", 0),
    ("cluster", "nodes.0.schedulable", "n"),
    ("cluster", "fabric.network.railOptimized", "off"),
    ("cluster", "nodes.0.gpus", [{"index": 0, "product": "NVIDIA-H100-80GB-HBM3"}]),
]


@pytest.mark.parametrize(("which", "path", "value"), AGREEMENT)
def test_the_schema_and_the_loader_agree(which, path, value):
    """An editor validating with schemas/ and placer must take and refuse the same files."""
    import jsonschema

    from placer.model.cluster import ClusterSpec
    from placer.model.spec import ServingTopology

    doc = _set(_spec_doc() if which == "spec" else _cluster_doc(), path, value)
    name, model = ("servingtopology", ServingTopology) if which == "spec" else ("cluster", ClusterSpec)
    schema = json.loads((ROOT / "schemas" / f"{name}.schema.json").read_text())
    by_schema = jsonschema.Draft202012Validator(schema).is_valid(doc)
    try:
        model.model_validate(doc, by_alias=True, by_name=False)
        by_loader = True
    except ValueError:
        by_loader = False
    assert by_schema == by_loader == (value == 8)


@pytest.mark.parametrize(
    ("field", "duration", "ok"),
    [
        ("cooldown", 1209600, False),
        ("cooldown", "5 m", False),
        ("cooldown", "３００s", False),
        ("cooldown", "5m", True),
    ],
)
def test_durations_agree_with_the_schema(field, duration, ok):
    import jsonschema

    from placer.model.spec import ServingTopology

    doc = _spec_doc() | {"scaling": {"maxReplicas": 4, "scaleUpWhen": {"queueDepthPerGPU": 4}, field: duration}}
    schema = json.loads((ROOT / "schemas" / "servingtopology.schema.json").read_text())
    assert jsonschema.Draft202012Validator(schema).is_valid(doc) == ok
    try:
        ServingTopology.model_validate(doc)
        assert ok
    except ValueError:
        assert not ok


def test_snake_case_is_refused_as_the_schema_refuses_it(tmp_path):
    """pydantic's populate_by_name took tensor_parallel; the schema (and DESIGN) say camelCase."""
    text = GOOD_SPEC.read_text().replace("tensorParallel: 8", "tensor_parallel: 8")
    (tmp_path / "s.yaml").write_text(text)
    with pytest.raises(InputError, match="tensor_parallel: unknown field: field names are camelCase"):
        load_spec(tmp_path / "s.yaml")


def test_plain_scalars_are_read_as_yaml_1_2_reads_them(tmp_path):
    """PyYAML reads YAML 1.1: 010 as eight, 0000:18:00.0 as a base-60 number, 2024-01-01 as a date and on
    as true. Editors (and the schemas) read YAML 1.2: ten, and text for the rest."""
    text = GOOD_CLUSTER.read_text()
    assert "    rack: r1\n" in text and "{nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}" in text
    text = text.replace("    rack: r1\n", "    rack: 2024-01-01\n", 1).replace(
        'pciBusID: "0000:18:00.0"', "pciBusID: 0000:18:00.0"
    )
    text = text.replace("{nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}", "{example.com/flag: on}", 1)
    (tmp_path / "c.yaml").write_text(text)
    node = load_cluster(tmp_path / "c.yaml").nodes[0]
    assert node.rack == "2024-01-01" and node.labels == {"example.com/flag": "on"}
    assert node.gpu_ids is not None and node.gpu_ids[0].pci_bus_id == "0000:18:00.0"
    for written, value in (("010", 10), ("08", 8), ("0o10", 8), ("+3", 3)):
        (tmp_path / "s.yaml").write_text(GOOD_SPEC.read_text().replace("replicas: 2", f"replicas: {written}"))
        assert load_spec(tmp_path / "s.yaml").replicas == value, written


@pytest.mark.parametrize(("kind", "said"), [("Placment", "got 'Placment'"), (None, "got None")])
def test_a_record_with_a_wrong_kind_is_named_with_its_line(tmp_path, kind, said):
    """A placer.dev/ record whose kind was mistyped or left out was read as manifests and refused as "not
    manifests placer emitted", with no line."""
    import yaml

    record = tmp_path / "p.yaml"
    assert run("solve", GOOD_SPEC, GOOD_CLUSTER, "--placement", record, "-q").returncode == 0
    doc = yaml.safe_load(record.read_text())
    doc.pop("kind")
    doc = {"apiVersion": doc.pop("apiVersion"), **({"kind": kind} if kind else {}), **doc}
    record.write_text(yaml.safe_dump(doc, sort_keys=False))
    proc = run("explain", record, "--cluster", GOOD_CLUSTER)
    assert proc.returncode == 2, proc.stderr
    line = 2 if kind else 1
    assert f"{record}:{line}: kind: a placer.dev/ document here is a record of kind 'Placement', {said}" in proc.stderr


@given(st.integers(-(10**12), 10**12), st.integers(0, 3), st.sampled_from(["", "+"]))
def test_a_plain_integer_reads_as_its_decimal_value(n, zeros, plus):
    """YAML 1.2: digits are base ten, leading zeros and all (a slip once read 8000 as 80)."""
    from placer.model.yaml_text import parse_documents

    sign = "-" if n < 0 else plus
    text = f"{sign}{'0' * zeros}{abs(n)}"
    ((data, _node),) = parse_documents(f"x: {text}\n", "t.yaml")
    assert data == {"x": n}


@pytest.mark.parametrize(
    ("written", "read"),
    [("0x1A", 26), ("0b101", "0b101"), ("1:30", "1:30"), ("1_000", "1_000"), ("1_000.5", "1_000.5"), ("010", 10)]
    + [("08", 8), ("0o10", 8), ("-0", 0), ("yes", "yes"), ("Off", "Off"), ("true", True), ("2024-01-01", "2024-01-01")]
    + [("1e3", 1000.0), ("'08'", "08"), ('"1e3"', "1e3"), ("~", None), ("r1", "r1"), (".5", 0.5)],
)
def test_plain_scalars_as_yaml_1_2(written, read):
    from placer.model.yaml_text import parse_documents

    ((data, _node),) = parse_documents(f"x: {written}\n", "t.yaml")
    assert data == {"x": read} and type(data["x"]) is type(read)


def _nested(depth: int, flow: bool) -> str:
    """``depth`` collections inside each other under a top-level mapping (which counts as one)."""
    if flow:
        return "x: " + "[" * (depth - 1) + "]" * (depth - 1) + "\n"
    return "".join(" " * i + "k:\n" for i in range(depth)) + " " * depth + "v\n"


@pytest.mark.parametrize("flow", [True, False], ids=["flow", "block"])
@pytest.mark.parametrize("event_pass", [False, True], ids=["tree", "events"])
def test_nesting_is_refused_at_the_same_line_whichever_check_finds_it(flow, event_pass, monkeypatch):
    """The depth limit is checked on the composed tree where libyaml has a nesting limit of its own, by a
    pass over the events where it has none: one answer either way, at the line where level 65 opens."""
    from placer.model import yaml_text as load

    monkeypatch.setattr(load, "_parser_limits_nesting", lambda: not event_pass)
    assert load.parse_documents(_nested(64, flow), "t.yaml")
    for depth in (65, 900, 5000):
        with pytest.raises(InputError) as err:
            load.parse_documents(_nested(depth, flow), "t.yaml")
        assert str(err.value) == f"t.yaml:{1 if flow else 65}: YAML nested more than 64 levels deep"


def test_this_pyyaml_limits_nesting_itself():
    """What lets the loader skip its second parse (pyproject asks for PyYAML 6.0.4 or later)."""
    from placer.model import yaml_text as load

    assert load._parser_limits_nesting()


_FAULTS = [
    lambda: "c: 1\nc: 2\n",  # a duplicate key
    lambda: "t: !foo x\n",  # a tag
    lambda: "x: &a 1\ny: *a\n",  # an alias
    lambda: "b: [1\n",  # a syntax error
    lambda: "ok: 1\n",
]


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.lists(
            st.one_of(
                st.tuples(st.just("deep"), st.integers(60, 70), st.booleans()),
                st.tuples(st.just("fault"), st.integers(0, len(_FAULTS) - 1), st.booleans()),
            ),
            min_size=1,
            max_size=4,
        ),
        min_size=1,
        max_size=3,
    )
)
def test_the_tree_and_the_event_pass_say_the_same_about_any_file(documents):
    """Where libyaml limits nesting itself, the depth is read off the composed tree; elsewhere an event pass
    reads it before anything is composed. Over files mixing deep branches with other faults, in any order
    and over several documents, both give the same first error (or the same data)."""
    from placer.model import yaml_text as load

    parts = []
    for doc in documents:
        lines = []
        for i, (kind, arg, flow) in enumerate(doc):
            if kind == "deep":
                lines.append(_nested(arg, flow).replace("x: ", f"d{i}: ", 1).replace("k:", f"k{i}:", 1))
            else:
                lines.append(_FAULTS[arg]().replace("c:", f"c{i}:") if arg == 4 else _FAULTS[arg]())
        parts.append("".join(lines))
    text = "---\n".join(parts)

    def read(event_pass: bool) -> str:
        original = load._parser_limits_nesting
        load._parser_limits_nesting = lambda: not event_pass
        try:
            return repr(load.parse_documents(text, "t.yaml"))
        except InputError as exc:
            return str(exc)
        finally:
            load._parser_limits_nesting = original

    assert read(event_pass=False) == read(event_pass=True)
