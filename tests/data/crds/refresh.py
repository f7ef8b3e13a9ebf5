"""Refresh the vendored upstream CRDs under tests/data/crds/upstream/ from checkouts of their repositories.

    python tests/data/crds/refresh.py OWNER/NAME=PATH [OWNER/NAME=PATH ...]

PATH is a checkout (a work tree) or a bare git directory of that repository; the files are read at its
``HEAD`` (``git show HEAD:<path>``), copied byte for byte, and ``upstream/SOURCES`` is rewritten with the
repository, path, commit and the newest release tag that contains the commit (or the nearest earlier one,
marked ``after``). Repositories not given keep their current files and lines. Every CRD placer emits a kind
of is listed in ``FILES``; the tests (tests/k8s_acceptance.py) find a CRD by its group and kind, so a new
kind only needs a line here and a refresh.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
UPSTREAM = HERE / "upstream"
SOURCES = UPSTREAM / "SOURCES"
# repository -> the CRD files placer's output is checked against (path in the repository).
FILES: dict[str, list[str]] = {
    "kubernetes-sigs/scheduler-plugins": ["config/crd/bases/scheduling.x-k8s.io_podgroups.yaml"],
    "kai-scheduler/KAI-Scheduler": [
        "deployments/kai-scheduler/crds/scheduling.run.ai_podgroups.yaml",
        "deployments/kai-scheduler/crds/kai.scheduler_topologies.yaml",
    ],
    "volcano-sh/volcano": [
        "config/crd/volcano/bases/scheduling.volcano.sh_podgroups.yaml",
        "config/crd/volcano/bases/topology.volcano.sh_hypernodes.yaml",  # --topology-objects
    ],
    # --topology-objects for --target kueue (Kueue's pods themselves are plain Pods)
    "kubernetes-sigs/kueue": [
        "config/components/crd/bases/kueue.x-k8s.io_topologies.yaml",
        "config/components/crd/bases/kueue.x-k8s.io_resourceflavors.yaml",
    ],
    "ai-dynamo/grove": [
        "operator/api/core/v1alpha1/crds/grove.io_podcliquesets.yaml",
        "operator/api/core/v1alpha1/crds/grove.io_clustertopologybindings.yaml",
    ],
    "kubernetes-sigs/lws": ["config/crd/bases/leaderworkerset.x-k8s.io_leaderworkersets.yaml"],
    "ai-dynamo/dynamo": ["deploy/operator/config/crd/bases/nvidia.com_dynamographdeployments.yaml"],
    "kubernetes-sigs/dra-driver-nvidia-gpu": [
        "deployments/helm/dra-driver-nvidia-gpu/crds/resource.nvidia.com_computedomains.yaml"
    ],
}
# The oldest release placer supports where it differs from main in a way the tests check (docs/TARGETS.md,
# "Supported versions"): repository -> {release tag: paths}; vendored under upstream/<name>-<tag>/.
OLDEST: dict[str, dict[str, list[str]]] = {
    "kubernetes-sigs/scheduler-plugins": {"v0.25.7": FILES["kubernetes-sigs/scheduler-plugins"]},
    "kai-scheduler/KAI-Scheduler": {"v0.15.0": FILES["kai-scheduler/KAI-Scheduler"]},
    "volcano-sh/volcano": {"v1.12.0": FILES["volcano-sh/volcano"], "v1.14.0": FILES["volcano-sh/volcano"]},
    "ai-dynamo/grove": {"v0.1.0-alpha.10": FILES["ai-dynamo/grove"]},
    "kubernetes-sigs/lws": {"v0.3.0": FILES["kubernetes-sigs/lws"]},
    "kubernetes-sigs/kueue": {"v0.13.0": FILES["kubernetes-sigs/kueue"]},
}
HEADER = "# repository\tpath\tcommit\trelease\tvendored as\n"


def _git(path: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(path), *args], check=True, capture_output=True, text=True).stdout.strip()


def release(path: Path) -> str:
    """The oldest release tag containing HEAD, else ``after <newest tag before it>``, else ``-``."""
    containing = _git(path, "tag", "--contains", "HEAD", "--sort=creatordate").split()
    if containing:
        return containing[0]
    try:
        return "after " + _git(path, "describe", "--tags", "--abbrev=0", "HEAD")
    except subprocess.CalledProcessError:
        return "-"


def vendored_name(repo: str, path: str) -> str:
    return f"{repo.split('/')[1].lower()}__{Path(path).name}"


def read_sources() -> dict[str, list[str]]:
    """Vendored file name -> its SOURCES line (fields)."""
    if not SOURCES.exists():
        return {}
    rows = [line.split("\t") for line in SOURCES.read_text().splitlines() if line and not line.startswith("#")]
    return {row[4]: row for row in rows}


def release_dir(repo: str, tag: str) -> str:
    return f"{repo.split('/')[1].lower()}-{tag}"


def _copy(checkout: Path, rev: str, path: str, dest: Path) -> None:
    text = subprocess.run(["git", "-C", str(checkout), "show", f"{rev}:{path}"], check=True, capture_output=True)
    dest.parent.mkdir(exist_ok=True)
    dest.write_bytes(text.stdout)


def refresh(repo: str, checkout: Path) -> list[list[str]]:
    if repo not in FILES:
        raise SystemExit(f"{repo}: not a repository placer vendors CRDs from ({', '.join(FILES)})")
    commit = _git(checkout, "rev-parse", "HEAD")
    tag = release(checkout)
    rows = []
    for path in FILES[repo]:
        name = vendored_name(repo, path)
        _copy(checkout, "HEAD", path, UPSTREAM / name)
        rows.append([repo, path, commit, tag, name])
        print(f"{name}: {repo}@{commit[:12]} ({tag}) {path}", file=sys.stderr)
    for old_tag, paths in OLDEST.get(repo, {}).items():
        old_commit = _git(checkout, "rev-parse", f"{old_tag}^{{commit}}")
        for path in paths:
            name = f"{release_dir(repo, old_tag)}/{vendored_name(repo, path)}"
            _copy(checkout, old_tag, path, UPSTREAM / name)
            rows.append([repo, path, old_commit, old_tag, name])
            print(f"{name}: {repo}@{old_commit[:12]} ({old_tag}) {path}", file=sys.stderr)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkouts", nargs="+", metavar="OWNER/NAME=PATH")
    args = parser.parse_args(argv)
    UPSTREAM.mkdir(exist_ok=True)
    rows = read_sources()
    for item in args.checkouts:
        repo, _, path = item.partition("=")
        for row in refresh(repo, Path(path)):
            rows[row[4]] = row
    SOURCES.write_text(HEADER + "".join("\t".join(r) + "\n" for r in sorted(rows.values())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
