"""Engine presets (``template.engine``): a serving engine's command, flags, port and probes, from the spec and
the placement, and the check that refuses user args contradicting them.

Every flag placer writes comes from the engine's own documentation (docs/TARGETS.md cites each, with the version):
tensor- and pipeline-parallel sizes from the pool, the disaggregation role and KV transfer from the pool's role, the
HTTP host and port, and for a multi-node instance the rendezvous (node count, this pod's rank, the leader's address)
as ``$(VAR)`` references to the env every engine container carries (``RANK_ENV``, ``PODS_ENV``, ``LEADER_ENV``
below, set by placer.emit.targets.common; Kubernetes expands them in command and args).

With ``router.kind: dynamo`` the engines run as Dynamo workers (``python3 -m dynamo.<engine>``): the same parallel
flags and role, no HTTP server of their own (Dynamo's frontend discovers them), no multi-node rendezvous (Dynamo's
operator injects it, ``--target dynamo``).

It reads only the spec (``placer.model.spec`` runs the contradiction check at load time, where the file and line
are known); ``engine_spec`` turns one instance's facts into container fields.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from placer.model.errors import InputError

# Env names the flags reference (placer.emit.targets.common's too; here, so the spec imports no cycle).
RANK_ENV = "PLACER_POD_RANK"
PODS_ENV = "PLACER_INSTANCE_PODS"
LEADER_ENV = "PLACER_LEADER_ADDRESS"

DEFAULT_PORT = {"vllm": 8000, "sglang": 30000, "trtllm": 8000, "custom": 8000}
SGLANG_BOOTSTRAP_PORT = 8998  # SGLang's default --disaggregation-bootstrap-port, written explicitly
SGLANG_DIST_PORT = 5000  # port of --dist-init-addr on the leader (multi-node SGLang)
NIXL_KV = json.dumps({"kv_connector": "NixlConnector", "kv_role": "kv_both"}, separators=(",", ":"))
# Model load takes minutes: the startup probe allows an hour (120 x 30 s) before liveness takes over.
STARTUP_PERIOD_S, STARTUP_FAILURES = 30, 120

# Multi-node vLLM: every pod runs `vllm serve` with the node count, its rank and the leader's address; the
# pods other than rank 0 add --headless (no API server). One script for every rank, so that a template
# shared by several pods (LeaderWorkerSet, Grove, Dynamo) works; $0 is the program name, "$@" the args.
VLLM_MULTINODE_SCRIPT = f'if [ "${RANK_ENV}" != 0 ]; then set -- "$@" --headless; fi; exec vllm serve "$@"'


@dataclass(frozen=True)
class Flag:
    """A flag placer owns: its spellings, and the value it writes (``None``: placer derives it from the
    placement, so the user may not give it at all; ``True``/``False``: a switch placer sets or leaves out)."""

    names: tuple[str, ...]
    value: str | bool | None
    why: str  # what the value follows from, for the refusal
    json: bool = False  # compare values as JSON documents

    @property
    def switch(self) -> bool:
        return isinstance(self.value, bool)


@dataclass
class Preset:
    """One pool's engine invocation, before the instance's rank is known."""

    command: list[str]
    args: list[str]  # placer's flags (and the model), in order
    owned: list[Flag]  # what the user's args may repeat (same value) but not contradict
    port: int | None  # the HTTP port the engine serves (None: no HTTP server, Dynamo workers)
    multinode: list[str] = field(default_factory=list)  # flags every pod of a multi-node instance adds


def _norm(flag: str, engine: str) -> str:
    """vLLM's parser takes underscores for dashes (``--tensor_parallel_size``); the others do not."""
    if engine == "vllm" and flag.startswith("--"):
        return "--" + flag[2:].replace("_", "-")
    return flag


def _matches(token: str, names: set[str], engine: str) -> bool:
    """Whether ``token`` spells one of ``names``. SGLang's parser is argparse with abbreviations allowed, so
    an unambiguous prefix such as ``--tp`` means ``--tp-size`` there (four characters at least, ``--`` and
    two); vLLM (underscores for dashes) and trtllm-serve (click) take whole names only."""
    token = _norm(token, engine)
    if token in names:
        return True
    return engine == "sglang" and token.startswith("--") and len(token) >= 4 and any(n.startswith(token) for n in names)


def flag_occurrences(args: list[str], flag: Flag, engine: str) -> list[tuple[int, str, str | None]]:
    """Where ``args`` give ``flag``: (index, spelling, value) for ``--flag value`` and ``--flag=value``; a
    switch has value None; a value flag at the end of args (no value) has value None."""
    names = {_norm(n, engine) for n in flag.names}
    out: list[tuple[int, str, str | None]] = []
    k = 0
    while k < len(args):
        arg = args[k]
        head, eq, tail = arg.partition("=")
        if arg.startswith("-") and _matches(head, names, engine):
            if eq:
                out.append((k, head, tail))
            elif flag.switch:
                out.append((k, arg, None))
            else:
                value = args[k + 1] if k + 1 < len(args) else None
                out.append((k, arg, value))
                k += 1
        k += 1
    return out


def _same(flag: Flag, given: str | None) -> bool:
    if flag.switch:
        return flag.value is True and given is None
    if given is None or flag.value is None:
        return False
    if flag.json:  # the user's config may say more (e.g. kv_buffer_device) as long as it keeps placer's keys
        try:
            mine, theirs = json.loads(str(flag.value)), json.loads(given)
        except ValueError:
            return False
        if isinstance(mine, dict) and isinstance(theirs, dict):
            return all(k in theirs and theirs[k] == v for k, v in mine.items())
        return bool(mine == theirs)
    return given.strip() == str(flag.value)


def check_args(args: list[str], owned: list[Flag], engine: str, where: str) -> list[int]:
    """Indices of user args that repeat placer's flags with the same value (dropped when rendering); a
    contradiction raises ValueError naming ``where[index]``, the flag, and what the spec says."""
    drop: list[int] = []
    for flag in owned:
        for k, spelling, given in flag_occurrences(args, flag, engine):
            if flag.value is None:
                raise ValueError(
                    f"{where}[{k}]: {spelling} is placer's to write ({flag.why}, engine: {engine}); remove it"
                )
            if not _same(flag, given):
                if flag.switch:
                    raise ValueError(
                        f"{where}[{k}]: {spelling} contradicts the spec: {flag.why} (engine: {engine}); remove it"
                    )
                shown = "nothing" if given is None else given
                raise ValueError(
                    f"{where}[{k}]: {spelling} {shown} contradicts the spec: {flag.why}, so placer writes "
                    f"{flag.names[0]} {flag.value} (engine: {engine}); remove it or make it {flag.value}"
                )
            if flag.json and given is not None and json.loads(given) != json.loads(str(flag.value)):
                continue  # it says more than placer's: the user's is written instead of placer's (engine_spec)
            drop.append(k)
            if not flag.switch and "=" not in args[k]:
                drop.append(k + 1)
    return sorted(set(drop))


def engine_port(template: Any) -> int:
    """The engine's HTTP port: the template's port named ``http`` (else its first), else the preset's."""
    ports = list(template.ports)
    named = [p for p in ports if p.name == "http"]
    if named or ports:
        return int((named or ports)[0].container_port)
    return DEFAULT_PORT[template.engine]


# Dynamo's runtime images (ai-dynamo release artifacts: one <engine>-runtime image per backend and release),
# at the release the router preset pins for the frontend.
DYNAMO_RELEASE = "1.5.0"
DYNAMO_RUNTIME = {
    "vllm": f"nvcr.io/nvidia/ai-dynamo/vllm-runtime:{DYNAMO_RELEASE}",
    "sglang": f"nvcr.io/nvidia/ai-dynamo/sglang-runtime:{DYNAMO_RELEASE}",
    "trtllm": f"nvcr.io/nvidia/ai-dynamo/tensorrtllm-runtime:{DYNAMO_RELEASE}",
}
# The engines' own upstream images, which lack Dynamo's worker modules (python3 -m dynamo.<engine>).
PLAIN_ENGINE_IMAGES = {
    "vllm": ("vllm/vllm-openai", "docker.io/vllm/vllm-openai"),
    "sglang": ("lmsysorg/sglang", "docker.io/lmsysorg/sglang"),
    "trtllm": ("nvcr.io/nvidia/tensorrt-llm/release",),
}


def worker_image(engine: str, image: str) -> str:
    """The image a preset engine runs in as a Dynamo worker: the engine's upstream image cannot run
    ``python3 -m dynamo.<engine>``, so it becomes Dynamo's runtime image for that engine; any other image
    (a Dynamo runtime, one built on it) is the user's choice and stays."""
    name = image.split("@", 1)[0]  # without a digest
    repository = name.rsplit(":", 1)[0] if ":" in name.rsplit("/", 1)[-1] else name  # without a tag
    if repository in PLAIN_ENGINE_IMAGES.get(engine, ()):
        return DYNAMO_RUNTIME[engine]
    return image


def dynamo_workers(spec: Any, target_dynamo: bool = False) -> bool:
    """Engines run as Dynamo workers: ``router.kind: dynamo``, or ``--target dynamo`` (a graph's frontend
    is Dynamo's, which finds only Dynamo workers)."""
    return target_dynamo or (spec.router is not None and spec.router_kind == "dynamo")


def preset(spec: Any, pool_name: str, dynamo: bool = False) -> Preset | None:
    """The pool's engine invocation (None for ``engine: custom``: the template's command and args as given);
    ``dynamo``: as a Dynamo worker (``dynamo_workers``)."""
    pool = spec.pools[pool_name]
    t = pool.template
    if t.engine == "custom":
        return None
    role = spec.role_of(pool_name)
    tp, pp, model = str(pool.tensor_parallel), str(pool.pipeline_parallel), t.model
    tp_why = f"pools.{pool_name}.tensorParallel is {tp}"
    pp_why = f"pools.{pool_name}.pipelineParallel is {pp}"
    model_why = f"pools.{pool_name}.template.model is {model}"
    role_why = f"pools.{pool_name} has role {role}"
    port = engine_port(t)
    port_why = f"the engine's port is {port} (template.ports, else the preset's)"
    host = Flag(("--host",), "0.0.0.0", "the engine listens on every address of its pod")
    derived = "from the placement: the instance's pods, this pod's rank, the leader's address"
    dp_why = f"an instance is one data-parallel rank (more: pools.{pool_name}.instances)"  # more need more GPUs
    if t.engine == "vllm":
        owned = [
            Flag(("--tensor-parallel-size", "-tp"), tp, tp_why),
            Flag(("--pipeline-parallel-size", "-pp"), pp, pp_why),
            Flag(("--model",), model, model_why),
            Flag(("--data-parallel-size", "-dp"), "1", dp_why),
        ]
        args = ["--tensor-parallel-size", tp, "--pipeline-parallel-size", pp]
        if dynamo:  # ai-dynamo 1.5.0 dynamo/vllm: the role by --disaggregation-mode; a prefill needs a KV config
            if role != "aggregated":
                args += ["--disaggregation-mode", role, "--kv-transfer-config", NIXL_KV]
                owned += [
                    Flag(("--disaggregation-mode",), role, role_why),
                    Flag(("--kv-transfer-config",), NIXL_KV, role_why, json=True),
                ]
            return Preset(["python3", "-m", "dynamo.vllm"], ["--model", model, *args], owned, None)
        args = [model, *args, "--host", "0.0.0.0", "--port", str(port)]
        owned += [host, Flag(("--port",), str(port), port_why)]
        if role != "aggregated":  # an aggregated pool's KV config (an offload connector) is the user's
            args += ["--kv-transfer-config", NIXL_KV]
            owned.append(Flag(("--kv-transfer-config",), NIXL_KV, role_why, json=True))
        owned += [Flag((n,), None, derived) for n in ("--nnodes", "--node-rank", "--master-addr", "--headless")]
        multinode = ["--nnodes", f"$({PODS_ENV})", "--node-rank", f"$({RANK_ENV})", "--master-addr", f"$({LEADER_ENV})"]
        return Preset(["vllm", "serve"], args, owned, port, multinode)
    if t.engine == "sglang":
        owned = [
            Flag(("--tp-size", "--tensor-parallel-size"), tp, tp_why),
            Flag(("--pp-size", "--pipeline-parallel-size"), pp, pp_why),
            Flag(("--model-path", "--model"), model, model_why),
            Flag(("--dp-size", "--data-parallel-size", "--dp"), "1", dp_why),
        ]
        args = ["--model-path", model, "--tp-size", tp, "--pp-size", pp]
        mode = Flag(("--disaggregation-mode",), role if role != "aggregated" else None, role_why)
        if role != "aggregated":
            args += ["--disaggregation-mode", role]
        owned.append(mode if role != "aggregated" else Flag(mode.names, None, f"{role_why}: no disaggregation"))
        boot = Flag(("--disaggregation-bootstrap-port",), str(SGLANG_BOOTSTRAP_PORT), "the router dials it")
        if role == "prefill":
            args += ["--disaggregation-bootstrap-port", str(SGLANG_BOOTSTRAP_PORT)]
            owned.append(boot)
        if dynamo:
            return Preset(["python3", "-m", "dynamo.sglang"], args, owned, None)
        args += ["--host", "0.0.0.0", "--port", str(port)]
        owned += [host, Flag(("--port",), str(port), port_why)]
        owned += [Flag((n,), None, derived) for n in ("--dist-init-addr", "--nnodes", "--node-rank")]
        multinode = [
            "--dist-init-addr", f"$({LEADER_ENV}):{SGLANG_DIST_PORT}",
            "--nnodes", f"$({PODS_ENV})", "--node-rank", f"$({RANK_ENV})",
        ]  # fmt: skip
        return Preset(["python3", "-m", "sglang.launch_server"], args, owned, port, multinode)
    # trtllm
    if dynamo:
        owned = [
            Flag(("--tensor-parallel-size",), tp, tp_why),
            Flag(("--pipeline-parallel-size",), pp, pp_why),
            Flag(("--model-path",), model, model_why),
        ]
        args = ["--model-path", model, "--tensor-parallel-size", tp, "--pipeline-parallel-size", pp]
        if role != "aggregated":
            args += ["--disaggregation-mode", role]
            owned.append(Flag(("--disaggregation-mode",), role, role_why))
        return Preset(["python3", "-m", "dynamo.trtllm"], args, owned, None)
    owned = [
        Flag(("--tp_size", "--tensor_parallel_size"), tp, tp_why),  # click aliases (trtllm commands/serve.py)
        Flag(("--pp_size", "--pipeline_parallel_size"), pp, pp_why),
        host,
        Flag(("--port",), str(port), port_why),
    ]
    args = [model, "--tp_size", tp, "--pp_size", pp, "--host", "0.0.0.0", "--port", str(port)]
    return Preset(["trtllm-serve"], args, owned, port)


NIXL_HOST_ENV = "VLLM_NIXL_SIDE_CHANNEL_HOST"


def preset_env(spec: Any, pool_name: str) -> list[dict[str, Any]]:
    """Environment a preset needs besides its flags. vLLM's NIXL connector tells the decode side where to
    fetch a prefill's KV blocks at ``VLLM_NIXL_SIDE_CHANNEL_HOST``, which defaults to ``localhost``
    (vllm/envs.py; nixl_connector.py returns it as ``remote_host``): across pods it must be the pod's IP,
    as vLLM's and llm-d's Kubernetes examples set it from the downward API."""
    t = spec.pools[pool_name].template
    if t.engine != "vllm" or spec.role_of(pool_name) == "aggregated":
        return []
    return [{"name": NIXL_HOST_ENV, "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]


def check_instance(spec: Any, inst: Any, dynamo_worker: bool = False) -> None:
    """An engine preset runs one process group over equal pods: vLLM and SGLang split the TP group evenly
    over ``--nnodes`` (vLLM: world_size % nnodes == 0, vllm/config/parallel.py), and trtllm-serve over
    several nodes needs an MPI launcher placer does not write. An instance the solver spread over nodes with
    unequal GPU counts (a pool without nodeCount/gpusPerNode) cannot run under a preset: refuse it."""
    t = spec.pools[inst.pool].template
    if t.engine == "custom" or len(inst.pods) == 1:
        return
    counts = [len(p.gpus) for p in inst.pods]
    where = f"pools.{inst.pool}: instance {inst.index} was placed over {len(counts)} nodes with {counts} GPUs"
    if len(set(counts)) > 1:
        raise InputError(
            f"{where}; engine {t.engine} needs the same GPU count on every node of an instance: give the pool "
            "nodeCount and gpusPerNode, or use engine: custom"
        )
    if t.engine == "trtllm" and not dynamo_workers(spec, dynamo_worker):
        raise InputError(
            f"{where}; trtllm-serve over several nodes needs an MPI launcher (mpirun or Slurm with "
            "trtllm-llmapi-launch), which placer does not write: use engine: custom with your launcher"
        )


def multinode_pool(pool: Any) -> bool:
    """Whether the pool's instances span nodes by the spec (``nodeCount`` > 1)."""
    return pool.node_count is not None and pool.node_count > 1


def owned_flags(spec: Any, pool_name: str) -> list[Flag]:
    """Every flag placer owns for the pool, as a plain engine and as a Dynamo worker: the user's args are
    checked against both at load time (the target, which may make the engines Dynamo workers, comes later)."""
    plain, worker = preset(spec, pool_name), preset(spec, pool_name, dynamo=True)
    return [*(plain.owned if plain else []), *(worker.owned if worker else [])]


def check_pool(spec: Any, pool_name: str) -> None:
    """The load-time checks of a preset pool (ValueError naming the field path): what the preset cannot
    express, and user args that contradict placer's flags."""
    pool = spec.pools[pool_name]
    t = pool.template
    if preset(spec, pool_name) is None:
        return
    where = f"pools.{pool_name}.template"
    if t.engine == "trtllm" and multinode_pool(pool) and not dynamo_workers(spec):
        raise ValueError(
            f"{where}.engine: trtllm-serve over several nodes needs an MPI launcher (mpirun or Slurm with "
            "trtllm-llmapi-launch), which placer does not write; use engine: custom with your launcher"
        )
    if t.command:
        raise ValueError(f"{where}.command: engine {t.engine} writes the command; remove it or use engine: custom")
    check_args(list(t.args), owned_flags(spec, pool_name), t.engine, f"{where}.args")


def user_args(spec: Any, pool_name: str) -> list[str]:
    """The template's args less the ones repeating placer's flags (same value: accepted, written once)."""
    template = spec.pools[pool_name].template
    drop = set(check_args(list(template.args), owned_flags(spec, pool_name), template.engine, "args"))
    return [a for k, a in enumerate(template.args) if k not in drop]


def http_probes(port: int) -> dict[str, Any]:
    """Startup (an hour for the model to load), readiness and liveness on the engine's ``/health``, each
    given 10 s: SGLang's generates a token and sleeps 1 s first (http_server.py), past Kubernetes' default 1 s."""
    get = {"httpGet": {"path": "/health", "port": port}, "timeoutSeconds": 10}
    return {
        "startupProbe": get | {"periodSeconds": STARTUP_PERIOD_S, "failureThreshold": STARTUP_FAILURES},
        "readinessProbe": get | {"periodSeconds": 10, "failureThreshold": 3},
        "livenessProbe": get | {"periodSeconds": 30, "failureThreshold": 5},
    }


def _without(args: list[str], flag: Flag, engine: str) -> list[str]:
    """``args`` less every occurrence of ``flag`` with its value."""
    skip: set[int] = set()
    for k, _, _ in flag_occurrences(args, flag, engine):
        skip |= {k} if "=" in args[k] else {k, k + 1}
    return [a for k, a in enumerate(args) if k not in skip]


def engine_spec(
    spec: Any, pool_name: str, pods: int, rank: int | None, target_dynamo: bool = False
) -> dict[str, Any] | None:
    """Container fields (command, args, ports, probes) of a preset engine serving an instance of ``pods``
    pods, as pod ``rank`` (None: a template shared by several pods of the instance). None: engine custom."""
    p = preset(spec, pool_name, dynamo=dynamo_workers(spec, target_dynamo))
    if p is None:
        return None
    t = spec.pools[pool_name].template
    command, args = list(p.command), [*p.args]
    if pods > 1 and p.multinode:
        args += p.multinode
        if t.engine == "vllm":
            if rank is None:
                command = ["/bin/sh", "-c", VLLM_MULTINODE_SCRIPT, "vllm-serve"]
            elif rank > 0:
                args.append("--headless")
    given = user_args(spec, pool_name)
    for flag in p.owned:  # a JSON config the user extends replaces placer's (its keys checked at load)
        if flag.json and flag_occurrences(given, flag, t.engine):
            args = _without(args, flag, t.engine)
    args += given
    out: dict[str, Any] = {"command": command, "args": args}
    if p.port is not None:
        ports = [{"name": q.name, "containerPort": q.container_port} for q in t.ports]
        out["ports"] = ports or [{"name": "http", "containerPort": p.port}]
        # Only the leader serves HTTP; a shared template of a multi-node instance gets no HTTP probes.
        if pods == 1 or rank == 0:
            out |= http_probes(p.port)
    return out
