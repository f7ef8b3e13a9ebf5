"""The package tree is the pipeline: one folder per stage, imports pointing one way, no cycles.

Every import is counted, including those inside functions and under ``TYPE_CHECKING``: a cycle hidden in a
function-local import is still a cycle a reader has to hold in their head.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "placer"

# A stage may import only stages of a lower rank (and itself). Equal ranks are siblings that do not meet.
RANK = {
    "model": 0,  # the formats: spec, cluster, placement, record, levels, errors, loading
    "topology": 1,  # the cluster as domains and links; the cost formulas
    "importers": 2,  # real sources -> a cluster document
    "check": 2,  # the independent checker
    "solver": 3,  # problem -> CP-SAT -> placement; batches, keep, plan
    "baselines": 4,  # other policies, judged by the checker
    "emit": 4,  # placement -> manifests, records, read-back
    "explain": 5,  # why a placement is what it is
    "sizing": 5,  # SLO -> instance counts: roofline + the placement's communication
    "pipeline": 6,  # the stages strung together
    "cli": 7,  # one file per command
    "__init__": 8,
    "__main__": 8,
}
LONG_MODULE_LINES = 420  # "~400": past this, DESIGN.md must say why the module stays whole


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _imports(path: Path, modules: dict[str, Path]) -> set[str]:
    """The placer modules one file imports, anywhere in it."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # ``from placer.x import y`` imports module placer.x.y when y is a module, else placer.x
            names = [
                f"{node.module}.{alias.name}" if f"{node.module}.{alias.name}" in modules else node.module
                for alias in node.names
            ]
        else:
            continue
        found.update(n for n in names if n == "placer" or n.startswith("placer."))
    return found


def _graph() -> nx.DiGraph:
    modules = _modules()
    graph = nx.DiGraph()
    graph.add_nodes_from(modules)
    for name, path in modules.items():
        for target in _imports(path, modules):
            if target != name and target in modules:
                graph.add_edge(name, target)
    return graph


def _stage(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def test_every_module_belongs_to_a_known_stage() -> None:
    unknown = sorted({_stage(m) for m in _modules()} - set(RANK))
    assert not unknown, f"placer/{unknown[0]} is not a stage listed in RANK (and in DESIGN.md's pipeline table)"


def test_no_import_cycles_between_modules() -> None:
    graph = _graph()
    cycles = list(nx.simple_cycles(graph))
    assert not cycles, "import cycle: " + " -> ".join([*cycles[0], cycles[0][0]])


def test_stages_import_only_earlier_stages() -> None:
    upward = [
        f"{a} imports {b}"
        for a, b in sorted(_graph().edges)
        if _stage(a) != _stage(b) and RANK[_stage(a)] <= RANK[_stage(b)]
    ]
    assert not upward, "imports against the pipeline's direction:\n" + "\n".join(upward)


def test_the_checker_imports_nothing_from_the_solver_or_ortools() -> None:
    graph = _graph()
    for module in (m for m in graph if _stage(m) == "check"):
        reached = nx.descendants(graph, module)
        assert not [m for m in reached if _stage(m) == "solver"], f"{module} reaches the solver"
        for dep in {module, *reached}:
            text = _modules()[dep].read_text()
            assert not re.search(r"^\s*(from|import) ortools", text, re.M), f"{dep} (used by {module}) imports ortools"


def test_a_stage_is_a_folder_and_the_design_table_names_each_one() -> None:
    design = (ROOT / "docs" / "DESIGN.md").read_text()
    table = design.split("## Pipeline", 1)[1].split("\n## ", 1)[0]
    for stage in (s for s in RANK if not s.startswith("__")):
        path = PACKAGE / stage
        assert path.is_dir() or (PACKAGE / f"{stage}.py").is_file(), f"placer/{stage} is missing"
        shown = f"`{stage}/`" if path.is_dir() else f"`{stage}.py`"
        assert shown in table, f"DESIGN.md's pipeline table has no row for {shown}"


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_a_long_module_says_why_in_design(path: Path) -> None:
    lines = len(path.read_text().splitlines())
    if lines <= LONG_MODULE_LINES:
        return
    design = (ROOT / "docs" / "DESIGN.md").read_text()
    relative = str(path.relative_to(ROOT))
    assert f"`{relative}`" in design.split("### Long modules", 1)[-1], (
        f"{relative} has {lines} lines: split it at a natural seam, or say under DESIGN.md's"
        " '### Long modules' why it stays whole"
    )


def test_bench_uses_only_the_public_surface() -> None:
    """bench/ measures what users run: the pipeline, the checker, the cost model, formats, generator, baselines."""
    public = (
        "placer.pipeline",
        "placer.check",
        "placer.topology",
        "placer.model",
        "placer.baselines",
        "placer.importers",
        "placer.emit",
        "placer.explain",
        "placer.cli",  # the commands themselves (the fuzzer calls the console script's main in-process)
    )
    # Probes that measure the solver's own internals rather than what users run, each with the reason.
    probes = {
        "fleet_relax.py": "an integer relaxation of a batch, built from the solver's problems (bench/NOTES.md)",
        "fleet_prices.py": "node prices for a batch's tier, through the one-deployment solve (bench/NOTES.md)",
    }
    bench = ROOT / "bench"
    private = []
    for path in sorted(bench.glob("*.py")):
        if path.name in probes:
            continue
        for target in _imports(path, _modules()):
            if target != "placer" and not target.startswith(public):
                private.append(f"{path.name} imports {target}")
    assert not private, "bench/ reaches into internals:\n" + "\n".join(private)
