"""Release numbers for ``--target-version``: their order, and the oldest release each target's output fits
(each target module's ``REQUIRES``), checked before anything is solved."""

from __future__ import annotations

import importlib
import re

from placer.model.errors import InputError


def require_version(version: str | None, product: str, oldest: str, why: str) -> None:
    """Refuse (bad input, exit 2) a --target-version older than ``oldest``, the first release placer's output
    fits (each target's ``REQUIRES``)."""
    if version is not None and version_key(version) < version_key(oldest):
        raise InputError(
            f"--target-version {version}: {product} before {oldest} {why}; placer supports {product} {oldest} and later"
        )


_PRE = {"alpha": 0, "beta": 1, "rc": 2}


def version_key(release: str) -> tuple[int, ...]:
    """Release order: v1.13.0 < 1.14 (1.12 == 1.12.0); an alpha, beta or rc before its
    release, v0.1.0-alpha.9 < v0.1.0-alpha.10 < v0.1.0-beta.1 < v0.1.0-rc.1 < v0.1.0; another suffix (a vendor
    build, v1.34.0-gke.1000) and build metadata (+...) count as the release."""
    main, _, suffix = release.partition("+")[0].partition("-")  # build metadata (+...) does not order
    numbers = tuple(int(n) for n in re.findall(r"\d+", main))
    if not numbers:
        raise InputError(f"--target-version {release!r}: expected a release such as 1.14 or v0.1.0-alpha.10")
    key = numbers + (0,) * (3 - len(numbers))
    label = re.match(r"[a-z]*", suffix.lower()).group(0)  # type: ignore[union-attr]
    if label not in _PRE:
        return (*key, 1)  # the release itself (a vendor's build such as 1.34.0-gke.1000 is one), after its pre-releases
    return (*key, 0, _PRE[label], *(int(n) for n in re.findall(r"\d+", suffix)))


def check_version(target: str, version: str | None) -> None:
    """``--target-version`` before any solving: a release number, and not older than the oldest release the
    target's output fits (its module's ``REQUIRES``; dynamo has no release to compare with)."""
    from placer.emit.targets import TARGETS

    if target not in TARGETS:  # the library's callers too: bad input, not a ValueError from deep in emit
        raise InputError(f"target {target!r} is not a --target ({', '.join(TARGETS)})")
    if version is None:
        return
    version_key(version)
    requires = getattr(importlib.import_module(f"placer.emit.targets.{target}"), "REQUIRES", None)
    if requires is not None:
        require_version(version, *requires)
